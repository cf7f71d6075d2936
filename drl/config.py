"""Typed, frozen experiment configuration: the one source of every option.

Each field carries its documentation in ``metadata["doc"]``; the CLI (``orchestrator/cli.py``) is generated
from these dataclasses, and every service receives the whole configuration as JSON in the ``DRL_CONFIG``
environment variable, so nothing reaches a service except through its command and environment.

``ExperimentConfig`` is a static class the type checker follows: the options every run has, then one typed block
per built-in algorithm (its hyperparameter dataclass under its name). An algorithm a plugin registers
(``drl.algorithms.load_plugins``, which the entry points call before they read a configuration) has its block in
``plugin_blocks``, filled with its defaults when a configuration is made; it reads as ``cfg.<name>``, and in JSON, on
the command line (``--<name>.<field>``) and among ``--algorithm``'s values it is a block like the built-in ones.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import math
import types
import typing
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeVar

from drl import device
from drl.algorithms import ALGORITHMS, Algorithm, import_plugins, split_modules
from drl.algorithms.appo.config import APPOConfig
from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.ppo.config import PPOConfig
from drl.algorithms.sac.config import SACConfig
from drl.algorithms.td3.config import TD3Config
from drl.envs import VECTOR_ENVS, envpool_refusal
from drl.errors import ConfigError, UserError
from drl.fields import choices_of, opt
from drl.fields import problems as check_ranges
from drl.naming import memory_servers

MODES = ("sync", "async")
TRACKERS = ("", "mlflow")
COMPILE_MODES = ("off", "auto", "on")
BLOCKS_FIELD = "plugin_blocks"
"""The field of ``ExperimentConfig`` holding the plugin algorithms' blocks (never a key of its JSON form)."""
C = TypeVar("C")
D = TypeVar("D")


def _algorithm_names() -> tuple[str, ...]:
    return tuple(ALGORITHMS)


class Blocks(dict):
    """The plugin algorithms' blocks of a configuration: a dict that refuses changes, as the frozen configuration
    holding it does (``replace`` makes a new one), and that copies, pickles and ``dataclasses.asdict`` as a dict."""

    def _read_only(self, *args: Any, **kwargs: Any) -> typing.NoReturn:
        raise TypeError("a configuration's blocks are read-only; drl.config.replace makes a changed copy")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type, tuple[dict[str, Any]]]:
        return Blocks, (dict(self),)

    def __deepcopy__(self, memo: dict[int, Any]) -> Blocks:
        return Blocks(copy.deepcopy(dict(self), memo))


def _block(name: str) -> Any:
    """The field of a built-in algorithm's block: its defaults, and the builder's help (``Algorithm.doc``)."""
    algorithm = ALGORITHMS[name]
    return opt(algorithm.config(), algorithm.doc)


