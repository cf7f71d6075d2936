"""DQN networks: an MLP from flat vector observations to one Q-value per action; for image observations a
convolutional encoder (``drl.algorithms.encoders``) with one linear layer per action (the Nature DQN)."""

from __future__ import annotations

import math

import torch
from torch import nn

from drl.algorithms.common import mlp
from drl.algorithms.convnets import ImageEncoder
from drl.algorithms.dqn.config import DQNConfig
from drl.envs import SpaceSpec


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...]):
        super().__init__()
        self.net = mlp([obs_dim, *hidden, n_actions])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class ImageQNetwork(nn.Module):
    """Images (B, *obs_shape), uint8 or float, to Q-values; the encoder scales uint8 by 1/255."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, encoder: str = "auto"):
        super().__init__()
        self.encoder = ImageEncoder(obs_shape, encoder)
        self.head = nn.Linear(self.encoder.features, n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(obs))


def q_network(spec: SpaceSpec, cfg: DQNConfig) -> nn.Module:
    """The Q network for ``spec``'s observations: convolutional for images, an MLP for vectors."""
    if spec.image:
        return ImageQNetwork(spec.obs_shape, spec.discrete_actions, cfg.encoder)
    return QNetwork(math.prod(spec.obs_shape), spec.discrete_actions, cfg.hidden)
