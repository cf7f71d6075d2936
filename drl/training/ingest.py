"""What the trainer does with each experience entry before it is committed: decode and check it, drop it as a
duplicate or as stale, or accept it, and keep the ledger that makes every transition count exactly once
(``Ingest``, ``Ledger``); and the reading around it (``Feed``).

Entries arrive at least once (a restarted worker re-sends, a restarted trainer re-reads what it had not
committed). The ledger remembers, per worker, which sequence numbers were taken (``SeqTracker``), the highest
produced total and the final and iteration-end entries seen, and counts what was consumed, dropped as a duplicate
or as stale, and dead-lettered. It is committed with the acknowledgements of the entries it describes
(``ExperienceReader.commit``), so a trainer killed at any point and restarted continues from exactly what the
memory server says was taken. An entry that cannot be decoded, or comes from a worker outside the run, is
dead-lettered and counted; it never stops the trainer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from drl.memory import Entry, ExperienceReader, ShardMap, codec, seq_field

log = logging.getLogger("drl.training.ingest")

COUNTERS = ("consumed", "duplicates", "stale", "dead_letters", "lost")
"""The ledger's counters, in transitions (``dead_letters``: entries); with the learner's ``updates`` they are the
counter fields of the committed state and of checkpoints. ``lost``: transitions of entries that can never arrive
(``Ingest.settle``), so that produced = consumed + unconsumed + stale + dead letters + lost."""


class SeqTracker:
    """Remembers which (worker, seq) entries were taken, in memory proportional to the gaps.

    Per worker: the watermark (every seq up to it was taken or declared lost), the writer's produced total
    through the watermark (``mark_total``; each entry carries its writer's running total, so the transitions in
    a gap are the difference of the totals at its edges), and each seq seen above the watermark with its count
    and total."""

    def __init__(self) -> None:
        self.watermark: dict[str, int] = {}
        self.above: dict[str, dict[int, tuple[int, int | None]]] = {}
        self.mark_total: dict[str, int | None] = {}

    def seen(self, worker: str, seq: int, count: int = 0, total: int | None = None) -> bool:
        """True if the entry was taken before; otherwise records it (``count`` transitions, the writer's
        ``total`` through it) and returns False."""
        mark = self.watermark.get(worker, 0)
        above = self.above.setdefault(worker, {})
        if seq <= mark or seq in above:
            return True
        above[seq] = (count, total)
        self._advance(worker, mark)
        return False

    def _advance(self, worker: str, mark: int) -> None:
        above = self.above.setdefault(worker, {})
        totals = self.mark_total
        if worker not in totals:
            totals[worker] = 0 if mark == 0 else None
        while mark + 1 in above:
            mark += 1
            totals[worker] = above.pop(mark)[1]
        self.watermark[worker] = mark

    def gaps(self) -> set[str]:
        """Workers with seqs seen above a missing one."""
        return {w for w, above in self.above.items() if above}

    def skip_to(self, worker: str, floor: int, floor_total: int) -> tuple[int, int | None]:
        """Declares every seq up to ``floor`` that was not seen lost (the writer no longer holds them: see
        ``Ingest.settle``) and moves the watermark past them; ``floor_total`` is the writer's produced total
        through ``floor``. Returns (entries lost, transitions lost; None when the total at the old watermark is
        unknown, a state written before totals were kept)."""
        mark = self.watermark.get(worker, 0)
        if floor <= mark:
            return 0, 0
        above = self.above.setdefault(worker, {})
        below = [s for s in above if s <= floor]
        taken = sum(above.pop(s)[0] for s in below)
        base = self.mark_total.get(worker, 0 if mark == 0 else None)
        lost = None if base is None else max(0, floor_total - base - taken)
        self.watermark[worker] = floor
        self.mark_total[worker] = floor_total
        self._advance(worker, floor)
        return floor - mark - len(below), lost

    def close(self, worker: str, total: int) -> tuple[int, int | None]:
        """Declares lost everything of a writer that finished with ``total`` transitions produced that was not
        seen (see ``Ingest.settle``): the holes below the highest seq seen and whatever followed it, and moves the
        watermark to that seq. Returns (entries lost below it, transitions lost; None when the total at the
        watermark is unknown)."""
        mark = self.watermark.get(worker, 0)
        above = self.above.setdefault(worker, {})
        top = max(above, default=mark)
        base = self.mark_total.get(worker, 0 if mark == 0 else None)
        taken = sum(count for count, _ in above.values())
        holes = top - mark - len(above)
        lost = None if base is None else max(0, total - base - taken)
        above.clear()
        self.watermark[worker] = top
        self.mark_total[worker] = total
        return holes, lost

    def dump(self, worker: str) -> str:
        """ "mark[,seq...]": the watermark first (writers read it), then the seqs seen above it."""
        return ",".join(str(x) for x in [self.watermark.get(worker, 0), *sorted(self.above.get(worker, ()))])

    def dump_totals(self, worker: str) -> str | None:
        """ "total[,seq:count:total...]": the produced total through the watermark, then each seq above it with
        its count and total; None while the total at the watermark is unknown."""
        base = self.mark_total.get(worker, 0 if self.watermark.get(worker, 0) == 0 else None)
        if base is None:
            return None
        above = self.above.get(worker, {})
        return ",".join(
            [str(base), *(f"{s}:{above[s][0]}:{above[s][1]}" for s in sorted(above) if above[s][1] is not None)]
        )

    def load(self, worker: str, text: str) -> None:
        mark, *above = (int(x) for x in text.split(",") if x)
        self.watermark[worker] = mark
        self.above[worker] = {s: (0, None) for s in above}
        self.mark_total[worker] = 0 if mark == 0 and not above else None  # the counts above are not known

    def load_totals(self, worker: str, text: str) -> None:
        """Takes ``dump_totals``'s text; load the watermark (``load``) first."""
        base, *above = text.split(",")
        self.mark_total[worker] = int(base)
        seqs = self.above.setdefault(worker, {})
        for item in above:
            seq, count, total = (int(x) for x in item.split(":"))
            if seq in seqs:
                seqs[seq] = (count, total)


