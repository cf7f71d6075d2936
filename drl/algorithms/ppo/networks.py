"""PPO networks: a policy (categorical or diagonal Gaussian) and a value function.

Vector observations: separate tanh MLPs for policy and value with orthogonal initialisation, as in the PPO
reference implementations; observation statistics live in the policy. Image observations: one convolutional
encoder (``drl.algorithms.encoders``) shared by a linear policy head and a linear value head, ReLU, orthogonal
initialisation (CleanRL's ``ppo_atari.py``); the encoder is part of the policy, which is what workers load, and
the value head reads its features. Both kinds split the pass into ``trunk`` (observations to features) and heads,
so the learner runs a shared encoder once per minibatch.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from drl.algorithms.common import ObsNorm, mlp
from drl.algorithms.convnets import ImageEncoder, orthogonal_
from drl.envs import SpaceSpec


class PPOHyper(Protocol):
    """What PPO's networks, actor and learner read of an algorithm's block: ``PPOConfig`` has it, and so has
    APPO's, whose actor and learner are PPO's."""

    @property
    def hidden(self) -> tuple[int, ...]: ...
    @property
    def encoder(self) -> str: ...
    @property
    def lr(self) -> float: ...
    @property
    def anneal_lr(self) -> bool: ...
    @property
    def gamma(self) -> float: ...
    @property
    def clip(self) -> float: ...
    @property
    def epochs(self) -> int: ...
    @property
    def minibatches(self) -> int: ...
    @property
    def ent_coef(self) -> float: ...
    @property
    def vf_coef(self) -> float: ...
    @property
    def max_grad_norm(self) -> float: ...
    @property
    def precision(self) -> str: ...
    @property
    def normalize_obs(self) -> bool: ...
    @property
    def init_log_std(self) -> float: ...


def _init(net: nn.Sequential, last_gain: float) -> nn.Sequential:
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, last_gain if i == len(linears) - 1 else math.sqrt(2))
        nn.init.zeros_(layer.bias)
    return net


class PolicyBase(nn.Module):
    """``forward`` maps observations (normalised, for vector policies) to the distribution's parameters: logits,
    or a Gaussian's mean (its log-std is a parameter of its own)."""

    discrete: int
    log_std: nn.Parameter
    """The Gaussian's log-std, of a continuous policy only."""

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def head_out(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head_out(self.trunk(obs))

    def distribution(self, out: torch.Tensor) -> Categorical | Normal:
        """The action distribution of the network's outputs, without torch's argument checks: the parameters
        are the network's own, and checking them (and each action's support in ``log_prob``) cost about a tenth
        of a minibatch step."""
        if self.discrete:
            return Categorical(logits=out, validate_args=False)
        return Normal(out, self.log_std.exp().expand_as(out), validate_args=False)

    def dist(self, obs_n: torch.Tensor) -> Categorical | Normal:
        """The action distribution for already normalised observations."""
        return self.distribution(self(obs_n))

    def log_prob(self, dist: Categorical | Normal, action: torch.Tensor) -> torch.Tensor:
        return dist.log_prob(action) if self.discrete else dist.log_prob(action).sum(-1)

    def entropy(self, dist: Categorical | Normal) -> torch.Tensor:
        return dist.entropy() if self.discrete else dist.entropy().sum(-1)


class Policy(PolicyBase):
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        discrete: int,
        hidden: tuple[int, ...],
        normalize_obs: bool,
        init_log_std: float,
    ):
        super().__init__()
        self.discrete = discrete
        self.norm = ObsNorm(obs_dim, enabled=normalize_obs)
        self.body = _init(mlp([obs_dim, *hidden, discrete or act_dim], nn.Tanh), 0.01)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def trunk(self, obs_n: torch.Tensor) -> torch.Tensor:
        return obs_n

    def head_out(self, features: torch.Tensor) -> torch.Tensor:
        return self.body(features)


class ValueNet(nn.Module):
    def __init__(self, obs_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.body = _init(mlp([obs_dim, *hidden, 1], nn.Tanh), 1.0)

    def forward(self, obs_n: torch.Tensor) -> torch.Tensor:
        return self.body(obs_n).squeeze(-1)


class ImagePolicy(PolicyBase):
    """Images (B, *obs_shape), uint8 or float, through the shared encoder to a linear head."""

    def __init__(self, obs_shape: tuple[int, ...], act_dim: int, discrete: int, encoder: str, init_log_std: float):
        super().__init__()
        self.discrete = discrete
        self.encoder = orthogonal_(ImageEncoder(obs_shape, encoder))
        self.head = orthogonal_(nn.Linear(self.encoder.features, discrete or act_dim), 0.01)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder(obs)

    def head_out(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)


class ValueHead(nn.Module):
    """The value of the policy encoder's features."""

    def __init__(self, features: int):
        super().__init__()
        self.head = orthogonal_(nn.Linear(features, 1), 1.0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features).squeeze(-1)


def networks(spec: SpaceSpec, cfg: PPOHyper) -> tuple[Policy | ImagePolicy, ValueNet | ValueHead]:
    """The policy and the value function for ``spec``'s observations (``drl.algorithms.ppo.networks``)."""
    act_dim = int(np.prod(spec.act_shape))
    if spec.image:
        policy = ImagePolicy(spec.obs_shape, act_dim, spec.discrete_actions, cfg.encoder, cfg.init_log_std)
        return policy, ValueHead(policy.encoder.features)
    obs_dim = int(np.prod(spec.obs_shape))
    return (
        Policy(obs_dim, act_dim, spec.discrete_actions, cfg.hidden, cfg.normalize_obs, cfg.init_log_std),
        ValueNet(obs_dim, cfg.hidden),
    )
