"""PPO's builder: on-policy, so it learns from each SYNC iteration's rollout (``drl.training.learning.RolloutLearning``),
never from replay, and its transitions carry what rebuilds per-environment trajectories (``truncated``,
``env_index``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from drl import device
from drl.algorithms.base import (
    Actor,
    Algorithm,
    FieldSpecs,
    Parameters,
    RolloutLearner,
    mlp_parameters,
    register,
)
from drl.algorithms.encoders import encoder_parameters
from drl.algorithms.ppo.config import PPOConfig
from drl.envs import TRAJECTORY_FIELDS, SpaceSpec

if TYPE_CHECKING:
    import numpy as np

    from drl.config import ExperimentConfig


class PPOBuilder(Algorithm):
    name = "ppo"
    config: type = PPOConfig
    doc = "PPO hyperparameters."
    continuous = True
    discrete = True
    bounded_actions = False  # a Gaussian policy; the worker's stepper clips to whatever bounds there are
    replay = False

    def parameters(self, spec: SpaceSpec, cfg: ExperimentConfig) -> Parameters:
        """A policy (logits, or a Gaussian's mean and log-std) and a value function, no targets
        (``drl.algorithms.ppo.networks``); for images the encoder belongs to the policy and the value function
        is a head on its features. Raises UserError when the configured encoder cannot read the observations."""
        hyper = self.hyper(cfg)
        obs, act = math.prod(spec.obs_shape), math.prod(spec.act_shape)
        log_std = 0 if spec.discrete_actions else act
        if spec.image:
            encoder, features = encoder_parameters(hyper.encoder, spec.obs_shape)
            policy = encoder + mlp_parameters([features, spec.discrete_actions or act]) + log_std
            return Parameters(trained=policy + mlp_parameters([features, 1]), frozen=0, acting=policy)
        policy = mlp_parameters([obs, *hyper.hidden, spec.discrete_actions or act]) + log_std
        value = mlp_parameters([obs, *hyper.hidden, 1])
        return Parameters(trained=policy + value, frozen=0, acting=policy)

    def wire_fields(self, cfg: ExperimentConfig) -> FieldSpecs:
        return dict(TRAJECTORY_FIELDS)

    def make_actor(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
        from drl.algorithms.ppo.actor import PPOActor

        return PPOActor(spec, self.hyper(cfg), seed)

    def acting_network(self, spec: SpaceSpec, cfg: ExperimentConfig, weights: dict[str, np.ndarray]) -> Any:
        from drl.algorithms import exporting

        return exporting.ppo(spec, self.hyper(cfg), weights)

    def make_learner(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> RolloutLearner:
        from drl.algorithms.ppo.learner import PPOLearner

        return PPOLearner(spec, self.hyper(cfg), seed, device=device.of(cfg))

    def make_learning(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int):
        from drl.training.learning import RolloutLearning

        return RolloutLearning(self.make_learner(spec, cfg, seed), cfg)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """On-policy: only SYNC iterations collect with exactly the learner's policy, and every action must be
        the policy's own."""
        found = []
        if cfg.mode == "async":
            found.append(
                f"{self.name} is on-policy and runs only in --mode sync (it has no off-policy "
                "correction for the policy lag of async collection)"
            )
        if cfg.random_steps:
            found.append(
                f"--random-steps must be 0 for {self.name}: it learns only from its own policy's "
                f"actions (got {cfg.random_steps})"
            )
        if cfg.prioritized:
            found.append(
                f"--prioritized applies to replay-based algorithms; {self.name} trains on each iteration's rollout"
            )
        return found + super().problems(cfg)


register(PPOBuilder())
