"""SAC gradient updates (Haarnoja et al. 2018, with the learned temperature of the 2019 version).

Pure math: it takes batches of tensors and returns metrics; replay, transport and storage live elsewhere.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from drl.algorithms.common import action_scale, load_training_state, training_state
from drl.algorithms.sac.config import SACConfig
from drl.algorithms.sac.networks import Actor, TwinCritic
from drl.envs import SpaceSpec


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
        self.batch_size = cfg.batch_size

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

    def _modules(self) -> dict:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _optimizers(self) -> dict:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Everything needed to continue training: tensors (networks, optimiser moments) and JSON-able meta."""
        tensors, optimizers = training_state(self._modules(), self._optimizers())
        tensors["log_alpha"] = self.log_alpha.detach().numpy().copy()
        return tensors, {"updates": self.updates, "optimizers": optimizers}

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what ``state`` returned; raises ValueError when it does not fit these networks."""
        try:
            load_training_state(self._modules(), self._optimizers(), tensors, meta["optimizers"])
            with torch.no_grad():
                self.log_alpha.copy_(torch.from_numpy(np.array(tensors["log_alpha"])))
            updates = int(meta["updates"])
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint does not fit the SAC networks: {exc}") from None
        self.updates = updates

    def policy_weights(self) -> dict[str, np.ndarray]:
        """What rollout workers and the evaluator need to act: the actor's parameters."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.actor.state_dict().items()}
