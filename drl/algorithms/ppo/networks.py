"""PPO networks: a policy (categorical or diagonal Gaussian) and a value function, tanh MLPs with orthogonal
initialisation as in the PPO reference implementations; observation statistics live in the policy."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Categorical, Normal

from drl.algorithms.common import ObsNorm, mlp


def _init(net: nn.Sequential, last_gain: float) -> nn.Sequential:
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, last_gain if i == len(linears) - 1 else math.sqrt(2))
        nn.init.zeros_(layer.bias)
    return net


class Policy(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, discrete: int, hidden: tuple[int, ...],
                 normalize_obs: bool, init_log_std: float):
        super().__init__()
        self.discrete = discrete
        self.norm = ObsNorm(obs_dim, enabled=normalize_obs)
        self.body = _init(mlp([obs_dim, *hidden, discrete or act_dim], nn.Tanh), 0.01)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def dist(self, obs_n: torch.Tensor) -> Categorical | Normal:
        """The action distribution for already normalised observations."""
        out = self.body(obs_n)
        if self.discrete:
            return Categorical(logits=out)
        return Normal(out, self.log_std.exp().expand_as(out))

    def log_prob(self, dist: Categorical | Normal, action: torch.Tensor) -> torch.Tensor:
        return dist.log_prob(action) if self.discrete else dist.log_prob(action).sum(-1)

    def entropy(self, dist: Categorical | Normal) -> torch.Tensor:
        return dist.entropy() if self.discrete else dist.entropy().sum(-1)


class ValueNet(nn.Module):
    def __init__(self, obs_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.body = _init(mlp([obs_dim, *hidden, 1], nn.Tanh), 1.0)

    def forward(self, obs_n: torch.Tensor) -> torch.Tensor:
        return self.body(obs_n).squeeze(-1)
