"""SAC networks: a tanh-squashed Gaussian actor and twin Q critics."""

from __future__ import annotations

import math

import torch
from torch import nn

from drl.algorithms.common import mlp

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """Outputs actions in [-1, 1]^d; the actor wrapper rescales them to the environment's bounds."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.trunk = mlp([obs_dim, *hidden])
        self.trunk.append(nn.ReLU())
        self.mean = nn.Linear(hidden[-1], act_dim)
        self.log_std = nn.Linear(hidden[-1], act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        log_std = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return self.mean(h), log_std

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample and its log-probability under the squashed distribution."""
        mean, log_std = self(obs)
        std = log_std.exp()
        noise = torch.randn_like(mean)
        pre = mean + std * noise
        action = torch.tanh(pre)
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - pre - nn.functional.softplus(-2 * pre))).sum(-1)
        return action, log_prob

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


class TwinCritic(nn.Module):
    """Two independent Q networks (ReLU MLPs on the concatenated observation and action) stored as one.

    Layer i of both critics is one weight ``weights[i]`` of shape [2, in, out] (critic k is ``weights[i][k]``,
    laid out so that ``x @ weights[i][k]`` is its product) and one bias ``biases[i]`` of shape [2, 1, out]. A
    batched product (``torch.baddbmm``) then runs both critics with one call per layer instead of two, which is
    what the SAC learner's hand-written gradients rely on. Initial values are those of two ``nn.Linear`` MLPs
    built one after the other, as separate critics would be.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        sizes = [obs_dim + act_dim, *hidden, 1]
        q1, q2 = mlp(sizes), mlp(sizes)
        pairs = zip((m for m in q1 if isinstance(m, nn.Linear)), (m for m in q2 if isinstance(m, nn.Linear)))
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for a, b in pairs:
            self.weights.append(nn.Parameter(torch.stack([a.weight.detach().t(), b.weight.detach().t()])))
            self.biases.append(nn.Parameter(torch.stack([a.bias.detach(), b.bias.detach()]).unsqueeze(1)))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        h = x.expand(2, *x.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = torch.relu(h)
        return h[0, :, 0], h[1, :, 0]
