"""N-step transitions, folded by the rollout worker before they are sent (as Ape-X's actors do).

Each environment keeps a window of its last ``n`` one-step transitions. Once the window is full, its oldest
transition leaves as an n-step one: the discounted sum of the window's rewards, the observation ``n`` steps
later as ``next_obs``, and ``nsteps = n``. When an episode ends (terminated or truncated) or the worker flushes
(the end of its share or of a SYNC iteration), every transition still in a window leaves with the steps that are
left: ``nsteps`` says how many, so the learner discounts its bootstrap by ``gamma ** nsteps``, and a terminated
one carries ``terminated`` (no bootstrap at all). Every one-step transition pushed comes out exactly once, so
the worker's transition counts are unchanged.
"""

from __future__ import annotations

from collections import deque

import numpy as np

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")
NSTEP_FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {"nsteps": ("|u1", ())}
"""The wire field folded transitions add (dtype, per-transition shape): steps summed into the reward; the target
discounts its bootstrap by gamma ** nsteps."""


class NStepFolder:
    def __init__(self, n: int, gamma: float, num_envs: int):
        if n < 1:
            raise ValueError(f"n-step length must be at least 1, got {n}")
        self.n, self.gamma = n, gamma
        self.windows: list[deque] = [deque() for _ in range(num_envs)]

    def push(self, step: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray] | None:
        """Adds the first ``count`` environments' transitions of one vectorised step; returns the n-step
        transitions that are complete (or None)."""
        out: list[dict] = []
        for i in range(count):
            window = self.windows[i]
            window.append({k: step[k][i] for k in FIELDS} | {"truncated": bool(step["truncated"][i])})
            last = window[-1]
            if last["terminated"] or last["truncated"]:
                out += self._drain(window)
            elif len(window) == self.n:
                out.append(self._fold(window))
                window.popleft()
        return self._stack(out)

    def flush(self) -> dict[str, np.ndarray] | None:
        """Every transition still in a window, folded over the steps it has."""
        out: list[dict] = []
        for window in self.windows:
            out += self._drain(window)
        return self._stack(out)

    def pending(self) -> int:
        return sum(len(w) for w in self.windows)

    def _drain(self, window: deque) -> list[dict]:
        out = []
        while window:
            out.append(self._fold(window))
            window.popleft()
        return out

    def _fold(self, window: deque) -> dict:
        first, last = window[0], window[-1]
        total, discount = 0.0, 1.0
        for t in window:
            total += discount * float(t["reward"])
            discount *= self.gamma
        return {
            "obs": first["obs"],
            "action": first["action"],
            "reward": np.float32(total),
            "next_obs": last["next_obs"],
            "terminated": last["terminated"],
            "nsteps": np.uint8(len(window)),
        }

    @staticmethod
    def _stack(rows: list[dict]) -> dict[str, np.ndarray] | None:
        if not rows:
            return None
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
