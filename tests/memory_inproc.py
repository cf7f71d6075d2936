"""The memory backend's protocols (``drl.memory.base``) kept in this process's memory: the tests' second
implementation, outside the shipped package (importing this module registers ``memory://NAME`` with
``drl.memory.register_scheme``).

Unit tests of the service loops run the trainer, rollout workers and evaluator as threads of one process; they
need the memory server's behaviour, not its network or its latency. ``open_inproc(name, run)`` (what
``drl.memory.open_memory`` does for ``memory://NAME``) returns an ``InProcessMemory``: every backend opened on the
same name sees the same server, as every service of a run sees the same Redis; one server holds many runs, each
bound to its own name as the Redis keys ``drl:{<run>}:*`` are.

The semantics are the Redis Streams implementation's (``drl.memory.redis``), which ``tests/integration/
test_memory_contract.py`` holds both to: an append is refused while the stream holds ``widening * max_entries``
entries, or while it holds bytes and this entry would take them past ``widening * max_bytes`` (so an entry always
enters an empty backlog), and the writer waits until a commit frees room, giving up only when the stop flag is
set; reads go through one consumer group, a reader's own unacknowledged entries first after it is (re)created; a
commit acknowledges, deletes, releases bytes, stores the reader's state and dead letters as one step. State
changes happen under one ``threading.Condition`` per server and every change notifies it, so a blocked read, a
held-back writer or a ``wait_for`` wakes when something happened instead of polling; only a caller's own
``should_stop`` (which no one can notify) is looked at every ``STOP_CHECK_S``.

``wipe(name)`` makes the server lose its data, as a Redis restarted without persistence does: the reader finds
its consumer group gone at its next read, reclaim, commit or settle (its ``resets`` grows and ``on_reset`` is
called before the commit's or settle's own fields are stored, so that nobody reads a partial state), and the
writers' next append installs a new data epoch, after which they re-send what was not consumed.
"""

from __future__ import annotations

import collections
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from drl.errors import Superseded
from drl.memory import register_scheme
from drl.memory.base import AppendReply, Entry, Identity, MemoryBackendError, ShardMap, merge_states, unseen_transitions
from drl.memory.outbox import Outbox, OutboxWriter, Outgoing, format_floor, parse_floors

log = logging.getLogger(__name__)

SCHEME = "memory://"
STOP_CHECK_S = 0.05
DEAD_LETTER_KEEP = 10_000

_Id = tuple[int, int]


@dataclass
class _Pending:
    consumer: str
    delivered_at: float
    deliveries: int = 1


@dataclass
class _Group:
    """The consumer group: what was delivered (``last``) and what is delivered but not acknowledged."""

    last: _Id = (0, 0)
    pending: dict[_Id, _Pending] = field(default_factory=dict)


@dataclass
class _RunData:
    """Everything one run keeps on the server (the Redis keys ``drl:{<run>}:*``)."""

    stream: dict[_Id, dict] = field(default_factory=dict)
    stream_exists: bool = False
    group: _Group | None = None
    backlog_bytes: int = 0
    widening: int = 1
    epoch: bytes | None = None
    floors: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)
    dead: collections.deque = field(default_factory=lambda: collections.deque(maxlen=DEAD_LETTER_KEEP))
    dead_counts: dict[str, int] = field(default_factory=dict)
    policy: int | None = None
    stop: str | None = None
    produced: dict[str, int] = field(default_factory=dict)
    workers_done: dict[str, int] = field(default_factory=dict)
    trainer_done: int | None = None
    started_at: float | None = None
    members: dict[str, str] = field(default_factory=dict)
    shares: dict[str, int] = field(default_factory=dict)
    status: dict[str, dict[str, str]] = field(default_factory=dict)
    claims: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (holder, monotonic expiry)
    shards: dict[int, "_ShardData"] = field(default_factory=dict)  # the experience fields of shards 1, 2, ...


_SHARD_FIELDS = frozenset(
    {"stream", "stream_exists", "group", "backlog_bytes", "widening", "floors", "state", "leases"}
)
"""The fields each experience shard has of its own (the Redis keys ``Keys(run, shard)`` gives a shard)."""


