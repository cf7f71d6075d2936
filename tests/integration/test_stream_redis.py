"""The Python side of the append and commit scripts (``drl/memory/redis/stream.py``) against a real server: what the
writer makes of the append script's reply, what the reader hands the commit script and reads back, and how both
treat keys that something other than drl wrote (docs/internals.md, "Shared state on the memory server": an
unsound value is reported in one line naming its key and read as absent, a key of the wrong type is repaired).
The behaviour both backends share is held by test_memory_contract.py; these are the Redis side's own rules.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from drl._proto import experience_pb2
from drl.memory.base import MemoryBackendError, MemoryUnavailable
from drl.memory.redis import Consumer, Keys, Producer, connection
from drl.memory.redis.repair import ATTEMPTS
from drl.memory.redis.stream import backlog_transitions, committed_state, producer_position


@pytest.fixture
def keys(redis_client) -> Keys:
    return Keys(f"stream-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def reports(caplog):
    """The memory server's report lines (``repair.Guard.report``): ``reports()`` lists them."""
    caplog.set_level(logging.WARNING, logger="drl.memory")
    return lambda: [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory server: key ")]


def line(key: str, why: str, action: str) -> str:
    return f"memory server: key {key} {why} (written by something other than drl?); {action}"


def reported(lines: list[str], key: str, why: str, action: str) -> bool:
    return line(key, why, action) in lines


class Background:
    """A call run on a thread; ``value`` waits for its result."""

    def __init__(self, fn):
        self.result: list = []
        self.thread = threading.Thread(target=lambda: self.result.append(self._catch(fn)), daemon=True)
        self.thread.start()

    @staticmethod
    def _catch(fn):
        try:
            return fn(), None
        except BaseException as exc:  # raised again by ``value``
            return None, exc

    def done(self, timeout: float = 0.0) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    @property
    def value(self):
        assert self.done(30.0), "the call did not return"
        value, error = self.result[0]
        if error is not None:
            raise error
        return value


def entry(worker: str, seq: int, count: int = 8) -> tuple[bytes, bytes]:
    header = experience_pb2.BatchHeader(run="r", worker_id=worker, seq=seq, count=count, produced_total=seq * count)
    return header.SerializeToString(), bytes([seq]) * 64


def writer(client, keys: Keys, worker: str = "rollout-0") -> Producer:
    return Producer(client, keys, worker, max_entries=100, max_bytes=1 << 20)


def send(producer: Producer, seq: int, count: int = 8):
    h, d = entry(producer.worker_id, seq, count)
    return producer.send(seq, h, d, seq * count)


def seqs(entries) -> list[int]:
    out = []
    for _, fields in entries:
        header = experience_pb2.BatchHeader()
        header.ParseFromString(fields[b"h"])
        out.append(header.seq)
    return out


def consume(reader: Consumer, state: dict, count: int = 100) -> list:
    got = reader.read(count, None)
    reader.commit([(eid, len(f[b"h"]) + len(f[b"d"])) for eid, f in got], state)
    return got


# -- the append's reply -----------------------------------------------------------------------------------------


def test_the_reply_reads_what_it_passes_on_as_written_and_reports_nothing(redis_client, keys, reports):
    producer = writer(redis_client, keys)
    first = send(producer, 1)
    assert (first.appended, first.policy_version, first.stop, first.watermark, first.widening, first.share) == (
        True,
        -1,
        False,
        0,
        1,
        None,
    )
    redis_client.set(keys.policy, "-1")
    redis_client.hset(keys.shares, "rollout-0", "7")
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "2,5")
    reply = send(producer, 2)
    assert (reply.policy_version, reply.watermark, reply.share) == (-1, 2, 7), (
        "a watermark at the highest seq sent is the writer's own"
    )
    assert reply.epoch == first.epoch
    assert reports() == []


