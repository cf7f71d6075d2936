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
from drl.memory.base import AppendReply, Entry, MemoryBackendError, seq_field, unseen_transitions
from drl.memory.outbox import Outbox, OutboxWriter, Outgoing, format_floor, parse_floors
from drl.memory.redis.announce import announce_in
from drl.memory.redis.connection import FENCED, RETRY_S, plain, retrying
from drl.memory.redis.keys import Keys
from drl.memory.redis.repair import ATTEMPTS, Guard, count, sound_state_field, watermark
from drl.memory.redis.scripts import ADD, COMMIT, RAISE, TAKE, DirectScript

log = logging.getLogger(__name__)

GROUP = "trainer"
BACKPRESSURE_FIRST_WAIT_S = 0.05
BACKPRESSURE_MAX_WAIT_S = 0.5


def _headers(client: redis.Redis, keys: Keys, retry_s: float):
    """The parsed headers of the entries still in the stream (undecodable ones are the trainer's to
    dead-letter, and hold nothing countable; a stream of the wrong type holds nothing)."""
    guard = Guard(client, keys, retry_s)
    for _, fields in guard.read(lambda: client.xrange(keys.stream), "XRANGE", keys.stream, []):
        header = experience_pb2.BatchHeader()
        try:
            header.ParseFromString(fields.get(b"h", b""))
        except Exception:
            continue
        yield header


def backlog_transitions(
    client: redis.Redis, keys: Keys, retry_s: float = RETRY_S, state: dict[str, str] | None = None
) -> int:
    """Transitions in entries still in the stream (unread or unacknowledged) that the trainer's committed state
    (or ``state``) has not taken, counted from their headers (``drl.memory.base.unseen_transitions``)."""
    if state is None:
        state = committed_state(client, keys, retry_s)
    return unseen_transitions(((h.worker_id, h.seq, h.count) for h in _headers(client, keys, retry_s)), state)


def committed_state(client: redis.Redis, keys: Keys, retry_s: float = RETRY_S) -> dict[str, str]:
    """``trainer:state`` as text, read by others than the trainer: of the wrong type it reads as empty, and its
    unsound fields are left out (both reported; the trainer repairs it)."""
    guard = Guard(client, keys, retry_s)
    raw = guard.read(lambda: client.hgetall(keys.consumer_state), "HGETALL state", keys.consumer_state, {})
    state = {}
    for field, value in raw.items():
        name = field.decode(errors="replace")
        if sound_state_field(name, value):
            state[name] = value.decode(errors="replace")
        else:
            guard.report(keys.consumer_state, f"field {name} is not a count or watermark", "left out")
    return state


def producer_position(client: redis.Redis, keys: Keys, worker_id: str, retry_s: float = RETRY_S) -> tuple[int, int]:
    """(last sequence number, transitions produced) of a worker, from the trainer's watermark, the entries
    still in the stream and the produced hash, so that a restarted worker process continues its numbering
    instead of having every entry dropped as a duplicate."""
    guard = Guard(client, keys, retry_s)
    raw = guard.read(
        lambda: client.hget(keys.consumer_state, seq_field(worker_id)), "HGET watermark", keys.consumer_state, None
    )
    seq = 0
    if raw is not None and watermark(raw) is None:
        guard.report(keys.consumer_state, f"field {seq_field(worker_id)} is not a watermark", "ignored")
    elif raw:
        seq = max(int(x) for x in raw.split(b","))
    for header in _headers(client, keys, retry_s):
        if header.worker_id == worker_id:
            seq = max(seq, header.seq)
    raw = guard.read(lambda: client.hget(keys.produced, worker_id), "HGET produced", keys.produced, None)
    produced = count(raw)
    if raw is not None and produced is None:
        guard.report(keys.produced, f"field {worker_id} is not a count", "ignored")
    produced = produced or 0
    raw = guard.read(lambda: client.hget(keys.floors, worker_id), "HGET floor", keys.floors, None)
    floor = parse_floors({worker_id: raw.decode(errors="replace")}).get(worker_id) if raw else None
    if floor is not None:
        seq, produced = max(seq, floor[0]), max(produced, floor[1])
    return seq, produced