@dataclass
class Ledger:
    """Per-worker progress and the run's counters, as the trainer commits them (docs/wire-format.md lists the
    fields of ``trainer:state``)."""

    seqs: SeqTracker = field(default_factory=SeqTracker)
    produced: dict[str, int] = field(default_factory=dict)
    final_seq: dict[str, int] = field(default_factory=dict)
    iteration_end: dict[str, int] = field(default_factory=dict)
    consumed: int = 0
    duplicates: int = 0
    stale: int = 0
    dead_letters: int = 0
    lost: int = 0

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}

    def fields(self, workers: Iterable[str], updates: int) -> dict[str, str | int]:
        """The committed state: the counters, ``updates``, and the progress of ``workers``."""
        out: dict[str, str | int] = {**self.counters(), "updates": updates}
        for w in workers:
            out[seq_field(w)] = self.seqs.dump(w)
            totals = self.seqs.dump_totals(w)
            if totals is not None:
                out[f"totals:{w}"] = totals
            for prefix, table in (("produced", self.produced), ("end", self.iteration_end), ("final", self.final_seq)):
                if w in table:
                    out[f"{prefix}:{w}"] = table[w]
        return out

    def load(self, state: dict[str, str]) -> int | None:
        """Takes the counters and per-worker progress of a committed state; returns its ``updates`` (None when
        the state has none)."""
        for name in COUNTERS:
            if name in state:
                setattr(self, name, int(state[name]))
        for key, value in state.items():
            kind, _, worker = key.partition(":")
            if kind == "seq":
                self.seqs.load(worker, value)
        for key, value in state.items():
            kind, _, worker = key.partition(":")
            if kind == "totals" and seq_field(worker) in state:
                self.seqs.load_totals(worker, value)
            elif kind == "produced":
                self.produced[worker] = int(value)
            elif kind == "end":
                self.iteration_end[worker] = int(value)
            elif kind == "final":
                self.final_seq[worker] = int(value)
        return int(state["updates"]) if "updates" in state else None

    def known_workers(self) -> set[str]:
        return set(self.seqs.watermark) | set(self.produced)


