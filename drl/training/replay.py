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
from drl.frames import INDEXED, TABLE, FrameRing, frame_capacity

PRIORITY = "priority"
"""The optional field with a transition's initial priority: the prioritized replay's own input, never stored
as a column and left out of batches."""
Extras = Mapping[str, tuple[str, tuple[int, ...]]] | Iterable[str]


class ReplayBuffer:
    """``extras``: the optional fields to keep beside the five every transition has, by name or as
    ``{name: (dtype, shape)}`` (shape () when only named); they are stored as float32, which is what batches
    hold anyway.

    An image environment whose frames travel once (``SpaceSpec.frame_stack``) is stored the same way: its frame
    tables go into a ``FrameRing`` of ``FRAME_ROOM`` frames per transition, each transition keeps the serials of
    its observations' frames, and a batch rebuilds the stacks. A transition leaves when one of its frames is
    overwritten, so the buffer may hold fewer than ``capacity``. Image observations reach a batch as uint8: the
    learner's first layer scales them."""

    def __init__(self, spec: SpaceSpec, capacity: int, seed: int, extras: Extras = ()):
        self.capacity = capacity
        self.obs_shape = spec.obs_shape
        obs_dt = np.dtype(spec.obs_dtype)
        obs_rows = (spec.frame_stack,) if spec.frame_stack else spec.obs_shape
        if spec.frame_stack:
            obs_dt = np.dtype(np.int64)
            self.ring: FrameRing | None = FrameRing(spec.frame_shape, frame_capacity(capacity))
            self.entry_start = np.zeros(capacity, dtype=np.int64)
        else:
            self.ring = None
        self.data = {
            "obs": np.zeros((capacity, *obs_rows), dtype=obs_dt),
            "action": np.zeros((capacity, *spec.act_shape), dtype=np.dtype(spec.act_dtype)),
            "reward": np.zeros(capacity, dtype=np.float32),
            "next_obs": np.zeros((capacity, *obs_rows), dtype=obs_dt),
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
        if self.ring is not None:
            start = self.ring.extend(arrays[TABLE])
            arrays = {
                **arrays,
                "obs": start + arrays["obs"].astype(np.int64),
                "next_obs": start + arrays["next_obs"].astype(np.int64),
            }
            self._drop_overwritten(self.ring.oldest)
        self._slots = idx = (self.pos + np.arange(n)) % self.capacity
        for name, store in self.data.items():
            store[idx] = arrays[name]
        if self.ring is not None:
            self.entry_start[idx] = start
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.capacity, self.size + n)
        return n

    def _drop_overwritten(self, oldest: int) -> None:
        """Drops, oldest first, the transitions of entries whose first frame the ring overwrote (serials below
        ``oldest``; entries come in order, so their first serials only grow along the buffer)."""
        while self.size:
            tail = (self.pos - self.size) % self.capacity
            if self.entry_start[tail] >= oldest:
                return
            span = (tail + np.arange(min(self.size, 4096))) % self.capacity
            gone = int(np.searchsorted(self.entry_start[span], oldest))
            self._dropped(span[:gone])
            self.size -= gone

    def _dropped(self, slots: np.ndarray) -> None:
        """Slots that no longer hold a transition."""

    def _gather(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        out = {}
        for name, store in self.data.items():
            if self.ring is not None and name in INDEXED:
                out[name] = torch.from_numpy(self.ring.stacks(store[idx], self.obs_shape))
                continue
            x = torch.from_numpy(store[idx])
            out[name] = x.float() if x.dtype != torch.int64 else x
        return out

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        return self._gather((self.pos - self.size + self.rng.integers(0, self.size, size=batch_size)) % self.capacity)

    def dump(self) -> tuple[dict[str, np.ndarray], dict]:
        """The stored transitions (oldest first) and the buffer's position, for checkpoints; a frame replay's
        as an entry would carry them (indices into the frames they refer to)."""
        order = np.arange(self.pos - self.size, self.pos) % self.capacity
        arrays = {name: store[order] for name, store in self.data.items()}
        if self.ring is not None and self.size:
            first = int(min(arrays["obs"].min(), arrays["next_obs"].min()))
            serials = np.arange(first, self.ring.next)
            arrays[TABLE] = self.ring.frames[serials % self.ring.capacity]
            for name in INDEXED:
                arrays[name] = (arrays[name] - first).astype(np.uint32)
        return arrays, {"size": self.size}

    def load(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Refills the buffer from ``dump``'s output (a smaller capacity keeps the newest transitions)."""
        self.pos = self.size = 0
        n = int(meta["size"])
        if n == 0:
            return
        keep = slice(max(0, n - self.capacity), n)
        rows = {
            name: np.asarray(arrays[name])[keep]
            for name in arrays
            if (name in self.data or name == PRIORITY) and name != TABLE
        }
        if self.ring is not None:
            table = np.asarray(arrays[TABLE])
            first = max(0, len(table) - self.ring.capacity)
            whole = np.minimum(rows["obs"].min(1), rows["next_obs"].min(1)) >= first
            rows = {name: value[whole] for name, value in rows.items()}
            for name in INDEXED:
                rows[name] = rows[name].astype(np.int64) - first
            rows[TABLE] = table[first:]
        self.add(rows)


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
    def __init__(
        self,
        spec: SpaceSpec,
        capacity: int,
        seed: int,
        extras: Extras = (),
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ):
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
        self.tree.set(self._slots, raw**self.alpha)
        return n

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """A batch drawn in proportion to priority (one draw per equal slice of the total mass), with its
        importance-sampling weights in ``weight``; the slots drawn are kept for ``update_priorities``."""
        total = self.tree.total()
        bounds = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        idx = self.tree.find(np.minimum(bounds, np.nextafter(total, 0)))
        idx = np.where(self.tree.leaves(idx) > 0, idx, (self.pos - 1) % self.capacity)
        probs = self.tree.leaves(idx) / total
        weights = (self.size * np.maximum(probs, 1e-12)) ** -self.beta
        batch = self._gather(idx)
        batch["weight"] = torch.from_numpy((weights / weights.max()).astype(np.float32))
        self.last_indices = idx
        return batch

    def _dropped(self, slots: np.ndarray) -> None:
        if len(slots):
            self.tree.set(slots, np.zeros(len(slots)))

    def update_priorities(self, idx: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities |TD error| + eps for the slots of the last batch."""
        raw = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps
        raw = np.where(np.isfinite(raw), raw, self.max_priority)
        self.max_priority = max(self.max_priority, float(raw.max()))
        self.tree.set(idx, raw**self.alpha)

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
