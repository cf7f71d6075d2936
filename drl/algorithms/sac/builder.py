"""SAC's builder: continuous actions, learning from replay; nothing folded, no extra wire fields."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from drl import device
from drl.algorithms.base import Actor, Algorithm, Learner, Parameters, mlp_parameters, register
from drl.algorithms.sac.config import SACConfig
from drl.envs import SpaceSpec

if TYPE_CHECKING:
    import numpy as np

    from drl.config import ExperimentConfig


class SACBuilder(Algorithm):
    name = "sac"
    config = SACConfig
    doc = "SAC hyperparameters."
    continuous = True

    def parameters(self, spec: SpaceSpec, cfg: ExperimentConfig) -> Parameters:
        """A squashed Gaussian actor (trunk, mean and log-std heads), twin critics and their targets, and the
        temperature (``drl.algorithms.sac.networks``)."""
        hidden = list(self.hyper(cfg).hidden)
        obs, act = math.prod(spec.obs_shape), math.prod(spec.act_shape)
        actor = mlp_parameters([obs, *hidden]) + 2 * (hidden[-1] * act + act)
        critics = 2 * mlp_parameters([obs + act, *hidden, 1])
        return Parameters(trained=actor + critics + 1, frozen=critics, acting=actor)

    def make_actor(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
        from drl.algorithms.sac.actor import SACActor

        return SACActor(spec, self.hyper(cfg), seed)

    def acting_network(self, spec: SpaceSpec, cfg: ExperimentConfig, weights: dict[str, np.ndarray]) -> Any:
        from drl.algorithms import exporting

        return exporting.sac(spec, self.hyper(cfg).hidden, weights)

    def make_learner(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Learner:
        from drl.algorithms.sac.learner import SACLearner

        return SACLearner(spec, self.hyper(cfg), seed, device=device.of(cfg))


register(SACBuilder())