class Ledgers:
    """The ledgers of the experience shards a trainer consumes, as one: each worker appends to one shard
    (``drl.memory.ShardMap``), so its progress is in that shard's ledger (``of``); the counters add up. Each
    shard's ledger is committed with that shard's reads only, so every shard counts its transitions exactly once on
    its own, and the run's counts are the sums."""

    def __init__(self, by_shard: dict[int, Ledger], shards: int):
        self.by_shard, self.shards, self.map = by_shard, shards, ShardMap(shards)

    @classmethod
    def single(cls, ledger: Ledger) -> "Ledgers":
        return cls({0: ledger}, 1)

    def of(self, worker: str) -> Ledger:
        return self.by_shard[self.map.of(worker)]

    def __iter__(self):
        return iter(self.by_shard.values())

    def owns(self, worker: str) -> bool:
        """Whether ``worker``'s shard is one of these."""
        return self.map.of(worker) in self.by_shard

    def counters(self) -> dict[str, int]:
        return {name: sum(getattr(ledger, name) for ledger in self) for name in COUNTERS}

    @property
    def consumed(self) -> int:
        return sum(ledger.consumed for ledger in self)

    @property
    def duplicates(self) -> int:
        return sum(ledger.duplicates for ledger in self)

    @property
    def stale(self) -> int:
        return sum(ledger.stale for ledger in self)

    @property
    def dead_letters(self) -> int:
        return sum(ledger.dead_letters for ledger in self)

    @property
    def lost(self) -> int:
        return sum(ledger.lost for ledger in self)

    @property
    def produced(self) -> dict[str, int]:
        """Every worker's produced total (a copy: write through ``of``)."""
        return {w: n for ledger in self for w, n in ledger.produced.items()}

    def known_workers(self) -> set[str]:
        return set().union(*(ledger.known_workers() for ledger in self))


