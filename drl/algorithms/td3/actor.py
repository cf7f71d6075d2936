"""TD3 acting policy: the deterministic action plus clipped-to-bounds Gaussian noise for collection, the
deterministic action alone for evaluation (numpy inference, see ``drl.algorithms.inference``)."""

from __future__ import annotations

import numpy as np

from drl.algorithms import inference as nx
from drl.algorithms.base import ActorBase
from drl.algorithms.td3.config import TD3Config
from drl.envs import SpaceSpec


class TD3Actor(ActorBase):
    def __init__(self, spec: SpaceSpec, cfg: TD3Config, seed: int = 0):
        self.spec = spec
        obs_dim, act_dim = int(np.prod(spec.obs_shape)), int(np.prod(spec.act_shape))
        self.layers = len(cfg.hidden) + 1
        self.shapes = nx.mlp_shapes("net.", [obs_dim, *cfg.hidden, act_dim])
        self.weights = nx.zeros(self.shapes)
        self.noise = cfg.exploration_noise
        self.low, self.high = spec.action_bounds()
        self.center, self.half = (self.high + self.low) / 2, (self.high - self.low) / 2
        self.rng = np.random.default_rng(seed)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit this network."""
        self.weights = nx.checked(weights, self.shapes)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        a = np.tanh(nx.mlp(self.weights, "net.", self.layers, nx.flat(obs)))
        if not deterministic and self.noise > 0:
            a = np.clip(a + self.noise * self.rng.standard_normal(a.shape, dtype=np.float32), -1.0, 1.0)
        a = np.clip(a.reshape(-1, *self.spec.act_shape) * self.half + self.center, self.low, self.high)
        return a.astype(np.float32)
