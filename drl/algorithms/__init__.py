"""Algorithm registry: each algorithm folder holds config, networks, learner (update math) and actor.

Nothing here touches processes, Redis or files; services compose these pieces.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from drl.envs import SpaceSpec
from drl.errors import UserError


class Learner(Protocol):
    updates: int

    def update(self, batch: dict[str, Any]) -> dict[str, float]: ...

    def policy_weights(self) -> dict[str, np.ndarray]: ...


class Actor(Protocol):
    def load(self, weights: dict[str, np.ndarray]) -> None: ...

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...


def check_spaces(algorithm: str, spec: SpaceSpec, env_id: str) -> None:
    """Raises UserError when the algorithm cannot act in the environment's action space."""
    if algorithm == "sac" and spec.discrete_actions:
        raise UserError(f"algorithm sac needs continuous (Box) actions, but {env_id} has {spec.action_space}; "
                        "pick a continuous environment such as Pendulum-v1")
    if algorithm == "sac" and not all(np.isfinite(spec.act_low + spec.act_high)):
        raise UserError(f"algorithm sac needs bounded actions, but {env_id} has {spec.action_space}")


def make_learner(algorithm: str, spec: SpaceSpec, cfg: Any, seed: int) -> Learner:
    if algorithm == "sac":
        from drl.algorithms.sac import SACLearner

        return SACLearner(spec, cfg.sac, seed)
    raise UserError(f"unknown algorithm {algorithm!r}")


def make_actor(algorithm: str, spec: SpaceSpec, cfg: Any, seed: int) -> Actor:
    if algorithm == "sac":
        from drl.algorithms.sac import SACActor

        return SACActor(spec, cfg.sac, seed)
    raise UserError(f"unknown algorithm {algorithm!r}")
