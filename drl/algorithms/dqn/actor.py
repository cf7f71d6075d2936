"""DQN acting policy: epsilon-greedy for collection, greedy for evaluation; also the Ape-X initial priorities."""

from __future__ import annotations

import numpy as np
import torch

from drl.algorithms.common import load_weights
from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.dqn.networks import QNetwork
from drl.envs import SpaceSpec


class DQNActor:
    def __init__(self, spec: SpaceSpec, cfg: DQNConfig, seed: int = 0):
        self.spec, self.cfg = spec, cfg
        self.net = QNetwork(int(np.prod(spec.obs_shape)), spec.discrete_actions, cfg.hidden)
        self.net.requires_grad_(False)
        self.rng = np.random.default_rng(seed)
        self.epsilon = cfg.eps_start

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit this network."""
        load_weights(self.net, weights)

    def set_progress(self, fraction: float) -> None:
        """Where the worker is in its share (0 to 1): epsilon falls linearly over ``eps_decay_fraction`` of it."""
        cfg = self.cfg
        ramp = min(1.0, fraction / cfg.eps_decay_fraction) if cfg.eps_decay_fraction > 0 else 1.0
        self.epsilon = cfg.eps_start + ramp * (cfg.eps_end - cfg.eps_start)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        greedy = self.net(torch.as_tensor(obs, dtype=torch.float32).flatten(1)).argmax(1).numpy()
        if deterministic:
            return greedy.astype(np.int64)
        explore = self.rng.random(len(greedy)) < self.epsilon
        random = self.rng.integers(0, self.spec.discrete_actions, size=len(greedy))
        return np.where(explore, random, greedy).astype(np.int64)

    @torch.no_grad()
    def priorities(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """|TD error| of each transition under this worker's copy of the online network (Ape-X's initial
        priorities: the trainer's target network is not needed for a first estimate)."""
        obs = torch.as_tensor(arrays["obs"], dtype=torch.float32).flatten(1)
        next_obs = torch.as_tensor(arrays["next_obs"], dtype=torch.float32).flatten(1)
        q = self.net(obs).gather(1, torch.as_tensor(arrays["action"]).long().reshape(-1, 1)).squeeze(1)
        nsteps = torch.as_tensor(arrays["nsteps"], dtype=torch.float32) if "nsteps" in arrays else 1.0
        done = torch.as_tensor(arrays["terminated"], dtype=torch.float32)
        target = (torch.as_tensor(arrays["reward"], dtype=torch.float32)
                  + self.cfg.gamma ** nsteps * (1 - done) * self.net(next_obs).max(1).values)
        return (q - target).abs().numpy().astype(np.float32)
