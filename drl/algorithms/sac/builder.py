"""SAC's builder: continuous actions, learning from replay; nothing folded, no extra wire fields."""

from __future__ import annotations

from typing import Any

from drl.algorithms.base import Actor, Algorithm, Learner, register
from drl.algorithms.sac.config import SACConfig
from drl.envs import SpaceSpec


class SACBuilder(Algorithm):
    name = "sac"
    config = SACConfig
    doc = "SAC hyperparameters."
    continuous = True

    def make_actor(self, spec: SpaceSpec, cfg: Any, seed: int) -> Actor:
        from drl.algorithms.sac.actor import SACActor

        return SACActor(spec, self.hyper(cfg), seed)

    def make_learner(self, spec: SpaceSpec, cfg: Any, seed: int) -> Learner:
        from drl.algorithms.sac.learner import SACLearner

        return SACLearner(spec, self.hyper(cfg), seed)


register(SACBuilder())
