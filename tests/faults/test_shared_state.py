"""Memory-server state written by anything else (docs/internals.md, "Shared state on the memory server"): with a
real run in progress (real valkey-server, real trainer, rollout workers and evaluator), every key the run owns is
overwritten with a value of the wrong type, or with values out of range; the run must still finish (or end for a
clear reason) within a bound, no service may crash (each one exits 0, so nothing would be restarted), every
corrupted key must be named in a log line, and the accounting must balance.

Several corruptions share one run, so the file stays fast. The scripts' own checks (a bad input or key leaves every
key unchanged) are tested at unit level against the real server in tests/integration/test_script_checks.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import FULL_TIER, ServiceRun, fast_config

RUN_BOUND_S = 150
SILENCE_S = 6.0


def _wrong_types(c, k) -> list[str]:
    """Every key of the run but the stop flag (which stops the run by existing), overwritten with another type: a
    string where a hash, list or stream belongs, a hash where a string belongs."""
    strings = [k.backlog_bytes, k.room, k.epoch, k.policy, k.trainer_done, k.started_at]
    others = [
        k.stream,
        k.freed,
        k.consumer_state,
        k.dead_letter,
        k.dead_letter_counts,
        k.produced,
        k.workers_done,
        k.members,
        k.shares,
        k.floors,
        k.leases,
        k.status("trainer"),
        k.status("rollout-0"),
        k.claim("trainer"),
    ]
    for key in strings + others:
        pipe = c.pipeline(transaction=True)  # a service may write the key between a DEL and an HSET
        pipe.delete(key)
        if key in strings:
            pipe.hset(key, "not", "a string")
        else:
            pipe.set(key, "not a hash, list or stream")
        pipe.execute()
        time.sleep(0.15)
    return strings + others


def _bad_values(c, k) -> list[str]:
    """Out-of-range values and garbage text in the numeric fields and strings."""
    writes = [
        (k.policy, lambda: c.set(k.policy, "-5")),
        (k.backlog_bytes, lambda: c.set(k.backlog_bytes, "-100")),
        (k.room, lambda: c.set(k.room, "0")),
        (k.epoch, lambda: c.set(k.epoch, "garbage")),
        (
            k.consumer_state,
            lambda: c.hset(
                k.consumer_state,
                mapping={"consumed": "abc", "seq:rollout-0": "-3", "duplicates": "1e99", "end:rollout-1": "x"},
            ),
        ),
        (k.produced, lambda: c.hset(k.produced, mapping={"rollout-0": "-1", "rollout-1": "9" * 30})),
        (k.members, lambda: c.hset(k.members, mapping={"rollout-9": "active", "rollout-0": "bogus", "x y": "1"})),
        (k.shares, lambda: c.hset(k.shares, mapping={"rollout-0": "abc", "rollout-1": "-5"})),
        (k.workers_done, lambda: c.hset(k.workers_done, mapping={"rollout-0": "abc"})),
        (k.dead_letter_counts, lambda: c.hset(k.dead_letter_counts, mapping={"bad_header": "many"})),
        (k.trainer_done, lambda: c.set(k.trainer_done, "soon")),
        (k.started_at, lambda: c.set(k.started_at, "yesterday")),
        (k.room, lambda: c.set(k.room, "100000")),
        (k.backlog_bytes, lambda: c.set(k.backlog_bytes, "1" * 40)),
        (k.policy, lambda: c.set(k.policy, "99999999999999999999")),
        (k.policy, lambda: c.set(k.policy, "v7")),
        (k.consumer_state, lambda: c.hset(k.consumer_state, "seq:rollout-1", "1,x,3")),
        (k.consumer_state, lambda: c.hset(k.consumer_state, mapping={"lost": "-2", "totals:rollout-0": "5,7:x:9"})),
        (k.floors, lambda: c.hset(k.floors, mapping={"rollout-0": "-1,5", "rollout-1": "many"})),
        (k.claim("trainer"), lambda: c.set(k.claim("trainer"), "someone else, for ever")),
        (k.leases, lambda: c.hset(k.leases, mapping={"rollout-0": "-1", "trainer": "x", "evaluator": "9" * 30})),
    ]
    for _, write in writes:
        write()
        time.sleep(0.15)
    return sorted({key for key, _ in writes})


# Keys some reader surely meets before the run ends (others may be written over by their owner first, which is
# also a repair: the trainer sets exp:room whenever it widens): each must be named in a log line.
REPORTED = {
    "types": (
        "stream",
        "backlog_bytes",
        "freed",
        "epoch",
        "consumer_state",
        "dead_letter",
        "dead_letter_counts",
        "produced",
        "workers_done",
        "members",
        "shares",
    ),
    "values": ("backlog_bytes", "consumer_state", "produced", "members"),
}


def test_the_corruptions_cover_every_key_the_run_owns():
    """A key added to the run's schema without a corruption here would go untested."""
    from drl.memory.redis.keys import Keys
    from drl.memory.redis.repair import schema

    keys = Keys("covered")
    owned = set(schema(keys))
    assert owned - {keys.stop} - set(_wrong_types(_Recorder(), keys)) == set()  # the stop flag: its own test
    assert {keys.policy, keys.consumer_state, keys.produced, keys.floors} <= set(_bad_values(_Recorder(), keys))


