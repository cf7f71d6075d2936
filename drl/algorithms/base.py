"""What an algorithm is to the rest of drl: the roles its pieces play and the builder that makes them.

Acme's builder is the model: one object per algorithm hands the services everything they need (the acting
policy, the learner with its replay or rollout, the worker-side folding of transitions, the wire fields beyond
the five every transition has, and its own configuration checks), so that a service never asks which algorithm
it runs, and adding one touches only its own folder. Pure: nothing here reads files, servers or processes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from drl.core import Actor, ActorBase, FieldSpecs, Folder, Learner, Learning, ReplayLearner, RolloutLearner
from drl.envs import SpaceSpec
from drl.errors import UserError
from drl.frames import FRAME_ROOM

if TYPE_CHECKING:
    from drl.config import ExperimentConfig

__all__ = [
    "ALGORITHMS",
    "Actor",
    "ActorBase",
    "Algorithm",
    "FieldSpecs",
    "Folder",
    "Learner",
    "Learning",
    "MemoryNeed",
    "Parameters",
    "ReplayLearner",
    "RolloutLearner",
    "get",
    "register",
]


def mlp_parameters(sizes: list[int]) -> int:
    """Weights and biases of ``drl.algorithms.common.mlp(sizes)``, counted without building it."""
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


@dataclass(frozen=True)
class Parameters:
    """An algorithm's network parameters, by what each costs in memory."""

    trained: int
    """Parameters the learner trains: each has a gradient and two Adam moments beside it."""
    frozen: int
    """Parameters the learner keeps without training them (target networks)."""
    acting: int
    """Parameters of the acting policy, which every rollout worker and the evaluator hold."""


@dataclass(frozen=True)
class MemoryNeed:
    """Memory a run will allocate for one thing, and the option that sizes it (for the message that refuses
    a run too large for the machine)."""

    what: str
    option: str
    value: object
    bytes: int


FLOAT_BYTES = 4