@dataclass(frozen=True)
class ExperimentConfig:
    """A whole distributed run: what to learn, with how many processes, and where data goes."""

    preset: str = opt("sac", "Preset the run started from (informational once resolved).")
    algorithm: str = opt("sac", "Learning algorithm.", choices=_algorithm_names)
    env: str = opt(
        "Pendulum-v1",
        "Any registered gymnasium environment id, or module:EnvId for an env of your own (gymnasium's form: every "
        "process of the run imports the module, which registers EnvId; docs/custom-envs.md).",
    )
    plugins: str = opt(
        "",
        "Modules every process of the run imports before it reads its configuration (comma-separated): plugins "
        "that register algorithms or environments. Kept in the run's configuration, so every service, evaluate, "
        "a resumed run and every pod import the same ones; the modules in DRL_PLUGINS are imported too.",
    )
    workers: int = opt(2, "Rollout worker processes.")
    envs_per_worker: int = opt(1, "Environments stepped together inside each rollout worker.")
    vector_env: str = opt(
        "auto",
        "How a rollout worker steps its environments: gymnasium (one Python env each), envpool (EnvPool's C++ "
        "threads; ALE -v5 games, the envpool extra), or auto (envpool for ALE -v5 games when it is installed). "
        "Both give the same Atari rules (drl.atari).",
        choices=VECTOR_ENVS,
    )
    env_threads: int = opt(
        0,
        "EnvPool threads per rollout worker; 0 takes the worker's CPU limit in a pod, else its share of the "
        "machine's cores among --workers.",
    )
    mode: str = opt(
        "sync", "sync: workers and trainer take turns per policy version; async: both run continuously.", choices=MODES
    )
    steps: int = opt(20_000, "Total environment steps collected by all workers together.")
    seed: int = opt(0, "Base random seed; each worker and the evaluator derive their own from it.")
    memory: str = opt(
        "",
        "Redis URL of the memory backend (redis://HOST:PORT/DB, rediss://HOST:PORT/DB, "
        "unix:///PATH?db=N; default $DRL_MEMORY_URL), or several separated by commas to spread "
        "the experience shards over servers (shard s on server s mod N, the run's control "
        "state on the first); empty starts a private Valkey/Redis server. "
        "Credentials and TLS files come from DRL_MEMORY_USERNAME, DRL_MEMORY_PASSWORD(_FILE), "
        "DRL_MEMORY_TLS_CA/_CERT/_KEY.",
    )
    store: str = opt(
        "",
        "Data store for policies and checkpoints: a directory, file://PATH or s3://BUCKET/PREFIX "
        "(endpoint and credentials from DRL_S3_ENDPOINT, AWS_* variables or AWS credential files); "
        "runs live under their name in it; empty means the output directory.",
    )
    run_name: str = opt("", "Run name; empty picks <preset>-<env>-<mode>-<time>.")
    output: str = opt("runs", "Directory that receives one folder per run (logs, evaluations, summary).")
    target_return: float | None = opt(None, "Stop early once a mean evaluation return reaches this value.")
    batch_transitions: int = opt(
        64, "Transitions per stream entry sent by a rollout worker (the least; see --entry-fill-ms)."
    )
    entry_fill_ms: float = opt(
        10.0,
        "A rollout worker keeps filling an entry past --batch-transitions until its "
        "stepping has used this many milliseconds of CPU time (or 100 times as "
        "long has passed), up to a quarter of the backlog's limit "
        "(--max-backlog-entries entries of --batch-transitions): a fast env sends "
        "fewer, larger entries, a slow one is not held back. 0 sends every entry at "
        "--batch-transitions.",
    )
    compression: str = opt(
        "auto",
        "How rollout workers compress each entry's arrays: zstd, lz4, none, or auto "
        "(zstd for image frames when the zstandard package is installed, none "
        "otherwise). The trainer reads any of them.",
        choices=("auto", "none", "zstd", "lz4"),
    )
    random_steps: int = opt(1000, "Initial environment steps (all workers together) taken with uniform random actions.")
    learning_starts: int = opt(1000, "Transitions in replay before the first gradient update.")
    updates_per_transition: float = opt(1.0, "Gradient updates per consumed transition (the replay ratio).")
    replay_size: int = opt(1_000_000, "Replay buffer capacity in transitions.")
    sync_steps_per_iteration: int = opt(
        1000, "SYNC: environment steps per iteration, split evenly over the workers (rounded up)."
    )
    sync_deadline_s: float = opt(
        60.0, "SYNC: seconds the trainer waits for an iteration's stragglers before training without them."
    )
    publish_every_updates: int = opt(250, "ASYNC: gradient updates between two published policy versions.")
    memory_shards: int = opt(
        1,
        "Experience streams on the memory server: rollout worker i appends to stream i mod "
        "this; each stream has its own backlog bounds and its own committed reader state, "
        "and the trainer reads them all. Not given, --learners N makes it N (each learner reads whole streams).",
    )
    max_backlog_entries: int = opt(16, "Stream entries waiting for the trainer before producers pause (back-pressure).")
    max_backlog_bytes: int = opt(
        256 * 1024 * 1024, "Bytes of stream entries waiting for the trainer before producers pause (back-pressure)."
    )
    max_policy_lag: int = opt(
        0,
        "ASYNC, algorithms that learn from a queue (appo): a segment collected with a "
        "policy more than this many versions older than the trainer's newest is dropped "
        "when its batch is formed, and counted (lag_dropped); 0: no limit.",
    )
    ratio_tolerance: int = opt(
        64, "ASYNC: transitions the trainer may read ahead of the updates it owes (the rate limiter's error buffer)."
    )
    reclaim_idle_s: float = opt(
        30.0, "Seconds an entry may stay pending at another (dead) consumer before the trainer claims it."
    )
    memory_retry_s: float = opt(120.0, "Seconds services keep retrying an unreachable memory server before failing.")
    member_silence_s: float = opt(
        600.0,
        "Seconds the trainer waits for a member rollout worker from which nothing "
        "arrives (one that never started, or whose name another program wrote "
        "into the membership) before it goes on without it.",
    )
    max_restarts: int = opt(
        5,
        "Times the local orchestrator restarts one process that crashed, hung or was "
        "killed, before it gives the run up as failed (0: never restart).",
    )
    hang_timeout_s: float = opt(
        60.0,
        "Seconds without a heartbeat after which the local orchestrator "
        "kills and restarts a process (a hung or stopped process).",
    )
    eval_episodes: int = opt(10, "Deterministic episodes per evaluated policy version.")
    track: str = opt(
        "",
        "Experiment tracking beyond TensorBoard: mlflow logs the configuration as parameters, every evaluation "
        "and the trainer's throughput as metrics against env steps, and the final policy exported as ONNX, to "
        "the server MLFLOW_TRACKING_URI names (the evaluator does; needs drl[track]; docs/results.md).",
        choices=TRACKERS,
    )
    track_experiment: str = opt("drl", "The MLflow experiment a tracked run is logged in (--track mlflow).")
    trainer_threads: int = opt(
        1,
        "Torch intra-op threads of the trainer; 0 takes the CPUs it may use (its pod's CPU limit, else its "
        "affinity): on a machine shared with niced rollout workers it uses the cores they leave idle, and a "
        "local run's evaluator then runs at the lowest priority.",
    )
    compile: str = opt(
        "off",
        "torch.compile the trainer's image encoders (almost all of a pixel learner's work): on compiles them "
        "(the trainer needs a C/C++ compiler: the project's image has none), auto compiles them when a compiler "
        "is on the trainer's PATH and trains eagerly otherwise; weights, checkpoints and acting are the same "
        "either way (bench/README.md, torch.compile).",
        choices=COMPILE_MODES,
    )
    learners: int = opt(
        1,
        "Trainer processes in one data-parallel group (torch.distributed: gloo on CPUs, NCCL on "
        "GPUs): learner r reads the experience streams s with s mod learners = r into its own "
        "replay, every update averages the group's gradients, and learner 0 publishes; needs "
        "--memory-shards of at least this.",
    )
    device: str = opt(
        "auto",
        "Where the trainer's networks train: auto (the first CUDA device when the trainer "
        "sees one, else the CPU), cpu, cuda or cuda:N; a named GPU the trainer does not have "
        "is refused.",
    )
    checkpoint_every_s: float = opt(60.0, "Seconds between full trainer checkpoints (one is also written at exit).")
    keep_checkpoints: int = opt(3, "Checkpoints kept in the store (the newest is never deleted).")
    checkpoint_replay: bool = opt(False, "Include the replay buffer in checkpoints (large; off by default).")
    keep_policies: int = opt(10, "Published policy versions kept in the store (the newest is never deleted).")
    prioritized: bool = opt(
        False,
        "Prioritized replay (sac, td3, dqn): sample transitions in proportion to "
        "their TD error; the trainer updates priorities after each update.",
    )
    priority_alpha: float = opt(0.6, "Prioritized replay: exponent turning |TD error| into a priority.")
    priority_beta: float = opt(
        0.4, "Prioritized replay: importance-sampling exponent at the start; it rises linearly to 1 over the run."
    )
    worker_priorities: bool = opt(
        False,
        "Prioritized replay: rollout workers compute each transition's initial "
        "priority with their copy of the network (Ape-X; dqn).",
    )
    sac: SACConfig = _block("sac")
    td3: TD3Config = _block("td3")
    ppo: PPOConfig = _block("ppo")
    dqn: DQNConfig = _block("dqn")
    appo: APPOConfig = _block("appo")
    plugin_blocks: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        """Gives every registered plugin algorithm its block (its defaults where none was given) and refuses a
        block no registered algorithm owns; the mapping is read-only, as the rest of the configuration."""
        algorithms = plugin_algorithms()
        unknown = sorted(set(self.plugin_blocks) - set(algorithms))
        if unknown:
            raise ConfigError(f"unknown configuration key(s): {', '.join(unknown)}")
        blocks = {name: self.plugin_blocks.get(name, algorithm.config()) for name, algorithm in algorithms.items()}
        object.__setattr__(self, BLOCKS_FIELD, Blocks(blocks))

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            """A plugin algorithm's block as ``cfg.<name>``, as a built-in one reads (the checker sees only the
            typed fields)."""
            blocks = self.__dict__.get(BLOCKS_FIELD, {})
            if name in blocks:
                return blocks[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def blocks(self) -> dict[str, Any]:
        """Every algorithm's block by name, the built-in ones first, then the plugins'."""
        return {**{name: getattr(self, name) for name in BLOCKS}, **self.plugin_blocks}

    def validate(self) -> Self:
        """Checks values that need no environment or server; raises ConfigError with every problem found."""
        problems = check_ranges(
            self,
            "--",
            positive_int=(
                "workers",
                "envs_per_worker",
                "steps",
                "batch_transitions",
                "eval_episodes",
                "memory_shards",
                "keep_policies",
                "keep_checkpoints",
                "sync_steps_per_iteration",
                "publish_every_updates",
                "max_backlog_entries",
                "max_backlog_bytes",
                "replay_size",
            ),
            nonneg=(
                "random_steps",
                "learning_starts",
                "ratio_tolerance",
                "max_policy_lag",
                "max_restarts",
                "entry_fill_ms",
                "env_threads",
                "trainer_threads",
            ),
            positive=(
                "updates_per_transition",
                "sync_deadline_s",
                "reclaim_idle_s",
                "memory_retry_s",
                "member_silence_s",
                "checkpoint_every_s",
                "hang_timeout_s",
            ),
            fraction=("priority_alpha", "priority_beta"),
        )
        if self.target_return is not None and not math.isfinite(self.target_return):
            problems.append(f"--target-return must be a finite number, got {self.target_return}")
        if not self.env:
            problems.append("--env must name a gymnasium environment id")
        device_problem = device.problem(self.device)
        if device_problem:
            problems.append(device_problem)
        if self.learners < 1:
            problems.append(f"--learners must be at least 1, got {self.learners}")
        elif self.learners > self.memory_shards:
            problems.append(
                f"--learners {self.learners} needs --memory-shards {self.learners} or more: each learner "
                f"reads whole experience streams (got --memory-shards {self.memory_shards})"
            )
        servers = len(memory_servers(self.memory))
        if servers > self.memory_shards:
            problems.append(
                f"--memory names {servers} servers for --memory-shards {self.memory_shards}: each server "
                f"holds whole experience streams (use --memory-shards {servers} or more)"
            )
        if self.run_name and not all(c.isalnum() or c in "-_." for c in self.run_name):
            problems.append(f"--run-name may hold letters, digits, '-', '_' and '.', got {self.run_name!r}")
        algo = ALGORITHMS.get(self.algorithm)
        if algo is not None:
            problems += algo.problems(self)
        if self.worker_priorities and not self.prioritized:
            problems.append("--worker-priorities needs --prioritized true")
        if self.steps >= 1 and self.workers > self.steps:
            problems.append(f"--workers ({self.workers}) exceeds --steps ({self.steps})")
        for name, block in self.blocks().items():
            if hasattr(block, "problems"):
                problems += block.problems(f"--{name}.")
        refusal = envpool_refusal(self.env) if self.vector_env == "envpool" else None
        if refusal:
            problems.append(refusal)
        package = {"zstd": "zstandard", "lz4": "lz4"}.get(self.compression)
        if package and importlib.util.find_spec(package) is None:
            problems.append(
                f"--compression {self.compression} needs the {package} package: "
                f"pip install {package} (or pip install 'drl[atari]')"
            )
        if problems:
            raise ConfigError("; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as a dict: every option, each algorithm's block (plugins' too) under its name."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != BLOCKS_FIELD}
        data.update(self.plugin_blocks)
        return {
            key: dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value
            for key, value in data.items()
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ExperimentConfig:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
            raise ConfigError(f"configuration is not valid JSON: {exc}") from None
        return from_dict(cls, data)


BLOCKS = tuple(f.name for f in dataclasses.fields(ExperimentConfig) if dataclasses.is_dataclass(f.default))
"""The built-in algorithms' blocks, typed fields of ``ExperimentConfig``."""
OPTIONS = frozenset(f.name for f in dataclasses.fields(ExperimentConfig))
"""The fields of ``ExperimentConfig``, which no plugin algorithm may be named like."""


def plugin_algorithms() -> dict[str, Algorithm]:
    """The registered algorithms whose blocks live in ``ExperimentConfig.plugin_blocks``, in registration order. A
    plugin algorithm named like an option would hide it, and is refused."""
    found = {name: algorithm for name, algorithm in ALGORITHMS.items() if name not in BLOCKS}
    taken = sorted(OPTIONS.intersection(found))
    if taken:
        raise ConfigError(
            f"algorithm {taken[0]!r} is named like the option --{_flag(taken[0])}: a plugin "
            "algorithm needs a name of its own (it names its configuration block)"
        )
    return found


def block_types(cls: type) -> dict[str, Any]:
    """Every key of ``cls``'s JSON form with its type: its fields, and for ``ExperimentConfig`` the plugin
    algorithms' blocks in place of ``plugin_blocks``."""
    hints = _hints(cls)
    types_ = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    if cls is ExperimentConfig:
        del types_[BLOCKS_FIELD]
        types_.update({name: algorithm.config for name, algorithm in plugin_algorithms().items()})
    return types_


def _make(cls: type[D], values: dict[str, Any]) -> D:
    """``cls(**values)``, an ``ExperimentConfig``'s plugin blocks gathered into ``plugin_blocks``."""
    if cls is ExperimentConfig:
        plugins = {name: values.pop(name) for name in plugin_algorithms() if name in values}
        values[BLOCKS_FIELD] = plugins
    return cls(**values)


def merge(base: dict, data: Any, where: str) -> dict:
    """``base`` with ``data``'s values laid over it, nested blocks merged key by key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a JSON object")
    out = dict(base)
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = merge(base[key], value, where)
        else:
            out[key] = value
    return out


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(tp: Any, value: Any, where: str) -> Any:
    """Converts a JSON or CLI value to the annotated type, or raises ConfigError naming the field."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "")):
            return None
        return coerce(args[0], value, where)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} expects a comma-separated list, got {value!r}")
        return tuple(coerce(inner, v, where) for v in value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} expects an object, got {value!r}")
        return from_dict(typing.cast(type, tp), value, prefix=f"{where}.")
    try:
        if tp is bool:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if tp is int:
            if isinstance(value, bool):
                raise ValueError(value)
            if isinstance(value, str):
                value = value.replace("_", "")
                if "e" not in value.lower():
                    return int(value)
                value = float(value)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise ValueError(value)
            return value
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where} expects {getattr(tp, '__name__', tp)}, got {value!r}") from None
    raise ConfigError(f"{where}: unsupported type {tp}")


