"""DQN gradient updates: Huber loss to double-DQN n-step targets, importance-weighted under prioritized replay.

For a transition (s, a, R, s', done, k) folded over k steps by the rollout worker (``drl.acting.nstep``):

    y = R + gamma^k (1 - done) Q_target(s', argmax_a' Q(s', a'))     (double DQN; max_a' Q_target(s', a') without)

and the loss is mean(w * huber(Q(s, a) - y)) with the batch's importance-sampling weights w (all 1 for uniform
replay). ``td_errors`` keeps |Q(s, a) - y| of the last batch for the replay's new priorities. The target network
is a copy of the online one, refreshed every ``target_update_every`` updates.

Image observations arrive as the replay keeps them (uint8, the environment's shape) and go to the network as
they are: its encoder makes them float. Vector observations are flattened.

Pure math: it takes batches of tensors and returns metrics; replay, transport and storage live elsewhere.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from drl.algorithms.common import fused, load_training_state, mean_grads, on_device, training_state
from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.dqn.networks import q_network
from drl.core import SOLO, Collective
from drl.envs import SpaceSpec


class DQNLearner:
    collective: Collective = SOLO
    """The learners this one averages its gradients with (``drl.core.Collective``; alone by default)."""

    def __init__(self, spec: SpaceSpec, cfg: DQNConfig, seed: int, device: torch.device | str = "cpu"):
        torch.manual_seed(seed)
        self.cfg = cfg
        self.image = spec.image
        self.device = torch.device(device)
        self.q = q_network(spec, cfg).to(self.device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr, **fused(spec, self.device))
        self._td_errors: torch.Tensor | None = None
        self.updates = 0
        self.batch_size = cfg.batch_size

    @property
    def td_errors(self) -> np.ndarray:
        """|Q(s, a) - y| of the last batch (host memory, copied from the device when first read)."""
        if self._td_errors is None:
            return np.zeros(0, dtype=np.float32)
        return self._td_errors.cpu().numpy().astype(np.float32)

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        return obs if self.image else obs.flatten(1)

    def targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The n-step double-DQN targets y of a batch."""
        next_obs = self.observations(batch["next_obs"])
        nsteps = batch.get("nsteps")
        discount = self.cfg.gamma ** (nsteps if nsteps is not None else torch.ones_like(batch["reward"]))
        with torch.no_grad():
            next_q = self.q_target(next_obs)
            if self.cfg.double:
                best = self.q(next_obs).argmax(1, keepdim=True)
                bootstrap = next_q.gather(1, best).squeeze(1)
            else:
                bootstrap = next_q.max(1).values
            return batch["reward"] + discount * (1.0 - batch["terminated"]) * bootstrap

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step on a batch from replay."""
        batch = on_device(batch, self.device)
        target = self.targets(batch)
        q = self.q(self.observations(batch["obs"])).gather(1, batch["action"].long().reshape(-1, 1)).squeeze(1)
        weight = batch.get("weight")
        per_sample = F.smooth_l1_loss(q, target, reduction="none")
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        mean_grads(self.collective, self.q.parameters())
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), self.cfg.max_grad_norm)
        self.opt.step()
        self._td_errors = (q.detach() - target).abs()
        self.updates += 1
        if self.updates % self.cfg.target_update_every == 0:
            self.q_target.load_state_dict(self.q.state_dict())
        loss_value, q_mean = torch.stack([loss.detach(), q.detach().mean()]).tolist()
        return {"loss": loss_value, "q": q_mean}

    def _modules(self) -> dict:
        return {"q": self.q, "q_target": self.q_target}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Everything needed to continue training: tensors (networks, optimiser moments) and JSON-able meta."""
        tensors, optimizers = training_state(self._modules(), {"opt": self.opt})
        return tensors, {"updates": self.updates, "optimizers": optimizers}

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what ``state`` returned; raises ValueError when it does not fit these networks."""
        try:
            load_training_state(self._modules(), {"opt": self.opt}, tensors, meta["optimizers"])
            updates = int(meta["updates"])
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint does not fit the DQN network: {exc}") from None
        self.updates = updates

    def policy_weights(self) -> dict[str, np.ndarray]:
        """What rollout workers and the evaluator need to act: the online network's parameters."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.q.state_dict().items()}
