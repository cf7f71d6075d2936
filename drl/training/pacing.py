"""How the trainer paces its reads: the replay ratio's tolerance, the widening of the backlog's limits while it waits
for data, and the gap it lets entries gather in before a read when it has nothing else to do.

ASYNC is rate-limited as in Reverb: updates follow the data (``Learning.owed``), and new experience is read only
while the updates owed are at most ``ratio_tolerance`` transitions' worth ahead of those done, so producers are
paced by back-pressure and the learner neither starves nor over-trains (``RateLimiter``). While no update is owed
the trainer reads everything every gap (``ReadPace``), so what waits in the backlog is bounded by the gap rather
than by the backlog's limits, and the limits can be widened (``Widening``): the workers then send larger entries
and the trainer reads less often. Once the trainer falls behind by more than the tolerance, the limits come back
and bound the policy lag of what waits again.
"""

from __future__ import annotations

from dataclasses import dataclass

from drl.memory import ExperienceReader
from drl.memory.backlog import BacklogLimits

WIDENING = 4
"""How far the trainer widens the backlog's limits while it waits for data (at most to ``--max-backlog-bytes``)."""


@dataclass(frozen=True)
class RateLimiter:
    """Decides, from the updates owed and done, whether the trainer waits for data, reads a little, or trains."""

    tolerance: float
    """Updates the trainer may be behind and still read (``updates_per_transition * ratio_tolerance``)."""

    @classmethod
    def of(cls, cfg) -> "RateLimiter":
        return cls(cfg.updates_per_transition * cfg.ratio_tolerance)

    def starved(self, behind: int) -> bool:
        """No update is owed: the trainer waits for data."""
        return behind <= 0

    def may_read(self, behind: int) -> bool:
        """Behind, but within the tolerance: it reads a few entries besides training."""
        return 0 < behind <= self.tolerance


class ReadPace:
    """How long a consumer with nothing else to do lets entries gather before its next read: long enough that a
    read carries several entries (each read and commit costs the consumer and the memory server about as much
    whatever it carries), short enough that the backlog never fills meanwhile (a full backlog holds producers
    back). The gap aims at ``share`` of the backlog's byte limit at the arrival rate the last read saw, within
    ``least_s`` and ``most_s``; it shrinks at once but at most doubles per read, so one quiet moment does not open
    a gap that a burst overflows. A read that came back full (more was waiting) drops it to ``least_s``."""

    def __init__(
        self, limit_bytes: int, first_s: float = 0.01, least_s: float = 0.002, most_s: float = 0.05, share: float = 0.5
    ):
        self.limit_bytes, self.least_s, self.most_s, self.share = limit_bytes, least_s, most_s, share
        self.gap_s = first_s

    def after_read(self, got_bytes: int, since_s: float, full: bool) -> float:
        """The gap before the next read, given what the last one got and the seconds it covered."""
        if full:
            self.gap_s = self.least_s
            return self.gap_s
        grown = 2 * self.gap_s
        if got_bytes > 0 and since_s > 0:
            grown = min(grown, self.share * self.limit_bytes * since_s / got_bytes)
        self.gap_s = min(self.most_s, max(self.least_s, grown))
        return self.gap_s


class Widening:
    """The trainer's factor on the backlog's limits (``ReaderRecovery.set_widening``): ``most`` (``WIDENING``,
    within ``--max-backlog-bytes``) while it waits for data, 1 otherwise. The read pace follows the widened byte
    limit."""

    def __init__(
        self,
        reader: ExperienceReader,
        limits: BacklogLimits,
        max_backlog_bytes: int,
        learning_starts: int,
        pace: ReadPace,
    ):
        self.reader, self.limits, self.learning_starts, self.pace = reader, limits, learning_starts, pace
        self.most = max(1, min(WIDENING, max_backlog_bytes // limits.limit_bytes))
        self.factor = 1
        reader.recovery.set_widening(1)

    def data_is_late(self, updates: int, consumed: int) -> bool:
        """Whether the trainer waits for data with no update owed for a while: the learner ahead of the data, or
        ``--learning-starts`` farther away than the widened backlog holds (so that the first updates do not meet
        a backlog full of experience from before learning started)."""
        if updates > 0:
            return True
        widened = self.most * self.limits.limit_bytes // self.limits.transition_bytes
        return consumed + widened < self.learning_starts

    def widen(self, wide: bool) -> None:
        factor = self.most if wide else 1
        if factor == self.factor:
            return
        self.reader.recovery.set_widening(factor)
        self.factor = factor
        self.pace.limit_bytes = factor * self.limits.limit_bytes
