"""TD3 networks: a deterministic tanh actor and twin Q critics."""

from __future__ import annotations

import torch
from torch import nn

from drl.algorithms.common import mlp


class Actor(nn.Module):
    """Outputs actions in [-1, 1]^d; the actor wrapper rescales them to the environment's bounds."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.net = mlp([obs_dim, *hidden, act_dim])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class TwinCritic(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.q1 = mlp([obs_dim + act_dim, *hidden, 1])
        self.q2 = mlp([obs_dim + act_dim, *hidden, 1])

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def q1_only(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The first critic alone, which the actor ascends (the paper's choice)."""
        return self.q1(torch.cat([obs, action], dim=-1)).squeeze(-1)