def test_the_reply_reads_unsound_values_others_wrote_as_absent_and_names_each(redis_client, keys, reports):
    producer = writer(redis_client, keys)
    send(producer, 1)
    redis_client.set(keys.policy, "v3")
    redis_client.hset(keys.shares, "rollout-0", "lots")
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "5")
    reply = send(producer, 2)
    assert (reply.appended, reply.policy_version, reply.watermark, reply.share) == (True, -1, 0, None)
    assert producer.retained() == 2, "a watermark beyond what the writer sent dropped its kept entries"
    lines = reports()
    assert reported(lines, keys.policy, "is not a policy version", "ignored")
    assert reported(lines, keys.consumer_state, "field seq:rollout-0 is beyond what this writer sent", "ignored")
    assert reported(lines, keys.shares, "field rollout-0 is not a count", "ignored")
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "9" * 20)
    assert send(producer, 3).watermark == 0, "a watermark of more than 15 digits is not a count"


# -- waiting for consumption --------------------------------------------------------------------------------------


def test_waiting_for_consumption_keeps_the_epoch_and_resends_nothing(redis_client, keys, reports):
    reader = Consumer(redis_client, keys)
    producer = writer(redis_client, keys)
    for seq in (1, 2, 3):
        send(producer, seq)
    consume(reader, {"seq:rollout-0": "2"}, count=2)
    epoch = redis_client.get(keys.epoch)
    assert producer.wait_consumed(3, timeout=0.2, should_stop=lambda: False) is False
    assert redis_client.get(keys.epoch) == epoch, "waiting replaced the epoch: every writer would re-send"
    assert producer.resent == 0 and seqs(reader.read(10, None)) == [3]
    idle = writer(redis_client, keys, "rollout-1")
    assert idle.wait_consumed(1, timeout=0.1, should_stop=lambda: False) is False
    assert reports() == [], "a writer the reader has no watermark for was reported"


def test_waiting_for_consumption_ignores_an_unsound_watermark(redis_client, keys, reports):
    producer = writer(redis_client, keys)
    for seq in (1, 2):
        send(producer, seq)
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "7")
    assert producer.wait_consumed(2, timeout=0.1, should_stop=lambda: False) is False, (
        "a watermark beyond what this writer sent ended the wait"
    )
    assert producer.retained() == 2
    assert reported(reports(), keys.consumer_state, "field seq:rollout-0 is not a watermark of this writer", "ignored")
    redis_client.delete(keys.consumer_state)
    redis_client.set(keys.consumer_state, "not a hash")
    assert producer.wait_consumed(2, timeout=0.1, should_stop=lambda: False) is False
    assert producer.retained() == 2


def test_waiting_for_consumption_repairs_an_epoch_of_the_wrong_type(redis_client, keys, reports):
    producer = writer(redis_client, keys)
    send(producer, 1)
    redis_client.delete(keys.epoch)
    redis_client.hset(keys.epoch, "not", "a string")
    assert producer.wait_consumed(1, timeout=0.1, should_stop=lambda: False) is False
    assert redis_client.type(keys.epoch) == b"string"
    assert any(keys.epoch in line for line in reports())


# -- the reader: resets and repairs ------------------------------------------------------------------------------


def test_every_data_loss_is_one_reset(redis_client, keys):
    calls: list[int] = []
    reader = Consumer(redis_client, keys, on_reset=lambda: calls.append(1))
    send(writer(redis_client, keys), 1)
    assert seqs(reader.read(10, None)) == [1]
    for losses in (1, 2):
        redis_client.flushdb()
        assert reader.read(10, None) == []
        assert reader.resets == losses and len(calls) == losses