class Algorithm:
    """An algorithm's builder: one instance per algorithm, registered by ``name``.

    ``config`` is its hyperparameter dataclass, which ``ExperimentConfig`` holds as a block under ``name`` (flags
    ``--<name>.<field>``, help ``doc``). Subclasses set the class attributes and ``make_actor`` and
    ``make_learner``; the defaults fit a replay-based algorithm that folds nothing and sends no extra fields.
    """

    name: str = ""
    config: type = type(None)
    doc: str = ""
    continuous: bool = False  # handles Box actions
    discrete: bool = False  # handles Discrete actions
    worker_priorities: bool = False  # its actor can compute initial replay priorities (``--worker-priorities``)
    bounded_actions: bool = True  # Box actions must have finite bounds (it squashes actions into them)

    def hyper(self, cfg: ExperimentConfig) -> Any:
        """Its block of an ``ExperimentConfig``."""
        return getattr(cfg, self.name)

    def wire_fields(self, cfg: ExperimentConfig) -> FieldSpecs:
        """Per-transition wire fields beyond obs, action, reward, next_obs and terminated that a run of ``cfg``
        sends, in wire order."""
        return {}

    def make_actor(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
        raise NotImplementedError(f"algorithm {self.name} has no actor")

    def make_learner(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Learner:
        raise NotImplementedError(f"algorithm {self.name} has no learner")

    def acting_network(self, spec: SpaceSpec, cfg: ExperimentConfig, weights: dict[str, np.ndarray]) -> Any:
        """A torch module holding the published ``weights`` that maps a batch of observations, as the environment
        gives them, to the deterministic action in the environment's units, everything it needs folded in
        (``drl.algorithms.exporting``): what ``drl-orchestrate export`` writes. An algorithm without one cannot
        be exported."""
        raise UserError(f"algorithm {self.name} cannot be exported: its builder has no acting_network")

    def make_learning(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> "Learning":
        """The learner with where its data goes: by default a replay (prioritized with ``cfg.prioritized``)
        keeping every wire field of the run for the learner's batches."""
        from drl.training.learning import ReplayLearning

        learner = cast(ReplayLearner, self.make_learner(spec, cfg, seed))  # a replay's learner, as ``replay`` says
        return ReplayLearning(learner, spec, cfg, keep=self.wire_fields(cfg))

    replay: bool = True
    """Its ``make_learning`` keeps a replay of ``--replay-size`` transitions (False: it learns from rollouts)."""

    def parameters(self, spec: SpaceSpec, cfg: ExperimentConfig) -> Parameters | None:
        """Its networks' parameter counts for ``spec`` and ``cfg``, computed without building them (a size too
        large for the machine must be refused before anything allocates it); None: not known."""
        return None

    def memory_needs(self, spec: SpaceSpec, cfg: ExperimentConfig) -> list[MemoryNeed]:
        """What a run of ``cfg`` allocates, at least: the replay (every stored field of ``replay_size``
        transitions, the prioritized replay's sum tree) and the networks (in the trainer with gradients, Adam
        moments and targets; in every rollout worker and the evaluator the acting policy, once as the network and
        once as the loaded weights). Checked before a run starts, so that a mistyped size ends with one line
        instead of allocation errors and restarts."""
        needs = []
        if self.replay:
            if spec.frame_stack:
                row = FRAME_ROOM * math.prod(spec.frame_shape) + 2 * 8 * (spec.frame_stack + 1)
            else:
                row = 2 * math.prod(spec.obs_shape) * _itemsize(spec.obs_dtype)
            row += math.prod(spec.act_shape) * _itemsize(spec.act_dtype) + 2 * FLOAT_BYTES
            row += sum(
                FLOAT_BYTES * math.prod(shape)
                for name, (_, shape) in self.wire_fields(cfg).items()
                if name != "priority"
            )
            tree = 2 * 2 ** math.ceil(math.log2(max(cfg.replay_size, 1))) * 8 if cfg.prioritized else 0
            needs.append(
                MemoryNeed("the replay buffer", "--replay-size", cfg.replay_size, int(cfg.replay_size * row) + tree)
            )
        counts = self.parameters(spec, cfg)
        if counts is not None:
            processes = cfg.workers + 1
            size = FLOAT_BYTES * (4 * counts.trained + counts.frozen + 2 * processes * counts.acting)
            hyper = self.hyper(cfg)
            if spec.image and hasattr(hyper, "encoder"):
                needs.append(MemoryNeed("the networks", f"--{self.name}.encoder", hyper.encoder, size))
            else:
                hidden = getattr(hyper, "hidden", None)
                needs.append(
                    MemoryNeed(
                        "the networks",
                        f"--{self.name}.hidden",
                        ",".join(map(str, hidden)) if hidden is not None else "",
                        size,
                    )
                )
        return needs

    def segment_steps(self, cfg: ExperimentConfig) -> int:
        """Steps per environment in each entry a worker sends (fixed-length trajectory segments for an
        algorithm that learns from them in order, APPO's); 0: entries are filled as ``--batch-transitions`` and
        ``--entry-fill-ms`` say."""
        return 0

    def entry_transitions(self, cfg: ExperimentConfig) -> int:
        """Transitions in every entry a worker sends when segments fix it (``segment_steps`` of each of its
        environments), else 0; workers and the trainer size the backlog's limits by it."""
        return self.segment_steps(cfg) * cfg.envs_per_worker

    def policy_lag(self, cfg: ExperimentConfig) -> float | None:
        """The policy lag, in published versions, that the data of a run whose trainer is its bound will have
        about, for an algorithm that trains on each segment once in order of arrival; None for the others."""
        return None

    def make_folder(self, cfg: ExperimentConfig) -> Folder | None:
        """Worker-side folding of transitions; None: transitions go as stepped."""
        return None

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """What this algorithm refuses in a configuration, one message per problem."""
        if cfg.max_policy_lag and not self.segment_steps(cfg):
            queued = ", ".join(n for n, a in ALGORITHMS.items() if a.segment_steps(cfg))
            return [
                f"--max-policy-lag applies to algorithms that learn from segments in order of arrival "
                f"({queued}); {self.name} does not"
            ]
        if cfg.worker_priorities and cfg.prioritized and not self.worker_priorities:
            workers_can = ", ".join(n for n, a in ALGORITHMS.items() if a.worker_priorities)
            return [
                f"--worker-priorities: {self.name}'s rollout workers have no value estimate to compute "
                f"priorities with (supported: {workers_can}); the trainer gives new transitions the largest "
                "priority instead"
            ]
        return []

    def check_spaces(self, spec: SpaceSpec, env_id: str) -> None:
        """Raises UserError when this algorithm cannot act in the environment's action space."""
        if spec.discrete_actions and not self.discrete:
            raise UserError(
                f"algorithm {self.name} needs continuous (Box) actions, but {env_id} has "
                f"{spec.action_space}; pick a continuous environment such as Pendulum-v1"
            )
        if not spec.discrete_actions and not self.continuous:
            raise UserError(
                f"algorithm {self.name} needs discrete actions, but {env_id} has {spec.action_space}; "
                "pick a discrete environment such as CartPole-v1"
            )
        if not spec.discrete_actions and self.bounded_actions and not all(np.isfinite(spec.act_low + spec.act_high)):
            raise UserError(f"algorithm {self.name} needs bounded actions, but {env_id} has {spec.action_space}")


def _itemsize(dtype: str) -> int:
    return int(np.dtype(dtype).itemsize)


ALGORITHMS: dict[str, Algorithm] = {}
"""Every registered algorithm by name, in registration order (the built-in ones first)."""


def register(builder: Algorithm) -> Algorithm:
    """Adds an algorithm; its module calls this when imported. Registering the same builder class again (a
    module imported twice) replaces it; another class under a taken name is refused."""
    if not builder.name or not builder.name.isidentifier():
        raise ValueError(
            f"an algorithm's name must be a Python identifier (it names a config block), got {builder.name!r}"
        )
    known = ALGORITHMS.get(builder.name)
    if known is not None and _qualname(known) != _qualname(builder):
        raise ValueError(
            f"algorithm {builder.name!r} is registered twice: by {_qualname(known)} and {_qualname(builder)}"
        )
    ALGORITHMS[builder.name] = builder
    return builder


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def get(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UserError(f"unknown algorithm {name!r}; accepted: {', '.join(sorted(ALGORITHMS))}") from None
