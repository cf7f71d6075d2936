"""The memory backend's contract (``drl.memory.base``), held against both implementations: the Redis Streams one on a
real server (through ``drl.memory.open_memory``) and the in-process one (``tests/memory_inproc.py``), which the unit
tests of the service loops stand on. Every protocol method's behaviour is checked the same way on both, so a
service that passes its in-process tests does the same against Redis.

Each test gets ``mem``: ``mem.open()`` opens another backend on the same server and run, as another service would;
``mem.lose_data()`` makes the server lose everything, as a memory server restarted without persistence does.
"""

from __future__ import annotations

import ast
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from drl._proto import experience_pb2
from drl.memory.base import AppendReply, MemoryBackend, MemoryBackendError
from tests import memory_inproc as inproc

WAKE_S = 5.0
"""How long a blocked call may take to notice what should wake it (Redis writers re-check every 0.5 s at most)."""
QUIET_S = 0.3
"""How long a blocked call is watched to show that it stays blocked."""


@dataclass
class Memory:
    kind: str
    run: str
    open: Callable[[], MemoryBackend]
    lose_data: Callable[[], None]
    open_run: Callable[[str], MemoryBackend]
    open_sharded: Callable[[int], MemoryBackend]


def _memories(request, kind: str):
    run = f"contract-{uuid.uuid4().hex[:8]}"
    opened: list[MemoryBackend] = []

    def keep(backend: MemoryBackend) -> MemoryBackend:
        opened.append(backend)
        return backend

    if kind == "inproc":
        name = f"contract-{uuid.uuid4().hex[:8]}"
        yield Memory(
            "inproc",
            run,
            lambda: keep(inproc.open_inproc(name, run)),
            lambda: inproc.wipe(name),
            lambda other: keep(inproc.open_inproc(name, other)),
            lambda shards: keep(inproc.open_inproc(name, run, shards=shards)),
        )
        inproc.discard(name)
    else:
        import redis

        from drl.memory import open_memory

        server = request.getfixturevalue("redis_server")
        urls = [server.url]
        if kind == "redis-2-servers":
            urls.append(request.getfixturevalue("redis_server_b").url)
        clients = [redis.Redis.from_url(url) for url in urls]
        for client in clients:
            client.flushdb()

        def lose_data() -> None:
            """FLUSHDB, then a moment as long as the shortest restart: a stream made afresh within the same
            millisecond as its lost predecessor would give new entries the lost ones' ids (time-based), which no
            restarted server can do."""
            for client in clients:
                client.flushdb()
            time.sleep(0.002)

        yield Memory(
            kind,
            run,
            lambda: keep(open_memory(server.url, run)),
            lose_data,
            lambda other: keep(open_memory(server.url, other)),
            lambda shards: keep(open_memory(",".join(urls), run, shards=shards)),
        )
        for client in clients:
            client.flushdb()
            client.close()
    for backend in opened:
        backend.close()


@pytest.fixture(params=["inproc", "redis"])
def mem(request):
    yield from _memories(request, request.param)


@pytest.fixture(params=["inproc", "redis", "redis-2-servers"])
def sharded(request):
    """``mem`` for the shards' tests, and also with the shards spread over two servers (shard s on server s mod
    2, the run's control state on the first): ``open_sharded`` opens both, ``open`` the first alone."""
    yield from _memories(request, request.param)


def entry(worker: str, seq: int, count: int = 8, pad: int = 64, run: str = "r") -> tuple[bytes, bytes]:
    """An entry whose header decodes (``count`` transitions) and whose data is ``pad`` bytes; for seq <= 15 the size
    of an entry does not depend on its seq."""
    header = experience_pb2.BatchHeader(run=run, worker_id=worker, seq=seq, count=count, produced_total=seq * count)
    return header.SerializeToString(), bytes([seq % 256]) * pad


def size(h: bytes, d: bytes) -> int:
    return len(h) + len(d)


def send(writer, worker: str, seq: int, **kw) -> AppendReply:
    h, d = entry(worker, seq, **kw)
    return writer.send(seq, h, d, seq * kw.get("count", 8))


def header(fields: dict) -> experience_pb2.BatchHeader:
    parsed = experience_pb2.BatchHeader()
    parsed.ParseFromString(fields[b"h"])
    return parsed


def seqs(entries) -> list[tuple[str, int]]:
    return [(header(f).worker_id, header(f).seq) for _, f in entries]


def consume(reader, count: int = 100, state: dict | None = None, block_ms: int | None = None):
    """Reads up to ``count`` entries and commits them all (with ``state``); returns them."""
    got = reader.read(count, block_ms)
    reader.commit([(eid, size(f[b"h"], f[b"d"])) for eid, f in got], state or {})
    return got


class Background:
    """A call run on a thread, to show that it blocks and what wakes it."""

    def __init__(self, fn: Callable):
        self.result: list = []
        self.error: list = []
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.started = time.monotonic()
        self.thread.start()

    def _run(self, fn):
        try:
            self.result.append(fn())
        except BaseException as exc:  # surfaced by ``value``
            self.error.append(exc)

    def done(self, timeout: float = 0.0) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    @property
    def value(self):
        assert self.done(WAKE_S), "the call did not return"
        if self.error:
            raise self.error[0]
        return self.result[0]


# -- the experience stream: order, back-pressure, widening -------------------------------------------------------


def test_entries_are_read_in_append_order_with_their_bytes_untouched(mem):
    backend = mem.open()
    reader = backend.reader("trainer-0")
    writers = {w: mem.open().writer(w, max_entries=100, max_bytes=1 << 20) for w in ("rollout-0", "rollout-1")}
    order = [("rollout-0", 1), ("rollout-1", 1), ("rollout-0", 2), ("rollout-0", 3), ("rollout-1", 2)]
    for worker, seq in order:
        assert send(writers[worker], worker, seq).appended
    assert reader.backlog() == 5
    assert reader.backlog_bytes() == sum(size(*entry(w, s)) for w, s in order)
    got = reader.read(3, None) + reader.read(10, None)
    assert seqs(got) == order
    assert all((f[b"h"], f[b"d"]) == entry(*seqs([(e, f)])[0]) for e, f in got)
    assert len({e for e, _ in got}) == 5
    assert reader.read(10, None) == [], "an entry was delivered twice"
    assert reader.backlog() == 5, "reading alone removed entries: only a commit does"
    reader.commit([(eid, size(f[b"h"], f[b"d"])) for eid, f in got], {})
    assert reader.backlog() == 0 and reader.backlog_bytes() == 0


