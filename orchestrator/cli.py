"""The ``drl-orchestrate`` command line, generated from the configuration dataclasses.

    drl-orchestrate --preset sac --env Pendulum-v1 --workers 4 [--detach]
    drl-orchestrate status [RUN] [--output DIR]  (every service of a local run, asked over gRPC)
    drl-orchestrate stop RUN [--output DIR]      (end a local run cleanly; prints its summary)
    drl-orchestrate presets
    drl-orchestrate --preset sac --help        (options with that preset's defaults)
    drl-orchestrate --backend kubernetes --preset sac --workers 32 [--namespace NS] [--image IMAGE]
                    [--s3-image IMAGE] [--s3-storage SIZE|emptydir] [--s3-storage-class NAME]
                    [--profile small|local] [--resources ROLE.requests.cpu=500m ...] [--pending-timeout S] [--detach]
    drl-orchestrate render [same flags]        (the Kubernetes manifests as YAML; no cluster needed)
    drl-orchestrate delete RUN [--namespace NS]
    drl-orchestrate status RUN --backend kubernetes [--namespace NS]   (a Kubernetes run's pods and services)
    drl-orchestrate scale RUN --workers N [--backend kubernetes --namespace NS]

Every option of ``ExperimentConfig`` (and of nested algorithm configs, as ``--sac.lr``) is a flag; only flags
given on the command line override the preset. ``--backend``, ``--namespace``, ``--image``, ``--s3-image``,
``--s3-storage``, ``--s3-storage-class``, ``--profile``, ``--resources``, ``--pending-timeout`` and ``--detach``
say where and how a run is deployed, not what it computes, so they stay out of the configuration
(like ``--config`` and ``--resume``). Each verb is written once: the command line parses its flags, picks the backend
(``backend_for``) and calls the verb on it (``orchestrator.backends``). Bad input prints one line and exits 2; output into a pipe whose
reader went away ends quietly with 141.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from drl.algorithms import import_plugins, load_plugins_or_exit, split_modules
from drl.config import (
    ConfigError,
    ExperimentConfig,
    coerce,
    from_dict,
    import_named_plugins,
    iter_options,
    learner_shards,
    merge,
    replace,
)
from drl.errors import EXIT_USAGE, UserError
from drl.presets import PRESETS, get_preset
from orchestrator.backends import BACKENDS, Backend, Deployment
from orchestrator.backends.kubernetes.manifests import (
    DEFAULT_IMAGE,
    PENDING_TIMEOUT_S,
    PROFILES,
    RESOURCE_ROLES,
    S3_IMAGE,
    S3_STORAGE,
)
from orchestrator.backends.local.launch import DETACHED_COMMAND

DEPLOYMENT_OPTIONS = (
    "backend",
    "namespace",
    "image",
    "s3_image",
    "s3_storage",
    "s3_storage_class",
    "profile",
    "resources",
    "pending_timeout",
    "detach",
)
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: how a Unix tool ends when the reader of its output goes away (``presets | head -1``), here
without a traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see drl-orchestrate --help)")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _type_name(tp: Any) -> str:
    text = getattr(tp, "__name__", None) or str(tp)
    return text.replace("typing.", "")


SUMMARIES = {
    "presets": ("presets", "list the presets"),
    "status": ("status [RUN]", "one line per service of a run"),
    "stop": ("stop RUN", "end a local run cleanly and print its summary"),
    "scale": ("scale RUN --workers N", "add or remove rollout workers of a running run"),
    "plot": ("plot RUN [--compare RUN ...]", "learning curves of runs as a PNG"),
    "evaluate": ("evaluate --run RUN", "score a published policy of a run"),
    "export": ("export RUN --format onnx --to FILE", "a published policy as an ONNX or TorchScript file"),
    "render": ("render [flags]", "a run's Kubernetes manifests as YAML"),
    "delete": ("delete RUN", "remove a Kubernetes run's objects"),
}
"""The subcommands as the top-level help lists them (usage, what it does); each has its own --help."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def build_parser(defaults: ExperimentConfig) -> argparse.ArgumentParser:
    width = max(len(usage) for usage, _ in SUMMARIES.values())
    commands = "\n".join(f"  {usage:<{width}}  {what}" for usage, what in SUMMARIES.values())
    parser = _Parser(
        prog="drl-orchestrate",
        argument_default=argparse.SUPPRESS,
        description="Run a distributed RL experiment: rollout workers, a trainer and an evaluator\n"
        "over a Redis memory backend, as local processes or as pods on Kubernetes.\n\n"
        f"other commands (each has its own --help):\n{commands}",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="JSON file with configuration values (flags override it)")
    parser.add_argument(
        "--resume",
        metavar="RUN",
        help="continue RUN (in --output) from its newest checkpoint; "
        "flags such as --steps override its saved configuration",
    )
    add_deployment_options(parser)
    for name, tp, _default, doc, choices in iter_options():
        current: Any = defaults
        for part in name.split("."):
            current = getattr(current, part)
        if isinstance(current, tuple):
            current = ",".join(str(x) for x in current)
        help_text = f"{doc} [{_type_name(tp)}; default for this preset: {current}]"
        kwargs: dict[str, Any] = {
            "dest": name,
            "help": help_text.replace("%", "%%"),
            "metavar": name.split(".")[-1].upper(),
        }
        if choices:
            kwargs["choices"] = choices
            kwargs.pop("metavar")
        parser.add_argument(_flag(name), **kwargs)
    return parser


