"""How a rollout worker fills the entries it sends: when an entry is full (``EntryFill``), the arrays it is
filled in (``EntryBuffer``), and how a vectorised step reaches them (``StepInto``, or ``Folding`` for an algorithm
that folds transitions before they are sent, such as DQN's n-step returns).

Steps are written straight into the entry being filled (one preallocated array per wire field, reused for every
entry; ``VecEnv.step_with`` acts and writes a step's rows in place), so a step allocates nothing and a send joins nothing.
"""

from __future__ import annotations

import time

import numpy as np

from drl.envs import Act, VecEnv

FILL_WALL_FACTOR = 100
FILL_CLOCK_EVERY = 8


class EntryFill:
    """Decides when an entry is full. It holds at least ``least`` transitions and keeps filling while the
    worker's own stepping has used less than ``fill_s`` of CPU time, up to ``most``: every entry costs a round
    trip, an encode and the trainer's bookkeeping, which a fast env pays thousands of times a second, while a slow
    env's entries are not held back.

    The clock is the thread's CPU time, not wall time: with more workers than cores each worker runs only part of
    the time, and a wall clock would cut its entries short exactly where their per-entry cost weighs most. An env
    that waits rather than computes (a remote simulator) uses little CPU, so wall time still bounds an entry, at
    ``FILL_WALL_FACTOR`` times ``fill_s``. Both clocks start after a send, so back-pressure does not count.

    Past the least, the clocks are read once every ``FILL_CLOCK_EVERY`` transitions, not at every step: reading a
    thread's CPU time is a system call, too dear at every step of a fast env, and entries then overshoot by a few
    transitions at most. ``check_at`` is the least count at which ``full`` can say yes, so a caller's loop skips
    the call below it. (bench/README.md, "Measurements behind the code", has the figures.)"""

    def __init__(self, least: int, most: int, fill_s: float, cpu_clock=time.thread_time, wall_clock=time.monotonic):
        self.least, self.most, self.fill_s = least, most, fill_s
        self._cpu_clock, self._wall_clock = cpu_clock, wall_clock
        self.restart()

    def restart(self) -> None:
        self._cpu_started, self._wall_started = self._cpu_clock(), self._wall_clock()
        self.check_at = self.least

    def full(self, pending: int) -> bool:
        if pending < self.check_at:
            return False
        if pending >= self.most:
            return True
        self.check_at = min(pending + FILL_CLOCK_EVERY, self.most)
        return (
            self._cpu_clock() - self._cpu_started >= self.fill_s
            or self._wall_clock() - self._wall_started >= FILL_WALL_FACTOR * self.fill_s
        )


class EntryBuffer:
    """The entry being filled: one array per wire field, allocated once and reused for every entry. Steps are
    written into it in place (``VecEnv.step_into``) and an entry is encoded from its first ``n`` rows, so a step
    allocates nothing and a send joins nothing; it grows only when n-step folding hands over more rows at once
    than it has room for."""

    def __init__(self, layout: dict[str, tuple[str, tuple[int, ...]]], capacity: int):
        self.arrays = {name: np.empty((capacity, *shape), dtype=np.dtype(dt)) for name, (dt, shape) in layout.items()}
        self.n = 0

    def reserve(self, rows: int) -> None:
        """Makes room for ``rows`` more rows past the filled ones."""
        capacity = len(self.arrays["reward"])
        if self.n + rows > capacity:
            grown = max(self.n + rows, 2 * capacity)
            for name, arr in self.arrays.items():
                bigger = np.empty((grown, *arr.shape[1:]), dtype=arr.dtype)
                bigger[: self.n] = arr[: self.n]
                self.arrays[name] = bigger

    def put(self, transitions: dict[str, np.ndarray] | None) -> None:
        """Appends rows given as arrays (folded transitions), if any."""
        if transitions is None:
            return
        rows = len(transitions["reward"])
        self.reserve(rows)
        for name, arr in self.arrays.items():
            arr[self.n : self.n + rows] = transitions[name]
        self.n += rows

    def filled(self) -> dict[str, np.ndarray]:
        return {name: arr[: self.n] for name, arr in self.arrays.items()}


class StepInto:
    """Transitions go into the entry as stepped (no folding): the step writes its rows in place."""

    def __init__(self, envs: VecEnv, entry: EntryBuffer):
        self.envs, self.entry = envs, entry

    def __call__(self, act: Act, count: int) -> None:
        """Acts on and steps every env once (``VecEnv.step_with``) and keeps the first ``count`` transitions; the
        entry has room for a whole step (the caller reserved it)."""
        entry = self.entry
        self.envs.step_with(act, entry.arrays, entry.n)
        entry.n += count

    def flush(self) -> None:
        """Nothing is held back."""


class StepRecording(StepInto):
    """Transitions go into the entry as stepped, with the fields the actor recorded while choosing the step's
    actions (``Actor.records``: APPO's behaviour log-probabilities) beside them."""

    def __init__(self, envs: VecEnv, entry: EntryBuffer, actor):
        super().__init__(envs, entry)
        self.actor = actor

    def recorded(self) -> dict[str, np.ndarray]:
        return {name: self.actor.recorded[name] for name in self.actor.records}

    def __call__(self, act: Act, count: int) -> None:
        entry = self.entry
        self.envs.step_with(act, entry.arrays, entry.n, self.recorded)
        entry.n += count


class Folding:
    """Transitions pass through a folder (``drl.algorithms.base.Folder``) on their way into the entry."""

    def __init__(self, envs: VecEnv, entry: EntryBuffer, folder):
        self.envs, self.entry, self.folder = envs, entry, folder

    def __call__(self, act: Act, count: int) -> None:
        rows = self.envs.rows()
        self.envs.step_with(act, rows, 0)
        self.entry.put(self.folder.push(rows, count))

    def flush(self) -> None:
        """Hands over every transition the folder still holds (the end of a share or of an iteration)."""
        self.entry.put(self.folder.flush())