def test_a_full_backlog_holds_the_writer_back_until_a_commit_frees_room(mem):
    backend = mem.open()
    reader = backend.reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=2, max_bytes=1 << 20)
    assert send(writer, "rollout-0", 1).appended and send(writer, "rollout-0", 2).appended
    held = Background(lambda: send(writer, "rollout-0", 3))
    assert not held.done(QUIET_S), "an append past max_entries was admitted"
    assert reader.backlog() == 2
    got = consume(reader, count=1)
    assert seqs(got) == [("rollout-0", 1)]
    assert held.value.appended, "the commit that freed room did not let the held-back writer in"
    assert writer.waited_s >= QUIET_S * 0.8
    assert seqs(reader.read(10, None)) == [("rollout-0", 2), ("rollout-0", 3)], "an entry was dropped or reordered"


def test_the_byte_limit_admits_an_entry_into_an_empty_backlog_and_then_holds_back(mem):
    reader = mem.open().reader("trainer-0")
    one = size(*entry("rollout-0", 1))
    writer = mem.open().writer("rollout-0", max_entries=100, max_bytes=one // 2)
    assert send(writer, "rollout-0", 1).appended, "an entry larger than the byte limit was refused by an empty backlog"
    held = Background(lambda: send(writer, "rollout-0", 2))
    assert not held.done(QUIET_S), "an entry went past the byte limit into a backlog holding bytes"
    consume(reader)
    assert held.value.appended
    assert reader.backlog_bytes() == one


def test_the_byte_limit_counts_the_bytes_already_waiting(mem):
    reader = mem.open().reader("trainer-0")
    one = size(*entry("rollout-0", 1))
    writer = mem.open().writer("rollout-0", max_entries=100, max_bytes=2 * one)
    assert send(writer, "rollout-0", 1).appended and send(writer, "rollout-0", 2).appended, (
        "entries up to exactly max_bytes were refused"
    )
    held = Background(lambda: send(writer, "rollout-0", 3))
    assert not held.done(QUIET_S)
    consume(reader, count=1)
    assert held.value.appended


def test_widening_multiplies_both_limits_and_the_reply_says_by_how_much(mem):
    reader = mem.open().reader("trainer-0")
    one = size(*entry("rollout-0", 1))
    writer = mem.open().writer("rollout-0", max_entries=2, max_bytes=100 * one)
    assert [send(writer, "rollout-0", s).widening for s in (1, 2)] == [1, 1]
    held = Background(lambda: send(writer, "rollout-0", 3))
    assert not held.done(QUIET_S)
    reader.recovery.set_widening(3)
    reply = held.value
    assert reply.appended and reply.widening == 3, "widening did not raise the entry limit"
    assert all(send(writer, "rollout-0", s).appended for s in (4, 5, 6))
    assert reader.backlog() == 6
    held = Background(lambda: send(writer, "rollout-0", 7))
    assert not held.done(QUIET_S), "the widened entry limit (3 x 2) did not hold"
    reader.recovery.set_widening(1)
    consume(reader, count=4)
    assert not held.done(QUIET_S), "with the limits restored, 2 entries in the stream still leave no room"
    consume(reader, count=1)
    reply = held.value
    assert reply.appended and reply.widening == 1

    bytes_writer = mem.open().writer("rollout-1", max_entries=100, max_bytes=2 * one)
    consume(reader)
    reader.recovery.set_widening(2)
    assert all(send(bytes_writer, "rollout-1", s).appended for s in (1, 2, 3, 4))
    held = Background(lambda: send(bytes_writer, "rollout-1", 5))
    assert not held.done(QUIET_S), "the widened byte limit (2 x 2 entries) did not hold"
    reader.recovery.set_widening(1)
    consume(reader)
    assert held.value.appended


def test_a_held_back_writer_gives_up_only_when_the_run_stops(mem):
    mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=1, max_bytes=1 << 20)
    control = mem.open().control()
    assert send(writer, "rollout-0", 1).appended
    held = Background(lambda: send(writer, "rollout-0", 2))
    assert not held.done(QUIET_S)
    control.request_stop("orchestrator")
    reply = held.value
    assert not reply.appended and reply.stop
    reply = send(writer, "rollout-0", 3)
    assert not reply.appended and reply.stop, "a refused append waited although the run is stopping"


def test_an_admitted_append_still_reports_the_stop_flag(mem):
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    mem.open().control().request_stop("stopped")
    reply = send(writer, "rollout-0", 1)
    assert reply.appended and reply.stop


# -- the append's reply, retained entries, data loss ---------------------------------------------------------------


def test_the_reply_carries_version_stop_watermark_epoch_widening_and_share(mem):
    reader = mem.open().reader("trainer-0")
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    first = send(writer, "rollout-0", 1)
    assert (first.appended, first.policy_version, first.stop, first.watermark, first.widening, first.share) == (
        True,
        -1,
        False,
        0,
        1,
        None,
    )
    assert isinstance(first.epoch, bytes) and first.epoch
    mem.open().announcements().announce(4)
    control.register({"rollout-0": "active"}, {"rollout-0": 1200})
    reader.commit([], {"seq:rollout-0": "2,4,5", "seq:rollout-1": "9"})
    reader.recovery.set_widening(2)
    reply = send(writer, "rollout-0", 2)
    assert (reply.policy_version, reply.stop, reply.watermark, reply.widening, reply.share) == (4, False, 2, 2, 1200)
    assert reply.epoch == first.epoch, "the epoch changed without a data loss"


def test_produced_totals_only_rise(mem):
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    h, d = entry("rollout-0", 1)
    writer.send(1, h, d, 16)
    writer.send(2, *entry("rollout-0", 2), 8)
    assert control.produced() == {"rollout-0": 16}, "an append lowered the produced total"
    writer.send(3, *entry("rollout-0", 3), 24)
    assert control.produced() == {"rollout-0": 24}
    assert control.snapshot()[0] == {"rollout-0": 24}