def take_lease(client: redis.Redis, keys: Keys, who: str, epoch: int, retry_s: float = RETRY_S) -> None:
    """Raises ``who``'s lease in this shard's ``leases`` to ``epoch`` (``scripts.TAKE``), or raises
    ``drl.errors.Superseded`` when a newer process holds it already."""
    Guard(client, keys, retry_s).call(
        lambda: client.register_script(TAKE)(keys=[keys.leases], args=[who, epoch]), "take lease", key=keys.leases
    )


class Producer(OutboxWriter):
    """``ExperienceWriter`` on Redis: one worker's appends, through ``drl.memory.outbox.Outbox`` (order, waiting
    while the backlog is full, keeping and re-sending what was not consumed).

    The kept entries are bounded by the backlog limit: an entry is dropped from the local buffer as soon as the
    trainer's watermark for this worker covers its sequence number.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        worker_id: str,
        max_entries: int,
        max_bytes: int,
        retry_s: float = RETRY_S,
        epoch: int | None = None,
    ):
        self.client = client
        self.keys = keys
        self.worker_id = worker_id
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.retry_s = retry_s
        self._add = DirectScript(client, ADD)
        self._add_keys = [
            keys.stream,
            keys.policy,
            keys.stop,
            keys.produced,
            keys.backlog_bytes,
            keys.consumer_state,
            keys.epoch,
            keys.freed,
            keys.room,
            keys.shares,
            keys.leases,
        ]
        self.fence = "" if epoch is None else str(epoch)
        self.outbox = Outbox()
        self.outbox.on_new_epoch = self._report_floor
        self.waited_s = 0.0
        self.guard = Guard(client, keys, retry_s)
        self._highest_seq = 0
        if epoch is not None:
            take_lease(client, keys, worker_id, epoch, retry_s)

    def _report_floor(self, floor: tuple[int, int]) -> None:
        """Tells the reader this writer's floor after a data loss (``ReaderRecovery.floors``)."""
        if floor[0] > 0:
            self.guard.call(
                lambda: self.client.hset(self.keys.floors, self.worker_id, format_floor(floor)),
                "HSET floor",
                key=self.keys.floors,
            )

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
        args = [
            self.max_entries,
            self.max_bytes,
            item.h,
            item.d,
            self.worker_id,
            item.produced_total,
            seq_field(self.worker_id),
            secrets.token_hex(8),
            self.fence,
        ]
        self._highest_seq = max(self._highest_seq, item.seq)
        return self._reply(self.guard.call(lambda: self._add(self._add_keys, args), "XADD"))

    def _reply(self, values: list) -> AppendReply:
        """``scripts.ADD``'s reply, positional on the wire (docs/wire-format.md), as a named result. The values
        the script passes on from keys others write are checked here: an unsound policy version reads as none
        (-1), a watermark above anything this writer sent as 0 (every entry is kept), an unsound share as none."""
        added, version, stop, mark, epoch, widening, share = values
        keys = self.keys
        policy = -1 if version in (b"-1", "-1") else count(version)
        if policy is None:
            self.guard.report(keys.policy, "is not a policy version", "ignored")
            policy = -1
        consumed = count(mark)
        if consumed is None or consumed > self._highest_seq:
            self.guard.report(
                keys.consumer_state, f"field {seq_field(self.worker_id)} is beyond what this writer sent", "ignored"
            )
            consumed = 0
        assigned = count(share) if share else None
        if share and assigned is None:
            self.guard.report(keys.shares, f"field {self.worker_id} is not a count", "ignored")
        return AppendReply(
            appended=bool(added),
            policy_version=policy,
            stop=bool(stop),
            watermark=consumed,
            epoch=epoch,
            widening=int(widening),
            share=assigned,
        )

    def _wait_for_room(self, refusals: int) -> None:
        """Blocks until a commit frees an entry (a token on ``Keys.freed``) or a timeout passes. The refusal
        cleared the tokens nobody waited for, so a token means room freed since; the timeout, which doubles
        with each refusal in a row, covers a trainer that commits nothing (paused, dead) and the server's
        restarts."""
        timeout = min(BACKPRESSURE_MAX_WAIT_S, BACKPRESSURE_FIRST_WAIT_S * 2**refusals)
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
            _, epoch, raw = pipe.execute(raise_on_error=False)
            if isinstance(epoch, redis.ResponseError):
                raise epoch
            return epoch, raw

        while time.monotonic() < deadline:
            epoch, raw = self.guard.call(fetch, "HGET watermark", key=self.keys.epoch)
            mark = None if isinstance(raw, redis.ResponseError) else watermark(raw or b"0")
            if mark is None or mark > max(last_seq, self._highest_seq):
                self.guard.report(
                    self.keys.consumer_state,
                    f"field {seq_field(self.worker_id)} is not a watermark of this writer",
                    "ignored",
                )
                mark = 0
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


