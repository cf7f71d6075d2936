"""SAC acting policy: stochastic actions for collection, the tanh of the mean for evaluation."""

from __future__ import annotations

import numpy as np
import torch

from drl.algorithms.common import action_scale, load_weights
from drl.algorithms.sac.config import SACConfig
from drl.algorithms.sac.networks import Actor
from drl.envs import SpaceSpec


class SACActor:
    def __init__(self, spec: SpaceSpec, cfg: SACConfig, seed: int = 0):
        self.spec = spec
        self.net = Actor(int(np.prod(spec.obs_shape)), int(np.prod(spec.act_shape)), cfg.hidden)
        self.net.requires_grad_(False)
        self.center, self.half = action_scale(spec)
        self.generator = torch.Generator().manual_seed(seed)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit this network."""
        load_weights(self.net, weights)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = torch.as_tensor(obs, dtype=torch.float32).flatten(1)
        if deterministic:
            a = self.net.deterministic(x)
        else:
            mean, log_std = self.net(x)
            a = torch.tanh(mean + log_std.exp() * torch.randn(mean.shape, generator=self.generator))
        a = a.reshape(-1, *self.spec.act_shape) * self.half + self.center
        return a.numpy().astype(np.float32)