def add_deployment_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("deployment (where the run's processes run; not part of the configuration)")
    group.add_argument(
        "--backend",
        choices=tuple(BACKENDS),
        help="local: processes on this machine; kubernetes: pods in the cluster of the kubeconfig "
        "(or in-cluster config) [default: local]",
    )
    group.add_argument(
        "--namespace",
        metavar="NS",
        help="Kubernetes namespace [default: the kubeconfig's current namespace, else default]",
    )
    group.add_argument("--image", metavar="IMAGE", help=f"drl image of the pods [default: {DEFAULT_IMAGE}]")
    group.add_argument(
        "--s3-image",
        metavar="IMAGE",
        dest="s3_image",
        help="SeaweedFS image of the run's own S3 server, when --store is empty (the chart's "
        "s3.image); --store s3://BUCKET/PREFIX uses an S3 store of yours instead "
        f"[default: {S3_IMAGE}]",
    )
    group.add_argument(
        "--s3-storage",
        metavar="SIZE|emptydir",
        dest="s3_storage",
        help="the run's own S3 server's /data: a PVC of SIZE (needs a default StorageClass, or "
        "--s3-storage-class), or emptydir: no PVC, and policies and checkpoints are lost "
        f"with the S3 server's pod (the chart's s3.persistence) [default: {S3_STORAGE}]",
    )
    group.add_argument(
        "--s3-storage-class",
        metavar="NAME",
        dest="s3_storage_class",
        help="StorageClass of the S3 server's PVC (the chart's s3.persistence.storageClass) "
        "[default: the cluster's default class]",
    )
    group.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        help="requests and limits of every pod, by name (the chart's helm/profiles/NAME.yaml); "
        "small: 2 workers fit one node of 2 CPUs; local: small's, with the images that "
        "scripts/local-cluster.sh images imports into its real node (drl.local/*:local, "
        "never pulled; --image and --s3-image still win) and no PVC for the S3 server "
        "[default: default, the chart's values]",
    )
    group.add_argument(
        "--resources",
        metavar="ROLE.KIND.RES=Q",
        action="append",
        type=_resource_setting,
        help=f"set one request or limit over the profile, as the chart's ROLE.resources: ROLE is "
        f"{', '.join(RESOURCE_ROLES)}; KIND requests or limits; RES cpu or memory; e.g. "
        "rollout.requests.cpu=250m,rollout.limits.memory=1Gi (repeatable)",
    )
    group.add_argument(
        "--pending-timeout",
        metavar="S",
        dest="pending_timeout",
        type=_seconds,
        help="Kubernetes: seconds a pod may stay unschedulable or uncreatable (reported at once, "
        "with the scheduler's or the quota's reason) before a followed run gives up with "
        f"exit 1; 0: wait for ever [default: {PENDING_TIMEOUT_S:g}]",
    )
    group.add_argument(
        "--detach",
        action="store_true",
        help="return once the run is started instead of following it (local: the run goes on "
        "in the background; see 'status RUN' and 'stop RUN'; kubernetes: once its objects "
        "are created)",
    )