def test_a_repaired_state_is_a_reset_and_a_repaired_stream_is_found_as_a_lost_group(redis_client, keys, reports):
    calls: list[int] = []
    reader = Consumer(redis_client, keys, on_reset=lambda: calls.append(1))
    redis_client.set(keys.consumer_state, "not a hash")
    reader.commit([], {"consumed": 3})
    assert len(calls) == 1, "the trainer was not told to write its whole state again"
    assert reader.load_state() == {"consumed": "3"}
    assert any(keys.consumer_state in line for line in reports())
    redis_client.delete(keys.stream)
    redis_client.set(keys.stream, "not a stream")
    assert reader.read(10, None) == []
    assert (reader.resets, len(calls)) == (1, 2), "a stream deleted for its type is one reset, found at once"
    assert redis_client.type(keys.stream) == b"stream"


def test_a_state_loaded_with_unsound_fields_is_written_again_at_the_next_commit_only(redis_client, keys, reports):
    calls: list[int] = []
    reader = Consumer(redis_client, keys, on_reset=lambda: calls.append(1))
    redis_client.hset(
        keys.consumer_state, mapping={"consumed": "many", "updates": "4", b"note\xff": b"\xfe", b"seq:\xff": b"x"}
    )
    assert reader.load_state() == {"updates": "4", "note\ufffd": "\ufffd"}
    lines = reports()
    assert reported(lines, keys.consumer_state, "field consumed is not a count or watermark", "left out")
    assert reported(lines, keys.consumer_state, "field seq:\ufffd is not a count or watermark", "left out")
    redis_client.hdel(keys.consumer_state, "consumed", b"seq:\xff")
    reader.commit([], {})
    assert calls == [], "an empty commit wrote the state"
    reader.commit([], {"updates": 5})
    reader.commit([], {"updates": 6})
    assert calls == [1], "the whole state is written again once, at the first commit"


def test_a_state_of_the_wrong_type_loads_as_empty_and_is_written_again(redis_client, keys, reports):
    calls: list[int] = []
    reader = Consumer(redis_client, keys, on_reset=lambda: calls.append(1))
    redis_client.set(keys.consumer_state, "not a hash")
    assert reader.load_state() == {}
    assert not redis_client.exists(keys.consumer_state), "the key of the wrong type was not repaired"
    assert reports() == [line(keys.consumer_state, "has the wrong type", "ignored")], "one line names the key"
    reader.commit([], {"consumed": 1})
    reader.commit([], {"consumed": 2})
    assert calls == [1]


# -- commit: dead letters ---------------------------------------------------------------------------------------


def test_a_dead_letter_keeps_the_entrys_fields_and_says_why_in_at_most_1000_bytes(redis_client, keys):
    reader = Consumer(redis_client, keys)
    fields = {b"h": b"\xff\x01", b"d": b"data", "decoded": "dropped"}
    reader.commit([], {}, dead=[(b"17-3", fields, "bad_entry", "é" + "x" * 1500)])
    ((_, letter),) = redis_client.xrange(keys.dead_letter)
    assert letter == {
        b"h": b"\xff\x01",
        b"d": b"data",
        b"reason": ("é" + "x" * 998).encode(),
        b"kind": b"bad_entry",
        b"source_id": b"17-3",
    }
    assert redis_client.hgetall(keys.dead_letter_counts) == {b"bad_entry": b"1"}


# -- rewrite, settle, widening ----------------------------------------------------------------------------------


def test_rewrite_repairs_the_keys_it_writes_and_announces_version_0(redis_client, keys, reports):
    reader = Consumer(redis_client, keys)
    redis_client.set(keys.consumer_state, "x")
    redis_client.set(keys.produced, "x")
    redis_client.hset(keys.room, "x", "y")
    redis_client.hset(keys.policy, "x", "y")
    reader.rewrite({"consumed": 5, "seq:rollout-0": "2"}, {"rollout-0": 16}, 2, 0)
    assert redis_client.hgetall(keys.consumer_state) == {b"consumed": b"5", b"seq:rollout-0": b"2"}
    assert redis_client.hgetall(keys.produced) == {b"rollout-0": b"16"}
    assert (redis_client.get(keys.room), redis_client.get(keys.policy)) == (b"2", b"0")
    assert sorted(reports()) == sorted(
        line(key, "checked before a rewrite", "repaired (deleted)")
        for key in (keys.consumer_state, keys.produced, keys.room, keys.policy)
    )


