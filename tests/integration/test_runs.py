"""Tiny end-to-end runs through the real CLI, real processes and a real Valkey/Redis server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, processes_mentioning, read_summary, run_cli

SUMMARY_KEYS = {
    "run",
    "preset",
    "env",
    "mode",
    "workers",
    "env_steps",
    "updates",
    "policy_version",
    "transitions_produced",
    "transitions_consumed",
    "duplicates_dropped",
    "best_eval_return",
    "last_eval_return",
    "wall_seconds",
    "exit_reason",
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_worker_run_accounts_for_every_transition(tmp_path, mode):
    run = f"tiny-{mode}"
    proc = run_cli(
        [
            "--preset",
            "sac",
            "--env",
            "Pendulum-v1",
            "--workers",
            "2",
            "--steps",
            "2000",
            "--mode",
            mode,
            "--eval-episodes",
            "2",
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / run
    summary = read_summary(run_dir)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["exit_reason"] == "steps_done"
    assert summary["env_steps"] == 2000
    assert summary["transitions_produced"] == 2000
    assert summary["transitions_consumed"] == 2000
    assert summary["transitions_unconsumed"] == 0
    assert summary["duplicates_dropped"] == 0
    assert summary["updates"] == 1000  # replay ratio 1 after 1000 learning-start transitions
    evaluations = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    assert evaluations, "the evaluator wrote no result"
    assert evaluations[-1]["version"] == summary["policy_version"], "the final policy was not evaluated"
    assert all(len(e["returns"]) == 2 for e in evaluations)
    assert summary["last_eval_return"] == evaluations[-1]["mean_return"]
    assert not processes_mentioning(f"DRL_RUN={run}")


def test_external_memory_url_is_used(tmp_path, redis_server, redis_client):
    run = "external-memory"
    proc = run_cli(
        [
            "--workers",
            "1",
            "--steps",
            "300",
            "--random-steps",
            "300",
            "--learning-starts",
            "200",
            "--eval-episodes",
            "1",
            "--memory",
            redis_server.url,
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / run / "redis").exists(), "a private server was started although --memory was given"
    assert redis_client.hget(f"drl:{{{run}}}:produced", "rollout-0") == b"300"
    assert read_summary(tmp_path / run)["transitions_consumed"] == 300


def _start(tmp_path, run, steps="200000", extra=()):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "--workers",
            "2",
            "--steps",
            steps,
            *extra,
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until_running(tmp_path, run, proc, timeout=120):
    """Waits until the trainer has started and both workers exist, then lets the run go on a little."""
    log = tmp_path / run / "logs" / "trainer.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if log.exists() and "trainer of run" in log.read_text() and len(_rollout_pids(tmp_path / run)) == 2:
            time.sleep(3)
            return
        time.sleep(0.2)
    raise AssertionError("the run did not start")


def _rollout_pids(run_dir) -> dict[int, int]:
    """worker index -> pid of the run's live rollout processes, as the orchestrator records them (state.json)."""
    from drl.process import pid_alive

    try:
        processes = json.loads((run_dir / "state.json").read_text())["processes"]
    except (OSError, ValueError, KeyError):
        return {}
    return {
        int(p["name"].rpartition("-")[2]): p["pid"]
        for p in processes
        if p["role"] == "rollout" and p["exit_code"] is None and pid_alive(p["pid"])
    }


def _niceness(pid: int) -> tuple[int, int | None]:
    """A process's niceness and its scheduling group's (None where the kernel has no groups)."""
    nice = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])
    try:
        group = int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[1])
    except (OSError, IndexError, ValueError):
        group = None
    return nice, group


def test_each_service_runs_as_nice_as_its_role_asks_with_its_session_group(tmp_path):
    """Workers 5 steps nicer than the trainer; beside a trainer that takes every CPU, the evaluator 19 steps, its
    session's scheduling group too (or the kernel would weigh its session as the trainer's equal)."""
    run = "niceness"
    proc = _start(tmp_path, run, extra=("--trainer-threads", "0"))
    try:
        _wait_until_running(tmp_path, run, proc)
        processes = json.loads((tmp_path / run / "state.json").read_text())["processes"]
        seen = {p["role"]: _niceness(p["pid"]) for p in processes}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    grouped = Path("/proc/self/autogroup").exists()
    for role, nice, group in (("trainer", 0, 0), ("rollout", 5, 0), ("evaluator", 19, 19)):
        assert seen[role] == (nice, group if grouped else None), role


def test_the_evaluators_group_returns_to_niceness_0_once_the_trainer_has_finished(tmp_path):
    """The run's end waits for the evaluator's last evaluation: from then on a busy machine must not hold it back
    at the lowest priority (its group niced beside a trainer that takes every CPU)."""
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel does not group processes by session (no /proc/self/autogroup)")
    run = "raised"
    extra = ("--preset", "sac", "--env", "Pendulum-v1", "--trainer-threads", "0", "--eval-episodes", "300")
    proc = _start(tmp_path, run, steps="2000", extra=extra)
    seen: list[tuple[bool, int | None]] = []
    try:
        _wait_until_running(tmp_path, run, proc)
        processes = json.loads((tmp_path / run / "state.json").read_text())["processes"]
        pids = {p["role"]: p["pid"] for p in processes}
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            trainer_alive = Path(f"/proc/{pids['trainer']}").exists()
            try:
                group = _niceness(pids["evaluator"])[1]
            except OSError:
                group = None
            if not seen or seen[-1] != (trainer_alive, group):
                seen.append((trainer_alive, group))
            if not trainer_alive and group == 0:
                break
            time.sleep(0.1)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert (True, 19) in seen, seen
    assert (False, 0) in seen, seen


def test_ctrl_c_stops_every_process(tmp_path):
    run = "interrupted"
    proc = _start(tmp_path, run)
    _wait_until_running(tmp_path, run, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert read_summary(tmp_path / run)["exit_reason"] == "interrupted"
    assert not processes_mentioning(f"DRL_RUN={run}")
    assert not processes_mentioning(str(tmp_path / run / "redis"))


def test_failing_process_stops_the_run_when_restarts_are_off(tmp_path):
    run = "failing"
    proc = _start(tmp_path, run, extra=("--max-restarts", "0"))
    _wait_until_running(tmp_path, run, proc)
    os.kill(_rollout_pids(tmp_path / run)[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["exit_reason"].startswith("failed: rollout-1 exited with code -9 after 0 restarts")
    assert summary["restarts"] == {"trainer": 0, "rollout": 0, "evaluator": 0, "memory": 0}
    assert not processes_mentioning(f"DRL_RUN={run}")
    assert not processes_mentioning(str(tmp_path / run / "redis"))
