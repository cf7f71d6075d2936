"""PPO acting policy: sampled actions for collection, the mode (argmax or mean) for evaluation.

Sampled continuous actions are returned unclipped: the transition must hold the action whose probability the
learner recomputes, and the rollout worker's environment stepper clips to the bounds. Evaluation actions are
clipped here, since they go to the environment directly.
"""

from __future__ import annotations

import numpy as np
import torch

from drl.algorithms.common import load_weights
from drl.algorithms.ppo.config import PPOConfig
from drl.algorithms.ppo.networks import Policy
from drl.envs import SpaceSpec


class PPOActor:
    def __init__(self, spec: SpaceSpec, cfg: PPOConfig, seed: int = 0):
        self.spec = spec
        self.net = Policy(int(np.prod(spec.obs_shape)), int(np.prod(spec.act_shape)), spec.discrete_actions,
                          cfg.hidden, cfg.normalize_obs, cfg.init_log_std)
        self.net.requires_grad_(False)
        self.generator = torch.Generator().manual_seed(seed)
        if not spec.discrete_actions:
            self.low = np.asarray(spec.act_low, np.float32).reshape(spec.act_shape)
            self.high = np.asarray(spec.act_high, np.float32).reshape(spec.act_shape)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights (with the observation statistics); raises ValueError when they do not fit."""
        load_weights(self.net, weights)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = self.net.norm(torch.as_tensor(obs, dtype=torch.float32).flatten(1))
        out = self.net.body(x)
        if self.spec.discrete_actions:
            if deterministic:
                return out.argmax(1).numpy().astype(np.int64)
            return torch.multinomial(torch.softmax(out, 1), 1, generator=self.generator).squeeze(1).numpy().astype(
                np.int64)
        if deterministic:
            return np.clip(out.numpy().reshape(-1, *self.spec.act_shape), self.low, self.high).astype(np.float32)
        noise = torch.randn(out.shape, generator=self.generator)
        a = out + self.net.log_std.exp() * noise
        return a.numpy().reshape(-1, *self.spec.act_shape).astype(np.float32)
