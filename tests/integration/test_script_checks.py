"""The Lua scripts check before they write (docs/internals.md, "Shared state on the memory server"): on a real
server, a script given an unsound key or a bad argument fails with ``UNSOUNDKEY``/``BADARG`` and leaves every key of
the run exactly as it was (a script that failed half-way would keep what it wrote)."""

from __future__ import annotations

import uuid

import pytest
import redis

from drl.memory import open_memory
from drl.memory.redis import Keys
from drl.memory.redis.scripts import ADD, COMMIT, DONE, NEW_EPOCH, RAISE, REGISTER, REPAIR, STATUS, TAKE


def _snapshot(client: redis.Redis, keys: Keys) -> dict:
    return {key: client.dump(key) for key in sorted(client.scan_iter(match=keys.prefix + "*"))}


@pytest.fixture
def live(redis_server, redis_client):
    """A run with entries in the stream, a committed state, produced counts and membership."""
    run = f"checks-{uuid.uuid4().hex[:8]}"
    memory = open_memory(redis_server.url, run)
    reader = memory.reader("trainer-0")
    writer = memory.writer("rollout-0", max_entries=100, max_bytes=1 << 20)
    for seq in (1, 2, 3):
        writer.send(seq, b"h%d" % seq, b"d" * 10, seq * 8)
    got = reader.read(1, None)
    reader.commit([(got[0][0], 13)], {"consumed": 8, "seq:rollout-0": "1", "produced:rollout-0": 8})
    control = memory.control()
    control.register({"rollout-0": "active"}, {"rollout-0": 100}, started_at=1.0)
    control.mark_worker_done("rollout-1", 5)
    yield redis_client, Keys(run), reader
    memory.close()


def _add(k: Keys, args=None):
    keys = [
        k.stream,
        k.policy,
        k.stop,
        k.produced,
        k.backlog_bytes,
        k.consumer_state,
        k.epoch,
        k.freed,
        k.room,
        k.shares,
        k.leases,
    ]
    return keys, args or [100, 1 << 20, b"h", b"dd", "rollout-0", 40, "seq:rollout-0", "token", 1]


def _commit(k: Keys, entry_id: bytes, args=None):
    keys = [k.stream, k.backlog_bytes, k.consumer_state, k.freed, k.dead_letter, k.dead_letter_counts, k.leases]
    return keys, [
        "trainer",
        1,
        *(args or ["trainer", 1, entry_id, 13, 1, "bad_header", 2, "h", "x", "reason", "r", "consumed", 16]),
    ]


