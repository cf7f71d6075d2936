"""TD3 acting policy: the deterministic action plus clipped-to-bounds Gaussian noise for collection, the
deterministic action alone for evaluation."""

from __future__ import annotations

import numpy as np
import torch

from drl.algorithms.common import action_scale, load_weights
from drl.algorithms.td3.config import TD3Config
from drl.algorithms.td3.networks import Actor
from drl.envs import SpaceSpec


class TD3Actor:
    def __init__(self, spec: SpaceSpec, cfg: TD3Config, seed: int = 0):
        self.spec = spec
        self.net = Actor(int(np.prod(spec.obs_shape)), int(np.prod(spec.act_shape)), cfg.hidden)
        self.net.requires_grad_(False)
        self.noise = cfg.exploration_noise
        self.center, self.half = action_scale(spec)
        self.low, self.high = self.center - self.half, self.center + self.half
        self.generator = torch.Generator().manual_seed(seed)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit this network."""
        load_weights(self.net, weights)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = torch.as_tensor(obs, dtype=torch.float32).flatten(1)
        a = self.net(x)
        if not deterministic and self.noise > 0:
            a = (a + self.noise * torch.randn(a.shape, generator=self.generator)).clamp(-1.0, 1.0)
        a = torch.clamp(a.reshape(-1, *self.spec.act_shape) * self.half + self.center, self.low, self.high)
        return a.numpy().astype(np.float32)
