"""The ``drl-orchestrate`` command line, generated from the configuration dataclasses.

    drl-orchestrate --preset sac --env Pendulum-v1 --workers 4
    drl-orchestrate presets
    drl-orchestrate --preset sac --help        (options with that preset's defaults)

Every option of ``ExperimentConfig`` (and of nested algorithm configs, as ``--sac.lr``) is a flag; only flags
given on the command line override the preset. Bad input prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from drl.config import ConfigError, ExperimentConfig, coerce, from_dict, iter_options, merge, replace
from drl.errors import UserError
from drl.presets import PRESETS, get_preset

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see drl-orchestrate --help)")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _type_name(tp: Any) -> str:
    text = getattr(tp, "__name__", None) or str(tp)
    return text.replace("typing.", "")


def build_parser(defaults: ExperimentConfig) -> argparse.ArgumentParser:
    parser = _Parser(prog="drl-orchestrate", argument_default=argparse.SUPPRESS,
                     description="Run a distributed RL experiment: rollout workers, a trainer and an evaluator "
                                 "over a Redis memory backend. Subcommand: 'presets' lists the presets.",
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", metavar="FILE", help="JSON file with configuration values (flags override it)")
    parser.add_argument("--resume", metavar="RUN", help="continue RUN (in --output) from its newest checkpoint; "
                                                        "flags such as --steps override its saved configuration")
    for name, tp, _default, doc, choices in iter_options():
        current = defaults
        for part in name.split("."):
            current = getattr(current, part)
        if isinstance(current, tuple):
            current = ",".join(str(x) for x in current)
        help_text = f"{doc} [{_type_name(tp)}; default for this preset: {current}]"
        kwargs: dict[str, Any] = {"dest": name, "help": help_text.replace("%", "%%"), "metavar": name.split(".")[-1].upper()}
        if choices:
            kwargs["choices"] = choices
            kwargs.pop("metavar")
        parser.add_argument(_flag(name), **kwargs)
    return parser


def _option_types() -> dict[str, Any]:
    return {name: tp for name, tp, *_ in iter_options()}


def resolve_config(argv: list[str]) -> ExperimentConfig:
    """Preset, then config file, then flags; validated. The preset and env may come from the file too."""
    pre = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    pre.add_argument("--preset")
    pre.add_argument("--env")
    pre.add_argument("--config")
    pre.add_argument("--resume")
    pre.add_argument("--output")
    known, _ = pre.parse_known_args(argv)
    resume = getattr(known, "resume", None)
    if resume and getattr(known, "config", None):
        raise UserError("--resume takes the run's own configuration; --config cannot be combined with it")
    if resume:
        saved = Path(getattr(known, "output", "runs")).resolve() / resume / "config.json"
        if not saved.exists():
            raise UserError(f"no run {resume!r} to resume: {saved} does not exist (is --output right?)")
        known.config = str(saved)
    file_data = _read_config_file(Path(known.config)) if getattr(known, "config", None) else {}
    preset_name = getattr(known, "preset", None) or file_data.get("preset") or "sac"
    base = get_preset(str(preset_name), getattr(known, "env", None) or file_data.get("env"))
    parser = build_parser(base)
    args = vars(parser.parse_args(argv))
    args.pop("config", None)
    if args.pop("resume", None):
        args["run_name"] = resume
    cfg = from_dict(ExperimentConfig, merge(dataclasses.asdict(base), file_data, f"config file {known.config}")) if file_data else base
    if "memory" not in args and not file_data.get("memory") and os.environ.get("DRL_MEMORY_URL"):
        args["memory"] = os.environ["DRL_MEMORY_URL"]
    types = _option_types()
    changes = {name: coerce(types[name], value, _flag(name)) for name, value in args.items()}
    return replace(cfg, **changes).validate()


def _read_config_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object")
    return data


def check_environment(cfg: ExperimentConfig) -> None:
    """Checks what needs gymnasium: the env id exists and the algorithm fits its action space."""
    from drl.algorithms import check_spaces
    from drl.envs import check_env_id, space_spec

    check_env_id(cfg.env)
    check_spaces(cfg.algorithm, space_spec(cfg.env), cfg.env)


def preflight_memory(cfg: ExperimentConfig) -> None:
    """Fails before anything starts when the memory backend cannot be had: unreachable URL, no server binary."""
    if cfg.memory:
        from drl.memory import connect
        from drl.memory.connection import url_has_password

        if url_has_password(cfg.memory):
            raise UserError("the memory URL must not carry a password (it would show in process arguments and run "
                            "files); put it in DRL_MEMORY_PASSWORD or DRL_MEMORY_PASSWORD_FILE")
        connect(cfg.memory).close()
    else:
        from orchestrator.redis_server import find_server_binary

        find_server_binary()


def default_run_name(cfg: ExperimentConfig) -> str:
    env = re.sub(r"[^A-Za-z0-9.-]+", "-", cfg.env).strip("-").lower()
    return f"{cfg.preset}-{env}-{cfg.mode}-{time.strftime('%Y%m%d-%H%M%S')}"


def cmd_run(argv: list[str]) -> int:
    cfg = resolve_config(argv)
    resume = "--resume" in argv or any(a.startswith("--resume=") for a in argv)
    check_environment(cfg)
    preflight_memory(cfg)
    from drl.store import open_store

    open_store(store_url(cfg))
    run = cfg.run_name or default_run_name(cfg)
    run_dir = Path(cfg.output).resolve() / run
    steps_done = 0
    if resume:
        steps_done = resume_point(cfg, run)
    elif (run_dir / "summary.json").exists() or (run_dir / "config.json").exists():
        raise UserError(f"run {run!r} already exists in {run_dir.parent}; pick another --run-name or --resume {run}")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"output directory {run_dir} cannot be created: {exc.strerror}") from None
    cfg = replace(cfg, run_name=run)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
    what = f"resuming at {steps_done:,} of" if resume else "with"
    print(f"drl: run {run} ({cfg.algorithm} on {cfg.env}, {cfg.mode}, {cfg.workers} workers, {what} "
          f"{cfg.steps:,} steps) -> {run_dir}", file=sys.stderr)
    from orchestrator.backends.local import run_local

    code, summary = run_local(cfg, run, run_dir, steps_done=steps_done, resume=resume)
    keys = ("exit_reason", "env_steps", "updates", "policy_version", "transitions_produced",
            "transitions_consumed", "duplicates_dropped", "best_eval_return", "last_eval_return", "wall_seconds")
    print(json.dumps({k: summary.get(k) for k in keys}))
    print(f"drl: summary written to {run_dir / 'summary.json'}", file=sys.stderr)
    return code


def store_url(cfg: ExperimentConfig) -> str:
    return cfg.store or str(Path(cfg.output).resolve())


def resume_point(cfg: ExperimentConfig, run: str) -> int:
    """Env steps the newest checkpoint of the run covers; refuses runs with nothing to resume."""
    from drl.store import run_store
    from drl.store.checkpoint import CheckpointStore

    latest = CheckpointStore(run_store(store_url(cfg), run), run).latest()
    if latest is None:
        raise UserError(f"run {run!r} has no checkpoint in {store_url(cfg)} to resume from")
    done = int(latest[0].env_steps)
    if done >= cfg.steps:
        raise UserError(f"run {run!r} already did {done:,} of its {cfg.steps:,} steps; pass --steps N with N > "
                        f"{done} to train longer")
    return done


def cmd_presets(argv: list[str]) -> int:
    if argv:
        raise UserError(f"'presets' takes no arguments, got {' '.join(argv)}")
    for name in sorted(PRESETS):
        cfg = get_preset(name)
        doc = (PRESETS[name].__doc__ or "").strip().splitlines()[0]
        print(f"{name}: {doc}")
        print(f"    algorithm={cfg.algorithm} env={cfg.env} steps={cfg.steps} mode={cfg.mode} workers={cfg.workers}")
    return 0


def cmd_evaluate(argv: list[str]) -> int:
    from orchestrator.evaluate import evaluate

    return evaluate(argv, _Parser)


COMMANDS = {"presets": cmd_presets, "evaluate": cmd_evaluate}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in COMMANDS:
            code = COMMANDS[argv[0]](argv[1:])
        else:
            code = cmd_run(argv)
    except UserError as exc:
        print(f"drl-orchestrate: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