CASES = {
    "add: stream of the wrong type": (
        "add",
        lambda c, k: (c.rename(k.stream, k.stream + "x"), c.set(k.stream, "t")),
        None,
    ),
    "add: byte count not a count": ("add", lambda c, k: c.set(k.backlog_bytes, "-5"), None),
    "add: room out of range": ("add", lambda c, k: c.set(k.room, "0"), None),
    "add: produced field garbage": ("add", lambda c, k: c.hset(k.produced, "rollout-0", "lots"), None),
    "add: epoch a hash": ("add", lambda c, k: (c.delete(k.epoch), c.hset(k.epoch, "a", "b")), None),
    "add: freed a string": ("add", lambda c, k: c.set(k.freed, "x"), None),
    "add: leases a string": ("add", lambda c, k: c.set(k.leases, "x"), None),
    "add: lease not a count": ("add", lambda c, k: c.hset(k.leases, "rollout-0", "x"), None),
    "add: bad epoch": ("add", None, [100, 1 << 20, b"h", b"dd", "rollout-0", 4, "seq:rollout-0", "t", "-1"]),
    "add: bad produced total": ("add", None, [100, 1 << 20, b"h", b"dd", "rollout-0", "-4", "seq:rollout-0", "t"]),
    "commit: trainer state garbage": ("commit", lambda c, k: c.hset(k.consumer_state, "consumed", "1e9"), None),
    "commit: dlq a string": ("commit", lambda c, k: c.set(k.dead_letter, "x"), None),
    "commit: dlq count garbage": ("commit", lambda c, k: c.hset(k.dead_letter_counts, "bad_header", "x"), None),
    "commit: byte count huge": ("commit", lambda c, k: c.set(k.backlog_bytes, "9" * 20), None),
    "commit: bad size": ("commit", None, "bad size"),
    "commit: leases a list": ("commit", lambda c, k: c.rpush(k.leases, "x"), None),
    "raise: produced a string": ("raise", lambda c, k: (c.delete(k.produced), c.set(k.produced, "x")), None),
    "raise: bad count": ("raise", None, ["rollout-0", "1e5"]),
    "done: produced garbage": ("done", lambda c, k: c.hset(k.produced, "rollout-0", "-1"), None),
    "done: workers done a string": ("done", lambda c, k: (c.delete(k.workers_done), c.set(k.workers_done, "x")), None),
    "register: members a string": ("register", lambda c, k: (c.delete(k.members), c.set(k.members, "x")), None),
    "register: bad state": ("register", None, [0, 1, 0, 0, "rollout-3", "sleeping"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_script_given_an_unsound_key_or_argument_changes_nothing(live, case):
    client, k, reader = live
    script, corrupt, bad_args = CASES[case]
    if corrupt is not None:
        corrupt(client, k)
    entry_id = client.xrange(k.stream)[0][0] if client.type(k.stream) == b"stream" else b"0-1"
    if script == "add":
        keys, args = _add(k, bad_args)
        text = ADD
    elif script == "commit":
        keys, args = _commit(k, entry_id, ["trainer", 1, entry_id, "-13", 0] if bad_args else None)
        text = COMMIT
    elif script == "raise":
        keys, args, text = [k.produced], bad_args or ["rollout-0", 64], RAISE
    elif script == "done":
        keys, args, text = [k.workers_done, k.produced], ["rollout-0", 64], DONE
    else:
        keys = [k.members, k.shares, k.started_at, k.workers_done]
        args, text = bad_args or [0, 1, 1, 1, "rollout-1", "active", "rollout-1", 50, "rollout-1", 2.0], REGISTER
    before = _snapshot(client, k)
    with pytest.raises(redis.ResponseError, match="^(UNSOUNDKEY|BADARG) "):
        client.register_script(text)(keys=keys, args=args)
    assert _snapshot(client, k) == before


def test_the_repair_script_rechecks_and_repairs_only_what_is_unsound(live):
    client, k, _ = live
    repair = client.register_script(REPAIR)
    client.hset(k.produced, mapping={"rollout-1": "abc", "rollout-2": "-3"})
    assert repair(keys=[k.produced], args=["hash", "count", 0]) == b"dropped fields"
    assert client.hgetall(k.produced) == {b"rollout-0": b"24"}
    assert repair(keys=[k.produced], args=["hash", "count", 0]) == b"sound"
    client.set(k.backlog_bytes, "-1")
    assert repair(keys=[k.backlog_bytes, k.stream], args=["string", "bytes", 0]) == b"recounted"
    assert int(client.get(k.backlog_bytes)) == sum(len(f[b"h"]) + len(f[b"d"]) for _, f in client.xrange(k.stream))
    client.rename(k.stream, k.stream + ":kept")
    client.set(k.stream, "text")
    assert repair(keys=[k.stream, k.backlog_bytes, k.epoch], args=["stream", "", 2]) == b"deleted"
    assert not client.exists(k.stream, k.backlog_bytes, k.epoch)
    assert client.exists(k.consumer_state, k.produced)


def test_a_write_with_an_older_epoch_is_refused_whole_and_a_newer_one_takes_the_lease(live):
    """The fence of every script (``fence``): a write carrying an epoch below the one its
    identity's lease holds is refused with ``FENCED`` and changes nothing; the same or a higher epoch is
    accepted and raises the lease; an unfenced write (empty epoch) is not checked."""
    client, k, _ = live
    client.hset(k.leases, mapping={"rollout-0": 5, "trainer": 2, "evaluator": 3})
    entry_id = client.xrange(k.stream)[0][0]
    refused = [
        (ADD, *_add(k, [100, 1 << 20, b"h", b"dd", "rollout-0", 40, "seq:rollout-0", "t", 4])),
        (COMMIT, [*_commit(k, entry_id)[0]], ["trainer", 1, "trainer", 1, entry_id, 13, 0, "consumed", 99]),
        (DONE, [k.workers_done, k.produced, k.leases], ["rollout-0", 64, 4]),
        (STATUS, [k.status("evaluator"), k.leases], ["evaluator", 2, "policy_version", 7]),
        (TAKE, [k.leases], ["rollout-0", 4]),
    ]
    for text, keys, args in refused:
        before = _snapshot(client, k)
        with pytest.raises(redis.ResponseError, match="^FENCED "):
            client.register_script(text)(keys=keys, args=args)
        assert _snapshot(client, k) == before, text[:200]
    add = client.register_script(ADD)
    keys, args = _add(k, [100, 1 << 20, b"h", b"dd", "rollout-0", 40, "seq:rollout-0", "t", 5])
    assert add(keys=keys, args=args)[0] == 1
    keys, args = _add(k, [100, 1 << 20, b"h", b"dd", "rollout-0", 48, "seq:rollout-0", "t", 7])
    assert add(keys=keys, args=args)[0] == 1
    assert client.hget(k.leases, "rollout-0") == b"7"
    keys, args = _add(k, [100, 1 << 20, b"h", b"dd", "rollout-0", 56, "seq:rollout-0", "t", ""])
    assert add(keys=keys, args=args)[0] == 1, "an unfenced write is not checked"
    assert (
        client.register_script(STATUS)(
            keys=[k.status("evaluator"), k.leases], args=["evaluator", 3, "policy_version", 7]
        )
        == 0
    )
    assert client.hget(k.status("evaluator"), "policy_version") == b"7"
    client.delete(k.leases)
    assert client.register_script(TAKE)(keys=[k.leases], args=["trainer", 1]) == 0
    assert client.hget(k.leases, "trainer") == b"1", "a lease lost with the data is taken by the next writer"


def test_a_new_epoch_is_above_the_held_one_and_the_servers_clock(live):
    client, k, _ = live
    new_epoch = client.register_script(NEW_EPOCH)
    now_ms = int(client.time()[0]) * 1000
    first = new_epoch(keys=[k.leases], args=["rollout-3"])
    assert first >= now_ms and client.hget(k.leases, "rollout-3") == str(first).encode()
    assert new_epoch(keys=[k.leases], args=["rollout-3"]) > first
    client.hset(k.leases, "rollout-3", 10**14)
    assert new_epoch(keys=[k.leases], args=["rollout-3"]) == 10**14 + 1
    client.hset(k.leases, "rollout-3", "x")
    before = _snapshot(client, k)
    with pytest.raises(redis.ResponseError, match="^UNSOUNDKEY "):
        new_epoch(keys=[k.leases], args=["rollout-3"])
    assert _snapshot(client, k) == before
