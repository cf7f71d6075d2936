"""Replay: a ring buffer of transitions in preallocated numpy arrays, uniform or prioritized.

Prioritized replay (Schaul et al. 2016, proportional variant) keeps a sum tree over the priorities: a
transition is drawn with probability p_i^alpha / sum p^alpha, and the batch carries importance-sampling weights
(N P(i))^-beta, divided by the batch's largest so they only ever shrink a gradient. New transitions get the
priority their rollout worker computed (Ape-X) when it sent one, else the largest priority seen so far, so every
transition is likely to be replayed at least once; the trainer writes new priorities after each update.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import torch

from drl.envs import SpaceSpec

PRIORITY = "priority"
"""The optional field with a transition's initial priority: the prioritized replay's own input, never stored
as a column and left out of batches."""
Extras = Mapping[str, tuple[str, tuple[int, ...]]] | Iterable[str]


class ReplayBuffer:
    """``extras``: the optional fields to keep beside the five every transition has, by name or as
    ``{name: (dtype, shape)}`` (shape () when only named); they are stored as float32, which is what batches
    hold anyway."""

    def __init__(self, spec: SpaceSpec, capacity: int, seed: int, extras: Extras = ()):
        self.capacity = capacity
        obs_dt = np.dtype(spec.obs_dtype)
        self.data = {
            "obs": np.zeros((capacity, *spec.obs_shape), dtype=obs_dt),
            "action": np.zeros((capacity, *spec.act_shape), dtype=np.dtype(spec.act_dtype)),
            "reward": np.zeros(capacity, dtype=np.float32),
            "next_obs": np.zeros((capacity, *spec.obs_shape), dtype=obs_dt),
            "terminated": np.zeros(capacity, dtype=np.float32),
        }
        shapes = extras if isinstance(extras, Mapping) else {name: ("<f4", ()) for name in extras}
        for name, (_dtype, shape) in shapes.items():
            if name != PRIORITY:
                self.data[name] = np.zeros((capacity, *shape), dtype=np.float32)
        self.pos = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, arrays: dict[str, np.ndarray]) -> int:
        """Appends a batch of transitions (rows along the first axis), overwriting the oldest when full."""
        n = len(arrays["reward"])
        self._slots = idx = (self.pos + np.arange(n)) % self.capacity
        for name, store in self.data.items():
            store[idx] = arrays[name]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.capacity, self.size + n)
        return n

    def _gather(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        out = {}
        for name, store in self.data.items():
            x = torch.from_numpy(store[idx])
            out[name] = x.float() if x.dtype != torch.int64 else x
        return out

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        return self._gather(self.rng.integers(0, self.size, size=batch_size))

    def dump(self) -> tuple[dict[str, np.ndarray], dict]:
        """The stored transitions (oldest first) and the buffer's position, for checkpoints."""
        order = np.arange(self.pos - self.size, self.pos) % self.capacity
        return {name: store[order] for name, store in self.data.items()}, {"size": self.size}

    def load(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Refills the buffer from ``dump``'s output (a smaller capacity keeps the newest transitions)."""
        self.pos = self.size = 0
        n = int(meta["size"])
        keep = slice(max(0, n - self.capacity), n)
        self.add({name: np.asarray(arrays[name])[keep] for name in arrays if name in self.data or name == PRIORITY})


class SumTree:
    """Sums over a fixed number of leaves in a flat array (leaf i at ``size + i``), updated and searched a
    whole batch at a time with one numpy operation per tree level."""

    def __init__(self, capacity: int):
        self.size = 1
        while self.size < capacity:
            self.size *= 2
        self.tree = np.zeros(2 * self.size, dtype=np.float64)

    def total(self) -> float:
        return float(self.tree[1])

    def leaves(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[self.size + idx]

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        idx = np.asarray(idx, dtype=np.int64)
        last = {}
        for i, v in zip(idx.tolist(), np.asarray(values, dtype=np.float64).tolist()):
            last[i] = v
        nodes = np.fromiter(last.keys(), dtype=np.int64) + self.size
        self.tree[nodes] = np.fromiter(last.values(), dtype=np.float64)
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaf index for each cumulative mass in [0, total)."""
        node = np.ones(len(mass), dtype=np.int64)
        mass = mass.astype(np.float64).copy()
        while node[0] < self.size:
            left = 2 * node
            left_sum = self.tree[left]
            right = mass >= left_sum
            mass -= np.where(right, left_sum, 0.0)
            node = np.where(right, left + 1, left)
        return node - self.size


class PrioritizedReplay(ReplayBuffer):
    def __init__(self, spec: SpaceSpec, capacity: int, seed: int, extras: Extras = (),
                 alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6):
        super().__init__(spec, capacity, seed, extras)
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.tree = SumTree(capacity)
        self.max_priority = 1.0
        self.last_indices = np.zeros(0, dtype=np.int64)

    def add(self, arrays: dict[str, np.ndarray]) -> int:
        n = super().add(arrays)
        given = arrays.get(PRIORITY)
        if given is not None:
            raw = np.abs(np.asarray(given, dtype=np.float64)) + self.eps
            raw = np.where(np.isfinite(raw), raw, self.max_priority)
            self.max_priority = max(self.max_priority, float(raw.max()))
        else:
            raw = np.full(n, self.max_priority)
        self.tree.set(self._slots, raw ** self.alpha)
        return n

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """A batch drawn in proportion to priority (one draw per equal slice of the total mass), with its
        importance-sampling weights in ``weight``; the slots drawn are kept for ``update_priorities``."""
        total = self.tree.total()
        bounds = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        idx = np.minimum(self.tree.find(np.minimum(bounds, np.nextafter(total, 0))), self.size - 1)
        probs = self.tree.leaves(idx) / total
        weights = (self.size * np.maximum(probs, 1e-12)) ** -self.beta
        batch = self._gather(idx)
        batch["weight"] = torch.from_numpy((weights / weights.max()).astype(np.float32))
        self.last_indices = idx
        return batch

    def update_priorities(self, idx: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities |TD error| + eps for the slots of the last batch."""
        raw = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps
        raw = np.where(np.isfinite(raw), raw, self.max_priority)
        self.max_priority = max(self.max_priority, float(raw.max()))
        self.tree.set(idx, raw ** self.alpha)

    def dump(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays, meta = super().dump()
        order = np.arange(self.pos - self.size, self.pos) % self.capacity
        arrays[PRIORITY] = (self.tree.leaves(order) ** (1 / self.alpha)).astype(np.float32)
        meta["max_priority"] = self.max_priority
        return arrays, meta

    def load(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        self.tree = SumTree(self.capacity)
        self.max_priority = float(meta.get("max_priority", 1.0))
        super().load(arrays, meta)