class Interfering(redis.Redis):
    """A client whose transactions another program races: before each of its next ``times`` transactions, that
    program writes a string where the trainer's state (a hash) belongs."""

    times = 0
    key = ""
    transactions = 0

    def pipeline(self, transaction=True, shard_hint=None):
        self.transactions += transaction
        if transaction and self.times > 0:
            self.times -= 1
            self.delete(self.key)
            self.set(self.key, "not a hash")
        return super().pipeline(transaction, shard_hint)


def test_rewrite_repairs_a_key_changed_again_before_its_write_a_bounded_number_of_times(
    redis_server, redis_client, keys
):
    client = Interfering.from_url(redis_server.url)
    client.key = keys.consumer_state
    reader = Consumer(client, keys)
    client.times = ATTEMPTS
    reader.rewrite({"consumed": 5}, {}, 1, -1)
    assert redis_client.hgetall(keys.consumer_state) == {b"consumed": b"5"}
    client.times = ATTEMPTS + 1
    with pytest.raises(MemoryBackendError, match="WRONGTYPE"):
        reader.rewrite({"consumed": 6}, {}, 1, -1)
    before = client.transactions
    with pytest.raises(MemoryBackendError, match="cannot store"):
        reader.rewrite({"consumed": None}, {}, 1, -1)
    assert client.transactions == before + 1, "a refusal other than a key's type was tried again"
    client.close()


def test_read_waits_for_any_positive_time_and_refuses_zero(redis_client, keys):
    reader = Consumer(redis_client, keys)
    assert reader.read(10, 1) == []
    with pytest.raises(ValueError, match="^block_ms must be positive or None$"):
        reader.read(10, 0)


def test_a_stream_of_the_wrong_type_counts_no_entries_and_is_repaired(redis_client, keys):
    reader = Consumer(redis_client, keys)
    redis_client.delete(keys.stream)
    redis_client.set(keys.stream, "not a stream")
    assert reader.backlog() == 0
    assert redis_client.type(keys.stream) == b"none"


# -- reads by others than the trainer ---------------------------------------------------------------------------


def test_the_committed_state_read_by_others_leaves_out_what_is_unsound(redis_client, keys, reports):
    assert committed_state(redis_client, keys) == {}
    redis_client.hset(
        keys.consumer_state,
        mapping={"consumed": "8", "seq:rollout-0": "1,3", "lost": "-2", b"note\xff": b"\xfe", b"seq:\xff": b"x"},
    )
    assert committed_state(redis_client, keys) == {"consumed": "8", "seq:rollout-0": "1,3", "note\ufffd": "\ufffd"}
    lines = reports()
    assert reported(lines, keys.consumer_state, "field lost is not a count or watermark", "left out")
    assert reported(lines, keys.consumer_state, "field seq:\ufffd is not a count or watermark", "left out")
    redis_client.delete(keys.consumer_state)
    redis_client.set(keys.consumer_state, "x")
    assert committed_state(redis_client, keys) == {}
    assert redis_client.get(keys.consumer_state) == b"x", "a reader other than the trainer repaired the state"


def test_the_backlogs_transitions_and_bytes_read_unsound_keys_as_nothing(redis_client, keys, reports):
    reader = Consumer(redis_client, keys)
    producer = writer(redis_client, keys)
    for seq in (1, 2):
        send(producer, seq)
    redis_client.xadd(keys.stream, {"d": b"no header"})
    redis_client.xadd(keys.stream, {"h": b"\xff\xff\xff\xff", "d": b"undecodable"})
    send(producer, 3, count=5)
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "1")
    assert backlog_transitions(redis_client, keys) == 13
    assert backlog_transitions(redis_client, keys, state={}) == 21
    assert reader.backlog_bytes() > 0 and reports() == []
    redis_client.set(keys.backlog_bytes, "lots")
    assert reader.backlog_bytes() == 0
    assert reported(reports(), keys.backlog_bytes, "is not a count", "read as 0")
    redis_client.delete(keys.stream, keys.backlog_bytes)
    redis_client.set(keys.stream, "x")
    redis_client.hset(keys.backlog_bytes, "x", "y")
    assert backlog_transitions(redis_client, keys, state={}) == 0
    assert reader.in_stream(["rollout-0"]) == {}
    assert reader.backlog_bytes() == 0
    assert producer_position(redis_client, keys, "rollout-0") == (1, 16), "the watermark and produced count alone"