class Consumer:
    """``ExperienceReader`` on Redis: consumer-group reads, reclaim, and atomic commit of acknowledgements and
    state."""

    @property
    def recovery(self) -> Consumer:
        """Its ``ReaderRecovery``: the settling, rewriting and widening methods below, which only the trainer's
        library calls (through this name, not as part of the reading protocol)."""
        return self

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        consumer: str = "trainer-0",
        on_reset: Callable[[], None] | None = None,
        retry_s: float = RETRY_S,
        identity: tuple[str, int] | None = None,
    ):
        self.client = client
        self.keys = keys
        self.consumer = consumer
        self.on_reset = on_reset
        self.retry_s = retry_s
        self._commit = client.register_script(COMMIT)
        self._raise = client.register_script(RAISE)
        self._pending_first = True
        self.resets = 0
        self.guard = Guard(client, keys, retry_s)
        self._rewrite_due = False
        self.identity = identity
        if identity is not None:
            take_lease(client, keys, identity[0], identity[1], retry_s)
        self._ensure_group()

    def _ensure_group(self) -> bool:
        try:
            self.guard.call(
                lambda: self.client.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True),
                "XGROUP CREATE",
                key=self.keys.stream,
            )
            return True
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            return False

    def _call(self, fn: Callable, what: str):
        """Runs a group command; when the server lost the group (restarted empty), recreates it and says so."""
        while True:
            try:
                return self.guard.call(fn, what, key=self.keys.stream, on_repaired=self._repaired)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("consumer group gone (memory server restarted without data); recreating it")
                self._ensure_group()
                self.resets += 1
                self._pending_first = False
                if self.on_reset:
                    self.on_reset()

    def _repaired(self, key: str) -> None:
        """A repaired ``trainer:state`` lost what was unsound in it: the trainer writes all of its state again
        (``on_reset``); a stream deleted for its type is a data loss, found as a lost group at the next call."""
        if key == self.keys.consumer_state and self.on_reset:
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
        reply = self._call(
            lambda: self.client.xreadgroup(
                GROUP, self.consumer, {self.keys.stream: start}, count=count, block=block_ms
            ),
            "XREADGROUP",
        )
        if not reply:
            return []
        return [(eid, fields) for eid, fields in reply[0][1] if fields is not None]

    def reclaim(self, min_idle_ms: int, count: int = 64) -> list[Entry]:
        """Claims entries left pending at other (dead) consumers for longer than min_idle_ms."""
        claimed: list[Entry] = []
        start = "0-0"
        while len(claimed) < count:
            reply = self._call(
                lambda start=start: self.client.xautoclaim(
                    self.keys.stream, GROUP, self.consumer, min_idle_ms, start_id=start, count=count
                ),
                "XAUTOCLAIM",
            )
            start, entries = reply[0], reply[1]
            claimed += [(eid, fields) for eid, fields in entries if fields is not None]
            if start in (b"0-0", "0-0"):
                break
        return claimed

    def commit(
        self,
        acks: Iterable[tuple[bytes, int]],
        state: dict[str, str | int],
        dead: Iterable[tuple[bytes, dict, str, str]] = (),
    ) -> None:
        """In one transaction: dead-letter entries, acknowledge and delete entries, release their bytes, and
        record the consumer's state (counters and watermarks), so a crash leaves all of it or none."""
        acks = list(acks)
        dead = list(dead)
        if not acks and not state and not dead:
            return
        if self._rewrite_due and self.on_reset:
            self._rewrite_due = False
            self.on_reset()
        who, epoch = self.identity or ("", "")
        args: list = [who, epoch, GROUP, len(acks)]
        for entry_id, size in acks:
            args += [entry_id, size]
        args.append(len(dead))
        for entry_id, fields, kind, reason in dead:
            kept = {k: v for k, v in fields.items() if isinstance(k, bytes)}
            kept.update({b"reason": reason.encode()[:1000], b"kind": kind.encode(), b"source_id": entry_id})
            args += [kind, len(kept)]
            for k, v in kept.items():
                args += [k, v]
        for key, value in plain(state).items():
            args += [key, value]
        keys = [
            self.keys.stream,
            self.keys.backlog_bytes,
            self.keys.consumer_state,
            self.keys.freed,
            self.keys.dead_letter,
            self.keys.dead_letter_counts,
            self.keys.leases,
        ]
        self._call(lambda: self._commit(keys=keys, args=args), "commit")

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
        theirs would lose their newer ones; ``scripts.RAISE``), the widening and the announced version. The keys it
        writes are checked (and repaired) first, and again if another writer changed one's type in between."""

        def _do(pipe):
            if state:
                pipe.hset(self.keys.consumer_state, mapping=state)
            args = [x for worker, count in produced.items() for x in (worker, count)]
            if args:
                self._raise(keys=[self.keys.produced], args=args, client=pipe)
            self._widen(pipe, widening)
            if version >= 0:
                announce_in(pipe, self.keys, version)

        written = (self.keys.consumer_state, self.keys.produced, self.keys.room, self.keys.policy)
        for attempt in range(ATTEMPTS + 1):
            for key in written:
                self.guard.repair(key, "checked before a rewrite")
            try:
                return self._fenced(_do, "restore memory state")
            except MemoryBackendError as exc:
                if attempt == ATTEMPTS or "WRONGTYPE" not in str(exc):
                    raise

    def _fenced(self, build: Callable, what: str, grouped: bool = False) -> None:
        """Runs the commands ``build`` queues on a transaction, only while this reader's identity still holds its
        epoch: its lease is watched, so a newer process taking it in between fails the transaction, which is
        tried again and then refused (``drl.errors.Superseded``). ``grouped``: only while the reader's group
        exists, checked on the transaction's own connection (a server restarted in between breaks it), so that
        a partial state never lands on a server that lost its data (NOGROUP, for ``_call``)."""

        def _do():
            while True:
                with self.client.pipeline(transaction=True) as pipe:
                    if grouped:
                        pipe.watch(self.keys.consumer_state)
                        pipe.xpending(self.keys.stream, GROUP)
                    if self.identity is not None:
                        who, epoch = self.identity
                        pipe.watch(self.keys.leases)
                        held = count(pipe.hget(self.keys.leases, who))
                        if held is not None and held > epoch:
                            raise redis.ResponseError(f"{FENCED}{who} holds epoch {held}, this reader {epoch}")
                    if grouped or self.identity is not None:
                        pipe.multi()
                    build(pipe)
                    try:
                        pipe.execute()
                        return
                    except redis.WatchError:
                        continue

        self.guard.call(_do, what, key=self.keys.leases)

    def load_state(self) -> dict[str, str]:
        """The committed state; a ``trainer:state`` of the wrong type is deleted, unsound fields are left out
        (both reported), and the trainer's next commit first writes all of its state again."""
        key = self.keys.consumer_state
        raw = self.guard.read(lambda: self.client.hgetall(key), "HGETALL state", key, None)
        if raw is None:
            self.guard.repair(key, "has the wrong type")
            self._rewrite_due = True
            return {}
        state = {}
        for field, value in raw.items():
            if sound_state_field(field.decode(errors="replace"), value):
                state[field.decode(errors="replace")] = value.decode(errors="replace")
            else:
                self.guard.report(
                    key, f"field {field.decode(errors='replace')} is not a count or watermark", "left out"
                )
                self._rewrite_due = True
        return state

    def floors(self) -> dict[str, tuple[int, int]]:
        raw = self.guard.read(lambda: self.client.hgetall(self.keys.floors), "HGETALL floors", self.keys.floors, {})
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
        def _do(pipe):
            if state:
                pipe.hset(self.keys.consumer_state, mapping=plain(state))
            args = [x for worker, count in produced.items() for x in (worker, count)]
            if args:
                self._raise(keys=[self.keys.produced], args=args, client=pipe)

        self._call(lambda: self._fenced(_do, "settle", grouped=True), "settle")

    def backlog(self) -> int:
        return int(self.guard.call(lambda: self.client.xlen(self.keys.stream), "XLEN", key=self.keys.stream))

    def backlog_bytes(self) -> int:
        raw = self.guard.read(
            lambda: self.client.get(self.keys.backlog_bytes), "GET bytes", self.keys.backlog_bytes, None
        )
        value = count(raw)
        if raw is not None and value is None:
            self.guard.report(self.keys.backlog_bytes, "is not a count", "read as 0")
        return value or 0