class _Recorder:
    """Takes the writes the corruptions make, to list their keys without a server."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


def _logs(run: ServiceRun) -> str:
    return "\n".join(p.read_text(errors="replace") for p in Path(run.run_dir, "logs").glob("*.log"))


@pytest.mark.parametrize("corruption", [pytest.param("types", marks=FULL_TIER), "values"])
def test_a_run_survives_every_key_overwritten(tmp_path, redis_server, redis_client, corruption):
    steps = 30000
    run = ServiceRun(fast_config(workers=2, steps=steps, member_silence_s=SILENCE_S), redis_server.url, tmp_path)
    c, k = run.client(), run.keys
    started = time.monotonic()
    run.start_all(evaluator=True)
    try:
        run.wait_until(lambda: run.consumed() >= 1000, 120, "1000 transitions consumed")
        touched = (_wrong_types if corruption == "types" else _bad_values)(c, k)
        run.wait_all(timeout=RUN_BOUND_S)
    finally:
        run.kill_all()
    assert time.monotonic() - started < RUN_BOUND_S + 60
    logs = _logs(run)
    for name in REPORTED[corruption]:
        key = getattr(k, name)
        assert key in touched
        assert f"key {key} " in logs, f"{key} was never reported"
    acc = _accounting(run)
    assert acc["produced"] == steps, acc
    assert acc["consumed"] + acc["stale"] == steps, acc
    assert acc["unconsumed"] == 0 and acc["backlog_bytes"] == 0, acc
    status = run.status("trainer")
    assert status["state"] == "finished" and status["exit_reason"] == "steps_done", status
    if corruption == "values":
        assert "rollout-9" in logs and "goes on without it" in logs, "the phantom member was not given up"


def test_a_stop_flag_of_the_wrong_type_stops_the_run_cleanly(tmp_path, redis_server, redis_client):
    """The flag stops a run by existing: one of another type is read as an unreadable reason, and the run ends
    'stopped' with everything accounted for."""
    run = ServiceRun(fast_config(workers=2, steps=60_000), redis_server.url, tmp_path)
    c, k = run.client(), run.keys
    run.start_all(evaluator=True)
    try:
        run.wait_until(lambda: run.consumed() >= 1000, 120, "1000 transitions consumed")
        c.hset(k.stop, "not", "a string")
        run.wait_all(timeout=RUN_BOUND_S)
    finally:
        run.kill_all()
    acc = _accounting(run)
    assert acc["produced"] == acc["consumed"] + acc["stale"] + acc["unconsumed"], acc
    assert acc["produced"] < 60_000
    assert run.status("trainer")["exit_reason"] == "stopped"
    assert f"key {k.stop} " in _logs(run)


def _accounting(run: ServiceRun) -> dict[str, int]:
    """The counters as drl reads them (``RunControl``, which leaves out what is unsound, as a summary does) and the
    trainer's committed counters."""
    from drl.memory import open_memory

    memory = open_memory(run.memory_url, run.run)
    try:
        control = memory.control()
        state = memory.reader("accounting").load_state()
        return {
            "produced": sum(control.produced().values()),
            "consumed": int(state.get("consumed", 0)),
            "stale": int(state.get("stale", 0)),
            "unconsumed": control.unconsumed(),
            "backlog_bytes": memory.reader("accounting").backlog_bytes(),
        }
    finally:
        memory.close()
