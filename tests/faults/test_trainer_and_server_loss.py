"""The trainer and the memory server lost within about a second of each other, in either order: the dedupe state
comes back from the checkpoint (not zeros), the entries the dead trainer took after its checkpoint are declared
lost from the workers' floors instead of awaited, and the run finishes with every transition accounted for once:
produced = consumed + stale + lost, nothing left in the stream."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from drl.memory.redis.server import RedisServer
from tests.harness import FULL_TIER, ServiceRun, fast_config


def _kill(proc) -> None:
    proc.kill()
    proc.wait()


STEPS = 20_000
"""Long enough that the workers are still producing when the trainer and the server are killed (with 6,000 a quiet
machine had them finish their shares first, their done markers then lost with the server, and the trainer waited
out --member-silence-s past the test's timeout, or was never caught past its checkpoint)."""


def _stop_past_its_checkpoint(run: ServiceRun, checkpoints: Path) -> None:
    """SIGSTOPs the trainer at a moment when it has committed entries its newest checkpoint does not hold (what
    its death together with the server's loses), so the test does not depend on how fast this machine runs."""
    trainer = run.procs["trainer"]
    for _ in range(600):
        os.kill(trainer.pid, signal.SIGSTOP)
        manifests = sorted(checkpoints.glob("*/manifest.json"))
        if manifests and run.consumed() > int(json.loads(manifests[-1].read_text())["env_steps"]) + 200:
            return
        os.kill(trainer.pid, signal.SIGCONT)
        time.sleep(0.1)
    raise AssertionError("never caught the trainer with committed entries beyond its newest checkpoint")


@pytest.mark.parametrize(
    "mode,first",
    [
        ("async", "trainer"),
        pytest.param("async", "server", marks=FULL_TIER),
        pytest.param("sync", "trainer", marks=FULL_TIER),
    ],
)
def test_trainer_and_memory_server_killed_together_the_run_finishes_and_balances(tmp_path, mode, first):
    server = RedisServer(tmp_path / "redis").start()
    port = server.port
    cfg = fast_config(mode=mode, workers=2, steps=STEPS, checkpoint_every_s=1.0, updates_per_transition=0.25)
    run = ServiceRun(cfg, server.url, tmp_path)
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 2500, 120, "2500 transitions consumed")
        _stop_past_its_checkpoint(run, tmp_path / "store" / run.run / "checkpoints")
        victims = [lambda: _kill(run.procs["trainer"]), lambda: _kill(server.proc)]
        if first == "server":
            victims.reverse()
        victims[0]()
        time.sleep(1.0)
        victims[1]()
        time.sleep(1.0)
        server = RedisServer(tmp_path / "redis2", port=port).start()
        run.start("trainer")
        run.wait_all(timeout=150)
        acc = run.accounting()
        status = run.status("trainer")
        assert status["exit_reason"] == "steps_done", status
        assert acc["produced"] == STEPS, acc
        assert acc["backlog_entries"] == 0 and acc["backlog_bytes"] == 0, acc
        assert acc["consumed"] + acc["stale"] + acc["lost"] == acc["produced"], acc
        assert acc["lost"] > 0, "the dead trainer took entries after its checkpoint; they must count as lost"
        assert int(status["lost"]) == acc["lost"]
        log = run.log_tail("trainer", 200_000)
        assert "can never arrive" in log and "restored checkpoint" in log
    finally:
        run.kill_all()
        server.stop()