def import_named_plugins(data: Any, where: str = "the configuration") -> None:
    """Imports the plugins a configuration's JSON form names (its ``plugins``), before anything in it is read:
    their algorithms' blocks and presets, and their environments, are then known. One that cannot be imported
    is the configuration's error (ConfigError, with ``import_plugins``' message)."""
    if not isinstance(data, dict) or not data.get("plugins"):
        return
    if not isinstance(data["plugins"], str):
        raise ConfigError(f"{where}: plugins expects a comma-separated str, got {data['plugins']!r}")
    try:
        import_plugins(split_modules(data["plugins"]), f"{where}'s plugins")
    except UserError as exc:
        raise ConfigError(str(exc)) from exc.__cause__


def from_dict(cls: type[D], data: dict, prefix: str = "") -> D:
    """Builds a config dataclass from a dict, refusing unknown keys and wrong types (an ``ExperimentConfig``'s
    plugins imported first: ``import_named_plugins``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"configuration {prefix or 'root'} must be an object")
    if cls is ExperimentConfig:
        import_named_plugins(data)
    known = block_types(cls)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"unknown configuration key(s): {', '.join(prefix + u for u in unknown)}")
    return _make(cls, {k: coerce(known[k], v, f"{prefix}{k}") for k, v in data.items()})


def learner_shards(learners: Any, named: Container[str], shards: int = 1) -> dict[str, int]:
    """What ``--learners N`` alone implies: ``{"memory_shards": N}`` (or ``shards``, the shards already set, when
    more), since each learner reads whole experience streams; nothing when N is not above 1 or when ``named``
    (the options and file keys given) sets ``memory_shards`` itself, which the configuration's check then holds
    to at least N. The command line, the Python API and the chart resolve it alike."""
    if not isinstance(learners, int) or learners <= 1 or "memory_shards" in named:
        return {}
    return {"memory_shards": max(learners, shards)}


def replace(cfg: C, **changes: Any) -> C:
    """dataclasses.replace that also accepts dotted keys for nested configs ("sac.lr"), plugin blocks too."""
    nested: dict[str, dict[str, Any]] = {}
    flat = {}
    for key, value in changes.items():
        if "." in key:
            head, tail = key.split(".", 1)
            nested.setdefault(head, {})[tail] = value
        else:
            flat[key] = value
    for head, sub in nested.items():
        flat[head] = replace(getattr(cfg, head), **sub)
    if isinstance(cfg, ExperimentConfig):
        plugins = {name: flat.pop(name) for name in cfg.plugin_blocks if name in flat}
        if plugins:
            flat[BLOCKS_FIELD] = {**cfg.plugin_blocks, **plugins}
    return dataclasses.replace(cfg, **flat)  # type: ignore[type-var]


Option = tuple[str, Any, Any, str, "tuple[str, ...] | None"]


def iter_options(cls: type = ExperimentConfig, prefix: str = "") -> Iterator[Option]:
    """Yields (dotted name, type, default, doc, choices) for every leaf option, for the CLI and the docs; an
    ``ExperimentConfig``'s plugin blocks come after the built-in ones."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if cls is ExperimentConfig and f.name == BLOCKS_FIELD:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from iter_options(typing.cast(type, tp), prefix=f"{prefix}{f.name}.")
            continue
        yield f"{prefix}{f.name}", tp, f.default, f.metadata.get("doc", ""), choices_of(f)
    if cls is ExperimentConfig:
        for name, algorithm in plugin_algorithms().items():
            yield from iter_options(algorithm.config, prefix=f"{prefix}{name}.")
