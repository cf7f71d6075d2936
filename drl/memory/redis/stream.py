"""The experience stream on Redis Streams: at-least-once delivery with exactly-once effect, and a bounded backlog.

Producers (``Producer``, one per rollout worker) append entries with one Lua script (``scripts.ADD``) that refuses
the entry while the backlog holds ``max_entries`` entries or ``max_bytes`` bytes (back-pressure: the producer keeps
its batch and waits, nothing is dropped; it waits blocked on ``Keys.freed``, where every commit that frees entries
pushes one token per entry, so a waiting producer wakes when there is room rather than polling), records the
producer's running total, and returns what the worker needs to know without another round trip
(``drl.memory.base.AppendReply``): the latest policy version, the stop flag, the trainer's consumed watermark for
this worker, the data epoch (a token that changes when the server lost its data, so the worker re-sends what was
not consumed; every call offers a fresh random token, which the first call after a data loss installs), the
trainer's widening of the limits and the worker's assigned share.

The trainer (``Consumer``) reads through a consumer group and commits in one transaction (``scripts.COMMIT``):
acknowledge, delete, release the backlog bytes and record its counters and per-worker sequence watermarks. A
trainer restarted after SIGKILL reloads that state and re-reads its own pending entries first, so every entry
counts once.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Callable, Iterable

import redis

from drl._proto import experience_pb2
from drl.memory.base import AppendReply, Entry, seq_field
from drl.memory.outbox import Outbox, Outgoing, OutboxWriter, format_floor, parse_floors
from drl.memory.redis.announce import announce_in
from drl.memory.redis.connection import RETRY_S, plain, retrying
from drl.memory.redis.keys import Keys
from drl.memory.redis.scripts import ADD, COMMIT, RAISE, DirectScript

log = logging.getLogger(__name__)

GROUP = "trainer"
BACKPRESSURE_FIRST_WAIT_S = 0.05
BACKPRESSURE_MAX_WAIT_S = 0.5


def _headers(client: redis.Redis, keys: Keys, retry_s: float):
    """The parsed headers of the entries still in the stream (undecodable ones are the trainer's to
    dead-letter, and hold nothing countable)."""
    for _, fields in retrying(lambda: client.xrange(keys.stream), "XRANGE", retry_s):
        header = experience_pb2.BatchHeader()
        try:
            header.ParseFromString(fields.get(b"h", b""))
        except Exception:
            continue
        yield header


def backlog_transitions(client: redis.Redis, keys: Keys, retry_s: float = RETRY_S) -> int:
    """Transitions in entries still in the stream (unread or unacknowledged), counted from their headers."""
    return sum(header.count for header in _headers(client, keys, retry_s))


def producer_position(client: redis.Redis, keys: Keys, worker_id: str, retry_s: float = RETRY_S) -> tuple[int, int]:
    """(last sequence number, transitions produced) of a worker, from the trainer's watermark, the entries
    still in the stream and the produced hash, so that a restarted worker process continues its numbering
    instead of having every entry dropped as a duplicate."""
    raw = retrying(lambda: client.hget(keys.consumer_state, seq_field(worker_id)), "HGET watermark", retry_s)
    seq = max((int(x) for x in raw.split(b",") if x), default=0) if raw else 0
    for header in _headers(client, keys, retry_s):
        if header.worker_id == worker_id:
            seq = max(seq, header.seq)
    produced = int(retrying(lambda: client.hget(keys.produced, worker_id), "HGET produced", retry_s) or 0)
    raw = retrying(lambda: client.hget(keys.floors, worker_id), "HGET floor", retry_s)
    floor = parse_floors({worker_id: raw.decode(errors="replace")}).get(worker_id) if raw else None
    if floor is not None:
        seq, produced = max(seq, floor[0]), max(produced, floor[1])
    return seq, produced


class Producer(OutboxWriter):
    """``ExperienceWriter`` on Redis: one worker's appends, through ``drl.memory.outbox.Outbox`` (order, waiting
    while the backlog is full, keeping and re-sending what was not consumed).

    The kept entries are bounded by the backlog limit: an entry is dropped from the local buffer as soon as the
    trainer's watermark for this worker covers its sequence number.
    """

    def __init__(self, client: redis.Redis, keys: Keys, worker_id: str, max_entries: int, max_bytes: int,
                 retry_s: float = RETRY_S):
        self.client = client
        self.keys = keys
        self.worker_id = worker_id
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.retry_s = retry_s
        self._add = DirectScript(client, ADD)
        self._add_keys = [keys.stream, keys.policy, keys.stop, keys.produced, keys.backlog_bytes,
                          keys.consumer_state, keys.epoch, keys.freed, keys.room, keys.shares]
        self.outbox = Outbox()
        self.outbox.on_new_epoch = self._report_floor
        self.waited_s = 0.0

    def _report_floor(self, floor: tuple[int, int]) -> None:
        """Tells the reader this writer's floor after a data loss (``ExperienceReader.floors``)."""
        if floor[0] > 0:
            retrying(lambda: self.client.hset(self.keys.floors, self.worker_id, format_floor(floor)),
                     "HSET floor", self.retry_s)

    def position(self) -> tuple[int, int]:
        return producer_position(self.client, self.keys, self.worker_id, self.retry_s)

    def continue_from(self, seq: int, produced: int) -> None:
        if seq > self.outbox.floor[0]:
            self.outbox.floor = (seq, produced)
        self._report_floor(self.outbox.floor)

    def send(self, seq: int, h: bytes, d: bytes, produced_total: int) -> AppendReply:
        """Appends one entry (after any re-sends due before it), waiting while the backlog is full; it gives up
        without appending only when the run is stopping."""
        self.outbox.queued.append(Outgoing(seq, h, d, produced_total))
        return self.outbox.drain(self._append, self._wait_for_room)

    def _append(self, item: Outgoing) -> AppendReply:
        args = [self.max_entries, self.max_bytes, item.h, item.d, self.worker_id, item.produced_total,
                seq_field(self.worker_id), secrets.token_hex(8)]
        return _reply(retrying(lambda: self._add(self._add_keys, args), "XADD", self.retry_s))

    def _wait_for_room(self, refusals: int) -> None:
        """Blocks until a commit frees an entry (a token on ``Keys.freed``) or a timeout passes. The refusal
        cleared the tokens nobody waited for, so a token means room freed since; the timeout, which doubles
        with each refusal in a row, covers a trainer that commits nothing (paused, dead) and the server's
        restarts."""
        timeout = min(BACKPRESSURE_MAX_WAIT_S, BACKPRESSURE_FIRST_WAIT_S * 2 ** refusals)
        started = time.perf_counter()
        try:
            self.client.blpop([self.keys.freed], timeout=timeout)
        except redis.RedisError:
            time.sleep(timeout)
        self.waited_s += time.perf_counter() - started

    def wait_consumed(self, last_seq: int, timeout: float, should_stop: Callable[[], bool]) -> bool:
        """Blocks until the trainer has consumed every entry up to last_seq, re-sending after a data loss."""
        deadline = time.monotonic() + timeout

        def fetch():
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.epoch, secrets.token_hex(8), nx=True)
            pipe.get(self.keys.epoch)
            pipe.hget(self.keys.consumer_state, seq_field(self.worker_id))
            return pipe.execute()

        while time.monotonic() < deadline:
            _, epoch, raw = retrying(fetch, "HGET watermark", self.retry_s)
            mark = int((raw or b"0").split(b",")[0])
            self.outbox.observe(mark, epoch)
            if self.outbox.queued and not self.outbox.drain(self._append, self._wait_for_room).appended:
                return False
            if mark >= last_seq:
                return True
            if should_stop():
                return False
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._add.close()


