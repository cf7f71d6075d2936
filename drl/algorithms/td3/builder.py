"""TD3's builder: continuous actions, learning from replay; nothing folded, no extra wire fields."""

from __future__ import annotations

from typing import Any

from drl.algorithms.base import Actor, Algorithm, Learner, register
from drl.algorithms.td3.config import TD3Config
from drl.envs import SpaceSpec


class TD3Builder(Algorithm):
    name = "td3"
    config = TD3Config
    doc = "TD3 hyperparameters."
    continuous = True

    def make_actor(self, spec: SpaceSpec, cfg: Any, seed: int) -> Actor:
        from drl.algorithms.td3.actor import TD3Actor

        return TD3Actor(spec, self.hyper(cfg), seed)

    def make_learner(self, spec: SpaceSpec, cfg: Any, seed: int) -> Learner:
        from drl.algorithms.td3.learner import TD3Learner

        return TD3Learner(spec, self.hyper(cfg), seed)


register(TD3Builder())
