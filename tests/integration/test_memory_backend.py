"""The memory backend against a real server: exactly-once effect, reclaim, dead letters, the append contract."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import pytest
import redis

from drl._proto import experience_pb2
from drl.memory import codec, seq_field
from drl.memory.codec import entry_size
from drl.memory.redis import Consumer, Keys, Producer, stream
from services.common import ServiceContext
from services.trainer.trainer import Trainer
from tests.harness import fast_config

RUN = "mem"


def _arrays(n: int, obs_dim: int = 3, obs_dtype=np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {
        "obs": rng.standard_normal((n, obs_dim)).astype(obs_dtype),
        "action": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        "reward": rng.standard_normal(n).astype(np.float32),
        "next_obs": rng.standard_normal((n, obs_dim)).astype(obs_dtype),
        "terminated": np.zeros(n, dtype=np.uint8),
    }


def _entry(worker: str, seq: int, n: int = 8, run: str = RUN, **arrays_kw) -> tuple[bytes, bytes]:
    header = experience_pb2.BatchHeader(run=run, worker_id=worker, seq=seq, produced_total=seq * n)
    return codec.encode(header, _arrays(n, **arrays_kw))


def _produce(url: str, worker: str, entries: int, n: int) -> None:
    client = redis.Redis.from_url(url)
    producer = Producer(client, Keys(RUN), worker, max_entries=32, max_bytes=1 << 20)
    for seq in range(1, entries + 1):
        h, d = _entry(worker, seq, n)
        producer.send(seq, h, d, seq * n)


_OPEN: list[Trainer] = []


@pytest.fixture(autouse=True)
def _close_trainers():
    """Each trainer a test makes gives its identity up at the test's end (its claim's renewing thread stops)."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def _trainer(tmp_path, url: str, **changes) -> Trainer:
    cfg = fast_config(**changes)
    ctx = ServiceContext("trainer", cfg, RUN, tmp_path, url, str(tmp_path / "store"), 0)
    _OPEN.append(Trainer(ctx))
    return _OPEN[-1]


def test_n_producer_processes_are_consumed_exactly_once(tmp_path, redis_server, redis_client):
    workers, entries, n = 4, 60, 16
    trainer = _trainer(tmp_path, redis_server.url, workers=workers)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_produce, args=(redis_server.url, f"rollout-{i}", entries, n)) for i in range(workers)]
    for p in procs:
        p.start()
    seen: dict[str, list[int]] = {}
    while trainer.ledger.consumed < workers * entries * n:
        for h in trainer.channels.read(count=16, block_ms=200):
            seen.setdefault(h.worker_id, []).append(h.seq)
        assert (
            any(p.is_alive() for p in procs)
            or redis_client.xlen(Keys(RUN).stream)
            or trainer.ledger.consumed == workers * entries * n
        )
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert trainer.ledger.consumed == workers * entries * n
    assert trainer.ledger.duplicates == 0
    assert {w: sorted(s) for w, s in seen.items()} == {
        f"rollout-{i}": list(range(1, entries + 1)) for i in range(workers)
    }
    assert redis_client.xlen(Keys(RUN).stream) == 0
    assert int(redis_client.get(Keys(RUN).backlog_bytes) or 0) == 0
    assert redis_client.hget(Keys(RUN).consumer_state, seq_field("rollout-2")) == str(entries).encode()


def test_resent_entries_are_dropped_as_duplicates(tmp_path, redis_server, redis_client):
    trainer = _trainer(tmp_path, redis_server.url, workers=1)
    keys = Keys(RUN)
    for seq in (1, 2, 2, 3, 1):
        h, d = _entry("rollout-0", seq)
        redis_client.xadd(keys.stream, {"h": h, "d": d})
    while redis_client.xlen(keys.stream):
        trainer.channels.read(count=2, block_ms=100)
    assert trainer.ledger.consumed == 3 * 8
    assert trainer.ledger.duplicates == 2 * 8


def test_entries_pending_at_a_dead_consumer_are_reclaimed(tmp_path, redis_server, redis_client):
    keys = Keys(RUN)
    dead = Consumer(redis_client, keys, consumer="trainer-old")
    for seq in range(1, 6):
        h, d = _entry("rollout-0", seq)
        redis_client.xadd(keys.stream, {"h": h, "d": d})
    taken = dead.read(count=5, block_ms=None)
    assert len(taken) == 5
    assert redis_client.xpending(keys.stream, "trainer")["pending"] == 5
    trainer = _trainer(tmp_path, redis_server.url, workers=1, reclaim_idle_s=60.0)
    assert trainer.channels.read(count=10, block_ms=None) == [], "claimed before the idle time passed"
    feed = trainer.channels[0].feed
    feed.reclaim_idle_ms, feed.reclaimed_at = 200, 0.0
    import time

    time.sleep(0.3)
    accepted = trainer.channels.read(count=10, block_ms=None)
    assert [h.seq for h in accepted] == [1, 2, 3, 4, 5]
    assert redis_client.xpending(keys.stream, "trainer")["pending"] == 0
    assert redis_client.xlen(keys.stream) == 0