@dataclass
class Intake:
    """One read's outcome: what to learn from, and what to commit."""

    accepted: list[codec.Batch] = field(default_factory=list)
    acks: list[tuple[bytes, int]] = field(default_factory=list)
    dead: list[tuple[bytes, dict, str, str]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        """Bytes of the entries read."""
        return sum(size for _, size in self.acks)


class Ingest:
    """Classifies entries against the ledger. ``admits(worker)`` says whether a worker belongs to the run (the
    membership, which may look again at the memory server before it says no)."""

    def __init__(
        self, run: str, layout: dict[str, tuple[str, tuple[int, ...]]], ledger: Ledger, admits: Callable[[str], bool]
    ):
        self.run, self.layout, self.ledger, self.admits = run, layout, ledger, admits

    def take(self, entries: Iterable[Entry], sync_version: int | None = None) -> Intake:
        """Decodes, checks and deduplicates ``entries``; with ``sync_version`` (a SYNC iteration), an entry of
        another policy version is dropped and counted as stale, though its sequence number, final flag and
        produced total still count."""
        ledger, intake = self.ledger, Intake()
        for entry_id, fields in entries:
            intake.acks.append((entry_id, codec.entry_size(fields)))
            try:
                batch = codec.decode(fields, self.run, self.layout)
            except codec.DecodeError as exc:
                log.warning("entry %s dead-lettered: %s", entry_id, exc)
                intake.dead.append((entry_id, fields, exc.kind, str(exc)))
                ledger.dead_letters += 1
                if exc.header is not None and self.admits(exc.header.worker_id):
                    ledger.seqs.seen(exc.header.worker_id, exc.header.seq, exc.header.count, exc.header.produced_total)
                    intake.touched.add(exc.header.worker_id)
                continue
            h = batch.header
            if not self.admits(h.worker_id):
                intake.dead.append(
                    (entry_id, fields, "unknown_worker", f"worker {h.worker_id!r} is not part of the run")
                )
                ledger.dead_letters += 1
                continue
            intake.touched.add(h.worker_id)
            if ledger.seqs.seen(h.worker_id, h.seq, h.count, h.produced_total):
                ledger.duplicates += h.count
                continue
            ledger.produced[h.worker_id] = max(ledger.produced.get(h.worker_id, 0), h.produced_total)
            if h.final:
                ledger.final_seq[h.worker_id] = h.seq
            if sync_version is not None and h.policy_version != sync_version:
                ledger.stale += h.count
                log.info(
                    "dropped %d transitions of %s for stale version %d (iteration %d)",
                    h.count,
                    h.worker_id,
                    h.policy_version,
                    sync_version,
                )
                continue
            if h.iteration_end:
                ledger.iteration_end[h.worker_id] = h.policy_version
            ledger.consumed += h.count
            intake.accepted.append(batch)
        return intake

    def settle(
        self,
        floors: dict[str, tuple[int, int]],
        done: dict[str, int],
        in_stream: Callable[[Iterable[str]], dict[str, list[tuple[int, int, int]]]],
    ) -> set[str]:
        """Declares lost the entries that can never arrive, and returns the workers whose watermark moved.

        A writer's floor (``ReaderRecovery.floors``) is the highest seq it knows it keeps nothing at or below,
        with its produced total there: the highest watermark any trainer ever confirmed to it, or, for a new
        process of the writer, the seq it continues from (``ExperienceWriter.continue_from``: its predecessor's
        kept entries died with it). An entry at or below it that this ledger has not seen and that is not in the
        stream (``in_stream``: such an entry still arrives, so the floor counts only up to the first of them) was
        taken by a trainer whose record was lost with the memory server, or was held by a dead process: no copy
        of it is left anywhere, so it is never waited on: its seq is marked taken and its transitions are counted
        in ``lost``.

        A writer that is done (``done``: its marker, with the transitions it produced in all; the orchestrator
        writes it back for a worker that exited before the memory server lost it) sends nothing more: once none
        of its entries is left in the stream, whatever of its total this ledger has not seen is lost, and it is
        finished (``final_seq``), so the run does not wait for its final entry."""
        ledger, seqs = self.ledger, self.ledger.seqs
        known = ledger.known_workers()
        floors = {w: f for w, f in floors.items() if f[0] > seqs.watermark.get(w, 0) and (w in known or self.admits(w))}
        open_done = {}
        for w, total in done.items():
            if w not in known and not self.admits(w):
                continue
            mark = seqs.watermark.get(w, 0)
            if w in ledger.final_seq and mark >= ledger.final_seq[w]:
                continue
            base = seqs.mark_total.get(w, 0 if mark == 0 else None)
            if seqs.above.get(w) or (base is not None and base < total):
                open_done[w] = total
        if not floors and not open_done:
            return set()
        pending = in_stream(set(floors) | set(open_done))
        moved = set()
        for worker, (floor, total) in floors.items():
            waiting = sorted(e for e in pending.get(worker, ()) if e[0] <= floor)
            if waiting:
                seq, count, at = waiting[0]
                floor, total = seq - 1, at - count
            entries, lost = seqs.skip_to(worker, floor, total)
            if not entries and not lost:
                continue
            moved.add(worker)
            ledger.lost += lost or 0
            ledger.produced[worker] = max(ledger.produced.get(worker, 0), total)
            log.warning(
                "%s: %d entries up to seq %d can never arrive (taken by a trainer whose record the memory "
                "server lost, or held by a process that died; nobody holds them now): %s transitions "
                "counted as lost",
                worker,
                entries,
                floor,
                "an unknown number of" if lost is None else lost,
            )
        for worker, total in open_done.items():
            if worker in pending:
                continue
            entries, lost = seqs.close(worker, total)
            moved.add(worker)
            ledger.lost += lost or 0
            ledger.produced[worker] = max(ledger.produced.get(worker, 0), total)
            ledger.final_seq[worker] = seqs.watermark[worker]
            log.warning(
                "%s finished with %d transitions produced, but not all of them arrived (the memory server "
                "lost them, and the worker that held them has exited): %d entries below seq %d and %s "
                "transitions counted as lost",
                worker,
                total,
                entries,
                seqs.watermark[worker],
                "an unknown number of" if lost is None else lost,
            )
        return moved


class Feed:
    """The trainer's reading: reads entries (now and then, also entries stranded at dead readers), ingests them,
    hands the accepted ones to the learning and commits the read with the ledger, in that order, so that a crash
    anywhere leaves every transition counted once."""

    RECLAIM_EVERY_S = 5.0
    FLOORS_EVERY_S = 2.0

    def __init__(
        self,
        reader: ExperienceReader,
        ingest: Ingest,
        learning,
        reclaim_idle_s: float,
        done: Callable[[], dict[str, int]] = dict,
    ):
        self.reader, self.ingest, self.learning, self.done = reader, ingest, learning, done
        self.reclaim_idle_ms = int(reclaim_idle_s * 1000)
        self.read_at = self.reclaimed_at = self.floors_at = 0.0
        self.last: Intake | None = None

    def settle(self) -> None:
        """Declares lost what the writers' floors and done markers say can never arrive (``Ingest.settle``) and
        records the moved watermarks and the produced counts at once, so that writers waiting for them see them
        and the produced counts include what was lost."""
        ledger = self.ingest.ledger
        recovery = self.reader.recovery
        moved = self.ingest.settle(recovery.floors(), self.done(), recovery.in_stream)
        if moved:
            recovery.settle(
                ledger.fields(moved, self.learning.learner.updates),
                {w: ledger.produced[w] for w in moved if w in ledger.produced},
            )

    def record(self) -> None:
        """Commits the ledger's counters and ``updates`` without acknowledging anything: at exit, so that the
        committed ``updates`` (the summary's) include the updates run since the last read."""
        self.reader.commit([], self.ingest.ledger.fields([], self.learning.learner.updates))

    def read(self, count: int, block_ms: int | None, sync_version: int | None = None) -> list:
        """Reads up to ``count`` entries (waiting ``block_ms`` for new ones, None: not at all) and returns the
        accepted entries' headers; ``sync_version`` as in ``Ingest.take``."""
        now = self.read_at = time.monotonic()
        if now - self.floors_at > self.FLOORS_EVERY_S:
            self.floors_at = now
            self.settle()
        entries = []
        if now - self.reclaimed_at > self.RECLAIM_EVERY_S:
            self.reclaimed_at = now
            entries = self.reader.reclaim(self.reclaim_idle_ms, count)
            if entries:
                log.warning("reclaimed %d entries left pending by another reader", len(entries))
        entries += self.reader.read(count, block_ms if not entries else None)
        if not entries:
            self.last = None
            return []
        intake = self.last = self.ingest.take(entries, sync_version)
        for batch in intake.accepted:
            self.learning.add(batch.header.worker_id, batch.header.seq, batch.arrays, batch.header.policy_version)
        ledger = self.ingest.ledger
        self.reader.commit(intake.acks, ledger.fields(intake.touched, self.learning.learner.updates), intake.dead)
        return [batch.header for batch in intake.accepted]

    def read_paced(self, pace, count: int, block_ms: int = 100) -> list:
        """Reads when no update is owed, after letting entries gather for the gap ``pace`` sets from the arrival
        rate (``drl.training.pacing.ReadPace``): nothing waits on the gap, the learner has no update to run until the data
        come, and the backlog keeps room for the producers."""
        wait = self.read_at + pace.gap_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        since = time.monotonic() - self.read_at
        got = self.read(count, block_ms=block_ms)
        entries, size = (len(self.last.acks), self.last.size) if self.last is not None else (0, 0)
        pace.after_read(size, since, full=entries >= count)
        return got
