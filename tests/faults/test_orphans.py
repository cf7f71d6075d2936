"""SIGKILL of a local run's orchestrator leaves nothing running for long: its services end by themselves within
seconds (foreground and detached, ASYNC and SYNC), ``stop RUN`` ends what could not (a stopped process), ``status``
says the orchestrator is gone, and ``--resume RUN`` afterwards completes the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT, processes_mentioning, read_summary, run_cli, run_client
from tests.faults.test_supervision import SMALL, Run
from tests.harness import FULL_TIER

ENDS_WITHIN_S = 30.0
"""Services give their orchestrator's death ``ORPHAN_GRACE_S`` (10 s) to hand in what they can; before they
watched for it they retried the dead memory server for about 130 s (ASYNC) or spun for about 12 minutes (SYNC)."""


def _consumed(run_dir, name: str) -> int:
    client = run_client(run_dir)
    try:
        return int(client.hget(f"drl:{{{name}}}:status:trainer", "transitions_consumed") or 0)
    finally:
        client.close()


def _has_checkpoint(run_dir) -> bool:
    return any((run_dir / "checkpoints").glob("c*/manifest.json"))


def _left(run_dir) -> list[str]:
    """The run's services still alive, and its private memory server (its title names its address)."""
    port = json.loads((run_dir / "state.json").read_text())["memory_url"].rsplit(":", 1)[1].split("/")[0]
    server = [line for line in processes_mentioning(f"127.0.0.1:{port}") if "server" in line]
    return processes_mentioning(str(run_dir)) + server


def _wait(what: str, check, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if check():
                return time.monotonic() - started
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _resume(tmp_path, name: str, steps: int) -> dict:
    resumed = run_cli([*SMALL, "--resume", name, "--output", str(tmp_path)], timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = read_summary(tmp_path / name)
    assert summary["exit_reason"] == "steps_done", summary
    assert summary["resumed_from_env_steps"] > 0 and summary["env_steps"] == steps, summary
    assert not _left(tmp_path / name), "the resumed run left processes behind"
    return summary


def test_orchestrator_sigkilled_in_the_foreground_its_services_end_and_the_run_resumes(tmp_path):
    # long enough that the kill falls mid-run on a loaded machine too: with 6,000 steps a CI run had all of them
    # in its checkpoint by the time all six processes were up, and --resume rightly had nothing left to do
    steps = 20_000
    run = Run(
        tmp_path, "fg-kill", ["--mode", "async", "--workers", "2", "--steps", str(steps), "--checkpoint-every-s", "1"]
    )
    run.wait_until("a checkpoint and 1,500 transitions", lambda: run.consumed() >= 1500 and _has_checkpoint(run.dir))
    # trainer, 2 workers, evaluator, their fork server, memory server: on a loaded machine the evaluator (or a
    # worker the trainer has not needed yet) can still be starting when 1,500 transitions are in
    run.wait_until("all six processes of the run", lambda: len(_left(run.dir)) == 6, timeout=60)
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.communicate(timeout=30)
    took = _wait("every process of the run to end", lambda: not _left(run.dir), ENDS_WITHIN_S)
    print(f"\nthe orphaned processes ended {took:.1f} s after the orchestrator")
    shown = run_cli(["status", "fg-kill", "--output", str(tmp_path)], timeout=60)
    assert "gone without a summary" in shown.stdout, shown.stdout
    _resume(tmp_path, "fg-kill", steps)


@FULL_TIER  # the foreground case above runs in every suite: the same ending of orphaned services, with a resume
def test_orchestrator_sigkilled_detached_its_services_end_and_stop_ends_a_stopped_one(tmp_path):
    steps, name = 6000, "bg-kill"
    run_dir = tmp_path / name
    started = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            *SMALL,
            "--mode",
            "sync",
            "--workers",
            "2",
            "--steps",
            str(steps),
            "--sync-steps-per-iteration",
            "600",
            "--checkpoint-every-s",
            "1",
            "--output",
            str(tmp_path),
            "--run-name",
            name,
            "--detach",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stderr
    _wait(
        "a checkpoint and 1,200 transitions", lambda: _consumed(run_dir, name) >= 1200 and _has_checkpoint(run_dir), 180
    )
    state = json.loads((run_dir / "state.json").read_text())
    wedged = next(p["pid"] for p in state["processes"] if p["name"] == "rollout-1")
    os.kill(wedged, signal.SIGSTOP)
    os.kill(state["orchestrator_pid"], signal.SIGKILL)
    took = _wait(
        "every process but the stopped one to end",
        lambda: _left(run_dir) and all(line.startswith(f"{wedged}:") for line in _left(run_dir)),
        ENDS_WITHIN_S,
    )
    print(f"\nthe orphaned processes ended {took:.1f} s after the orchestrator")

    shown = run_cli(["status", name, "--output", str(tmp_path)], timeout=60)
    assert "gone without a summary" in shown.stdout, shown.stdout
    stopped = run_cli(["stop", name, "--output", str(tmp_path)], timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "ended what it left running: rollout-1" in stopped.stderr, stopped.stderr
    assert not _left(run_dir)
    shown = run_cli(["status", name, "--output", str(tmp_path)], timeout=60)
    assert shown.stdout.startswith(f"run {name}: finished (failed: the orchestrator"), shown.stdout
    log = (run_dir / "logs" / "rollout-0.log").read_text()
    assert log.count("WARNING") < 50, "an orphaned worker kept writing warnings"
    _resume(tmp_path, name, steps)


def test_a_policy_wait_ends_on_a_stop_request_while_the_server_is_gone(tmp_path):
    """The SYNC worker's spin: ``wait_for`` retried a failing subscribe until its timeout without asking
    ``should_stop``, so a worker asked to stop (its orchestrator gone, its server with it) went on for minutes."""
    from drl.memory import open_memory
    from drl.memory.redis.server import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    memory = open_memory(server.url, "gone", retry_s=1.0)
    announcements = memory.announcements()
    server.stop()
    started = time.monotonic()
    try:
        assert announcements.wait_for(1, timeout=60.0, should_stop=lambda: True) == -1
    finally:
        announcements.close()
        memory.close()
    assert time.monotonic() - started < 10.0, "the wait did not ask should_stop while the server was gone"
