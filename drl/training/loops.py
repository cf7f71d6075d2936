"""The trainer's two loops, over the parts its process shell (``services/trainer``) wires together.

ASYNC reads and trains as the rate limiter says (``drl.training.pacing``); SYNC trains once per policy version,
after every live worker has sent its share of that version or the deadline passed (``drl.training.iteration``).
In a group of learners every decision the learners must take together is agreed (``drl.training.collective``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from drl.core import Collective, Learning
from drl.training.collective import all_of, any_of
from drl.training.ingest import Ledgers
from drl.training.iteration import wait_for_shares
from drl.training.membership import Membership
from drl.training.pacing import RateLimiter
from drl.training.publishing import Publisher
from drl.training.shards import Channels
from drl.training.stopping import STOPPED, StopCheck

if TYPE_CHECKING:
    from drl.config import ExperimentConfig

log = logging.getLogger("drl.trainer")

ASYNC_READ_ENTRIES = 4
STARVED_READ_ENTRIES = 64
SYNC_READ_ENTRIES = 64
MOST_UPDATES_PER_LOOP = 16
STOP_CHECK_EVERY_UPDATES = 200


class TrainerParts(Protocol):
    cfg: ExperimentConfig
    learning: Learning
    limiter: RateLimiter
    ledger: Ledgers
    channels: Channels
    membership: Membership
    group: Collective
    size: int
    pub: Publisher
    should_stop: StopCheck

    @property
    def updates(self) -> int: ...

    @property
    def version(self) -> int: ...

    def finished(self) -> bool: ...

    def publish(self, force: bool = False, checkpoint: bool = False) -> None: ...

    def republish(self) -> int | None: ...

    def report(self, force: bool = False, state: str = "running", reason: str = "") -> None: ...


def _stopped(self: TrainerParts, reason: str) -> str:
    """Why the group stops: this learner's reason, else the run's flag read now (another learner saw it), else
    ``stopped``."""
    return reason or self.should_stop(force=True) or STOPPED


def run_async(self: TrainerParts) -> str:
    """Reads and trains as the rate limiter says. In a group of learners every decision that the learners
    must take together is agreed each round: stopping, the number of updates (the fewest any learner owes),
    and the end (every learner's workers finished and its streams empty). Once any learner has run out of
    data for good, the group stops updating and every learner reads what is left (``draining``), so that no
    learner waits for updates another one can no longer make."""
    learning, limiter = self.learning, self.limiter
    draining = False
    while True:
        reason = self.should_stop()
        if any_of(self.group, bool(reason)):
            return _stopped(self, reason)
        behind = learning.owed(self.ledger.consumed) - self.updates
        out = False
        if draining or limiter.starved(behind):
            self.channels.widen(self.channels[0].widening.data_is_late(self.updates, self.ledger.consumed))
            out = not self.channels.read_paced(STARVED_READ_ENTRIES) and self.finished()
        elif limiter.may_read(behind):
            self.channels.read(ASYNC_READ_ENTRIES, None)
        else:
            self.channels.widen(False)
        if all_of(self.group, out):
            return "steps_done"
        draining = draining or (self.size > 1 and any_of(self.group, out))
        count = 0 if draining else self.group.min_int(min(max(behind, 0), MOST_UPDATES_PER_LOOP))
        for _ in range(count):
            learning.update(self.ledger.consumed)
        if self.updates - max(self.pub.published_updates, 0) >= self.cfg.publish_every_updates:
            self.publish(checkpoint=True)
        self.report()


def run_sync(self: TrainerParts) -> str:
    """Per policy version: waits for this learner's workers' shares (or the deadline), then trains. In a group
    of learners each waits for its own workers; stopping, the updates owed (the fewest any learner owes) and
    the end are agreed, and a rollout is trained only when every learner has one
    (``drl.training.learning``)."""
    membership = self.membership
    while True:
        waited = wait_for_shares(
            self.version,
            membership,
            self.channels.read,
            self.cfg.sync_deadline_s,
            self.should_stop,
            self.republish,
            self.report,
        )
        version = waited.version
        if any_of(self.group, waited.stopped):
            return _stopped(self, "")
        if membership.all_finished():
            while self.channels.read(SYNC_READ_ENTRIES, 100, version) or self.channels.backlog():
                pass
        elif waited.missing:
            log.warning(
                "iteration %d: no complete share from %s within %.0fs; training without them",
                version,
                ", ".join(sorted(waited.missing)),
                self.cfg.sync_deadline_s,
            )
        self.learning.end_iteration(self.ledger.consumed)
        owed = self.group.min_int(max(0, self.learning.owed(self.ledger.consumed) - self.updates))
        for done in range(1, owed + 1):
            self.learning.update(self.ledger.consumed)
            if done % STOP_CHECK_EVERY_UPDATES == 0:
                reason = self.should_stop()
                if any_of(self.group, bool(reason)):
                    return _stopped(self, reason)
            self.report()
        if all_of(self.group, self.finished()):
            return "steps_done"
        self.publish(force=True, checkpoint=True)
