"""Which rollout workers take part in a run and which of them have finished, as the trainer sees it.

The orchestrator owns the membership (``RunControl.members``: ``active`` or ``retired``) and each worker's share
(``RunControl.shares``); the trainer reads them at the start of every SYNC iteration, when an entry of an unknown
worker arrives, and before it decides that every worker is done. A run starts with ``--workers`` workers; live
scaling adds workers, and on Kubernetes a scale-down then up re-activates a finished worker's name with a share
above what it produced: that worker is taken back, and its new entries are awaited.

A worker is finished once its final entry and every entry before it were taken (entries re-sent after a memory
server restart may arrive after the final one), or once it said so itself (``RunControl.workers_done``).

Every worker finished is not enough while the run is being scaled: the orchestrator retires a worker, waits for it
to hand in, and only then shares the steps it did not produce among the workers it keeps and the ones it adds. In
between, the members that are left may all finish their old shares. So the run is done only once the members also
cover its steps: each active member with its share (the even split of the run's steps for a worker of the
original ``--workers`` the orchestrator wrote no share for), each retired one with what it produced.

The wait for a worker is bounded: one from which nothing arrives for ``silence_s`` seconds (it never started, or
another program wrote its name into the membership) is given up, with a line naming it, and counts as finished,
so that a run never waits for ever on a member that will not send. Whatever it sends later is still taken.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

from drl.memory import ACTIVE, RunMembers
from drl.naming import even_share, worker_index, worker_names
from drl.training.ingest import Ledger, Ledgers

log = logging.getLogger("drl.training.membership")

Snapshot = tuple[dict[str, int], dict[str, int], dict[str, str]]
"""``RunMembers.snapshot()``: (produced, shares, members)."""


def _index(name: str) -> int:
    try:
        return worker_index(name)
    except (ValueError, IndexError):
        return -1


class Membership:
    def __init__(
        self,
        control: RunMembers,
        ledger: Ledger | Ledgers,
        workers: int,
        silence_s: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
        steps: int | None = None,
    ):
        """``ledger``: the trainer's, or the ledgers of the shards it reads (``Ledgers``: a learner of a group
        follows only the workers of its shards); ``steps``: what this session of the run produces in all (its
        steps less those a resumed run's checkpoint covers); None leaves the coverage rule out."""
        self.control = control
        self.ledgers = ledger if isinstance(ledger, Ledgers) else Ledgers.single(ledger)
        self.initial, self.steps = workers, steps
        self.workers: set[str] = {w for w in worker_names(workers) if self.ledgers.owns(w)}
        self.finished: set[str] = set()
        self.given_up: set[str] = set()
        self.silence_s, self.clock = silence_s, clock
        self._heard: dict[str, tuple[tuple, float]] = {}
        self._short_since: float | None = None

    def refresh(self, snapshot: Snapshot | None = None) -> None:
        """Adds the workers registered since, and takes back finished ones that returned with more to produce
        (from ``snapshot``, a ``RunMembers.snapshot()`` the caller already read, else a new one)."""
        _, shares, members = snapshot if snapshot is not None else self.control.snapshot()
        added = {w for w in members if self.ledgers.owns(w)} - self.workers
        if added:
            log.info("rollout workers joined: %s", ", ".join(sorted(added)))
            self.workers |= added
        produced = self.ledgers.produced
        returned = {
            w
            for w in self.finished - self.given_up
            if members.get(w) == ACTIVE and shares.get(w, 0) > produced.get(w, 0)
        }
        if returned:
            log.info("rollout workers returned: %s", ", ".join(sorted(returned)))
            self.finished -= returned
            for w in returned:
                self.ledgers.of(w).final_seq.pop(w, None)

    def admits(self, worker: str) -> bool:
        """Whether ``worker`` belongs to the run (and appends to a shard this trainer reads), looking at the
        membership again before saying no."""
        if worker not in self.workers:
            self.refresh()
        return worker in self.workers

    def all_finished(self) -> bool:
        """Whether every worker is finished (see the module docstring)."""
        for ledger in self.ledgers:
            watermark = ledger.seqs.watermark
            self.finished |= {w for w, seq in ledger.final_seq.items() if watermark.get(w, 0) >= seq}
        if not self.finished >= self.workers and not self._finish_done():
            return False
        # One read of the membership for both questions: a worker the orchestrator registers between two reads
        # would count in the shares without being awaited.
        snapshot = self.control.snapshot()
        self.refresh(snapshot)
        if not self.finished >= self.workers and not self._finish_done():
            return False
        return self.covered(snapshot)

    def _finish_done(self) -> bool:
        """Counts as finished the workers that said so and the silent ones; whether every worker is finished."""
        self.finished |= set(self.control.workers_done()) & self.workers
        self._give_up_silent()
        return self.finished >= self.workers

    def covered(self, snapshot: Snapshot | None = None) -> bool:
        """Whether the members' shares add up to the run's steps (see the module docstring), read from
        ``snapshot`` (as ``refresh``)."""
        if self.steps is None:
            return True
        produced, shares, members = snapshot if snapshot is not None else self.control.snapshot()
        done = self.control.workers_done()
        promised = 0
        for w in self.workers | set(members):
            if members.get(w, ACTIVE) == ACTIVE:
                index = _index(w)
                default = even_share(self.steps, self.initial, index) if 0 <= index < self.initial else 0
                promised += shares.get(w, default)
            else:
                promised += max(produced.get(w, 0), done.get(w, 0), self.ledgers.produced.get(w, 0))
        if promised >= self.steps:
            self._short_since = None
            return True
        now = self.clock()
        if self._short_since is None:
            self._short_since = now
            log.info(
                "every rollout worker finished, but their shares cover %d of the run's %d steps: waiting "
                "for the orchestrator to share out the rest",
                promised,
                self.steps,
            )
        elif now - self._short_since >= self.silence_s:
            log.warning(
                "the rollout workers' shares still cover only %d of the run's %d steps after %.0f s "
                "(--member-silence-s); the run ends without the rest",
                promised,
                self.steps,
                now - self._short_since,
            )
            return True
        return False

    def _give_up_silent(self) -> None:
        """Counts as finished the workers from which nothing arrived for ``silence_s`` (see the module
        docstring)."""
        now = self.clock()
        for w in self.workers - self.finished:
            ledger = self.ledgers.of(w)
            progress = (ledger.seqs.watermark.get(w, 0), len(ledger.seqs.above.get(w, ())), ledger.produced.get(w, 0))
            last = self._heard.get(w)
            if last is None or last[0] != progress:
                self._heard[w] = (progress, now)
            elif now - last[1] >= self.silence_s:
                log.warning(
                    "rollout worker %s: nothing arrived from it for %.0f s (--member-silence-s); the run "
                    "goes on without it",
                    w,
                    now - last[1],
                )
                self.given_up.add(w)
                self.finished.add(w)

    def waiting_for(self, version: int) -> set[str]:
        """Workers not finished whose share of SYNC iteration ``version`` is not in yet (a restarted trainer does
        not wait again for a share it already has)."""
        return {w for w in self.workers - self.finished if self.ledgers.of(w).iteration_end.get(w, -1) < version}
