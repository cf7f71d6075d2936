"""Algorithm registry: each algorithm folder holds config, networks, learner (update math) and actor.

Nothing here touches processes, Redis or files; services compose these pieces. An algorithm registers the
action spaces it handles, the name of its hyperparameter block in ``ExperimentConfig`` and factories for its
learner and its acting policy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from drl.envs import TRAJECTORY_FIELDS, SpaceSpec
from drl.errors import UserError
from drl.nstep import NSTEP_FIELDS

FIELD_SPECS: dict[str, tuple[str, tuple[int, ...]]] = {**TRAJECTORY_FIELDS, **NSTEP_FIELDS,
                                                       "priority": ("<f4", ())}  # Ape-X's initial priority


class Learner(Protocol):
    """Gradient updates on batches of transitions; pure math, no I/O."""

    updates: int
    batch_size: int

    def update(self, batch: dict[str, Any]) -> dict[str, float]: ...

    def policy_weights(self) -> dict[str, np.ndarray]: ...

    def state(self) -> tuple[dict[str, np.ndarray], dict]: ...

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None: ...


class Actor(Protocol):
    """The acting policy that rollout workers and the evaluator run."""

    def load(self, weights: dict[str, np.ndarray]) -> None: ...

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...


@dataclass(frozen=True)
class Algorithm:
    name: str
    module: str  # drl.algorithms.<name>, exporting Learner and Actor classes
    learner: str
    actor: str
    continuous: bool  # handles Box actions
    discrete: bool  # handles Discrete actions
    on_policy: bool = False  # trains on each SYNC iteration's rollout (``train``) instead of replay (``update``)
    extras: tuple[str, ...] = ()  # optional wire fields it needs (FIELD_SPECS)
    worker_priorities: bool = False  # its actor computes initial replay priorities (``priorities``)

    def load(self, attr: str):
        return getattr(importlib.import_module(self.module), attr)


ALGORITHMS: dict[str, Algorithm] = {
    "sac": Algorithm("sac", "drl.algorithms.sac", "SACLearner", "SACActor", continuous=True, discrete=False),
    "td3": Algorithm("td3", "drl.algorithms.td3", "TD3Learner", "TD3Actor", continuous=True, discrete=False),
    "ppo": Algorithm("ppo", "drl.algorithms.ppo", "PPOLearner", "PPOActor", continuous=True, discrete=True,
                     on_policy=True, extras=("truncated", "env_index")),
    "dqn": Algorithm("dqn", "drl.algorithms.dqn", "DQNLearner", "DQNActor", continuous=False, discrete=True,
                     extras=("nsteps",), worker_priorities=True),
}


def lazy_exports(package: str, names: dict[str, str]):
    """A module ``__getattr__`` that imports ``names[attr]`` (a submodule of ``package``) on first access."""

    def __getattr__(attr: str):
        if attr in names:
            return getattr(importlib.import_module(f"{package}.{names[attr]}"), attr)
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")

    return __getattr__


def get(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UserError(f"unknown algorithm {name!r}; accepted: {', '.join(sorted(ALGORITHMS))}") from None


def check_spaces(algorithm: str, spec: SpaceSpec, env_id: str) -> None:
    """Raises UserError when the algorithm cannot act in the environment's action space."""
    algo = get(algorithm)
    if spec.discrete_actions and not algo.discrete:
        raise UserError(f"algorithm {algorithm} needs continuous (Box) actions, but {env_id} has "
                        f"{spec.action_space}; pick a continuous environment such as Pendulum-v1")
    if not spec.discrete_actions and not algo.continuous:
        raise UserError(f"algorithm {algorithm} needs discrete actions, but {env_id} has {spec.action_space}; "
                        "pick a discrete environment such as CartPole-v1")
    if not spec.discrete_actions and not algo.on_policy and not all(np.isfinite(spec.act_low + spec.act_high)):
        raise UserError(f"algorithm {algorithm} needs bounded actions, but {env_id} has {spec.action_space}")


def wire_extras(cfg: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The optional wire fields of a run (``cfg`` an ExperimentConfig): its algorithm's, plus worker priorities;
    name: (dtype, per-transition shape), for ``codec.expected_layout``."""
    extras = get(cfg.algorithm).extras
    names = extras + ("priority",) if cfg.prioritized and cfg.worker_priorities else extras
    return {name: FIELD_SPECS[name] for name in names}


def make_learner(algorithm: str, spec: SpaceSpec, cfg: Any, seed: int) -> Learner:
    """The learner of ``cfg.algorithm`` with its hyperparameter block (``cfg.<algorithm>``)."""
    algo = get(algorithm)
    return algo.load(algo.learner)(spec, getattr(cfg, algo.name), seed)


def make_actor(algorithm: str, spec: SpaceSpec, cfg: Any, seed: int) -> Actor:
    algo = get(algorithm)
    return algo.load(algo.actor)(spec, getattr(cfg, algo.name), seed)
