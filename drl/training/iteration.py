"""SYNC: the wait for one policy version's shares.

A learner waits for an end-of-iteration entry (``iteration_end``) from each of its workers that is to send one for
``version`` (``Membership.waiting_for``), for at most ``deadline_s`` seconds; a finished worker is not waited for,
and once every worker finished nothing is. While no entry came for ``stalled_s`` seconds it checks that the
version the workers wait for is still in the store (``republish``: publishing it again, or the next one, which
restarts the wait for the new version). A stop found while waiting ends the wait.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from drl.training.membership import Membership

READ_ENTRIES = 64
STALLED_S = 5.0


@dataclass
class Waited:
    version: int
    """The version whose shares were awaited (the republished one where the wait restarted)."""
    missing: set[str] = field(default_factory=set)
    """Workers whose share did not come before the deadline."""
    stopped: bool = False


def wait_for_shares(
    version: int,
    membership: Membership,
    read: Callable[[int, int, int], list],
    deadline_s: float,
    stopping: Callable[[], str],
    republish: Callable[[], int | None],
    report: Callable[[], None],
    stalled_s: float = STALLED_S,
) -> Waited:
    """Reads (``read(count, block_ms, version)``) until every awaited share came, the deadline passed or a stop
    was found; ``republish()`` returns the new version when it published one, else None."""
    membership.refresh()
    waiting = membership.waiting_for(version)
    deadline = time.monotonic() + deadline_s
    progressed = checked = time.monotonic()
    while waiting and time.monotonic() < deadline:
        if stopping():
            return Waited(version, waiting, stopped=True)
        now = time.monotonic()
        if now - max(progressed, checked) > stalled_s:
            checked = now
            republished = republish()
            if republished is not None:
                version = republished
                waiting = membership.waiting_for(version)
                deadline = now + deadline_s
        taken = read(READ_ENTRIES, 100, version)
        if taken:
            progressed = time.monotonic()
        waiting -= {h.worker_id for h in taken if h.iteration_end}
        waiting -= membership.finished
        if waiting and membership.all_finished():
            waiting.clear()
        report()
    return Waited(version, waiting)
