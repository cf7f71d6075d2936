"""SAC gradient updates (Haarnoja et al. 2018, with the learned temperature of the 2019 version).

Pure math: it takes batches of tensors and returns metrics; replay, transport and storage live elsewhere.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from drl.algorithms.sac.config import SACConfig
from drl.algorithms.sac.networks import Actor, TwinCritic
from drl.envs import SpaceSpec


def action_scale(spec: SpaceSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and half-range mapping [-1, 1] to the environment's Box bounds."""
    low = torch.tensor(spec.act_low, dtype=torch.float32).reshape(spec.act_shape)
    high = torch.tensor(spec.act_high, dtype=torch.float32).reshape(spec.act_shape)
    return (high + low) / 2, (high - low) / 2


class SACLearner:
    def __init__(self, spec: SpaceSpec, cfg: SACConfig, seed: int):
        torch.manual_seed(seed)
        self.cfg = cfg
        obs_dim = int(np.prod(spec.obs_shape))
        act_dim = int(np.prod(spec.act_shape))
        self.actor = Actor(obs_dim, act_dim, cfg.hidden)
        self.critic = TwinCritic(obs_dim, act_dim, cfg.hidden)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(cfg.init_alpha)), requires_grad=True)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -float(act_dim)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr)
        self.center, self.half = action_scale(spec)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step of critics, actor and temperature on a batch from replay."""
        obs = batch["obs"].flatten(1)
        next_obs = batch["next_obs"].flatten(1)
        action = ((batch["action"] - self.center) / self.half).flatten(1).clamp(-1.0, 1.0)
        reward, done = batch["reward"], batch["terminated"]
        alpha = self.log_alpha.exp().detach()

        with torch.no_grad():
            next_action, next_logp = self.actor.sample(next_obs)
            q1_t, q2_t = self.critic_target(next_obs, next_action)
            target = reward + self.cfg.gamma * (1.0 - done) * (torch.min(q1_t, q2_t) - alpha * next_logp)
        q1, q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        self.critic.requires_grad_(False)
        new_action, logp = self.actor.sample(obs)
        q1_pi, q2_pi = self.critic(obs, new_action)
        actor_loss = (alpha * logp - torch.min(q1_pi, q2_pi)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        self.critic.requires_grad_(True)

        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()

        with torch.no_grad():
            for p, tp in zip(self.critic.parameters(), self.critic_target.parameters()):
                tp.lerp_(p, self.cfg.tau)
        self.updates += 1
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": float(alpha),
                "entropy": -logp.mean().item()}

    def policy_weights(self) -> dict[str, np.ndarray]:
        """What rollout workers and the evaluator need to act: the actor's parameters."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.actor.state_dict().items()}
