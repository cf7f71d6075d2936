"""Uniform replay: a ring buffer of transitions in preallocated numpy arrays."""

from __future__ import annotations

import numpy as np
import torch

from drl.envs import SpaceSpec


class ReplayBuffer:
    def __init__(self, spec: SpaceSpec, capacity: int, seed: int):
        self.capacity = capacity
        obs_dt = np.dtype(spec.obs_dtype)
        self.data = {
            "obs": np.zeros((capacity, *spec.obs_shape), dtype=obs_dt),
            "action": np.zeros((capacity, *spec.act_shape), dtype=np.dtype(spec.act_dtype)),
            "reward": np.zeros(capacity, dtype=np.float32),
            "next_obs": np.zeros((capacity, *spec.obs_shape), dtype=obs_dt),
            "terminated": np.zeros(capacity, dtype=np.float32),
        }
        self.pos = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, arrays: dict[str, np.ndarray]) -> int:
        """Appends a batch of transitions (rows along the first axis), overwriting the oldest when full."""
        n = len(arrays["reward"])
        idx = (self.pos + np.arange(n)) % self.capacity
        for name, store in self.data.items():
            store[idx] = arrays[name]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.capacity, self.size + n)
        return n

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        idx = self.rng.integers(0, self.size, size=batch_size)
        out = {}
        for name, store in self.data.items():
            x = torch.from_numpy(store[idx])
            out[name] = x.float() if x.dtype != torch.int64 else x
        return out

    def dump(self) -> tuple[dict[str, np.ndarray], dict]:
        """The stored transitions (oldest first) and the buffer's position, for checkpoints."""
        order = np.arange(self.pos - self.size, self.pos) % self.capacity
        return {name: store[order] for name, store in self.data.items()}, {"size": self.size}

    def load(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Refills the buffer from ``dump``'s output (a smaller capacity keeps the newest transitions)."""
        self.pos = self.size = 0
        n = int(meta["size"])
        keep = slice(max(0, n - self.capacity), n)
        self.add({name: np.asarray(arrays[name])[keep] for name in self.data})
