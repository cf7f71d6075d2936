"""APPO's networks are PPO's (``drl.algorithms.ppo.networks``): a categorical or diagonal Gaussian policy and a
value function, separate tanh MLPs for vector observations, one convolutional encoder with two linear heads for
images. Sharing them keeps one implementation of each network, and ``APPOConfig`` names the fields they read
(``hidden``, ``encoder``, ``normalize_obs``, ``init_log_std``) as ``PPOConfig`` does."""

from __future__ import annotations

from drl.algorithms.ppo.networks import networks

__all__ = ["networks"]