def test_a_writers_position_ignores_what_is_unsound(redis_client, keys, reports):
    assert producer_position(redis_client, keys, "rollout-0") == (0, 0) and reports() == []
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "two")
    redis_client.hset(keys.produced, "rollout-0", "-16")
    redis_client.hset(keys.floors, "rollout-0", "junk")
    assert producer_position(redis_client, keys, "rollout-0") == (0, 0)
    lines = reports()
    assert reported(lines, keys.consumer_state, "field seq:rollout-0 is not a watermark", "ignored")
    assert reported(lines, keys.produced, "field rollout-0 is not a count", "ignored")
    redis_client.hset(keys.consumer_state, "seq:rollout-0", "4,6")
    redis_client.hset(keys.produced, "rollout-0", "48")
    redis_client.hset(keys.floors, "rollout-0", "5,40")
    assert producer_position(redis_client, keys, "rollout-0") == (6, 48), "the floor is below both"
    redis_client.hset(keys.floors, "rollout-0", b"9,4\xff")
    assert producer_position(redis_client, keys, "rollout-0") == (6, 48), "a floor that is not text is malformed"
    redis_client.hset(keys.floors, b"rollout-\xff", "1,8")
    reader = Consumer(redis_client, keys)
    assert reader.floors() == {"rollout-\ufffd": (1, 8)}, "a floor is read whatever bytes its writer's name has"


def test_reads_of_keys_of_the_wrong_type_name_the_key_and_read_as_nothing(redis_client, keys, reports, caplog):
    reader = Consumer(redis_client, keys)
    for key in (keys.stream, keys.consumer_state, keys.produced, keys.floors):
        redis_client.delete(key)
        redis_client.set(key, "not a stream or hash")
    redis_client.hset(keys.backlog_bytes, "not", "a string")
    for call, value, named in [
        (lambda: backlog_transitions(redis_client, keys, state={}), 0, [keys.stream]),
        (lambda: committed_state(redis_client, keys), {}, [keys.consumer_state]),
        (
            lambda: producer_position(redis_client, keys, "rollout-0"),
            (0, 0),
            [keys.consumer_state, keys.stream, keys.produced, keys.floors],
        ),
        (reader.floors, {}, [keys.floors]),
        (reader.backlog_bytes, 0, [keys.backlog_bytes]),
    ]:
        caplog.clear()
        assert call() == value
        assert sorted(reports()) == sorted(line(key, "has the wrong type", "ignored") for key in named)


def test_a_writers_floor_only_rises_and_a_floors_key_of_the_wrong_type_is_repaired(redis_client, keys, reports):
    reader = Consumer(redis_client, keys)
    producer = writer(redis_client, keys)
    redis_client.set(keys.floors, "not a hash")
    producer.continue_from(5, 40)
    assert reader.floors() == {"rollout-0": (5, 40)}
    assert any(keys.floors in line for line in reports())
    producer.continue_from(7, 56)
    assert reader.floors() == {"rollout-0": (7, 56)}
    producer.continue_from(6, 48)
    assert reader.floors() == {"rollout-0": (7, 56)}