def _resource_setting(text: str) -> str:
    """One ``--resources`` value, its form checked at once (``manifests.resource_settings``); requests against
    limits are checked once the profile is known (``manifests.resources_for``)."""
    from orchestrator.backends.kubernetes.manifests import resource_settings

    resource_settings((text,))
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--pending-timeout takes seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise UserError(f"--pending-timeout must be 0 (wait for ever) or more seconds, got {text!r}")
    return value


def deployment_options(argv: list[str]) -> Deployment:
    """The deployment flags of a command line (the generated parser accepts them and leaves them out of the
    configuration)."""
    pre = _Parser(add_help=False, allow_abbrev=False, argument_default=argparse.SUPPRESS)
    add_deployment_options(pre)
    known, _ = pre.parse_known_args(argv)
    values = vars(known)
    if "resources" in values:
        values["resources"] = tuple(values["resources"])
    return Deployment(**values)


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
    pre.add_argument("--plugins")
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
    if getattr(known, "plugins", None):
        import_plugins(split_modules(known.plugins), "--plugins")
    import_named_plugins(file_data, f"config file {getattr(known, 'config', '')}")
    preset_name = getattr(known, "preset", None) or file_data.get("preset") or "sac"
    base = get_preset(str(preset_name), getattr(known, "env", None) or file_data.get("env"))
    parser = build_parser(base)
    args = vars(parser.parse_args(argv))
    args.pop("config", None)
    for name in DEPLOYMENT_OPTIONS:
        args.pop(name, None)
    if args.pop("resume", None):
        args["run_name"] = resume
    cfg = (
        from_dict(ExperimentConfig, merge(base.to_dict(), file_data, f"config file {known.config}"))
        if file_data
        else base
    )
    if "memory" not in args and not file_data.get("memory") and os.environ.get("DRL_MEMORY_URL"):
        args["memory"] = os.environ["DRL_MEMORY_URL"]
    types = _option_types()
    changes = {name: coerce(types[name], value, _flag(name)) for name, value in args.items()}
    changes.update(learner_shards(changes.get("learners"), {*changes, *file_data}, cfg.memory_shards))
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


def _resuming(argv: list[str]) -> bool:
    return "--resume" in argv or any(a.startswith("--resume=") for a in argv)


def backend_for(verb: str, deployment: Deployment) -> Backend:
    """``--backend``; else Kubernetes for ``render`` and ``delete`` and wherever ``--namespace`` names a run's
    place (not for a new run, which is local unless ``--backend kubernetes`` says otherwise), else local."""
    if deployment.backend:
        return BACKENDS[deployment.backend]
    if verb in ("render", "delete") or (deployment.namespace and verb != "run"):
        return BACKENDS["kubernetes"]
    return BACKENDS["local"]


def cmd_run(argv: list[str]) -> int:
    return _run_or_render("run", argv)


def cmd_render(argv: list[str]) -> int:
    """Prints the manifests ``--backend kubernetes`` would create, as a YAML stream (no cluster needed)."""
    return _run_or_render("render", argv)


def _run_or_render(verb: str, argv: list[str]) -> int:
    deployment = deployment_options(argv)
    backend = backend_for(verb, deployment)
    resume = _resuming(argv)
    backend.check(deployment, resume)
    cfg = resolve_config(argv)
    check_environment(cfg)
    if verb == "render":
        sys.stdout.write(backend.render(cfg, deployment))
        return 0
    return backend.run(cfg, deployment, resume)


def cmd_run_detached(argv: list[str]) -> int:
    from orchestrator.backends.local.launch import run_detached

    return run_detached(argv)


