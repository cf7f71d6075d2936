"""A rollout worker's process and the memory server lost together: the worker exited (its done marker went with
the server) or was SIGKILLed and started again as a new process (its kept entries went with it). Nobody holds
the entries the trainer never saw, so they are counted as lost instead of awaited, and the run finishes with
produced = consumed + stale + dead letters + lost and nothing left in the stream."""

from __future__ import annotations

import os
import signal
import time

import pytest

from drl.memory.redis.server import RedisServer
from tests.conftest import processes_mentioning
from tests.faults.test_supervision import Run
from tests.harness import FULL_TIER, ServiceRun, fast_config


def _kill(proc) -> None:
    proc.kill()
    proc.wait()


def _balances(acc: dict) -> None:
    assert acc["backlog_entries"] == 0 and acc["backlog_bytes"] == 0, acc
    assert acc["produced"] == acc["consumed"] + acc["stale"] + acc["dead_letter_entries"] + acc["lost"], acc


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_a_worker_and_the_memory_server_sigkilled_together_the_new_worker_process_reports_its_floor(tmp_path, mode):
    """The worker's entries in the stream died with the server, those it kept with its process, and the trainer,
    stopped, has not written its state back when the new worker process starts: the new process takes its
    position once a version is announced (after the trainer's state is back), continues after the highest seq
    the trainer saw, and reports that seq as its floor. Entries the dead process appended that the server lost
    before the trainer saw them are known to nobody: they are not counted as produced, and the new process
    produces them again."""
    server = RedisServer(tmp_path / "redis").start()
    port = server.port
    cfg = fast_config(mode=mode, workers=2, steps=6000, updates_per_transition=0.25, max_backlog_entries=16)
    run = ServiceRun(cfg, server.url, tmp_path)
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 1500, 120, "1500 transitions consumed")
        os.kill(run.procs["trainer"].pid, signal.SIGSTOP)  # entries of rollout-0 wait in the stream
        time.sleep(2.0)
        _kill(run.procs["rollout-0"])
        time.sleep(0.5)
        _kill(server.proc)
        time.sleep(1.0)
        server = RedisServer(tmp_path / "redis2", port=port).start()
        run.start("rollout", 0)
        run.wait_until(
            lambda: run.log_tail("rollout-0", 100_000).count("waits for a policy version") == 2,
            60,
            "the new rollout-0 process read its position and waits for a policy",
        )
        os.kill(run.procs["trainer"].pid, signal.SIGCONT)
        run.wait_all(timeout=180)
        acc = run.accounting()
        status = run.status("trainer")
        assert status["exit_reason"] == "steps_done", status
        _balances(acc)
        assert int(status["lost"]) == acc["lost"], acc
        assert acc["produced"] >= 6000, acc
        log = run.log_tail("rollout-0", 100_000)
        assert "continues at entry" in log, "the new process did not take its position after the trainer's state"
    finally:
        run.kill_all()
        server.stop()


def test_a_worker_and_the_memory_server_sigkilled_while_the_server_keeps_its_data_nothing_is_lost(tmp_path):
    """Only the worker dies: everything it appended is in the stream or was taken, so its new process's floor
    (the seq it continues from) declares nothing lost, and its entries still in the stream count as consumed."""
    server = RedisServer(tmp_path / "redis").start()
    cfg = fast_config(workers=2, steps=6000, updates_per_transition=0.25, max_backlog_entries=16)
    run = ServiceRun(cfg, server.url, tmp_path)
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 1500, 120, "1500 transitions consumed")
        os.kill(run.procs["trainer"].pid, signal.SIGSTOP)  # the worker's entries wait in the stream
        run.wait_until(lambda: run.client().xlen(run.keys.stream) >= 4, 60, "entries waiting in the stream")
        _kill(run.procs["rollout-0"])
        run.start("rollout", 0)
        time.sleep(3.0)
        os.kill(run.procs["trainer"].pid, signal.SIGCONT)
        run.wait_all(timeout=180)
        acc = run.accounting()
        assert run.status("trainer")["exit_reason"] == "steps_done"
        _balances(acc)
        assert acc["lost"] == 0 and acc["produced"] == 6000, acc
    finally:
        run.kill_all()
        server.stop()


def test_memory_server_and_trainer_lost_after_a_worker_exited_the_orchestrator_writes_back_its_done_marker(tmp_path):
    """rollout-1 is scaled away (hands in everything and exits 0); then the trainer and the private memory server
    are SIGKILLed within a second, with no checkpoint written: the restarted trainer knows nothing of rollout-1,
    whose done marker went with the server. The orchestrator writes the marker back, and the trainer counts
    rollout-1's transitions as lost instead of waiting for its final entry for ever."""
    run = Run(
        tmp_path, "done-lost", ["--mode", "async", "--workers", "2", "--steps", "30000", "--checkpoint-every-s", "3600"]
    )
    try:
        run.wait_until("1,500 transitions consumed", lambda: run.consumed() >= 1500)
        from tests.conftest import run_cli

        down = run_cli(["scale", run.name, "--workers", "1", "--output", str(tmp_path)], timeout=180)
        assert down.returncode == 0, down.stderr[-2000:]
        run.wait_until(
            "rollout-1 exited 0",
            lambda: any(p["name"] == "rollout-1" and p.get("exit_code") == 0 for p in run.state()["processes"]),
        )
        time.sleep(1.5)
        port = run.state()["memory_url"].rsplit(":", 1)[1].split("/")[0]
        server = [line for line in processes_mentioning(f"127.0.0.1:{port}") if "server" in line]
        assert len(server) == 1, server
        os.kill(run.pid("trainer"), signal.SIGKILL)
        time.sleep(0.1)
        os.kill(int(server[0].split(":")[0]), signal.SIGKILL)
        summary, err = run.finish(timeout=240)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.communicate()
    assert summary["exit_reason"] == "steps_done", summary
    trainer = next(p for p in run.state()["processes"] if p["name"] == "trainer")["last_status"]
    lost = int(trainer["lost"])
    assert lost > 0, trainer
    dropped = summary["stale_dropped"] + sum(summary["dead_lettered"].values()) + lost
    assert summary["transitions_unconsumed"] == 0, summary
    assert summary["transitions_produced"] == summary["transitions_consumed"] + dropped, (summary, lost)
    assert "finished with" in (run.dir / "logs" / "trainer.log").read_text()