def test_restarted_consumer_rereads_its_own_pending_entries_first(redis_server, redis_client):
    keys = Keys(RUN)
    first = Consumer(redis_client, keys)
    for seq in range(1, 4):
        h, d = _entry("rollout-0", seq)
        redis_client.xadd(keys.stream, {"h": h, "d": d})
    got = first.read(count=2, block_ms=None)
    assert len(got) == 2
    second = Consumer(redis_client, keys)  # same consumer name: a restart
    again = second.read(count=10, block_ms=None)
    assert [e[0] for e in again] == [e[0] for e in got]
    second.commit([(eid, entry_size(f)) for eid, f in again], {"consumed": 16})
    rest = second.read(count=10, block_ms=None)
    assert len(rest) == 1


def _bad_entries() -> dict[str, dict]:
    good_h, good_d = _entry("rollout-0", 1)
    header = experience_pb2.BatchHeader()
    header.ParseFromString(good_h)
    future = experience_pb2.BatchHeader()
    future.CopyFrom(header)
    future.format_version = 99
    wrong_dtype_h, wrong_dtype_d = _entry("rollout-0", 3, obs_dtype=np.float64)
    wrong_shape_h, wrong_shape_d = _entry("rollout-0", 4, obs_dim=5)
    foreign_h, foreign_d = _entry("rollout-0", 5, run="another-run")
    stranger_h, stranger_d = _entry("rollout-9", 1)
    return {
        "bad_entry": {"x": b"1"},
        "bad_header": {"h": b"\xff\xff\xff\xff", "d": good_d},
        "bad_header_version": {"h": future.SerializeToString(), "d": good_d},
        "truncated": {"h": _entry("rollout-0", 2)[0], "d": good_d[:-5]},
        "wrong_dtype": {"h": wrong_dtype_h, "d": wrong_dtype_d},
        "wrong_shape": {"h": wrong_shape_h, "d": wrong_shape_d},
        "foreign_run": {"h": foreign_h, "d": foreign_d},
        "unknown_worker": {"h": stranger_h, "d": stranger_d},
    }


def test_each_kind_of_bad_entry_is_dead_lettered_and_counted(tmp_path, redis_server, redis_client):
    keys = Keys(RUN)
    trainer = _trainer(tmp_path, redis_server.url, workers=1)
    bad = _bad_entries()
    for fields in bad.values():
        redis_client.xadd(keys.stream, fields)
    good_h, good_d = _entry("rollout-0", 6)
    redis_client.xadd(keys.stream, {"h": good_h, "d": good_d})
    while redis_client.xlen(keys.stream):
        trainer.channels.read(count=3, block_ms=100)
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(keys.dead_letter_counts).items()}
    assert counts == {
        "bad_entry": 1,
        "bad_header": 2,
        "truncated": 1,
        "wrong_dtype": 1,
        "wrong_shape": 1,
        "foreign_run": 1,
        "unknown_worker": 1,
    }
    assert trainer.ledger.dead_letters == len(bad)
    assert trainer.ledger.consumed == 8, "the good entry after the bad ones was lost"
    letters = redis_client.xrange(keys.dead_letter)
    assert len(letters) == len(bad)
    assert all(b"reason" in f and b"kind" in f and b"source_id" in f for _, f in letters)
    assert int(redis_client.get(keys.backlog_bytes) or 0) == 0
    assert redis_client.xpending(keys.stream, "trainer")["pending"] == 0


def test_append_script_refuses_when_full_and_reports_policy_and_stop(redis_server, redis_client):
    keys = Keys(RUN)
    producer = Producer(redis_client, keys, "rollout-0", max_entries=2, max_bytes=1 << 20)
    for seq in (1, 2):
        h, d = _entry("rollout-0", seq)
        assert producer.send(seq, h, d, seq * 8).appended
    redis_client.set(keys.policy, 7)
    redis_client.set(keys.stop, "test")
    h, d = _entry("rollout-0", 3)
    reply = producer.send(3, h, d, 24)
    assert (reply.appended, reply.policy_version, reply.stop) == (False, 7, True)
    assert redis_client.xlen(keys.stream) == 2
    assert redis_client.hget(keys.produced, "rollout-0") == b"16"
    assert producer.retained() == 2


