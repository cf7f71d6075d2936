"""The ``drl-orchestrate`` command line, generated from the configuration dataclasses.

    drl-orchestrate --preset sac --env Pendulum-v1 --workers 4 [--detach]
    drl-orchestrate status [RUN] [--output DIR]  (every service of a local run, asked over gRPC)
    drl-orchestrate stop RUN [--output DIR]      (end a local run cleanly; prints its summary)
    drl-orchestrate presets
    drl-orchestrate --preset sac --help        (options with that preset's defaults)
    drl-orchestrate --backend kubernetes --preset sac --workers 32 [--namespace NS] [--image IMAGE] [--detach]
    drl-orchestrate render [same flags]        (the Kubernetes manifests as YAML; no cluster needed)
    drl-orchestrate delete RUN [--namespace NS]
    drl-orchestrate status RUN --backend kubernetes [--namespace NS]   (a Kubernetes run's pods and services)
    drl-orchestrate scale RUN --workers N [--backend kubernetes --namespace NS]

Every option of ``ExperimentConfig`` (and of nested algorithm configs, as ``--sac.lr``) is a flag; only flags
given on the command line override the preset. ``--backend``, ``--namespace``, ``--image`` and ``--detach`` say
where and how a run is deployed, not what it computes, so they stay out of the configuration (like ``--config``
and ``--resume``). A local run with ``--detach`` goes on in the background: after every check passed, the
orchestrator runs again as a child in its own session (``DETACHED_COMMAND``, output in
``<run dir>/orchestrator.log``), and the command prints the run's name once the child has started the
processes. Bad input prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from drl.config import ConfigError, ExperimentConfig, coerce, from_dict, iter_options, merge, replace
from drl.errors import EXIT_USAGE, UserError
from drl.naming import check_workers, default_kubernetes_run_name, default_run_name
from drl.presets import PRESETS, get_preset
from orchestrator.backends.kubernetes.manifests import DEFAULT_IMAGE

DETACHED_COMMAND = "_run-detached"
DETACH_START_S = 120.0
BACKENDS = ("local", "kubernetes")
DEPLOYMENT_OPTIONS = ("backend", "namespace", "image", "detach")


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
                                 "over a Redis memory backend, as local processes or as pods on Kubernetes. "
                                 "Subcommands: 'presets' lists the presets; 'evaluate' evaluates a stored policy; "
                                 "'render' prints the Kubernetes manifests of a run (same flags); 'delete RUN "
                                 "[--namespace NS]' removes a run from Kubernetes; 'status [RUN]' shows every "
                                 "service of a run; 'stop RUN' ends a local run cleanly.",
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", metavar="FILE", help="JSON file with configuration values (flags override it)")
    parser.add_argument("--resume", metavar="RUN", help="continue RUN (in --output) from its newest checkpoint; "
                                                        "flags such as --steps override its saved configuration")
    add_deployment_options(parser)
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


def add_deployment_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("deployment (where the run's processes run; not part of the configuration)")
    group.add_argument("--backend", choices=BACKENDS,
                       help="local: processes on this machine; kubernetes: pods in the cluster of the kubeconfig "
                            "(or in-cluster config) [default: local]")
    group.add_argument("--namespace", metavar="NS",
                       help="Kubernetes namespace [default: the kubeconfig's current namespace, else default]")
    group.add_argument("--image", metavar="IMAGE", help=f"drl image of the pods [default: {DEFAULT_IMAGE}]")
    group.add_argument("--detach", action="store_true",
                       help="return once the run is started instead of following it (local: the run goes on "
                            "in the background; see 'status RUN' and 'stop RUN'; kubernetes: once its objects "
                            "are created)")


@dataclasses.dataclass(frozen=True)
class Deployment:
    backend: str = ""  # "" when not given: local for a run, kubernetes for render
    namespace: str = ""
    image: str = ""
    detach: bool = False


def deployment_options(argv: list[str]) -> Deployment:
    """The deployment flags of a command line (the generated parser accepts them and leaves them out of the
    configuration)."""
    pre = _Parser(add_help=False, allow_abbrev=False, argument_default=argparse.SUPPRESS)
    add_deployment_options(pre)
    known, _ = pre.parse_known_args(argv)
    return Deployment(**vars(known))


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
    for name in DEPLOYMENT_OPTIONS:
        args.pop(name, None)
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
    except (json.JSONDecodeError, RecursionError) as exc:
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


def _resuming(argv: list[str]) -> bool:
    return "--resume" in argv or any(a.startswith("--resume=") for a in argv)


def cmd_run(argv: list[str]) -> int:
    deployment = deployment_options(argv)
    if deployment.backend == "kubernetes":
        return run_on_kubernetes(argv, deployment)
    cfg = resolve_config(argv)
    given = [name for name in ("namespace", "image") if getattr(deployment, name)]
    if given:
        raise UserError(f"--{given[0]} applies to --backend kubernetes only")
    resume = _resuming(argv)
    check_environment(cfg)
    preflight_memory(cfg)
    from drl.store import open_store

    open_store(store_url(cfg))
    run = cfg.run_name or default_run_name(cfg.preset, cfg.env, cfg.mode)
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
    if deployment.detach:
        return detach(run, run_dir, steps_done, resume)
    from orchestrator.backends.local.run import run_local

    code, summary = run_local(cfg, run, run_dir, steps_done=steps_done, resume=resume)
    keys = ("exit_reason", "env_steps", "updates", "policy_version", "transitions_produced",
            "transitions_consumed", "duplicates_dropped", "best_eval_return", "last_eval_return", "wall_seconds")
    print(json.dumps({k: summary.get(k) for k in keys}))
    print(f"drl: summary written to {run_dir / 'summary.json'}", file=sys.stderr)
    return code


def detach(run: str, run_dir: Path, steps_done: int, resume: bool) -> int:
    """Starts the run's orchestrator as a child that outlives this command: its own session (no terminal
    signals), no parent-death signal, stdin closed, output to ``<run dir>/orchestrator.log``. Returns once the
    child has written state.json for this run (its processes exist), or with 1 if it ended first."""
    from orchestrator.state import read_state

    log_path = run_dir / "orchestrator.log"
    command = [sys.executable, "-m", "orchestrator.cli", DETACHED_COMMAND, str(run_dir), str(steps_done)]
    if resume:
        command.append("--resume")
    (run_dir / "state.json").unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=os.getcwd())
    deadline = time.monotonic() + DETACH_START_S
    while time.monotonic() < deadline:
        state = read_state(run_dir)
        if state is not None and state.orchestrator_pid == child.pid:
            break
        if child.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            print(f"drl-orchestrate: error: the run ended at once (code {child.returncode}): "
                  f"{tail[0] if tail else 'no output'} (log: {log_path})", file=sys.stderr)
            return 1
        time.sleep(0.1)
    else:
        print(f"drl: the run's processes are not started after {DETACH_START_S:.0f}s; it goes on in the background",
              file=sys.stderr)
    print(f"drl: run {run} goes on in the background (orchestrator pid {child.pid}, log {log_path}); "
          f"drl-orchestrate status {run} / drl-orchestrate stop {run}", file=sys.stderr)
    print(run)
    return 0


def cmd_run_detached(argv: list[str]) -> int:
    """The detached orchestrator (started by ``detach``): runs the configuration cmd_run already checked and
    wrote to ``<run dir>/config.json``."""
    from orchestrator.backends.local.run import run_local

    if len(argv) < 2 or not argv[1].isdigit():
        raise UserError(f"{DETACHED_COMMAND} is started by --detach: {DETACHED_COMMAND} RUN_DIR STEPS_DONE [--resume]")
    run_dir, steps_done = Path(argv[0]), int(argv[1])
    cfg = ExperimentConfig.from_json((run_dir / "config.json").read_text())
    code, summary = run_local(cfg, cfg.run_name, run_dir, steps_done=steps_done, resume="--resume" in argv[2:],
                              detached=True)
    print(json.dumps(summary), flush=True)
    return code


def cmd_status(argv: list[str]) -> int:
    if _on_kubernetes(argv):
        return kubernetes_status(argv)
    from orchestrator.backends.local.control import cmd_status as status

    return status(argv, _Parser)


def cmd_stop(argv: list[str]) -> int:
    from orchestrator.backends.local.control import cmd_stop as stop

    return stop(argv, _Parser)


def cmd_scale(argv: list[str]) -> int:
    if _on_kubernetes(argv):
        return kubernetes_scale(argv)
    from orchestrator.backends.local.control import cmd_scale as scale

    return scale(argv, _Parser)


def _on_kubernetes(argv: list[str]) -> bool:
    """``--backend kubernetes``, or a ``--namespace`` without ``--backend local``: a Kubernetes run."""
    deployment = deployment_options(argv)
    return deployment.backend == "kubernetes" or (bool(deployment.namespace) and deployment.backend != "local")


def _kubernetes_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=description)
    parser.add_argument("run", metavar="RUN", help="the run's name")
    parser.add_argument("--backend", choices=("kubernetes",), default="kubernetes", help="kubernetes")
    parser.add_argument("--namespace", metavar="NS",
                        help="namespace of the run [default: the kubeconfig's current namespace, else default]")
    return parser


def kubernetes_status(argv: list[str]) -> int:
    from orchestrator.backends.kubernetes.api import default_namespace

    parser = _kubernetes_parser("drl-orchestrate status", "One line per pod of a Kubernetes run: its service's "
                                "state, policy version, env steps, rate (from the pod's /metrics through the API "
                                "server's pod proxy), Kubernetes restarts and last error.")
    args = parser.parse_args(argv)
    from orchestrator.backends.kubernetes.status import show_status

    return show_status(args.run, args.namespace or default_namespace())


def kubernetes_scale(argv: list[str]) -> int:
    from orchestrator.backends.kubernetes import manifests
    from orchestrator.backends.kubernetes.api import default_namespace

    parser = _kubernetes_parser("drl-orchestrate scale", "Add or remove rollout workers of a running Kubernetes "
                                "run: the rollout Indexed Job is scaled and a scaler Job moves the shares in the "
                                "run's Redis; removed workers hand in what they collected first.")
    parser.add_argument("--workers", type=int, required=True, metavar="N", help="rollout workers wanted")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds the scaler waits for removed workers to hand in what they collected")
    args = parser.parse_args(argv)
    check_workers(args.workers)
    if args.timeout < 0:
        raise UserError(f"--timeout must not be negative, got {args.timeout:g}")
    manifests.check_run_name(args.run, "RUN")
    namespace = manifests.check_namespace(args.namespace or default_namespace())
    from orchestrator.backends.kubernetes.scale import scale_run

    return scale_run(args.run, namespace, args.workers, hand_in_s=args.timeout)


def kubernetes_objects(argv: list[str], deployment: Deployment) -> tuple[ExperimentConfig, str, str, list[dict]]:
    """(configuration, run, namespace, manifests) of a Kubernetes run; reads no cluster."""
    from orchestrator.backends.kubernetes import manifests
    from orchestrator.backends.kubernetes.api import default_namespace

    if _resuming(argv):
        raise UserError("--resume applies to local runs; on Kubernetes a restarted trainer resumes from its "
                        "checkpoint by itself")
    if deployment.namespace:
        manifests.check_namespace(deployment.namespace)
    if any(c.isspace() for c in deployment.image):
        raise UserError(f"--image must name an image, got {deployment.image!r}")
    cfg = resolve_config(argv)
    if cfg.run_name:
        manifests.check_run_name(cfg.run_name)
    manifests.check_memory_url(cfg.memory)
    manifests.check_store_url(cfg.store)
    check_environment(cfg)
    namespace = deployment.namespace or manifests.check_namespace(default_namespace())
    run = cfg.run_name or default_kubernetes_run_name(cfg.preset, cfg.env, cfg.mode)
    cfg = replace(cfg, run_name=run)
    objects = manifests.manifests(cfg, run, image=deployment.image or DEFAULT_IMAGE, namespace=namespace)
    return cfg, run, namespace, objects


def run_on_kubernetes(argv: list[str], deployment: Deployment) -> int:
    cfg, run, namespace, objects = kubernetes_objects(argv, deployment)
    print(f"drl: run {run} ({cfg.algorithm} on {cfg.env}, {cfg.mode}, {cfg.workers} workers, {cfg.steps:,} steps) "
          f"-> Kubernetes namespace {namespace}", file=sys.stderr)
    from orchestrator.backends.kubernetes.run import run_kubernetes

    return run_kubernetes(run, objects, namespace=namespace, detach=deployment.detach)


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


def cmd_render(argv: list[str]) -> int:
    """Prints the manifests ``--backend kubernetes`` would create, as a YAML stream (no cluster needed)."""
    deployment = deployment_options(argv)
    if deployment.backend == "local":
        raise UserError("render prints Kubernetes manifests; --backend local has none")
    from orchestrator.backends.kubernetes import manifests

    _, _, _, objects = kubernetes_objects(argv, deployment)
    sys.stdout.write(manifests.to_yaml(objects))
    return 0


def cmd_delete(argv: list[str]) -> int:
    parser = _Parser(prog="drl-orchestrate delete",
                     description="Delete every Kubernetes object of a run (label drl.dev/run=RUN).")
    parser.add_argument("run", metavar="RUN", help="the run's name")
    parser.add_argument("--namespace", metavar="NS",
                        help="namespace of the run [default: the kubeconfig's current namespace, else default]")
    args = parser.parse_args(argv)
    from orchestrator.backends.kubernetes import manifests
    from orchestrator.backends.kubernetes.api import default_namespace

    manifests.check_run_name(args.run, "RUN")
    namespace = manifests.check_namespace(args.namespace or default_namespace())
    from orchestrator.backends.kubernetes.run import delete_run

    return delete_run(args.run, namespace)


COMMANDS = {"presets": cmd_presets, "evaluate": cmd_evaluate, "render": cmd_render, "delete": cmd_delete,
            "plot": lambda argv: __import__("orchestrator.plot", fromlist=["main"]).main(argv)}

COMMANDS.update({"status": cmd_status, "stop": cmd_stop, "scale": cmd_scale, DETACHED_COMMAND: cmd_run_detached})


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
