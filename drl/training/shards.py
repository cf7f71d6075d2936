"""The experience shards one learner consumes, as one object: its readers, their ledgers, feeds and pacing.

With ``--memory-shards`` S and ``--learners`` K, learner ``rank`` consumes the shards ``s`` with ``s % K == rank``
(the memory backend's ``ShardMap``): every shard has exactly one consumer, and each shard's ledger is committed with that shard's
reads only. A shard's feed settles only the workers that append to it (another shard's finished worker is not this
shard's loss). Reads go round the shards in turn, so that no shard waits behind another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from drl.memory import ExperienceReader, MemoryBackend, RunMembers, ShardMap
from drl.memory.backlog import BacklogLimits
from drl.training.ingest import Feed, Ingest, Ledger, Ledgers
from drl.training.pacing import ReadPace, Widening

CONSUMER = "trainer-0"
"""Every shard's one consumer name: a learner's replacement takes up its predecessor's pending entries."""


def done_markers(control: RunMembers, shards: ShardMap, shard: int) -> Callable[[], dict[str, int]]:
    """The done markers (``RunControl.workers_done``) of the workers that append to ``shard``."""
    if shards.shards == 1:
        return control.workers_done
    return lambda: shards.in_shard(shard, control.workers_done())


@dataclass
class Channel:
    """One experience shard as the trainer consumes it: its reader, its ledger (committed with that reader's reads
    only), the feed that reads and ingests, and the pacing of its reads."""

    shard: int
    reader: ExperienceReader
    ledger: Ledger
    feed: Feed
    pace: ReadPace
    widening: Widening


class Channels(list):
    """A learner's channels, read in turn (a list of ``Channel``)."""

    turn = 0

    @classmethod
    def open(
        cls,
        memory: MemoryBackend,
        control: RunMembers,
        ledgers: Ledgers,
        ingest: Callable[[Ledger], Ingest],
        learning,
        limits: BacklogLimits,
        *,
        reclaim_idle_s: float,
        max_backlog_bytes: int,
        learning_starts: int,
        on_reset: Callable[..., None],
    ) -> Channels:
        channels = cls()
        for s, ledger in ledgers.by_shard.items():
            reader = memory.reader(CONSUMER, on_reset=on_reset, shard=s)
            feed = Feed(
                reader, ingest(ledger), learning, reclaim_idle_s, done=done_markers(control, memory.shard_map, s)
            )
            pace = ReadPace(limits.limit_bytes)
            widening = Widening(reader, limits, max_backlog_bytes, learning_starts, pace)
            channels.append(Channel(s, reader, ledger, feed, pace, widening))
        return channels

    def read(self, count: int, block_ms: int | None, sync_version: int | None = None) -> list:
        """Reads every shard once without waiting (the next shard first, in turn) and, when none had anything and
        ``block_ms`` is set, waits that long on the shard whose turn it is; returns the accepted headers."""
        order = self[self.turn :] + self[: self.turn]
        self.turn = (self.turn + 1) % len(self)
        taken = []
        for ch in order:
            taken += ch.feed.read(count, None, sync_version)
        if not taken and block_ms is not None:
            taken = order[0].feed.read(count, block_ms, sync_version)
        return taken

    def read_paced(self, count: int) -> bool:
        """ASYNC with no update owed: each shard's paced read (``Feed.read_paced``, each waiting a share of 100 ms
        for new entries, so a round over the shards waits about as long as one stream's read did); whether any
        took anything."""
        block_ms = max(10, 100 // len(self))
        got = False
        for ch in self:
            got = bool(ch.feed.read_paced(ch.pace, count, block_ms)) or got
        return got

    def widen(self, wide: bool) -> None:
        for ch in self:
            ch.widening.widen(wide)

    def backlog(self) -> int:
        return sum(ch.reader.backlog() for ch in self)

    def backlog_bytes(self) -> int:
        return sum(ch.reader.backlog_bytes() for ch in self)

    def resets(self) -> int:
        return sum(ch.reader.resets for ch in self)

    def committed(self) -> dict[int, dict]:
        """Each shard's committed reader state (empty where the memory server holds none)."""
        return {ch.shard: ch.reader.load_state() for ch in self}

    def lost_state(self) -> bool:
        """Whether a shard's server lost the state of workers this learner knows (it restarted empty and nothing
        has been read from it since)."""
        return any(ch.ledger.known_workers() and not ch.reader.load_state() for ch in self)

    def rewrite(self, updates: int, version: int) -> None:
        """Puts back on every shard's server what services read from it after it restarted empty."""
        for ch in self:
            ch.reader.recovery.rewrite(
                ch.ledger.fields(ch.ledger.known_workers(), updates), ch.ledger.produced, ch.widening.factor, version
            )

    def record(self) -> None:
        for ch in self:
            ch.feed.record()