@dataclass
class _ShardData:
    """The experience fields of shard s > 0 (shard 0's are the run's own, as in Redis)."""

    stream: dict[_Id, dict] = field(default_factory=dict)
    stream_exists: bool = False
    group: _Group | None = None
    backlog_bytes: int = 0
    widening: int = 1
    floors: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    leases: dict[str, int] = field(default_factory=dict)


def _fence(data, who: str, epoch: int | None) -> None:
    """The scripts' ``fence`` on ``data``'s leases (lock held): a write of ``who`` with an epoch below the held one
    is refused (``Superseded``), an equal or higher one is taken; None is an unfenced write."""
    if epoch is None:
        return
    held = data.leases.get(who)
    if held is not None and held > epoch:
        raise Superseded(f"the memory server refused it: {who} holds epoch {held}, this writer {epoch}")
    data.leases[who] = epoch


class _ShardView:
    """A run's data as shard s > 0 sees it: that shard's experience fields (``_SHARD_FIELDS``), the run's control
    fields (policy, stop, shares, produced counts, ...), read and written through."""

    def __init__(self, run: _RunData, shard: _ShardData):
        object.__setattr__(self, "run_data", run)
        object.__setattr__(self, "shard_data", shard)

    def __getattr__(self, name: str):
        return getattr(self.shard_data if name in _SHARD_FIELDS else self.run_data, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.shard_data if name in _SHARD_FIELDS else self.run_data, name, value)


def _base(data) -> _RunData:
    return data.run_data if isinstance(data, _ShardView) else data


class _Server:
    """One named server: its runs' data and the condition every change notifies."""

    def __init__(self, name: str):
        self.name = name
        self.cond = threading.Condition(threading.RLock())
        self.runs: dict[str, _RunData] = {}
        self._last_id: _Id = (0, 0)

    def data(self, run: str, shard: int = 0):
        """The run's data, or as shard ``shard`` > 0 sees it (``_ShardView``)."""
        data = self.runs.get(run)
        if data is None:
            data = self.runs[run] = _RunData()
        if shard == 0:
            return data
        return _ShardView(data, data.shards.setdefault(shard, _ShardData()))

    def next_id(self) -> _Id:
        """A stream id after every earlier one, as Redis makes them (milliseconds, then a counter); it keeps
        growing across ``wipe`` as a restarted server's clock does."""
        ms = int(time.time() * 1000)
        last_ms, last_n = self._last_id
        self._last_id = (ms, 0) if ms > last_ms else (last_ms, last_n + 1)
        return self._last_id

    def changed(self) -> None:
        self.cond.notify_all()


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _server(name: str) -> _Server:
    with _SERVERS_LOCK:
        server = _SERVERS.get(name)
        if server is None:
            server = _SERVERS[name] = _Server(name)
        return server


def server_name(url_or_name: str) -> str:
    """The server's name in ``memory://NAME`` (a bare name is taken as it is)."""
    name = url_or_name[len(SCHEME) :] if url_or_name.startswith(SCHEME) else url_or_name
    name = name.rstrip("/")
    if not name:
        raise ValueError(f"an in-process memory URL names its server: memory://NAME, got {url_or_name!r}")
    return name


def open_inproc(name: str, run: str, shards: int = 1) -> "InProcessMemory":
    """A backend bound to ``run`` (with ``shards`` experience streams) on the in-process server ``name``
    (``memory://NAME`` or NAME), created on first use; every backend opened on the same name shares its data."""
    return InProcessMemory(server_name(name), run, shards)


def wipe(name: str) -> None:
    """The server ``name`` loses every run's data, as a memory server restarted without persistence does."""
    server = _server(server_name(name))
    with server.cond:
        server.runs = {}
        server.changed()


def discard(name: str) -> None:
    """Forgets the server ``name`` altogether (between tests); backends still open on it keep the old one."""
    with _SERVERS_LOCK:
        _SERVERS.pop(server_name(name), None)


def _parse_id(entry_id: bytes | str) -> _Id:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    ms, _, n = text.partition("-")
    return int(ms), int(n or 0)


def _format_id(key: _Id) -> bytes:
    return f"{key[0]}-{key[1]}".encode()


