"""PPO acting policy: sampled actions for collection, the mode (argmax or mean) for evaluation.

Vector observations go through numpy (``drl.algorithms.inference``), image observations through the learner's
own torch module (``inference.TorchNet``, which says why).

Sampled continuous actions are returned unclipped: the transition must hold the action whose probability the
learner recomputes, and the rollout worker's environment stepper clips to the bounds. Evaluation actions are
clipped here, since they go to the environment directly. Observations are standardised with the statistics
that came with the policy version, as ``drl.algorithms.common.ObsNorm`` does in the learner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from drl.algorithms import inference as nx
from drl.algorithms.base import ActorBase
from drl.envs import SpaceSpec

if TYPE_CHECKING:
    from drl.algorithms.ppo.networks import PPOHyper


class PPOActor(ActorBase):
    def __init__(self, spec: SpaceSpec, cfg: PPOHyper, seed: int = 0):
        self.spec, self.cfg = spec, cfg
        obs_dim, act_dim = int(np.prod(spec.obs_shape)), int(np.prod(spec.act_shape))
        if not spec.discrete_actions:
            self.low, self.high = spec.action_bounds()
        self.rng = np.random.default_rng(seed)
        self.net: nx.TorchNet | None = None
        if spec.image:
            from drl.algorithms.ppo.networks import networks

            self.net = nx.TorchNet(networks(spec, cfg)[0])
            self.shapes = self.net.shapes
            if not spec.discrete_actions:
                self.net.module.log_std.data.fill_(cfg.init_log_std)
        else:
            self.layers = len(cfg.hidden) + 1
            self.shapes = {
                "norm.mean": (obs_dim,),
                "norm.var": (obs_dim,),
                "norm.count": (),
                **nx.mlp_shapes("body.", [obs_dim, *cfg.hidden, spec.discrete_actions or act_dim]),
            }
            if not spec.discrete_actions:
                self.shapes["log_std"] = (act_dim,)
            self.weights = nx.zeros(self.shapes)
            self.weights["norm.var"][:] = 1.0
            if not spec.discrete_actions:
                self.weights["log_std"][:] = cfg.init_log_std

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights (with the observation statistics); raises ValueError when they do not fit."""
        if self.net is not None:
            self.net.load(weights)
        else:
            self.weights = nx.checked(weights, self.shapes)

    def outputs(self, obs: np.ndarray) -> np.ndarray:
        """The policy's logits (discrete actions) or Gaussian means (continuous) for a batch of observations."""
        if self.net is not None:
            return self.net(obs)
        w = self.weights
        x = nx.flat(obs)
        if self.cfg.normalize_obs:
            mean, var = w["norm.mean"].astype(np.float32), w["norm.var"].astype(np.float32)
            x = np.clip((x - mean) / np.sqrt(var + np.float32(1e-8)), -10.0, 10.0).astype(np.float32)
        return nx.mlp(w, "body.", self.layers, x, activation=np.tanh)

    def log_std(self) -> np.ndarray:
        if self.net is not None:
            return self.net.module.log_std.detach().numpy()
        return self.weights["log_std"]

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        out = self.outputs(obs)
        if self.spec.discrete_actions:
            if deterministic:
                return out.argmax(1).astype(np.int64)
            logits = out - out.max(1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(1, keepdims=True)
            u = self.rng.random((len(probs), 1))
            return np.minimum((probs.cumsum(1) < u).sum(1), probs.shape[1] - 1).astype(np.int64)
        if deterministic:
            return np.clip(out.reshape(-1, *self.spec.act_shape), self.low, self.high).astype(np.float32)
        a = out + np.exp(self.log_std()) * self.rng.standard_normal(out.shape, dtype=np.float32)
        return a.reshape(-1, *self.spec.act_shape).astype(np.float32)