def test_appends_go_on_after_the_server_lost_its_scripts_and_dropped_the_connection(redis_server, redis_client):
    """The append runs on a connection of its own (``DirectScript``), outside the client's pool: it must load
    its script again after SCRIPT FLUSH (a restarted server has none) and reconnect after the server closed it."""
    keys = Keys(RUN)
    producer = Producer(redis_client, keys, "rollout-0", max_entries=32, max_bytes=1 << 20, retry_s=10)
    assert producer.send(1, *_entry("rollout-0", 1), 8).appended
    redis_client.script_flush()
    assert producer.send(2, *_entry("rollout-0", 2), 16).appended
    assert redis_client.client_kill_filter(skipme=True) >= 1  # every connection but this call's
    assert producer.send(3, *_entry("rollout-0", 3), 24).appended
    assert redis_client.xlen(keys.stream) == 3 and redis_client.hget(keys.produced, "rollout-0") == b"24"


def test_the_trainers_widening_widens_both_limits_of_the_append_script(redis_server, redis_client):
    keys = Keys(RUN)
    size = sum(len(x) for x in _entry("rollout-0", 1))
    producer = Producer(redis_client, keys, "rollout-0", max_entries=2, max_bytes=2 * size)
    consumer = Consumer(redis_client, keys)
    redis_client.set(keys.stop, "test")  # a refused producer then gives up at once instead of waiting
    replies = [producer.send(seq, *_entry("rollout-0", seq), seq * 8) for seq in (1, 2, 3)]
    assert [r.appended for r in replies] == [True, True, False] and replies[-1].widening == 1
    redis_client.delete(keys.stop)

    consumer.set_widening(3)
    for seq in range(3, 7):
        reply = producer.send(seq, *_entry("rollout-0", seq), seq * 8)
        assert reply.appended, f"entry {seq} refused with widening 3"
    assert reply.widening == 3 and redis_client.xlen(keys.stream) == 6
    redis_client.set(keys.stop, "test")
    assert not producer.send(7, *_entry("rollout-0", 7), 56).appended, "the widened entry limit (6) did not hold"

    consumer.set_widening(1)
    assert redis_client.get(keys.room) is None
    reply = producer.send(7, *_entry("rollout-0", 7), 56)
    assert not reply.appended and reply.widening == 1


def test_every_append_reads_the_workers_share_accepted_or_refused(redis_server, redis_client):
    """Live scaling changes ``workers:shares``; the append's reply carries it, so an ASYNC worker that sends often
    needs no HGET of its own (``RolloutWorker.collect_async``)."""
    keys = Keys(RUN)
    producer = Producer(redis_client, keys, "rollout-0", max_entries=1, max_bytes=1 << 20)
    reply = producer.send(1, *_entry("rollout-0", 1), 8)
    assert reply.appended and reply.share is None
    redis_client.hset(keys.shares, mapping={"rollout-0": 5000, "rollout-1": 7})
    redis_client.set(keys.stop, "test")  # the refused append below gives up at once
    reply = producer.send(2, *_entry("rollout-0", 2), 16)
    assert not reply.appended and reply.share == 5000
    redis_client.delete(keys.stop)
    redis_client.xtrim(keys.stream, maxlen=0)
    redis_client.hset(keys.shares, "rollout-0", 4200)
    reply = producer.send(2, *_entry("rollout-0", 2), 16)
    assert reply.appended and reply.share == 4200


def test_a_held_back_producer_waits_blocked_and_wakes_when_a_commit_frees_room(redis_server, redis_client, monkeypatch):
    """No polling: with a 10 s fallback, the refused producer asks once and then waits until the commit's token
    wakes it. Tokens from commits that nobody waited for were cleared by the refusal, so they wake no one."""
    monkeypatch.setattr(stream, "BACKPRESSURE_FIRST_WAIT_S", 10.0)
    monkeypatch.setattr(stream, "BACKPRESSURE_MAX_WAIT_S", 10.0)
    keys = Keys(RUN)
    producer = Producer(redis_client, keys, "rollout-0", max_entries=2, max_bytes=1 << 20)
    consumer = Consumer(redis_client, keys)

    def send(seq: int):
        h, d = _entry("rollout-0", seq)
        return producer.send(seq, h, d, seq * 8)

    def consume(count: int) -> None:
        got = consumer.read(count=count, block_ms=None)
        assert len(got) == count
        consumer.commit([(eid, entry_size(f)) for eid, f in got], {"consumed": 0})

    assert send(1).appended and send(2).appended
    consume(2)  # two tokens that nobody waits for
    assert redis_client.llen(keys.freed) == 2
    assert send(3).appended and send(4).appended
    result: list = []
    waiting = threading.Thread(target=lambda: result.append(send(5)))
    waiting.start()
    time.sleep(0.5)
    assert not result and producer.refused == 1, "the held-back producer polled or woke on a stale token"
    consume(1)
    waiting.join(timeout=5.0)
    assert result and result[0].appended, "the commit that freed room did not wake the producer"
    assert producer.refused == 1
    assert redis_client.xlen(keys.stream) == 2