def test_waiting_for_consumption_resends_after_a_data_loss_and_waits_on_for_the_copies(redis_client, keys):
    reader = Consumer(redis_client, keys)
    producer = Producer(redis_client, keys, "rollout-0", max_entries=2, max_bytes=1 << 20)
    for seq in (1, 2):
        send(producer, seq)
    consume(reader, {})
    send(producer, 3)
    redis_client.flushdb()
    waiting = Background(lambda: producer.wait_consumed(3, timeout=30.0, should_stop=lambda: False))
    got: list[int] = []
    deadline = time.monotonic() + 30.0
    while not waiting.done(0.01) and time.monotonic() < deadline:
        entries = reader.read(10, 100)
        got += seqs(entries)
        reader.commit(
            [(eid, len(f[b"h"]) + len(f[b"d"])) for eid, f in entries], {"seq:rollout-0": str(max(got))} if got else {}
        )
    assert waiting.value is True, "the wait ended before the re-sent entries were consumed"
    assert sorted(got) == [1, 2, 3] and producer.resent == 3, "a re-send waits for room like any append"


def test_waiting_for_consumption_gives_up_when_the_run_stops_during_its_resend(redis_client, keys):
    reader = Consumer(redis_client, keys)
    producer = Producer(redis_client, keys, "rollout-0", max_entries=1, max_bytes=1 << 20)
    send(producer, 1)
    consume(reader, {})
    send(producer, 2)
    redis_client.flushdb()
    redis_client.set(keys.stop, "stopped")
    assert producer.wait_consumed(2, timeout=30.0, should_stop=lambda: False) is False
    assert producer.resent == 2


def test_reclaim_goes_on_past_entries_pending_elsewhere_that_are_not_idle(redis_client, keys):
    """One XAUTOCLAIM looks at ten times ``count`` entries at most: the next one starts where it stopped."""
    reader = Consumer(redis_client, keys)
    ids = [redis_client.xadd(keys.stream, {"h": b"", "d": bytes([i])}) for i in range(22)]
    dead, busy = Consumer(redis_client, keys, "trainer-old"), Consumer(redis_client, keys, "trainer-busy")
    assert len(dead.read(1, None)) == 1 and len(busy.read(20, None)) == 20 and len(dead.read(1, None)) == 1
    redis_client.xclaim(keys.stream, "trainer", "trainer-old", 0, [ids[0], ids[21]], idle=60_000)
    assert [eid for eid, _ in reader.reclaim(30_000, count=2)] == [ids[0], ids[21]]


def test_reclaim_takes_64_entries_at_a_time_unless_told(redis_client, keys):
    reader = Consumer(redis_client, keys)
    for i in range(70):
        redis_client.xadd(keys.stream, {"h": b"", "d": bytes([i])})
    assert len(Consumer(redis_client, keys, "trainer-old").read(100, None)) == 70
    assert len(reader.reclaim(0)) == 64


# -- retrying within the caller's time ---------------------------------------------------------------------------


class Unreachable(redis.Redis):
    """A client that loses its server on demand, as a lost connection does: every command naming one of the keys in
    ``down``, and every transaction while ``pipelines_down``; it lists the (keys, timeout) of each blocking wait in
    ``waits``."""

    down: frozenset = frozenset()
    pipelines_down = False
    waits: list | None = None

    def blpop(self, keys, timeout=0):
        if self.waits is not None:
            self.waits.append((keys, timeout))
        return super().blpop(keys, timeout)

    def execute_command(self, *args, **options):
        if any(isinstance(a, str) and a in self.down for a in args[1:]):
            raise redis.ConnectionError("the memory server is unreachable")
        return super().execute_command(*args, **options)

    def pipeline(self, transaction=True, shard_hint=None):
        if self.pipelines_down:
            raise redis.ConnectionError("the memory server is unreachable")
        return super().pipeline(transaction, shard_hint)


class NoRetries:
    """A stand-in for the ``time`` module of ``drl.memory.redis.connection``: its clock is the real one, and a wait
    before a retry fails the test at once (a caller that gives ``retry_s`` 0 never waits)."""

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def sleep(seconds: float) -> None:
        raise AssertionError(f"retried after {seconds} s, past the caller's retry time")


