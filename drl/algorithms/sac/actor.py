"""SAC acting policy: stochastic actions for collection, the tanh of the mean for evaluation (numpy inference,
see ``drl.algorithms.inference``)."""

from __future__ import annotations

import numpy as np

from drl.algorithms import inference as nx
from drl.algorithms.base import ActorBase
from drl.algorithms.sac.config import SACConfig
from drl.envs import SpaceSpec

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # as in drl.algorithms.sac.networks


class SACActor(ActorBase):
    def __init__(self, spec: SpaceSpec, cfg: SACConfig, seed: int = 0):
        self.spec = spec
        obs_dim, act_dim = int(np.prod(spec.obs_shape)), int(np.prod(spec.act_shape))
        self.layers = len(cfg.hidden)
        last = cfg.hidden[-1]
        self.shapes = {
            **nx.mlp_shapes("trunk.", [obs_dim, *cfg.hidden]),
            "mean.weight": (act_dim, last),
            "mean.bias": (act_dim,),
            "log_std.weight": (act_dim, last),
            "log_std.bias": (act_dim,),
        }
        self.weights = nx.zeros(self.shapes)
        low, high = spec.action_bounds()
        self.center, self.half = (high + low) / 2, (high - low) / 2
        self.rng = np.random.default_rng(seed)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit this network."""
        self.weights = nx.checked(weights, self.shapes)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        w = self.weights
        h = nx.mlp(w, "trunk.", self.layers, nx.flat(obs), activate_last=True)
        mean = h @ w["mean.weight"].T + w["mean.bias"]
        if deterministic:
            a = np.tanh(mean)
        else:
            log_std = np.tanh(h @ w["log_std.weight"].T + w["log_std.bias"])
            log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
            a = np.tanh(mean + np.exp(log_std) * self.rng.standard_normal(mean.shape, dtype=np.float32))
        return (a.reshape(-1, *self.spec.act_shape) * self.half + self.center).astype(np.float32)
