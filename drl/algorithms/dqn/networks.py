"""DQN network: an MLP from observations to one Q-value per action."""

from __future__ import annotations

import torch
from torch import nn

from drl.algorithms.common import mlp


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...]):
        super().__init__()
        self.net = mlp([obs_dim, *hidden, n_actions])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)