def test_a_call_that_loses_the_server_gives_up_within_its_retry_time_and_names_what_it_did(
    redis_server, keys, monkeypatch
):
    client = Unreachable.from_url(redis_server.url)
    reader = Consumer(client, keys, retry_s=0)
    producer = Producer(client, keys, "rollout-0", 10, 1 << 20, retry_s=0)
    monkeypatch.setattr(connection, "time", NoRetries)
    cases = [
        ("XRANGE", [keys.stream], lambda: backlog_transitions(client, keys, 0, state={})),
        ("HGETALL state", [keys.consumer_state], lambda: backlog_transitions(client, keys, 0)),
        ("XRANGE", [keys.stream], lambda: reader.in_stream(["rollout-0"])),
        ("HGET watermark", [keys.consumer_state], producer.position),
        ("HGET produced", [keys.produced], producer.position),
        ("HGET floor", [keys.floors], producer.position),
        ("HSET floor", [keys.floors], lambda: producer.continue_from(3, 24)),
        ("SET room", [keys.room], lambda: reader.set_widening(2)),
        ("HGETALL state", [keys.consumer_state], reader.load_state),
        ("HGETALL floors", [keys.floors], reader.floors),
        ("XLEN", [keys.stream], reader.backlog),
        ("GET bytes", [keys.backlog_bytes], reader.backlog_bytes),
        ("XREADGROUP", [keys.stream], lambda: reader.read(10, None)),
        ("XAUTOCLAIM", [keys.stream], lambda: reader.reclaim(0)),
        ("commit", [keys.stream], lambda: reader.commit([], {"consumed": 1})),
        ("restore memory state", "transactions", lambda: reader.rewrite({"consumed": 1}, {"rollout-0": 8}, 1, 3)),
        ("settle", "transactions", lambda: reader.settle({"consumed": 1}, {"rollout-0": 8})),
        ("HGET watermark", "transactions", lambda: producer.wait_consumed(1, 30.0, lambda: False)),
    ]
    for what, down, call in cases:
        client.pipelines_down = down == "transactions"
        client.down = frozenset(() if client.pipelines_down else down)
        with pytest.raises(MemoryUnavailable, match=f"^{what}: memory server unreachable"):
            call()
    client.close()
    with socket.socket() as probe:  # a port nothing listens on: the append's own connection is refused
        probe.bind(("127.0.0.1", 0))
        nobody = redis.Redis(host="127.0.0.1", port=probe.getsockname()[1], retry=Retry(NoBackoff(), 0))
    with pytest.raises(MemoryUnavailable, match="^XADD: memory server unreachable"):
        send(Producer(nobody, keys, "rollout-0", 10, 1 << 20, retry_s=0), 1)
    with pytest.raises(MemoryUnavailable, match="^XGROUP CREATE: memory server unreachable"):
        Consumer(nobody, keys, retry_s=0)


def test_a_writer_whose_wait_for_room_fails_waits_out_its_timeout_and_tries_again(redis_server, redis_client, keys):
    client = Unreachable.from_url(redis_server.url)
    client.down = frozenset([keys.freed])
    client.waits = []
    reader = Consumer(redis_client, keys)
    producer = Producer(client, keys, "rollout-0", max_entries=1, max_bytes=1 << 20)
    started = time.perf_counter()
    send(producer, 1)
    held = Background(lambda: send(producer, 2))
    while producer.refused < 2 and not held.done(0.01):
        pass
    consume(reader, {})
    assert held.value.appended
    assert 0 < producer.waited_s <= time.perf_counter() - started
    assert client.waits and all(waited == [keys.freed] for waited, _ in client.waits), "a wait not on Keys.freed"
    assert [timeout for _, timeout in client.waits] == [min(0.5, 0.05 * 2**i) for i in range(len(client.waits))], (
        "the wait's timeout starts at 50 ms and doubles with each refusal in a row, up to 0.5 s"
    )
    client.close()