@pytest.fixture(autouse=True)
def _clean(redis_client):
    yield
    redis_client.flushdb()


def test_sync_iteration_never_mixes_policy_versions(tmp_path, redis_server, redis_client):
    keys = Keys(RUN)
    trainer = _trainer(tmp_path, redis_server.url, workers=1, mode="sync")
    for seq, version in ((1, 1), (2, 0), (3, 1)):
        header = experience_pb2.BatchHeader(
            run=RUN, worker_id="rollout-0", seq=seq, policy_version=version, produced_total=seq * 8
        )
        h, d = codec.encode(header, _arrays(8))
        redis_client.xadd(keys.stream, {"h": h, "d": d})
    accepted = []
    while redis_client.xlen(keys.stream):
        accepted += trainer.channels.read(count=8, block_ms=100, sync_version=1)
    assert [h.seq for h in accepted] == [1, 3]
    assert trainer.ledger.stale == 8 and trainer.ledger.consumed == 16
    assert len(trainer.learning.replay) == 16
    assert redis_client.hget(keys.consumer_state, "stale") == b"8"


def test_a_worker_that_returns_with_a_larger_share_is_awaited_again(tmp_path, redis_server, redis_client):
    keys = Keys(RUN)
    redis_client.hset(keys.members, mapping={"rollout-0": "active", "rollout-1": "active"})
    redis_client.hset(keys.shares, mapping={"rollout-0": 16, "rollout-1": 16})
    trainer = _trainer(tmp_path, redis_server.url, workers=2, steps=32)

    def send(worker: str, seq: int, final: bool) -> None:
        header = experience_pb2.BatchHeader(run=RUN, worker_id=worker, seq=seq, produced_total=seq * 8, final=final)
        h, d = codec.encode(header, _arrays(8))
        redis_client.xadd(keys.stream, {"h": h, "d": d})

    for worker in ("rollout-0", "rollout-1"):
        send(worker, 1, False)
        send(worker, 2, True)
    while trainer.channels.read(count=16, block_ms=100):
        pass
    assert trainer.membership.all_finished()

    redis_client.hset(keys.shares, "rollout-1", 32)
    assert not trainer.membership.all_finished(), "a worker whose share was raised was still counted as finished"
    for seq in (3, 4):
        send("rollout-1", seq, seq == 4)
    assert not trainer.membership.all_finished()
    while trainer.channels.read(count=16, block_ms=100):
        pass
    assert trainer.membership.all_finished() and trainer.ledger.consumed == 48


def test_after_a_data_loss_the_trainer_never_lowers_a_count_a_worker_raised_first(tmp_path, redis_server, redis_client):
    """Workers notice a server restart at their next append and go on appending, which raises their
    ``produced`` counts, before the trainer notices at its next read; its restore must not write its older
    counts over theirs (the run's summary adds them up: 4,792 of 6,000 transitions in one such race). It puts
    back its widened limits too."""
    keys = Keys(RUN)
    trainer = _trainer(tmp_path, redis_server.url, workers=2)
    producers = {
        w: Producer(redis_client, keys, w, max_entries=32, max_bytes=1 << 20) for w in ("rollout-0", "rollout-1")
    }
    for worker, producer in producers.items():
        for seq in (1, 2):
            producer.send(seq, *_entry(worker, seq), seq * 8)
    while trainer.channels.read(count=16, block_ms=100):
        pass
    assert trainer.ledger.produced == {"rollout-0": 16, "rollout-1": 16}

    trainer.channels.widen(True)
    redis_client.flushdb()
    for seq in (3, 4, 5):
        producers["rollout-0"].send(seq, *_entry("rollout-0", seq), seq * 8)
    assert redis_client.hget(keys.produced, "rollout-0") == b"40"
    trainer.channels.read(count=16, block_ms=100)
    assert trainer.channels[0].reader.resets == 1
    assert redis_client.hget(keys.produced, "rollout-0") == b"40", "the restore lowered a worker's count"
    assert redis_client.hget(keys.produced, "rollout-1") == b"16", "the restore did not put back a count"
    assert redis_client.get(keys.room) == b"4", "the restore did not put back the widened limits"