def _stored(value) -> str:
    """A value as the Redis implementation stores and returns it: bytes and str as they are, an int or a float as
    its ``repr`` (a numpy float as a float's); anything else (a bool, None, a numpy integer, ...) is refused there by the client, so it is
    refused here too, or a service loop tested in process could write what fails against Redis."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(value)
    raise MemoryBackendError(f"the memory server cannot store a value of type {type(value).__name__}: {value!r}")


def _fields(values: dict) -> dict[str, str]:
    return {str(k): _stored(v) for k, v in values.items()}


def _header(fields: dict):
    """The entry's ``BatchHeader``, or None when it does not decode (such an entry counts no transitions)."""
    from drl._proto import experience_pb2

    header = experience_pb2.BatchHeader()
    try:
        header.ParseFromString(fields.get(b"h", b""))
    except Exception:
        return None
    return header


_LEADING_DIGITS = re.compile(r"\d+")


def _watermark(data: _RunData, worker: str) -> int:
    """The first number of the reader's ``seq:<worker>`` state (``"mark[,seq...]"``), as the append reports it."""
    match = _LEADING_DIGITS.match(data.state.get(f"seq:{worker}", "0"))
    return int(match.group()) if match else 0


class InProcessWriter(OutboxWriter):
    """One worker's side of the stream, through ``drl.memory.outbox.Outbox`` (order, waiting while the backlog is
    full, keeping and re-sending what was not consumed); it waits on the server's condition."""

    def __init__(
        self,
        server: _Server,
        run: str,
        worker: str,
        max_entries: int,
        max_bytes: int,
        shard: int = 0,
        epoch: int | None = None,
    ):
        self._server = server
        self._epoch = epoch
        self._run = run
        self._shard = shard
        self.worker = worker
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.outbox = Outbox()
        self.outbox.on_new_epoch = self._report_floor
        self.waited_s = 0.0
        with server.cond:
            _fence(server.data(run, shard), worker, epoch)

    def _report_floor(self, floor: tuple[int, int]) -> None:
        if floor[0] > 0:
            with self._server.cond:
                self._server.data(self._run, self._shard).floors[self.worker] = format_floor(floor)

    def position(self) -> tuple[int, int]:
        with self._server.cond:
            data = self._server.data(self._run, self._shard)
            raw = data.state.get(f"seq:{self.worker}", "")
            seq = max((int(x) for x in raw.split(",") if x), default=0)
            for fields in data.stream.values():
                header = _header(fields)
                if header is not None and header.worker_id == self.worker:
                    seq = max(seq, header.seq)
            produced = data.produced.get(self.worker, 0)
            floor = parse_floors({k: v for k, v in data.floors.items() if k == self.worker}).get(self.worker)
            if floor is not None:
                seq, produced = max(seq, floor[0]), max(produced, floor[1])
            return seq, produced

    def continue_from(self, seq: int, produced: int) -> None:
        if seq > self.outbox.floor[0]:
            self.outbox.floor = (seq, produced)
        self._report_floor(self.outbox.floor)

    def send(self, seq: int, h: bytes, d: bytes, produced_total: int) -> AppendReply:
        with self._server.cond:
            self.outbox.queued.append(Outgoing(seq, h, d, produced_total))
            return self._drain()

    def _drain(self) -> AppendReply:
        """Appends the queued entries in order (lock held); a refusal waits on the condition until something
        changed."""
        return self.outbox.drain(self._append, self._wait)

    def _wait(self, refusals: int) -> None:
        started = time.perf_counter()
        self._server.cond.wait()
        self.waited_s += time.perf_counter() - started

    def _append(self, item: Outgoing) -> AppendReply:
        """One append as the server's script does it: admitted or refused, the reply says what the run is at."""
        data = self._server.data(self._run, self._shard)
        _fence(data, self.worker, self._epoch)
        if data.epoch is None:
            data.epoch = secrets.token_hex(8).encode()
        size = len(item.h) + len(item.d)
        factor = data.widening
        appended = not (
            len(data.stream) >= factor * self.max_entries
            or (data.backlog_bytes > 0 and data.backlog_bytes + size > factor * self.max_bytes)
        )
        if appended:
            data.stream[self._server.next_id()] = {b"h": item.h, b"d": item.d}
            data.stream_exists = True
            data.backlog_bytes += size
            if item.produced_total > data.produced.get(self.worker, 0):
                data.produced[self.worker] = item.produced_total
            self._server.changed()
        return AppendReply(
            appended=appended,
            policy_version=-1 if data.policy is None else data.policy,
            stop=data.stop is not None,
            watermark=_watermark(data, self.worker),
            epoch=data.epoch,
            widening=data.widening,
            share=data.shares.get(self.worker),
        )

    def wait_consumed(self, last_seq: int, timeout: float, should_stop: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._server.cond:
                data = self._server.data(self._run, self._shard)
                if data.epoch is None:
                    data.epoch = secrets.token_hex(8).encode()
                mark = _watermark(data, self.worker)
                self.outbox.observe(mark, data.epoch)
                if self.outbox.queued and not self._drain().appended:
                    return False
                if mark >= last_seq:
                    return True
            if should_stop():
                return False
            with self._server.cond:
                if _watermark(self._server.data(self._run, self._shard), self.worker) < last_seq:
                    self._server.cond.wait(max(0.0, min(STOP_CHECK_S, deadline - time.monotonic())))
        return False

    def close(self) -> None:
        pass


class _Lost(Exception):
    """The consumer group vanished while a read waited (the server lost its data)."""


class InProcessReader:
    """The trainer's side of the stream: one consumer of the run's consumer group."""

    @property
    def recovery(self) -> InProcessReader:
        """Its ``ReaderRecovery``: the settling, rewriting and widening methods below, which only the trainer's
        library calls (through this name, not as part of the reading protocol)."""
        return self

    def __init__(
        self,
        server: _Server,
        run: str,
        name: str,
        on_reset: Callable[[], None] | None = None,
        shard: int = 0,
        identity: tuple[str, int] | None = None,
    ):
        self._server = server
        self._identity = identity
        self._run = run
        self._shard = shard
        self.name = name
        self.on_reset = on_reset
        self.resets = 0
        self._pending_first = True
        with server.cond:
            data = server.data(run, shard)
            self._fence(data)
            if data.group is None:
                data.group = _Group()
                data.stream_exists = True

    def _fence(self, data) -> None:
        if self._identity is not None:
            _fence(data, *self._identity)

    def _call(self, fn: Callable[[_RunData, _Group], list]) -> list:
        """Runs a group operation; when the server lost the group, recreates it (from the stream's start), counts
        a reset and calls ``on_reset`` (outside the lock) before running it again."""
        while True:
            with self._server.cond:
                data = self._server.data(self._run, self._shard)
                if data.group is not None:
                    try:
                        return fn(data, data.group)
                    except _Lost:
                        continue
                log.warning("consumer group gone (memory server restarted without data); recreating it")
                data.group = _Group()
                data.stream_exists = True
                self.resets += 1
                self._pending_first = False
            if self.on_reset:
                self.on_reset()

    def read(self, count: int, block_ms: int | None) -> list[Entry]:
        if block_ms is not None and block_ms <= 0:
            raise ValueError("block_ms must be positive or None")
        if self._pending_first:
            got = self._call(lambda data, group: self._history(data, group, count))
            if got:
                return got
            self._pending_first = False
        deadline = None if block_ms is None else time.monotonic() + block_ms / 1000.0
        return self._call(lambda data, group: self._new(data, group, count, deadline))

    def _history(self, data: _RunData, group: _Group, count: int) -> list[Entry]:
        """This consumer's own pending entries, oldest first (each delivered again now)."""
        now = time.monotonic()
        mine = sorted(k for k, p in group.pending.items() if p.consumer == self.name)[:count]
        out = []
        for key in mine:
            pending = group.pending[key]
            if key in data.stream:
                pending.delivered_at, pending.deliveries = now, pending.deliveries + 1
                out.append((_format_id(key), dict(data.stream[key])))
        return out

    def _new(self, data: _RunData, group: _Group, count: int, deadline: float | None) -> list[Entry]:
        """Entries never delivered to the group, waiting on the condition until ``deadline`` for some."""
        while True:
            fresh = [k for k in data.stream if k > group.last][:count]
            if fresh or deadline is None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self._server.cond.wait(left)
            if self._server.runs.get(self._run) is not _base(data) or data.group is not group:
                raise _Lost
        now = time.monotonic()
        for key in fresh:
            group.pending[key] = _Pending(self.name, now)
        if fresh:
            group.last = fresh[-1]
        return [(_format_id(k), dict(data.stream[k])) for k in fresh]

    def reclaim(self, min_idle_ms: int, count: int = 64) -> list[Entry]:
        def claim(data: _RunData, group: _Group) -> list[Entry]:
            now = time.monotonic()
            out = []
            for key in sorted(group.pending):
                if len(out) >= count:
                    break
                pending = group.pending[key]
                if (now - pending.delivered_at) * 1000.0 < min_idle_ms:
                    continue
                if key not in data.stream:
                    del group.pending[key]
                    continue
                group.pending[key] = _Pending(self.name, now, pending.deliveries + 1)
                out.append((_format_id(key), dict(data.stream[key])))
            return out

        return self._call(claim)

    def commit(
        self,
        acks: Iterable[tuple[bytes, int]],
        state: dict[str, str | int],
        dead: Iterable[tuple[bytes, dict, str, str]] = (),
    ) -> None:
        acks, dead = list(acks), list(dead)
        if not acks and not state and not dead:
            return
        values = _fields(state)

        def _do(data: _RunData, group: _Group) -> list:
            self._fence(data)
            for entry_id, fields, kind, reason in dead:
                kept = {k: v for k, v in fields.items() if isinstance(k, bytes)}
                kept.update(
                    {
                        b"reason": reason.encode()[:1000],
                        b"kind": kind.encode(),
                        b"source_id": entry_id if isinstance(entry_id, bytes) else str(entry_id).encode(),
                    }
                )
                data.dead.append(kept)
                data.dead_counts[kind] = data.dead_counts.get(kind, 0) + 1
            freed = 0
            for entry_id, size in acks:
                key = _parse_id(entry_id)
                group.pending.pop(key, None)
                if data.stream.pop(key, None) is not None:
                    freed += int(size)
            data.backlog_bytes = max(0, data.backlog_bytes - freed)
            data.state.update(values)
            self._server.changed()
            return []

        self._call(_do)

    def load_state(self) -> dict[str, str]:
        with self._server.cond:
            return dict(self._server.data(self._run, self._shard).state)

    def floors(self) -> dict[str, tuple[int, int]]:
        with self._server.cond:
            return parse_floors(dict(self._server.data(self._run, self._shard).floors))

    def in_stream(self, workers) -> dict[str, list[tuple[int, int, int]]]:
        wanted = set(workers)
        out: dict[str, list[tuple[int, int, int]]] = {}
        with self._server.cond:
            for fields in self._server.data(self._run, self._shard).stream.values():
                h = _header(fields)
                if h is not None and h.worker_id in wanted:
                    out.setdefault(h.worker_id, []).append((h.seq, h.count, h.produced_total))
        return out

    def settle(self, state: dict[str, str | int], produced: dict[str, int]) -> None:
        self._call(lambda data, group: self.rewrite(state, produced, widening=0, version=-1) or [])

    def rewrite(self, state: dict[str, str | int], produced: dict[str, int], widening: int, version: int) -> None:
        """Also ``settle`` (``widening`` 0 and ``version`` -1 leave both as they are)."""
        values = _fields(state)
        with self._server.cond:
            data = self._server.data(self._run, self._shard)
            self._fence(data)
            data.state.update(values)
            for worker, count in produced.items():
                if int(count) > data.produced.get(worker, 0):
                    data.produced[worker] = int(count)
            if widening > 0:
                data.widening = int(widening)
            if version >= 0:
                data.policy = int(version)
            self._server.changed()

    def set_widening(self, factor: int) -> None:
        with self._server.cond:
            self._server.data(self._run, self._shard).widening = max(1, int(factor))
            self._server.changed()

    def backlog(self) -> int:
        with self._server.cond:
            return len(self._server.data(self._run, self._shard).stream)

    def backlog_bytes(self) -> int:
        with self._server.cond:
            return self._server.data(self._run, self._shard).backlog_bytes


class InProcessAnnouncements:
    """The latest announced policy version; waiting for a newer one waits on the server's condition."""

    def __init__(self, server: _Server, run: str):
        self._server = server
        self._run = run

    def announce(self, version: int) -> None:
        _stored(version)
        with self._server.cond:
            self._server.data(self._run).policy = int(version)
            self._server.changed()

    def latest(self) -> int:
        with self._server.cond:
            policy = self._server.data(self._run).policy
            return -1 if policy is None else policy

    def wait_for(self, min_version: int, timeout: float, should_stop: Callable[[], bool]) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            latest = self.latest()
            if latest >= min_version:
                return latest
            if should_stop():
                return -1
            with self._server.cond:
                if self.latest() < min_version:
                    self._server.cond.wait(max(0.0, min(STOP_CHECK_S, deadline - time.monotonic())))
        return -1

    def close(self) -> None:
        pass


class InProcessControl:
    """The run's control state: stop flag, membership and shares, done markers, status fields, counters."""

    def __init__(self, server: _Server, run: str, shards: int = 1, identity: Identity | None = None):
        self._server = server
        self._run = run
        self.shards = max(1, shards)
        self.identity = identity or Identity()

    def _read(self, fn: Callable[[_RunData], object]):
        with self._server.cond:
            return fn(self._server.data(self._run))

    def _write(self, fn: Callable[[_RunData], None]) -> None:
        with self._server.cond:
            fn(self._server.data(self._run))
            self._server.changed()

    def stop_reason(self) -> str | None:
        return self._read(lambda d: d.stop)

    def request_stop(self, reason: str) -> None:
        reason = _stored(reason)
        self._write(lambda d: setattr(d, "stop", reason))

    def members(self) -> dict[str, str]:
        return self._read(lambda d: dict(d.members))

    def shares(self) -> dict[str, int]:
        return self._read(lambda d: dict(d.shares))

    def share(self, worker: str) -> int | None:
        return self._read(lambda d: d.shares.get(worker))

    def register(
        self,
        members: dict[str, str],
        shares: dict[str, int],
        only_new: bool = False,
        forget_done: Iterable[str] = (),
        started_at: float | None = None,
    ) -> None:
        states, _ = _fields(members), _fields(shares)
        forget = list(forget_done)
        if started_at is not None:
            _stored(started_at)

        def do(d: _RunData) -> None:
            for name, state in states.items():
                if not only_new or name not in d.members:
                    d.members[name] = state
            for name, value in shares.items():
                if not only_new or name not in d.shares:
                    d.shares[name] = int(value)
            for name in forget:
                d.workers_done.pop(name, None)
            if started_at is not None:
                d.started_at = float(started_at)

        self._write(do)

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
        return self._read(lambda d: (dict(d.produced), dict(d.shares), dict(d.members)))

    def mark_worker_done(self, worker: str, produced: int) -> None:
        _stored(produced)
        epoch = self.identity.of(worker)

        def do(d: _RunData) -> None:
            _fence(d, worker, epoch)
            d.workers_done[worker] = int(produced)

        self._write(do)

    def workers_done(self) -> dict[str, int]:
        return self._read(lambda d: dict(d.workers_done))

    def forget_workers_done(self, workers: Iterable[str]) -> None:
        workers = list(workers)

        def do(d: _RunData) -> None:
            for worker in workers:
                d.workers_done.pop(worker, None)

        self._write(do)

    def mark_trainer_done(self, version: int) -> None:
        _stored(version)
        self._write(lambda d: setattr(d, "trainer_done", int(version)))

    def trainer_done(self) -> int | None:
        return self._read(lambda d: d.trainer_done)

    def write_status(self, name: str, fields: dict) -> None:
        values = _fields({k: "" if v is None else v for k, v in fields.items()})
        epoch = self.identity.of(name)

        def do(d: _RunData) -> None:
            _fence(d, name, epoch)
            d.status.setdefault(name, {}).update(values)

        if values:
            self._write(do)

    def status(self, name: str) -> dict[str, str]:
        return self._read(lambda d: dict(d.status.get(name, {})))

    def statuses(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        names = list(names)
        return self._read(lambda d: {n: dict(d.status.get(n, {})) for n in names})

    def forget_status_field(self, name: str, field: str) -> None:
        def do(d: _RunData) -> None:
            fields = d.status.get(name)
            if fields is not None:
                fields.pop(field, None)
                if not fields:
                    del d.status[name]

        self._write(do)

    def started_at(self) -> float | None:
        return self._read(lambda d: d.started_at)

    def set_started_at(self, when: float) -> None:
        _stored(when)
        self._write(lambda d: setattr(d, "started_at", float(when)))

    def produced(self) -> dict[str, int]:
        return self._read(lambda d: dict(d.produced))

    def dead_letters(self) -> dict[str, int]:
        return self._read(lambda d: dict(d.dead_counts))

    def _shards(self, d: _RunData) -> list:
        return [d if s == 0 else _ShardView(d, d.shards.setdefault(s, _ShardData())) for s in range(self.shards)]

    def unconsumed(self, ledger: dict[str, str] | None = None) -> int:
        def count(d: _RunData) -> int:
            total = 0
            for shard in self._shards(d):
                headers = (_header(fields) for fields in shard.stream.values())
                total += unseen_transitions(
                    ((h.worker_id, h.seq, h.count) for h in headers if h is not None),
                    shard.state if ledger is None else ledger,
                )
            return total

        return self._read(count)

    def ledger(self) -> dict[str, str]:
        if self.shards == 1:
            return self._read(lambda d: dict(d.state))
        return self._read(lambda d: merge_states(dict(shard.state) for shard in self._shards(d)))

    def has_data(self) -> bool:
        return self._read(lambda d: d.policy is not None or d.stream_exists)

    def clear(self) -> None:
        with self._server.cond:
            old = self._server.runs.pop(self._run, None)
            if old is not None and old.claims:
                self._server.data(self._run).claims = old.claims
            self._server.changed()

    def claim(self, name: str, holder: str, ttl_s: float) -> str | None:
        holder = _stored(holder)

        def do(d: _RunData) -> str | None:
            now = time.monotonic()
            current = d.claims.get(name)
            if current is not None and current[0] != holder and current[1] > now:
                return current[0]
            d.claims[name] = (holder, now + ttl_s)
            return None

        with self._server.cond:
            return do(self._server.data(self._run))

    def release(self, name: str, holder: str) -> None:
        def do(d: _RunData) -> None:
            if d.claims.get(name, ("",))[0] == holder:
                del d.claims[name]

        self._write(do)


class InProcessMemory:
    """A connection to the in-process server ``name``, bound to ``run`` with ``shards`` experience streams
    (``drl.memory.base.MemoryBackend``)."""

    def __init__(self, name: str, run: str, shards: int = 1):
        self.name = name
        self.run = run
        self.shards = max(1, shards)
        self.shard_map = ShardMap(self.shards)
        self._server = _server(name)
        self.identity = Identity()

    def take_identity(self, name: str) -> int:
        with self._server.cond:
            leases = self._server.data(self.run).leases
            leases[name] = max(leases.get(name, 0) + 1, int(time.time() * 1000))
            self.identity.name, self.identity.epoch = name, leases[name]
            return leases[name]

    def writer(self, worker: str, max_entries: int, max_bytes: int) -> InProcessWriter:
        return InProcessWriter(
            self._server, self.run, worker, max_entries, max_bytes, self.shard_map.of(worker), self.identity.of(worker)
        )

    def reader(self, name: str, on_reset: Callable[[], None] | None = None, shard: int = 0) -> InProcessReader:
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} of a run with {self.shards} shard(s)")
        taken = self.identity.epoch
        return InProcessReader(
            self._server, self.run, name, on_reset, shard, None if taken is None else (self.identity.name, taken)
        )

    def announcements(self) -> InProcessAnnouncements:
        return InProcessAnnouncements(self._server, self.run)

    def control(self) -> InProcessControl:
        return InProcessControl(self._server, self.run, self.shards, self.identity)

    def wipe(self) -> None:
        """This backend's server loses every run's data (see ``wipe``)."""
        wipe(self.name)

    def describe(self) -> str:
        return SCHEME + self.name

    def close(self) -> None:
        pass


register_scheme(SCHEME, lambda name, run, shards: open_inproc(name, run, shards=shards))