def test_retained_entries_are_dropped_once_the_watermark_covers_them(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    assert writer.retained() == 3
    consume(reader, count=2, state={"seq:rollout-0": "2"})
    reply = send(writer, "rollout-0", 4)
    assert reply.watermark == 2
    assert writer.retained() == 2, "entries at or below the watermark were kept, or unconsumed ones dropped"


def test_after_a_data_loss_writers_resend_what_was_not_consumed_and_the_reader_resets(mem):
    resets: list[int] = []
    reader = mem.open().reader("trainer-0", on_reset=lambda: resets.append(1))
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    replies = [send(writer, "rollout-0", seq) for seq in (1, 2, 3, 4)]
    epoch = replies[-1].epoch
    before = consume(reader, count=3, state={"seq:rollout-0": "3"})
    assert seqs(before) == [("rollout-0", 1), ("rollout-0", 2), ("rollout-0", 3)]
    assert writer.retained() == 4, "the writer learned of consumption without an append"

    mem.lose_data()
    reply = send(writer, "rollout-0", 5)
    assert reply.appended and reply.epoch != epoch, "the epoch did not change after the server lost its data"
    assert reply.watermark == 0
    assert writer.resent == 4
    after = reader.read(100, None)
    assert reader.resets == 1 and resets == [1], "the reader did not notice the reset exactly once"
    assert sorted(seqs(after)) == [("rollout-0", s) for s in (1, 2, 3, 4, 5)]
    first_copies = {header(f).seq: (f[b"h"], f[b"d"]) for _, f in before}
    for _, fields in after:
        seq = header(fields).seq
        if seq in first_copies:
            assert (fields[b"h"], fields[b"d"]) == first_copies[seq], "a re-sent entry changed its bytes"
    duplicates = {seq for _, seq in seqs(after)} & set(first_copies)
    assert duplicates == {1, 2, 3}, "re-sent entries are not recognisable by (worker, seq)"
    assert reader.load_state() == {}
    send(writer, "rollout-0", 6)
    assert reader.resets == 1 and seqs(reader.read(10, None)) == [("rollout-0", 6)]


def test_after_a_data_loss_a_writer_reports_its_floor_the_highest_watermark_it_was_told(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    idle = mem.open().writer("rollout-1", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3, 4):
        send(writer, "rollout-0", seq)
    send(idle, "rollout-1", 1)
    consume(reader, count=3, state={"seq:rollout-0": "3"})
    send(writer, "rollout-0", 5)
    assert reader.recovery.floors() == {}, "a floor was reported without a data loss"
    mem.lose_data()
    send(writer, "rollout-0", 6)
    assert writer.resent == 2
    assert reader.recovery.floors() == {"rollout-0": (3, 3 * 8)}, (
        "the floor is the watermark seen, with its produced total"
    )
    assert idle.wait_consumed(1, timeout=0.3, should_stop=lambda: False) is False
    assert "rollout-1" not in reader.recovery.floors(), "a writer that was never told a watermark has no floor"


def test_a_writer_held_back_when_the_server_loses_its_data_gets_in_and_resends(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=2, max_bytes=1 << 20)
    epoch = send(writer, "rollout-0", 1).epoch
    send(writer, "rollout-0", 2)
    held = Background(lambda: send(writer, "rollout-0", 3))
    assert not held.done(QUIET_S)
    mem.lose_data()
    got = []
    deadline = time.monotonic() + WAKE_S
    while not held.done() and time.monotonic() < deadline:
        got += seqs(consume(reader, block_ms=100))
    reply = held.value
    assert reply.appended and reply.epoch != epoch
    assert writer.resent == 2, "the unconsumed entries were not re-sent (they wait for room like any other)"
    got += seqs(consume(reader))
    assert sorted(s for _, s in got) == [1, 2, 3] and reader.resets == 1


def test_a_commit_after_a_data_loss_finds_the_reset_and_the_whole_state_goes_back_first(mem):
    """A trainer that was between its read and its commit when the server lost its data: the commit finds the loss
    (one reset) and ``on_reset`` runs before the commit's own fields are stored, so that no writer ever reads a
    state holding only one commit's fields (a new process of another writer would find no position and number
    its entries from 1 again, every one dropped as a duplicate). Acknowledging the lost entries releases nothing
    of the new ones; the next read finds no further reset."""
    resets: list[int] = []
    reader = mem.open().reader("trainer-0", on_reset=lambda: resets.append(len(reader.load_state())))
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    send(writer, "rollout-0", 1)
    got = reader.read(10, None)
    mem.lose_data()
    send(writer, "rollout-0", 2)
    reader.commit([(eid, size(f[b"h"], f[b"d"])) for eid, f in got], {"consumed": 8, "seq:rollout-0": "1"})
    assert reader.resets == 1 and resets == [0], "the loss was not found before the commit stored its fields"
    assert reader.load_state() == {"consumed": "8", "seq:rollout-0": "1"}
    assert reader.backlog() == 2, "the new entry and the re-sent one"
    assert reader.backlog_bytes() == size(*entry("rollout-0", 1)) + size(*entry("rollout-0", 2)), (
        "acknowledging an entry the server lost released another's bytes"
    )
    assert sorted(seqs(reader.read(10, None))) == [("rollout-0", 1), ("rollout-0", 2)]
    assert reader.resets == 1 and resets == [0]


def test_a_settle_after_a_data_loss_finds_the_reset_first(mem):
    """Settling (watermarks moved past lost entries) on a server that lost its data would store a partial state
    too: it finds the loss first, as a commit does."""
    resets: list[int] = []
    reader = mem.open().reader("trainer-0", on_reset=lambda: resets.append(len(reader.load_state())))
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    send(writer, "rollout-0", 1)
    reader.read(10, None)
    mem.lose_data()
    reader.recovery.settle({"seq:rollout-0": "1"}, {"rollout-0": 8})
    assert reader.resets == 1 and resets == [0]
    assert reader.load_state() == {"seq:rollout-0": "1"}
    reader.recovery.settle({"seq:rollout-0": "2"}, {"rollout-0": 16})
    assert reader.resets == 1, "a settle on a server that kept its data counted a reset"


def test_the_reader_finds_the_reset_on_reclaim_too(mem):
    resets: list[int] = []
    reader = mem.open().reader("trainer-0", on_reset=lambda: resets.append(1))
    mem.lose_data()
    assert reader.reclaim(0) == []
    assert reader.resets == 1 and resets == [1]


def test_rewrite_puts_back_state_raises_produced_restores_widening_and_announces(mem):
    backend = mem.open()
    announcements = mem.open().announcements()
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    reader = backend.reader(
        "trainer-0",
        on_reset=lambda: reader.recovery.rewrite(
            {"consumed": 32, "seq:rollout-0": "2", "seq:rollout-1": "2"}, {"rollout-0": 16, "rollout-1": 16}, 4, 7
        ),
    )
    for seq in (1, 2):
        send(writer, "rollout-0", seq)
    mem.lose_data()
    for seq in (3, 4, 5):
        send(writer, "rollout-0", seq)
    assert control.produced() == {"rollout-0": 40}
    assert announcements.latest() == -1
    reader.read(100, None)
    assert reader.resets == 1
    assert control.produced() == {"rollout-0": 40, "rollout-1": 16}, "rewrite lowered a count or left one out"
    assert reader.load_state() == {"consumed": "32", "seq:rollout-0": "2", "seq:rollout-1": "2"}
    assert announcements.latest() == 7
    reply = send(writer, "rollout-0", 6)
    assert (reply.widening, reply.watermark, reply.policy_version) == (4, 2, 7)


def test_rewrite_without_a_version_announces_nothing(mem):
    reader = mem.open().reader("trainer-0")
    reader.recovery.rewrite({"consumed": 0}, {}, 1, -1)
    assert mem.open().announcements().latest() == -1
    assert reader.load_state() == {"consumed": "0"}


def test_wait_consumed_returns_once_the_watermark_reaches_the_last_seq(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    waiting = Background(lambda: writer.wait_consumed(3, timeout=30.0, should_stop=lambda: False))
    consume(reader, count=2, state={"seq:rollout-0": "2"})
    assert not waiting.done(QUIET_S), "returned before its last entry was consumed"
    consume(reader, state={"seq:rollout-0": "3"})
    assert waiting.value is True
    assert writer.retained() == 0

    started = time.monotonic()
    assert writer.wait_consumed(4, timeout=0.3, should_stop=lambda: False) is False
    assert 0.25 <= time.monotonic() - started < WAKE_S
    stop = threading.Event()
    waiting = Background(lambda: writer.wait_consumed(4, timeout=30.0, should_stop=stop.is_set))
    assert not waiting.done(QUIET_S)
    stop.set()
    assert waiting.value is False


def test_wait_consumed_resends_after_a_data_loss(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    consume(reader, count=1, state={"seq:rollout-0": "1"})
    mem.lose_data()
    assert writer.wait_consumed(3, timeout=0.3, should_stop=lambda: False) is False
    assert writer.resent == 3, "wait_consumed did not re-send what the lost server held"
    assert sorted(s for _, s in seqs(reader.read(100, None))) == [1, 2, 3]


def test_a_restarted_writer_continues_its_numbering(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    assert writer.position() == (0, 0)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    send(mem.open().writer("rollout-1", 10, 1 << 20), "rollout-1", 9)
    consume(reader, count=1, state={"seq:rollout-0": "1"})
    assert mem.open().writer("rollout-0", 10, 1 << 20).position() == (3, 24), "entries still in the stream count"
    consume(reader, state={"seq:rollout-0": "3,5,7"})
    assert mem.open().writer("rollout-0", 10, 1 << 20).position() == (7, 24), "the seqs seen above the mark count"
    assert mem.open().writer("rollout-2", 10, 1 << 20).position() == (0, 0)


# -- reading: blocking, pending entries first, reclaim -------------------------------------------------------------


def test_read_returns_at_once_or_waits_for_an_append_up_to_block_ms(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    started = time.monotonic()
    assert reader.read(10, None) == []
    assert reader.read(10, 200) == []
    assert 0.15 <= time.monotonic() - started < WAKE_S
    waiting = Background(lambda: reader.read(10, 20_000))
    assert not waiting.done(QUIET_S)
    send(writer, "rollout-0", 1)
    assert seqs(waiting.value) == [("rollout-0", 1)]
    assert time.monotonic() - waiting.started < WAKE_S + QUIET_S
    with pytest.raises(ValueError):
        reader.read(10, 0)


def test_a_restarted_reader_reads_its_own_unacknowledged_entries_first(mem):
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    first = mem.open().reader("trainer-0")
    got = first.read(2, None)
    assert seqs(got) == [("rollout-0", 1), ("rollout-0", 2)]
    send(writer, "rollout-0", 4)
    restarted = mem.open().reader("trainer-0")
    again = restarted.read(10, None)
    assert [e for e, _ in again] == [e for e, _ in got], "the restarted reader did not get its pending entries first"
    restarted.commit([(e, size(f[b"h"], f[b"d"])) for e, f in again], {"consumed": 16})
    assert seqs(restarted.read(10, None)) == [("rollout-0", 3), ("rollout-0", 4)]
    assert restarted.load_state() == {"consumed": "16"}


def test_reclaim_takes_entries_idle_at_another_reader(mem):
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3, 4):
        send(writer, "rollout-0", seq)
    dead = mem.open().reader("trainer-old")
    assert len(dead.read(3, None)) == 3
    alive = mem.open().reader("trainer-0")
    assert alive.reclaim(60_000) == [], "reclaimed entries that were not idle long enough"
    assert seqs(consume(alive)) == [("rollout-0", 4)], "entries pending at another reader were read as new"
    time.sleep(0.3)
    claimed = alive.reclaim(200)
    assert seqs(claimed) == [("rollout-0", 1), ("rollout-0", 2), ("rollout-0", 3)]
    assert alive.reclaim(200) == [], "entries just claimed were idle again at once"
    assert seqs(mem.open().reader("trainer-0").read(10, None)) == seqs(claimed), (
        "reclaimed entries did not become the claiming reader's own pending ones"
    )
    assert mem.open().reader("trainer-old").read(10, None) == [], "the dead reader kept entries it lost"


def test_reclaim_takes_at_most_count_entries_oldest_first(mem):
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3, 4, 5):
        send(writer, "rollout-0", seq)
    mem.open().reader("trainer-old").read(5, None)
    time.sleep(0.05)
    alive = mem.open().reader("trainer-0")
    first = alive.reclaim(10, count=2)
    assert 2 <= len(first) <= 3 and seqs(first)[:2] == [("rollout-0", 1), ("rollout-0", 2)]
    rest = alive.reclaim(10_000)
    assert rest == [], "entries just claimed were idle again at once"


# -- commit: acknowledgements, bytes, state, dead letters ----------------------------------------------------------


def test_commit_acknowledges_deletes_releases_bytes_and_stores_state_in_one_step(mem):
    reader = mem.open().reader("trainer-0")
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    got = reader.read(10, None)
    sizes = [size(f[b"h"], f[b"d"]) for _, f in got]
    (good_id, good), (bad_id, bad), (third_id, _) = got
    reader.commit(
        [(good_id, sizes[0]), (bad_id, sizes[1])],
        {"consumed": 8, "seq:rollout-0": "1,2"},
        dead=[(bad_id, bad, "foreign_run", "run 'x' is not this run")],
    )
    assert reader.backlog() == 1 and reader.backlog_bytes() == sizes[2]
    assert control.dead_letters() == {"foreign_run": 1}
    assert reader.load_state() == {"consumed": "8", "seq:rollout-0": "1,2"}
    assert control.unconsumed() == 8

    reader.commit([(good_id, sizes[0])], {"consumed": 9})
    assert reader.backlog_bytes() == sizes[2], "acknowledging a deleted entry again released its bytes twice"
    assert reader.load_state() == {"consumed": "9", "seq:rollout-0": "1,2"}, "state fields are merged, not replaced"

    reader.commit(
        [],
        {},
        dead=[(b"0-1", {b"x": b"1"}, "bad_entry", "no header"), (b"0-2", {b"h": b"\xff"}, "bad_entry", "undecodable")],
    )
    assert control.dead_letters() == {"foreign_run": 1, "bad_entry": 2}
    assert reader.backlog() == 1
    reader.commit([(third_id, sizes[2])], {})
    assert reader.backlog() == 0 and reader.backlog_bytes() == 0 and control.unconsumed() == 0
    assert mem.open().reader("trainer-0").read(10, None) == [], "a committed entry was delivered again"


def test_the_ledger_is_the_committed_state_and_unconsumed_leaves_out_what_it_took(mem):
    """A summary's counters come from what the reader committed (``RunControl.ledger``), and entries it already
    took, sent again after a data loss, are not counted as still owed."""
    reader = mem.open().reader("trainer-0")
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    assert control.ledger() == {}
    for seq in (1, 2, 3, 4):
        send(writer, "rollout-0", seq)
    got = reader.read(10, None)
    reader.commit([(eid, size(f[b"h"], f[b"d"])) for eid, f in got[:1]], {"consumed": 8, "seq:rollout-0": "1,3"})
    assert control.ledger() == reader.load_state() == {"consumed": "8", "seq:rollout-0": "1,3"}
    assert control.unconsumed() == 16, "seq 3 is taken (above the watermark) and seqs 2 and 4 are owed"
    other = mem.open().writer("rollout-1", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 1):
        h, d = entry("rollout-1", seq, count=5)
        other.send(seq, h, d, 5)
    assert reader.backlog() == 5
    assert control.unconsumed() == 21, "two copies of one entry were counted twice"


# -- shards: several experience streams of one run --------------------------------------------------------------


def test_each_shard_is_a_stream_of_its_own_and_the_ledger_adds_them_up(sharded):
    """Worker i appends to shard i mod S; a shard's reader sees only its workers' entries, commits only its own
    state, and is held back by nothing of another shard; the run's ledger and unconsumed count add up every
    shard."""
    backend = sharded.open_sharded(2)
    assert backend.shards == 2
    readers = [backend.reader("trainer-0", shard=s) for s in (0, 1)]
    control = sharded.open_sharded(2).control()
    writers = {
        w: sharded.open_sharded(2).writer(w, max_entries=2, max_bytes=1 << 20)
        for w in ("rollout-0", "rollout-1", "rollout-2")
    }
    for worker, seq in (("rollout-0", 1), ("rollout-1", 1), ("rollout-2", 1), ("rollout-1", 2)):
        assert send(writers[worker], worker, seq).appended
    assert [r.backlog() for r in readers] == [2, 2]
    got = readers[0].read(10, None)
    assert seqs(got) == [("rollout-0", 1), ("rollout-2", 1)]
    readers[0].commit(
        [(eid, size(f[b"h"], f[b"d"])) for eid, f in got],
        {"consumed": 16, "updates": 3, "seq:rollout-0": "1", "seq:rollout-2": "1"},
    )
    assert sharded.open_sharded(2).reader("trainer-0", shard=1).backlog() == 2
    held = Background(lambda: send(writers["rollout-1"], "rollout-1", 3))
    assert not held.done(QUIET_S), "shard 1 holds two entries, its limit: the third must wait"
    assert send(writers["rollout-0"], "rollout-0", 2).appended, "shard 1's full backlog held back shard 0"
    got = readers[1].read(10, None)
    assert seqs(got) == [("rollout-1", 1), ("rollout-1", 2)]
    readers[1].commit(
        [(eid, size(f[b"h"], f[b"d"])) for eid, f in got], {"consumed": 16, "updates": 3, "seq:rollout-1": "2"}
    )
    assert held.value.appended
    assert readers[0].load_state() == {"consumed": "16", "updates": "3", "seq:rollout-0": "1", "seq:rollout-2": "1"}
    assert readers[1].load_state() == {"consumed": "16", "updates": "3", "seq:rollout-1": "2"}
    assert control.ledger() == {
        "consumed": "32",
        "updates": "3",
        "seq:rollout-0": "1",
        "seq:rollout-2": "1",
        "seq:rollout-1": "2",
    }
    assert control.unconsumed() == 16, "rollout-0's seq 2 on shard 0 and rollout-1's seq 3 on shard 1"
    assert sharded.open().control().unconsumed() == 8, "a one-shard view sees shard 0 alone"
    with pytest.raises(ValueError, match="shard 2 of a run with 2"):
        backend.reader("trainer-0", shard=2)


def test_shards_share_the_runs_control_state(sharded):
    """Every shard's append reply carries the run's announced version, stop flag and the worker's share."""
    backend = sharded.open_sharded(3)
    control = backend.control()
    control.register({"rollout-4": "active"}, {"rollout-4": 120})
    backend.announcements().announce(7)
    writer = backend.writer("rollout-4", max_entries=10, max_bytes=1 << 20)
    reply = send(writer, "rollout-4", 1)
    assert (reply.policy_version, reply.stop, reply.share) == (7, False, 120)
    control.request_stop("stopped")
    assert send(writer, "rollout-4", 2).stop
    assert backend.reader("trainer-0", shard=1).backlog() == 2, "rollout-4 is shard 4 mod 3 = 1's"
    assert backend.reader("trainer-0", shard=0).backlog() == 0


def test_every_shard_resets_after_a_data_loss(sharded):
    backend = sharded.open_sharded(2)
    reader = backend.reader("trainer-0", shard=1)
    writer = sharded.open_sharded(2).writer("rollout-1", max_entries=10, max_bytes=1 << 20)
    send(writer, "rollout-1", 1)
    consume(reader, state={"consumed": 8, "seq:rollout-1": "1"})
    sharded.lose_data()
    assert reader.read(10, None) == [] and reader.resets == 1
    assert send(writer, "rollout-1", 2).appended
    assert sorted(seqs(reader.read(10, None))) == [("rollout-1", 1), ("rollout-1", 2)], (
        "the writer re-sends what it kept (seq 1: its reply never carried the watermark; the trainer drops the copy)"
    )
    assert sharded.open_sharded(2).reader("trainer-0", shard=0).backlog() == 0


def test_an_empty_commit_changes_nothing(mem):
    reader = mem.open().reader("trainer-0")
    reader.commit([], {})
    assert reader.load_state() == {} and reader.backlog() == 0


def test_values_the_server_cannot_store_are_refused_as_a_memory_backend_error(mem):
    """A bool (or None, or a numpy integer) cannot be stored as the Redis implementation stores values; callers see
    only the protocol's errors, so the refusal must be ``MemoryBackendError``, and nothing is written."""
    control, reader = mem.open().control(), mem.open().reader("trainer-0")
    with pytest.raises(MemoryBackendError):
        control.write_status("trainer", {"updates": 3, "finished": True})
    assert control.status("trainer") == {}
    with pytest.raises(MemoryBackendError):
        reader.commit([], {"consumed": 8, "done": None})
    assert reader.load_state() == {}


def test_values_are_returned_as_the_server_stores_them(mem):
    control, reader = mem.open().control(), mem.open().reader("trainer-0")
    control.write_status(
        "trainer",
        {"s": "é", "b": b"raw", "i": 10**20, "f": 0.1 + 0.2, "big": 1e20, "none": None, "np": np.float64(2.5)},
    )
    assert control.status("trainer") == {
        "s": "é",
        "b": "raw",
        "i": "100000000000000000000",
        "f": "0.30000000000000004",
        "big": "1e+20",
        "none": "",
        "np": "2.5",
    }
    reader.commit([], {"consumed": 8, "rate": 2.5, "seq:rollout-0": b"3,5"})
    assert reader.load_state() == {"consumed": "8", "rate": "2.5", "seq:rollout-0": "3,5"}


# -- announcements -------------------------------------------------------------------------------------------------


def test_announcements_are_seen_by_every_service_and_wake_waiters(mem):
    trainer, worker = mem.open().announcements(), mem.open().announcements()
    assert worker.latest() == -1
    trainer.announce(0)
    assert worker.latest() == 0
    assert worker.wait_for(0, timeout=5.0, should_stop=lambda: False) == 0

    started = time.monotonic()
    assert worker.wait_for(1, timeout=0.3, should_stop=lambda: False) == -1
    assert 0.25 <= time.monotonic() - started < WAKE_S

    stop = threading.Event()
    waiting = Background(lambda: worker.wait_for(1, timeout=30.0, should_stop=stop.is_set))
    assert not waiting.done(QUIET_S)
    stop.set()
    assert waiting.value == -1

    waiting = Background(lambda: worker.wait_for(2, timeout=30.0, should_stop=lambda: False))
    trainer.announce(1)
    assert not waiting.done(QUIET_S), "a version below min_version ended the wait"
    trainer.announce(3)
    assert waiting.value == 3
    assert time.monotonic() - waiting.started < WAKE_S + QUIET_S
    trainer.close()
    worker.close()


# -- run control ---------------------------------------------------------------------------------------------------


def test_the_stop_flag(mem):
    control, other = mem.open().control(), mem.open().control()
    assert control.stop_reason() is None
    other.request_stop("target_reached:12")
    assert control.stop_reason() == "target_reached:12"
    other.request_stop("orchestrator")
    assert control.stop_reason() == "orchestrator"


def test_members_and_shares_register_together_and_only_new_keeps_registered_workers(mem):
    control = mem.open().control()
    assert (control.members(), control.shares(), control.share("rollout-0")) == ({}, {}, None)
    control.register({"rollout-0": "active", "rollout-1": "active"}, {"rollout-0": 500, "rollout-1": 500})
    assert control.members() == {"rollout-0": "active", "rollout-1": "active"}
    assert control.shares() == {"rollout-0": 500, "rollout-1": 500}
    assert control.share("rollout-1") == 500 and control.share("rollout-7") is None

    control.register({"rollout-1": "retired", "rollout-2": "active"}, {"rollout-1": 1, "rollout-2": 300}, only_new=True)
    assert control.members() == {"rollout-0": "active", "rollout-1": "active", "rollout-2": "active"}
    assert control.shares() == {"rollout-0": 500, "rollout-1": 500, "rollout-2": 300}

    control.register({"rollout-1": "retired"}, {"rollout-0": 600, "rollout-1": 120})
    assert control.members() == {"rollout-0": "active", "rollout-1": "retired", "rollout-2": "active"}
    assert control.shares() == {"rollout-0": 600, "rollout-1": 120, "rollout-2": 300}
    assert mem.open().control().share("rollout-0") == 600


def test_register_forgets_done_markers_and_sets_the_start_in_the_same_step(mem):
    """A worker that returns (live scaling) is active again and no longer done in one step; a restored server gets
    its members and its start time in one step: nobody reads one half without the other."""
    control = mem.open().control()
    control.mark_worker_done("rollout-1", 300)
    control.mark_worker_done("rollout-2", 200)
    control.register({"rollout-1": "active"}, {"rollout-1": 600}, forget_done=["rollout-1"], started_at=1234.5)
    assert control.members() == {"rollout-1": "active"} and control.shares() == {"rollout-1": 600}
    assert control.workers_done() == {"rollout-2": 200}
    assert control.started_at() == 1234.5
    control.register({}, {}, started_at=99.0)
    assert control.started_at() == 99.0 and control.members() == {"rollout-1": "active"}


def test_snapshot_reads_produced_shares_and_members_together(mem):
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    control.register({"rollout-0": "active", "rollout-1": "retired"}, {"rollout-0": 64, "rollout-1": 8})
    send(writer, "rollout-0", 1)
    send(writer, "rollout-0", 2)
    assert control.snapshot() == (
        {"rollout-0": 16},
        {"rollout-0": 64, "rollout-1": 8},
        {"rollout-0": "active", "rollout-1": "retired"},
    )


def test_done_markers(mem):
    control, other = mem.open().control(), mem.open().control()
    assert control.workers_done() == {} and control.trainer_done() is None
    other.mark_worker_done("rollout-0", 400)
    other.mark_worker_done("rollout-1", 380)
    assert control.workers_done() == {"rollout-0": 400, "rollout-1": 380}
    control.forget_workers_done(["rollout-0", "rollout-5"])
    assert control.workers_done() == {"rollout-1": 380}
    control.forget_workers_done([])
    assert control.workers_done() == {"rollout-1": 380}
    other.mark_trainer_done(0)
    assert control.trainer_done() == 0
    other.mark_trainer_done(12)
    assert control.trainer_done() == 12


def test_status_fields(mem):
    control, other = mem.open().control(), mem.open().control()
    assert control.status("trainer") == {}
    other.write_status("trainer", {"role": "trainer", "updates": 10, "transitions_per_s": 2.5})
    other.write_status("trainer", {"updates": 12, "control_port": 5055})
    other.write_status("rollout-0", {"role": "rollout", "produced": 64})
    assert control.status("trainer") == {
        "role": "trainer",
        "updates": "12",
        "transitions_per_s": "2.5",
        "control_port": "5055",
    }
    both = control.statuses(["trainer", "rollout-0", "evaluator"])
    assert both["trainer"] == control.status("trainer")
    assert both["rollout-0"] == {"role": "rollout", "produced": "64"}
    assert both.get("evaluator", {}) == {}
    control.forget_status_field("trainer", "control_port")
    control.forget_status_field("trainer", "never_written")
    assert control.status("trainer") == {"role": "trainer", "updates": "12", "transitions_per_s": "2.5"}


def test_started_at(mem):
    control = mem.open().control()
    assert control.started_at() is None
    when = time.time()
    mem.open().control().set_started_at(when)
    assert control.started_at() == pytest.approx(when, abs=1e-3)


def test_unconsumed_counts_the_transitions_in_entries_still_in_the_stream(mem):
    reader = mem.open().reader("trainer-0")
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    assert control.unconsumed() == 0
    send(writer, "rollout-0", 1, count=8)
    send(writer, "rollout-0", 2, count=5)
    writer.send(3, b"\xff\xff\xff\xff", b"junk", 13)
    send(writer, "rollout-0", 4, count=3)
    assert control.unconsumed() == 16, "an undecodable entry must count nothing, the others their header's count"
    reader.read(2, None)
    assert control.unconsumed() == 16, "read but unacknowledged entries are still unconsumed"
    consume(mem.open().reader("trainer-0"), count=1)
    assert control.unconsumed() == 8


def test_unconsumed_judged_against_a_ledger_kept_elsewhere(mem):
    """After the server lost the reader's state, the summary judges the stream against the trainer's own record."""
    control = mem.open().control()
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq, count in ((1, 8), (2, 5), (3, 3)):
        send(writer, "rollout-0", seq, count=count)
    assert control.unconsumed() == 16
    assert control.unconsumed({"seq:rollout-0": "1,3"}) == 5, "seqs 1 and 3 are taken by that ledger, 2 is owed"
    assert control.unconsumed({}) == 16


def test_has_data_and_clear(mem):
    control = mem.open().control()
    assert control.has_data() is False
    mem.open().announcements().announce(0)
    assert control.has_data() is True
    control.clear()
    assert control.has_data() is False
    send(mem.open().writer("rollout-0", 10, 1 << 20), "rollout-0", 1)
    assert control.has_data() is True

    reader = mem.open().reader("trainer-0")
    reader.commit([], {"consumed": 3})
    reader.recovery.set_widening(4)
    control.request_stop("stopped")
    control.register({"rollout-0": "active"}, {"rollout-0": 10})
    control.mark_worker_done("rollout-0", 8)
    control.mark_trainer_done(2)
    control.write_status("trainer", {"updates": 1})
    control.set_started_at(1.0)
    reader.commit([], {}, dead=[(b"0-1", {b"x": b"1"}, "bad_entry", "no header")])
    control.clear()
    assert control.has_data() is False
    assert (control.stop_reason(), control.members(), control.shares(), control.produced()) == (None, {}, {}, {})
    assert (control.workers_done(), control.trainer_done(), control.status("trainer")) == ({}, None, {})
    assert (control.started_at(), control.dead_letters(), control.unconsumed()) == (None, {}, 0)
    assert reader.load_state() == {} and reader.backlog() == 0 and reader.backlog_bytes() == 0
    assert mem.open().announcements().latest() == -1
    assert send(mem.open().writer("rollout-0", 10, 1 << 20), "rollout-0", 1).widening == 1


def test_a_claim_has_one_holder_until_it_is_released(mem):
    control, other = mem.open().control(), mem.open().control()
    assert control.claim("orchestrator", "host:1:/runs/a", 30) is None
    assert other.claim("orchestrator", "host:2:/other/a", 30) == "host:1:/runs/a"
    assert control.claim("orchestrator", "host:1:/runs/a", 30) is None, "the holder renews its claim"
    assert other.claim("trainer", "host:2:/other/a", 30) is None, "claims of other names are apart"
    other.release("orchestrator", "host:2:/other/a")
    assert other.claim("orchestrator", "host:2:/other/a", 30) == "host:1:/runs/a", "only the holder releases"
    control.release("orchestrator", "host:1:/runs/a")
    assert other.claim("orchestrator", "host:2:/other/a", 30) is None
    assert mem.open_run(mem.run + "-other").control().claim("orchestrator", "x", 30) is None, "runs are apart"


def test_a_claim_that_is_not_renewed_expires(mem):
    control, other = mem.open().control(), mem.open().control()
    assert control.claim("trainer", "old", 0.3) is None
    assert other.claim("trainer", "new", 30) == "old"
    time.sleep(0.5)
    assert other.claim("trainer", "new", 30) is None
    assert control.claim("trainer", "old", 0.3) == "new", "a holder whose claim expired does not get it back"


def test_concurrent_claimants_have_one_winner(mem):
    backends = [mem.open().control() for _ in range(8)]
    results: dict[int, str | None] = {}
    start = threading.Barrier(len(backends))

    def claim(i: int) -> None:
        start.wait()
        results[i] = backends[i].claim("orchestrator", f"holder-{i}", 30)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(backends))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, other in results.items() if other is None]
    assert len(winners) == 1, results
    assert all(other == f"holder-{winners[0]}" for i, other in results.items() if i != winners[0])


def test_clear_keeps_the_claims(mem):
    control = mem.open().control()
    control.claim("orchestrator", "me", 30)
    mem.open().announcements().announce(3)
    control.clear()
    assert control.has_data() is False
    assert mem.open().control().claim("orchestrator", "another", 30) == "me"


def test_runs_on_one_server_are_apart(mem):
    mine, theirs = mem.open(), mem.open_run(mem.run + "-other")
    mine.announcements().announce(5)
    mine.control().request_stop("stopped")
    send(mine.writer("rollout-0", 10, 1 << 20), "rollout-0", 1)
    assert theirs.announcements().latest() == -1
    assert theirs.control().stop_reason() is None and theirs.control().has_data() is False
    assert theirs.reader("trainer-0").read(10, None) == []
    theirs.control().clear()
    assert mine.control().has_data() is True and mine.run == mem.run


def test_describe_names_the_server(mem):
    text = mem.open().describe()
    assert isinstance(text, str) and text


# -- many threads at once ------------------------------------------------------------------------------------------


def test_concurrent_writers_and_a_reader_count_every_entry_once_in_order(mem):
    workers, entries = 3, 30
    reader = mem.open().reader("trainer-0")
    seen: dict[str, list[int]] = {}

    def produce(worker: str) -> None:
        writer = mem.open().writer(worker, max_entries=4, max_bytes=1 << 20)
        for seq in range(1, entries + 1):
            assert send(writer, worker, seq).appended

    threads = [threading.Thread(target=produce, args=(f"rollout-{i}",), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(map(len, seen.values())) < workers * entries and time.monotonic() < deadline:
        for worker, seq in seqs(consume(reader, count=3, block_ms=200)):
            seen.setdefault(worker, []).append(seq)
    for t in threads:
        t.join(WAKE_S)
    assert seen == {f"rollout-{i}": list(range(1, entries + 1)) for i in range(workers)}
    assert reader.backlog() == 0 and reader.backlog_bytes() == 0


# -- Redis only: a refusal by the server --------------------------------------------------------------------------


@pytest.mark.parametrize("use", ["writer", "reader", "announcements"])
def test_a_key_of_the_wrong_type_is_repaired_or_ignored_on_redis(use, redis_server, redis_client, caplog):
    """The in-process server holds no keys of the wrong type; on Redis a key of a run that another program wrote
    with another type is reported in one line naming it, and repaired (a stream of the wrong type is a data loss:
    deleted, its writers re-send) or read as absent (``docs/internals.md``, "Shared state on the memory
    server"), never raised to the caller."""

    from drl.memory import open_memory
    from drl.memory.redis import Keys

    run = f"contract-{uuid.uuid4().hex[:8]}"
    keys = Keys(run)
    backend = open_memory(redis_server.url, run)
    try:
        if use == "writer":
            redis_client.set(keys.stream, "not a stream")
            assert send(backend.writer("rollout-0", 10, 1 << 20), "rollout-0", 1).appended
            assert redis_client.type(keys.stream) == b"stream" and redis_client.xlen(keys.stream) == 1
        elif use == "reader":
            redis_client.set(keys.stream, "not a stream")
            assert backend.reader("trainer-0").read(10, None) == []
            assert redis_client.type(keys.stream) == b"stream"
        else:
            redis_client.hset(keys.policy, "not", "a version")
            assert backend.announcements().latest() == -1
        assert any(keys.stream in r.message or keys.policy in r.message for r in caplog.records)
    finally:
        backend.close()


# -- the in-process implementation itself --------------------------------------------------------------------------


def test_in_process_backends_share_a_server_by_name_only():
    run = "shared"
    a, b = inproc.open_inproc("memory://contract-a", run), inproc.open_inproc("contract-a", run)
    other = inproc.open_inproc("memory://contract-b", run)
    try:
        a.announcements().announce(3)
        assert b.announcements().latest() == 3 and other.announcements().latest() == -1
        assert a.describe() == "memory://contract-a"
        a.wipe()
        assert b.announcements().latest() == -1
    finally:
        inproc.discard("contract-a")
        inproc.discard("contract-b")


def test_open_memory_dispatches_memory_urls_to_the_in_process_backend():
    from drl.memory import open_memory

    backend = open_memory("memory://contract-dispatch", "r")
    try:
        assert isinstance(backend, inproc.InProcessMemory) and backend.run == "r"
    finally:
        inproc.discard("contract-dispatch")


def test_the_in_process_backend_imports_no_redis():
    tree = ast.parse(Path(inproc.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {n for n in names if n == "redis" or n.startswith(("redis.", "drl.memory.redis"))}


def test_a_new_writer_process_continues_past_its_floor_and_reports_it(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        send(writer, "rollout-0", seq)
    consume(reader, count=1, state={"seq:rollout-0": "1"})
    assert reader.recovery.in_stream(["rollout-0", "rollout-1"]) == {"rollout-0": [(2, 8, 16), (3, 8, 24)]}
    assert reader.recovery.in_stream([]) == {}
    successor = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    assert successor.position() == (3, 24)
    successor.continue_from(3, 24)
    assert reader.recovery.floors() == {"rollout-0": (3, 24)}
    mem.lose_data()
    reader.read(1, None)
    reader.recovery.settle({"seq:rollout-0": "1"}, {"rollout-0": 16})
    later = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    assert later.position() == (1, 16), "the reader's watermark and the produced count it raised"
    later.continue_from(1, 16)
    assert reader.recovery.floors() == {"rollout-0": (1, 16)}
    reader.recovery.settle({}, {"rollout-0": 8})
    assert mem.open().control().produced() == {"rollout-0": 16}, "settle lowered a produced count"


def test_a_writers_position_counts_its_floor(mem):
    reader = mem.open().reader("trainer-0")
    writer = mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20)
    writer.continue_from(5, 40)
    assert reader.recovery.floors() == {"rollout-0": (5, 40)}
    assert mem.open().writer("rollout-0", max_entries=10, max_bytes=1 << 20).position() == (5, 40)


def test_a_newer_process_with_the_same_identity_fences_every_write_of_the_older_one(sharded):
    """One identity, one writer (docs/reliability.md): once a second backend takes an identity, every write of
    the first as that identity (its appends, a reader's commit and settle, its done marker and status) is
    refused whole with ``Superseded``, on every shard and server; the newer process's writes go through, and the
    older one's entries already in the stream still count."""
    from drl.errors import Superseded

    old, new = sharded.open_sharded(2), sharded.open_sharded(2)
    first = old.take_identity("rollout-1")
    writer = old.writer("rollout-1", max_entries=100, max_bytes=1 << 20)
    assert writer.send(1, *entry("rollout-1", 1), 8).appended
    control = old.control()
    control.write_status("rollout-1", {"produced": 8})
    assert new.take_identity("rollout-1") > first
    twin = new.writer("rollout-1", max_entries=100, max_bytes=1 << 20)
    assert twin.position() == (1, 8)
    with pytest.raises(Superseded):
        writer.send(2, *entry("rollout-1", 2), 16)
    with pytest.raises(Superseded):
        control.write_status("rollout-1", {"produced": 16})
    with pytest.raises(Superseded):
        control.mark_worker_done("rollout-1", 16)
    assert twin.send(2, *entry("rollout-1", 2, pad=32), 16).appended
    new.control().mark_worker_done("rollout-1", 16)
    assert new.control().workers_done() == {"rollout-1": 16}
    assert new.control().status("rollout-1") == {"produced": "8"}

    trainer_old, trainer_new = sharded.open_sharded(2), sharded.open_sharded(2)
    trainer_old.take_identity("trainer")
    reader = trainer_old.reader("trainer-0", shard=1)
    got = reader.read(10, None)
    assert [entry_fields[b"d"][:1] for _, entry_fields in got] == [b"\x01", b"\x02"]
    trainer_new.take_identity("trainer")
    reader_new = trainer_new.reader("trainer-0", shard=1)
    with pytest.raises(Superseded):
        reader.commit([(got[0][0], 1)], {"consumed": 8})
    with pytest.raises(Superseded):
        reader.recovery.settle({"consumed": 8}, {})
    assert reader_new.load_state() == {}
    reader_new.commit([(got[0][0], 1)], {"consumed": 8})
    assert reader_new.load_state() == {"consumed": "8"}


def test_an_identity_taken_again_after_the_server_lost_its_data_still_fences_the_older_process(mem):
    """The server loses every epoch with its data; a process taking the identity afterwards gets one above the
    server's clock in milliseconds, so the older process's next write, which would take the empty lease with its
    own epoch, is refused once the newer one wrote, and the newer one's is never refused by the older one's. (A
    server restarts in far more than the clock's millisecond.)"""
    from drl.errors import Superseded

    old, new = mem.open(), mem.open()
    old.take_identity("rollout-0")
    writer = old.writer("rollout-0", max_entries=100, max_bytes=1 << 20)
    assert writer.send(1, *entry("rollout-0", 1), 8).appended
    mem.lose_data()
    time.sleep(0.002)
    new.take_identity("rollout-0")
    twin = new.writer("rollout-0", max_entries=100, max_bytes=1 << 20)
    with pytest.raises(Superseded):
        writer.send(2, *entry("rollout-0", 2), 16)
    assert twin.send(1, *entry("rollout-0", 1), 8).appended
