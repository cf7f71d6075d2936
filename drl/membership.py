"""Which rollout workers take part in a run and which of them have finished, as the trainer sees it.

The orchestrator owns the membership (``RunControl.members``: ``active`` or ``retired``) and each worker's share
(``RunControl.shares``); the trainer reads them at the start of every SYNC iteration, when an entry of an unknown
worker arrives, and before it decides that every worker is done. A run starts with ``--workers`` workers; live
scaling adds workers, and on Kubernetes a scale-down then up re-activates a finished worker's name with a share
above what it produced: that worker is taken back, and its new entries are awaited.

A worker is finished once its final entry and every entry before it were taken (entries re-sent after a memory
server restart may arrive after the final one), or once it said so itself (``RunControl.workers_done``).

The wait for a worker is bounded: one from which nothing arrives for ``silence_s`` seconds (it never started, or
another program wrote its name into the membership) is given up, with a line naming it, and counts as finished,
so that a run never waits for ever on a member that will not send. Whatever it sends later is still taken.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

from drl.ingest import Ledger
from drl.memory import RunControl
from drl.naming import worker_names

log = logging.getLogger("drl.membership")


class Membership:
    def __init__(self, control: RunControl, ledger: Ledger, workers: int, silence_s: float = math.inf,
                 clock: Callable[[], float] = time.monotonic):
        self.control, self.ledger = control, ledger
        self.workers: set[str] = set(worker_names(workers))
        self.finished: set[str] = set()
        self.given_up: set[str] = set()
        self.silence_s, self.clock = silence_s, clock
        self._heard: dict[str, tuple[tuple, float]] = {}

    def refresh(self) -> None:
        """Adds the workers registered since, and takes back finished ones that returned with more to produce."""
        _, shares, members = self.control.snapshot()
        added = set(members) - self.workers
        if added:
            log.info("rollout workers joined: %s", ", ".join(sorted(added)))
            self.workers |= added
        produced = self.ledger.produced
        returned = {w for w in self.finished - self.given_up
                    if members.get(w) == "active" and shares.get(w, 0) > produced.get(w, 0)}
        if returned:
            log.info("rollout workers returned: %s", ", ".join(sorted(returned)))
            self.finished -= returned
            for w in returned:
                self.ledger.final_seq.pop(w, None)

    def admits(self, worker: str) -> bool:
        """Whether ``worker`` belongs to the run, looking at the membership again before saying no."""
        if worker not in self.workers:
            self.refresh()
        return worker in self.workers

    def all_finished(self) -> bool:
        """Whether every worker is finished (see the module docstring)."""
        watermark = self.ledger.seqs.watermark
        self.finished |= {w for w, seq in self.ledger.final_seq.items() if watermark.get(w, 0) >= seq}
        if self.finished >= self.workers:
            self.refresh()
        if self.finished >= self.workers:
            return True
        self.finished |= set(self.control.workers_done()) & self.workers
        self._give_up_silent()
        return self.finished >= self.workers

    def _give_up_silent(self) -> None:
        """Counts as finished the workers from which nothing arrived for ``silence_s`` (see the module
        docstring)."""
        now = self.clock()
        ledger = self.ledger
        for w in self.workers - self.finished:
            progress = (ledger.seqs.watermark.get(w, 0), len(ledger.seqs.above.get(w, ())), ledger.produced.get(w, 0))
            last = self._heard.get(w)
            if last is None or last[0] != progress:
                self._heard[w] = (progress, now)
            elif now - last[1] >= self.silence_s:
                log.warning("rollout worker %s: nothing arrived from it for %.0f s (--member-silence-s); the run "
                            "goes on without it", w, now - last[1])
                self.given_up.add(w)
                self.finished.add(w)

    def waiting_for(self, version: int) -> set[str]:
        """Workers not finished whose share of SYNC iteration ``version`` is not in yet (a restarted trainer does
        not wait again for a share it already has)."""
        return {w for w in self.workers - self.finished if self.ledger.iteration_end.get(w, -1) < version}
