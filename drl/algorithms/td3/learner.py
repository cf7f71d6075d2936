"""TD3 gradient updates (Fujimoto, van Hoof and Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods").

Every update fits both critics to the clipped double-Q target, whose next action is the target actor's action
plus clipped Gaussian noise (target policy smoothing). Every ``policy_delay``-th update also ascends the first
critic with the actor and moves the target actor and target critics by Polyak averaging.

Pure math: it takes batches of tensors and returns metrics; replay, transport and storage live elsewhere.
Under prioritized replay the critics' squared errors are weighted by the batch's importance-sampling weights,
and ``td_errors`` keeps the mean of |q1 - y| and |q2 - y| per transition for the new priorities.
Smoothing noise comes from torch's global RNG, which the trainer seeds and checkpoints.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from drl.algorithms.common import action_scale, fused, load_training_state, mean_grads, on_device, training_state
from drl.algorithms.td3.config import TD3Config
from drl.algorithms.td3.networks import Actor, TwinCritic
from drl.core import SOLO, Collective
from drl.envs import SpaceSpec


class TD3Learner:
    collective: Collective = SOLO
    """The learners this one averages its gradients with (``drl.core.Collective``; alone by default)."""

    def __init__(self, spec: SpaceSpec, cfg: TD3Config, seed: int, device: torch.device | str = "cpu"):
        torch.manual_seed(seed)
        self.cfg = cfg
        self.device = torch.device(device)
        obs_dim = int(np.prod(spec.obs_shape))
        act_dim = int(np.prod(spec.act_shape))
        self.actor = Actor(obs_dim, act_dim, cfg.hidden).to(self.device)
        self.critic = TwinCritic(obs_dim, act_dim, cfg.hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        options = fused(spec, self.device)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, **options)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, **options)
        self.center, self.half = (t.to(self.device) for t in action_scale(spec))
        self.updates = 0
        self.actor_updates = 0
        self.batch_size = cfg.batch_size
        self.last_actor_loss = 0.0
        self._td_errors: torch.Tensor | None = None

    @property
    def td_errors(self) -> np.ndarray:
        """The last batch's mean of |q1 - y| and |q2 - y| per transition (host memory, copied when first read)."""
        if self._td_errors is None:
            return np.zeros(0, dtype=np.float32)
        return self._td_errors.cpu().numpy().astype(np.float32)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One critic step on a batch from replay; every ``policy_delay``-th call also an actor and target step.

        ``actor_loss`` is that of the latest actor step (0 before the first one).
        """
        batch = on_device(batch, self.device)
        obs = batch["obs"].flatten(1)
        next_obs = batch["next_obs"].flatten(1)
        action = ((batch["action"] - self.center) / self.half).flatten(1).clamp(-1.0, 1.0)
        reward, done = batch["reward"], batch["terminated"]

        with torch.no_grad():
            next_mean = self.actor_target(next_obs)
            noise = (torch.randn_like(next_mean) * self.cfg.target_noise).clamp(
                -self.cfg.noise_clip, self.cfg.noise_clip
            )
            next_action = (next_mean + noise).clamp(-1.0, 1.0)
            q1_t, q2_t = self.critic_target(next_obs, next_action)
            target = reward + self.cfg.gamma * (1.0 - done) * torch.min(q1_t, q2_t)
        q1, q2 = self.critic(obs, action)
        weight = batch.get("weight")
        if weight is None:
            critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        else:
            critic_loss = (weight * ((q1 - target).square() + (q2 - target).square())).mean()
        self._td_errors = (0.5 * ((q1 - target).abs() + (q2 - target).abs())).detach()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        mean_grads(self.collective, self.critic.parameters())
        self.critic_opt.step()
        self.updates += 1

        if self.updates % self.cfg.policy_delay == 0:
            self.critic.requires_grad_(False)
            actor_loss = -self.critic.q1_only(obs, self.actor(obs)).mean()
            self.actor_opt.zero_grad(set_to_none=True)
            actor_loss.backward()
            mean_grads(self.collective, self.actor.parameters())
            self.actor_opt.step()
            self.critic.requires_grad_(True)
            with torch.no_grad():
                for net, target_net in ((self.actor, self.actor_target), (self.critic, self.critic_target)):
                    for p, tp in zip(net.parameters(), target_net.parameters()):
                        tp.lerp_(p, self.cfg.tau)
            self.actor_updates += 1
            self.last_actor_loss = actor_loss.item()
        return {"critic_loss": critic_loss.item(), "actor_loss": self.last_actor_loss, "q": q1.detach().mean().item()}

    def _modules(self) -> dict:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "actor_target": self.actor_target,
            "critic_target": self.critic_target,
        }

    def _optimizers(self) -> dict:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Everything needed to continue training: tensors (networks, optimiser moments) and JSON-able meta."""
        tensors, optimizers = training_state(self._modules(), self._optimizers())
        return tensors, {
            "updates": self.updates,
            "actor_updates": self.actor_updates,
            "last_actor_loss": self.last_actor_loss,
            "optimizers": optimizers,
        }

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what ``state`` returned; raises ValueError when it does not fit these networks."""
        try:
            load_training_state(self._modules(), self._optimizers(), tensors, meta["optimizers"])
            updates, actor_updates = int(meta["updates"]), int(meta["actor_updates"])
            last_actor_loss = float(meta["last_actor_loss"])
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint does not fit the TD3 networks: {exc}") from None
        self.updates, self.actor_updates, self.last_actor_loss = updates, actor_updates, last_actor_loss

    def policy_weights(self) -> dict[str, np.ndarray]:
        """What rollout workers and the evaluator need to act: the actor's parameters."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.actor.state_dict().items()}
