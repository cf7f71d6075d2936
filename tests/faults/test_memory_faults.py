"""Delivery guarantees against a real server and real processes: nothing lost, nothing counted twice."""

from __future__ import annotations

import os
import signal
import time

import pytest

from drl.memory.redis.server import RedisServer
from tests.harness import FULL_TIER, ServiceRun, fast_config


def _reconciles(acc: dict, steps: int) -> None:
    assert acc["produced"] == steps, acc
    assert acc["consumed"] + acc["stale"] == steps, acc
    assert acc["backlog_entries"] == 0 and acc["backlog_bytes"] == 0, acc


def _kill_mid_batch(run: ServiceRun, proc) -> int:
    """SIGKILLs the trainer at a moment when it holds entries it read but has not committed."""
    client = run.client()
    for _ in range(2000):
        os.kill(proc.pid, signal.SIGSTOP)
        pending = client.xpending(run.keys.stream, "trainer")["pending"]
        if pending:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return pending
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.003)
    raise AssertionError("never caught the trainer between read and commit")


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_trainer_sigkill_mid_batch_then_restart_counts_every_transition_once(
    tmp_path, redis_server, redis_client, mode
):
    # One update per two transitions keeps the learner the bottleneck, so the trainer reads often, a few entries at a
    # time, for seconds: a learner ahead of the data reads every few tens of milliseconds and finishes the run in
    # well under a second, leaving few moments between a read and its commit to catch.
    run = ServiceRun(fast_config(mode=mode, updates_per_transition=0.5), redis_server.url, tmp_path)
    run.start_all()
    trainer = run.procs["trainer"]
    run.wait_until(lambda: run.consumed() >= 1500, 120, "1500 transitions consumed")
    pending = _kill_mid_batch(run, trainer)
    assert pending > 0
    before = run.consumed()
    version_before = int(run.client().get(run.keys.policy))
    run.start("trainer")
    run.wait_all(timeout=300)
    acc = run.accounting()
    _reconciles(acc, 6000)
    assert acc["consumed"] > before
    assert acc["workers"] == 3
    status = run.status("trainer")
    assert status["state"] == "finished" and status["exit_reason"] == "steps_done"
    assert int(status["policy_version"]) > version_before, "a policy version was reused after the restart"
    assert "continuing: " in run.log_tail("trainer", 100_000)


def test_memory_server_killed_and_restarted_mid_run(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    port = server.port
    run = ServiceRun(fast_config(steps=9000), server.url, tmp_path)
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 2000, 120, "2000 transitions consumed")
        server.proc.kill()
        server.proc.wait()
        time.sleep(1.5)
        server = RedisServer(tmp_path / "redis2", port=port).start()
        run.wait_all(timeout=300)
        acc = run.accounting()
        _reconciles(acc, 9000)
        status = run.status("trainer")
        assert int(status["memory_resets"]) >= 1
        assert status["exit_reason"] == "steps_done"
        resent = [int(run.status(f"rollout-{i}").get("resent", 0)) for i in range(3)]
        print("entries re-sent after the restart:", resent, "duplicates dropped:", acc["duplicates"])
    finally:
        run.kill_all()
        server.stop()


def test_backpressure_bounds_the_backlog_while_the_trainer_is_paused(tmp_path, redis_server, redis_client):
    max_bytes = 12_000
    cfg = fast_config(steps=6000, max_backlog_entries=1000, max_backlog_bytes=max_bytes)
    run = ServiceRun(cfg, redis_server.url, tmp_path)
    run.start_all()
    trainer = run.procs["trainer"]
    run.wait_until(lambda: run.consumed() >= 500, 120, "500 transitions consumed")
    os.kill(trainer.pid, signal.SIGSTOP)
    try:
        time.sleep(2.0)
        samples = []
        for _ in range(5):
            samples.append(
                (
                    redis_client.xlen(run.keys.stream),
                    int(redis_client.get(run.keys.backlog_bytes) or 0),
                    redis_client.info("memory")["used_memory"],
                )
            )
            time.sleep(0.5)
        largest_entry = max(len(f[b"h"]) + len(f[b"d"]) for _, f in redis_client.xrange(run.keys.stream))
        for entries, nbytes, _ in samples:
            assert nbytes <= max_bytes, samples
            assert entries * largest_entry >= nbytes
        assert samples[-1][0] == samples[0][0], "producers kept adding while the trainer was paused"
        assert abs(samples[-1][2] - samples[0][2]) < 256 * 1024, "server memory kept growing"
        assert all(p.poll() is None for p in run.procs.values()), "a producer gave up instead of waiting"
    finally:
        os.kill(trainer.pid, signal.SIGCONT)
    run.wait_all(timeout=300)
    _reconciles(run.accounting(), 6000)
    waited = [float(run.status(f"rollout-{i}")["backpressure_s"]) for i in range(3)]
    assert sum(waited) > 1.0, waited


def test_rollout_worker_sigkill_then_restart_continues_its_numbering(tmp_path, redis_server, redis_client):
    run = ServiceRun(fast_config(steps=6000), redis_server.url, tmp_path)
    run.start_all()
    run.wait_until(
        lambda: int(redis_client.hget(run.keys.produced, "rollout-1") or 0) >= 600,
        120,
        "rollout-1 has produced 600 transitions",
    )
    victim = run.procs["rollout-1"]
    victim.kill()
    victim.wait()
    run.start("rollout", 1)
    run.wait_all(timeout=300)
    acc = run.accounting()
    _reconciles(acc, 6000)
    assert acc["duplicates"] == 0, "the restarted worker reused sequence numbers"
    assert "continues after a restart" in run.log_tail("rollout-1", 100_000)