def _reply(values: list) -> AppendReply:
    """``scripts.ADD``'s reply, positional on the wire (docs/wire-format.md), as a named result."""
    added, version, stop, mark, epoch, widening, share = values
    return AppendReply(appended=bool(added), policy_version=int(version), stop=bool(stop), watermark=int(mark),
                       epoch=epoch, widening=int(widening), share=int(share) if share else None)


class Consumer:
    """``ExperienceReader`` on Redis: consumer-group reads, reclaim, and atomic commit of acknowledgements and
    state."""

    def __init__(self, client: redis.Redis, keys: Keys, consumer: str = "trainer-0",
                 on_reset: Callable[[], None] | None = None, retry_s: float = RETRY_S):
        self.client = client
        self.keys = keys
        self.consumer = consumer
        self.on_reset = on_reset
        self.retry_s = retry_s
        self._commit = client.register_script(COMMIT)
        self._raise = client.register_script(RAISE)
        self._pending_first = True
        self.resets = 0
        self._ensure_group()

    def _ensure_group(self) -> bool:
        try:
            retrying(lambda: self.client.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True),
                     "XGROUP CREATE", self.retry_s)
            return True
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            return False

    def _call(self, fn: Callable, what: str):
        """Runs a group command; when the server lost the group (restarted empty), recreates it and says so."""
        while True:
            try:
                return retrying(fn, what, self.retry_s)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("consumer group gone (memory server restarted without data); recreating it")
                self._ensure_group()
                self.resets += 1
                self._pending_first = False
                if self.on_reset:
                    self.on_reset()

    def read(self, count: int, block_ms: int | None) -> list[Entry]:
        """Returns up to count entries: this consumer's own pending ones first (after a restart), then new ones.

        ``block_ms`` None returns at once; a positive value waits that long for new entries (0 would wait
        forever, so it is refused).
        """
        if block_ms is not None and block_ms <= 0:
            raise ValueError("block_ms must be positive or None")
        if self._pending_first:
            got = self._xread("0", count, None)
            if got:
                return got
            self._pending_first = False
        return self._xread(">", count, block_ms)

    def _xread(self, start: str, count: int, block_ms: int | None) -> list[Entry]:
        reply = self._call(lambda: self.client.xreadgroup(GROUP, self.consumer, {self.keys.stream: start},
                                                          count=count, block=block_ms), "XREADGROUP")
        if not reply:
            return []
        return [(eid, fields) for eid, fields in reply[0][1] if fields is not None]

    def reclaim(self, min_idle_ms: int, count: int = 64) -> list[Entry]:
        """Claims entries left pending at other (dead) consumers for longer than min_idle_ms."""
        claimed: list[Entry] = []
        start = "0-0"
        while len(claimed) < count:
            reply = self._call(lambda: self.client.xautoclaim(self.keys.stream, GROUP, self.consumer, min_idle_ms,
                                                              start_id=start, count=count), "XAUTOCLAIM")
            start, entries = reply[0], reply[1]
            claimed += [(eid, fields) for eid, fields in entries if fields is not None]
            if start in (b"0-0", "0-0"):
                break
        return claimed

    def commit(self, acks: Iterable[tuple[bytes, int]], state: dict[str, str | int],
               dead: Iterable[tuple[bytes, dict, str, str]] = ()) -> None:
        """In one transaction: dead-letter entries, acknowledge and delete entries, release their bytes, and
        record the consumer's state (counters and watermarks), so a crash leaves all of it or none."""
        acks = list(acks)
        dead = list(dead)
        if not acks and not state and not dead:
            return
        args: list = [GROUP, len(acks)]
        for entry_id, size in acks:
            args += [entry_id, size]
        for key, value in plain(state).items():
            args += [key, value]

        keys = [self.keys.stream, self.keys.backlog_bytes, self.keys.consumer_state, self.keys.freed]
        if not dead:
            # The script alone is atomic; a MULTI/EXEC pipeline would only add a round trip (the pipeline checks
            # SCRIPT EXISTS before every execute).
            self._call(lambda: self._commit(keys=keys, args=args), "commit")
            return

        def _do():
            pipe = self.client.pipeline(transaction=True)
            for entry_id, fields, kind, reason in dead:
                kept = {k: v for k, v in fields.items() if isinstance(k, bytes)}
                kept.update({b"reason": reason.encode()[:1000], b"kind": kind.encode(), b"source_id": entry_id})
                pipe.xadd(self.keys.dead_letter, kept, maxlen=10_000, approximate=True)
                pipe.hincrby(self.keys.dead_letter_counts, kind, 1)
            self._commit(keys=keys, args=args, client=pipe)
            pipe.execute()

        self._call(_do, "commit")

    def set_widening(self, factor: int) -> None:
        """Widens the backlog's limits ``factor``-fold for every producer's next append (``Keys.room``; 1 restores
        them). The limits bound how much experience waits, and so its policy lag, while the learner is the
        bottleneck; a trainer that waits for data reads everything every few tens of milliseconds, so what waits
        is bounded by its read gap instead, and wider limits let it read less often."""
        retrying(lambda: self._widen(self.client, factor), "SET room", self.retry_s)

    def _widen(self, target, factor: int) -> None:
        if factor > 1:
            target.set(self.keys.room, factor)
        else:
            target.delete(self.keys.room)

    def rewrite(self, state: dict[str, str | int], produced: dict[str, int], widening: int, version: int) -> None:
        """Puts back, in one transaction, what services read from the server after it lost its data: the trainer's
        state, the produced counts (raised only: after a data loss workers re-send and go on appending, each
        append raising its own count, before the trainer notices, and writing the trainer's older counts over
        theirs would lose their newer ones; ``scripts.RAISE``), the widening and the announced version."""
        def _do():
            pipe = self.client.pipeline(transaction=True)
            if state:
                pipe.hset(self.keys.consumer_state, mapping=state)
            args = [x for worker, count in produced.items() for x in (worker, count)]
            if args:
                self._raise(keys=[self.keys.produced], args=args, client=pipe)
            self._widen(pipe, widening)
            if version >= 0:
                announce_in(pipe, self.keys, version)
            pipe.execute()

        retrying(_do, "restore memory state", self.retry_s)

    def load_state(self) -> dict[str, str]:
        raw = retrying(lambda: self.client.hgetall(self.keys.consumer_state), "HGETALL state", self.retry_s)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def floors(self) -> dict[str, tuple[int, int]]:
        raw = retrying(lambda: self.client.hgetall(self.keys.floors), "HGETALL floors", self.retry_s)
        return parse_floors({k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()})

    def in_stream(self, workers) -> dict[str, list[tuple[int, int, int]]]:
        wanted = set(workers)
        out: dict[str, list[tuple[int, int, int]]] = {}
        if wanted:
            for h in _headers(self.client, self.keys, self.retry_s):
                if h.worker_id in wanted:
                    out.setdefault(h.worker_id, []).append((h.seq, h.count, h.produced_total))
        return out

    def settle(self, state: dict[str, str | int], produced: dict[str, int]) -> None:
        def _do():
            pipe = self.client.pipeline(transaction=True)
            if state:
                pipe.hset(self.keys.consumer_state, mapping=plain(state))
            args = [x for worker, count in produced.items() for x in (worker, count)]
            if args:
                self._raise(keys=[self.keys.produced], args=args, client=pipe)
            pipe.execute()

        retrying(_do, "settle", self.retry_s)

    def backlog(self) -> int:
        return int(retrying(lambda: self.client.xlen(self.keys.stream), "XLEN", self.retry_s))

    def backlog_bytes(self) -> int:
        return int(retrying(lambda: self.client.get(self.keys.backlog_bytes), "GET bytes", self.retry_s) or 0)