def _run_parser(
    verb: str, description: str, run_help: str = "the run's name", optional_run: bool = False
) -> argparse.ArgumentParser:
    """The parser of a verb that acts on an existing run: its name, and where to find it."""
    parser = _Parser(prog=f"drl-orchestrate {verb}", description=description)
    optional: dict[str, Any] = {"nargs": "?"} if optional_run else {}
    parser.add_argument("run", metavar="RUN", help=run_help, **optional)
    where = parser.add_argument_group("where the run is")
    where.add_argument(
        "--backend",
        choices=tuple(BACKENDS),
        help=f"local or kubernetes [default: kubernetes with --namespace, else {backend_for(verb, Deployment()).name}]",
    )
    where.add_argument("--output", metavar="DIR", help="folder of the local runs [default: runs]")
    where.add_argument(
        "--namespace",
        metavar="NS",
        help="namespace of a Kubernetes run [default: the kubeconfig's current namespace, else default]",
    )
    return parser


def _existing_run(verb: str, parser: argparse.ArgumentParser, argv: list[str]):
    """(parsed arguments, backend, deployment) of a verb acting on an existing run."""
    args = parser.parse_args(argv)
    deployment = Deployment(backend=args.backend or "", namespace=args.namespace or "", output=args.output or "")
    backend = backend_for(verb, deployment)
    backend.check(deployment)
    return args, backend, deployment


def cmd_status(argv: list[str]) -> int:
    parser = _run_parser(
        "status",
        "One line per service of a run: state, policy version, env steps, rate, "
        "restarts and last error; a local run's services asked over gRPC (drl.v1.Control), a "
        "Kubernetes run's pods through their /metrics pages (the API server's pod proxy).",
        "the run's name [default: the newest run in --output]",
        optional_run=True,
    )
    args, backend, deployment = _existing_run("status", parser, argv)
    return backend.status(args.run, deployment)


def cmd_stop(argv: list[str]) -> int:
    parser = _run_parser(
        "stop",
        "End a local run cleanly: the rollout workers hand in what they collected, the "
        "trainer writes a final checkpoint, and the run's orchestrator writes summary.json "
        "(exit_reason stopped), which is printed.",
    )
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds to wait for the run to end")
    args, backend, deployment = _existing_run("stop", parser, argv)
    return backend.stop(args.run, deployment, args.timeout)


def cmd_scale(argv: list[str]) -> int:
    parser = _run_parser(
        "scale",
        "Add or remove rollout workers of a running run. Removed workers hand in what "
        "they collected before they exit; the steps not yet collected are spread over the "
        "workers that remain; SYNC iterations split over the new count. On Kubernetes the rollout "
        "Indexed Job is scaled and a scaler Job moves the shares in the run's memory server.",
    )
    parser.add_argument("--workers", type=int, required=True, metavar="N", help="rollout workers wanted")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds to wait until the new number of workers runs (Kubernetes: that the scaler "
        "waits for removed workers to hand in what they collected)",
    )
    args, backend, deployment = _existing_run("scale", parser, argv)
    return backend.scale(args.run, args.workers, deployment, args.timeout)


def cmd_delete(argv: list[str]) -> int:
    parser = _run_parser("delete", "Delete every Kubernetes object of a run (label drl.dev/run=RUN).")
    args, backend, deployment = _existing_run("delete", parser, argv)
    return backend.delete(args.run, deployment)


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


def cmd_export(argv: list[str]) -> int:
    from orchestrator.export import export

    return export(argv, _Parser)


COMMANDS = {
    "presets": cmd_presets,
    "evaluate": cmd_evaluate,
    "export": cmd_export,
    "render": cmd_render,
    "delete": cmd_delete,
    "plot": lambda argv: __import__("orchestrator.plot", fromlist=["main"]).main(argv),
}

COMMANDS.update({"status": cmd_status, "stop": cmd_stop, "scale": cmd_scale, DETACHED_COMMAND: cmd_run_detached})


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    load_plugins_or_exit()
    try:
        if argv and argv[0] in COMMANDS:
            code = COMMANDS[argv[0]](argv[1:])
        else:
            code = cmd_run(argv)
        sys.stdout.flush()
    except UserError as exc:
        print(f"drl-orchestrate: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        _quiet_stdout()
        code = EXIT_BROKEN_PIPE
    sys.exit(code)


def _quiet_stdout() -> None:
    """The reader of stdout went away (``status | head -1``): what is still buffered goes nowhere, so that the
    interpreter's own flush at exit does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    main()
