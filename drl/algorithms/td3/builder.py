"""TD3's builder: continuous actions, learning from replay; nothing folded, no extra wire fields."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from drl import device
from drl.algorithms.base import Actor, Algorithm, Learner, Parameters, mlp_parameters, register
from drl.algorithms.td3.config import TD3Config
from drl.envs import SpaceSpec

if TYPE_CHECKING:
    import numpy as np

    from drl.config import ExperimentConfig


class TD3Builder(Algorithm):
    name = "td3"
    config = TD3Config
    doc = "TD3 hyperparameters."
    continuous = True

    def parameters(self, spec: SpaceSpec, cfg: ExperimentConfig) -> Parameters:
        """A deterministic actor and twin critics, each with a target copy (``drl.algorithms.td3.networks``)."""
        hidden = list(self.hyper(cfg).hidden)
        obs, act = math.prod(spec.obs_shape), math.prod(spec.act_shape)
        actor = mlp_parameters([obs, *hidden, act])
        critics = 2 * mlp_parameters([obs + act, *hidden, 1])
        return Parameters(trained=actor + critics, frozen=actor + critics, acting=actor)

    def make_actor(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
        from drl.algorithms.td3.actor import TD3Actor

        return TD3Actor(spec, self.hyper(cfg), seed)

    def acting_network(self, spec: SpaceSpec, cfg: ExperimentConfig, weights: dict[str, np.ndarray]) -> Any:
        from drl.algorithms import exporting

        return exporting.td3(spec, self.hyper(cfg).hidden, weights)

    def make_learner(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Learner:
        from drl.algorithms.td3.learner import TD3Learner

        return TD3Learner(spec, self.hyper(cfg), seed, device=device.of(cfg))


register(TD3Builder())
