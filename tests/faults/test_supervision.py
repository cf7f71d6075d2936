"""Faults during whole runs through the real CLI: the orchestrator restarts what crashed, was killed or hung,
and the run completes with every transition accounted for and the restarts counted per role."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, processes_mentioning, read_summary, run_cli, run_client
from tests.harness import FULL_TIER, assert_balanced

SMALL = [
    "--sac.hidden",
    "16,16",
    "--sac.batch-size",
    "32",
    "--eval-episodes",
    "1",
    "--learning-starts",
    "300",
    "--random-steps",
    "300",
    "--updates-per-transition",
    "0.25",
]


class Run:
    """A foreground ``drl-orchestrate`` run in a subprocess, and the pids its state.json names."""

    def __init__(self, tmp_path: Path, name: str, args: list[str]):
        self.name = name
        self.dir = tmp_path / name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", *SMALL, *args, "--output", str(tmp_path), "--run-name", name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def state(self) -> dict:
        try:
            return json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def pid(self, name: str) -> int:
        return next(p["pid"] for p in self.state()["processes"] if p["name"] == name)

    def status(self, name: str) -> dict:
        client = run_client(self.dir)
        try:
            raw = client.hgetall(f"drl:{{{self.name}}}:status:{name}")
        finally:
            client.close()
        return {k.decode(): v.decode() for k, v in raw.items()}

    def wait_until(self, what: str, check, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (
                f"the run ended while waiting for {what}: {self.proc.stderr.read()[-3000:]}"
            )
            try:
                if check():
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    def consumed(self) -> int:
        return int(self.status("trainer").get("transitions_consumed") or 0)

    def finish(self, timeout: float = 300) -> tuple[dict, str]:
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err[-4000:]
        summary = read_summary(self.dir)
        assert_balanced(summary)
        assert not processes_mentioning(f"DRL_RUN={self.name}")
        return summary, err


def _status_row(run: Run, name: str) -> list[str]:
    """The row of ``drl-orchestrate status RUN`` for one process, split into columns."""
    shown = run_cli(["status", run.name, "--output", str(run.dir.parent)], timeout=60)
    return next((line.split() for line in shown.stdout.splitlines() if line.startswith(name + " ")), [])


def _accounts_for_everything(summary: dict, steps: int) -> None:
    """Produced = consumed + counted drops, with nothing left in the stream."""
    dropped = sum(summary["dropped"].values())
    print(
        f"\n{summary['run']}: restarts {summary['restarts']}, produced {summary['transitions_produced']}, consumed "
        f"{summary['transitions_consumed']}, stale {summary['stale_dropped']}, dead letters "
        f"{summary['dead_lettered']}, duplicates dropped {summary['duplicates_dropped']}, unconsumed "
        f"{summary['transitions_unconsumed']}, {summary['wall_seconds']} s"
    )
    assert summary["exit_reason"] == "steps_done", summary
    assert summary["transitions_produced"] == steps, summary
    assert summary["transitions_consumed"] + dropped == steps, summary
    assert summary["transitions_unconsumed"] == 0, summary


@pytest.mark.parametrize("mode", [pytest.param("sync", marks=FULL_TIER), "async"])
def test_sigkilled_rollout_workers_are_restarted_and_every_transition_counted(tmp_path, mode):
    steps = 6000
    run = Run(
        tmp_path,
        f"kill-workers-{mode}",
        ["--mode", mode, "--workers", "3", "--steps", str(steps), "--sync-steps-per-iteration", "600"],
    )
    run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
    killed = [run.pid("rollout-0"), run.pid("rollout-2")]
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    run.wait_until(
        "both workers restarted", lambda: run.pid("rollout-0") not in killed and run.pid("rollout-2") not in killed
    )
    summary, err = run.finish()
    _accounts_for_everything(summary, steps)
    assert summary["restarts"] == {"trainer": 0, "rollout": 2, "evaluator": 0, "memory": 0}
    assert "rollout-0 exited with code -9; restarting it" in err
    assert {p["name"]: p["restarts"] for p in run.state()["processes"] if p["role"] == "rollout"} == {
        "rollout-0": 1,
        "rollout-1": 0,
        "rollout-2": 1,
    }


def test_sigkilled_trainer_is_restarted_and_resumes_from_its_checkpoint(tmp_path):
    steps = 6000
    run = Run(
        tmp_path,
        "kill-trainer",
        [
            "--mode",
            "async",
            "--workers",
            "2",
            "--steps",
            str(steps),
            "--checkpoint-every-s",
            "1",
            "--publish-every-updates",
            "25",
        ],
    )
    run.wait_until(
        "a checkpoint and 2,000 transitions",
        lambda: run.consumed() >= 2000 and any((tmp_path / "kill-trainer" / "checkpoints").glob("c*/manifest.json")),
    )
    version_before = int(run.status("trainer")["policy_version"])
    os.kill(run.pid("trainer"), signal.SIGKILL)
    summary, err = run.finish()
    _accounts_for_everything(summary, steps)
    assert summary["restarts"]["trainer"] == 1 and summary["restarts"]["rollout"] == 0
    assert summary["policy_version"] > version_before
    assert "continuing: " in (run.dir / "logs" / "trainer.log").read_text(), "the trainer did not resume"
    versions = [json.loads(line)["version"] for line in (run.dir / "evaluations.jsonl").read_text().splitlines()]
    assert versions == sorted(set(versions)), f"a policy version was evaluated twice or went back: {versions}"


def test_memory_server_sigkilled_is_started_again_and_the_run_completes(tmp_path):
    steps = 6000
    run = Run(tmp_path, "kill-memory", ["--mode", "async", "--workers", "2", "--steps", str(steps)])
    run.wait_until("1,500 transitions consumed", lambda: run.consumed() >= 1500)
    port = run.state()["memory_url"].rsplit(":", 1)[1].split("/")[0]
    server = [line for line in processes_mentioning(f"127.0.0.1:{port}") if "server" in line]
    assert len(server) == 1, server
    os.kill(int(server[0].split(":")[0]), signal.SIGKILL)
    summary, err = run.finish()
    assert summary["restarts"] == {"trainer": 0, "rollout": 0, "evaluator": 0, "memory": 1}
    assert "the memory server exited with code -9; starting it again" in err
    _accounts_for_everything(summary, steps)
    trainer = next(p for p in run.state()["processes"] if p["name"] == "trainer")
    assert int(trainer["last_status"]["memory_resets"]) >= 1


def test_evaluator_crash_is_restarted_while_training_goes_on(tmp_path):
    steps = 6000
    run = Run(
        tmp_path,
        "kill-evaluator",
        ["--mode", "async", "--workers", "2", "--steps", str(steps), "--publish-every-updates", "25"],
    )
    evaluations = run.dir / "evaluations.jsonl"
    run.wait_until("a first evaluation", lambda: evaluations.exists() and evaluations.read_text().strip())
    os.kill(run.pid("evaluator"), signal.SIGKILL)
    consumed_at_kill = run.consumed()
    summary, err = run.finish()
    _accounts_for_everything(summary, steps)
    assert summary["restarts"] == {"trainer": 0, "rollout": 0, "evaluator": 1, "memory": 0}
    assert summary["transitions_consumed"] > consumed_at_kill
    last = json.loads(evaluations.read_text().splitlines()[-1])
    assert last["version"] == summary["policy_version"], "the restarted evaluator did not evaluate the final policy"


def test_hung_worker_is_left_behind_by_sync_iterations_and_replaced(tmp_path):
    steps = 6000
    run = Run(
        tmp_path,
        "hung-worker",
        [
            "--mode",
            "sync",
            "--workers",
            "3",
            "--steps",
            str(steps),
            "--sync-steps-per-iteration",
            "600",
            "--sync-deadline-s",
            "2",
            "--hang-timeout-s",
            "12",
        ],
    )
    run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
    stopped = run.pid("rollout-1")
    os.kill(stopped, signal.SIGSTOP)
    version = int(run.status("trainer")["policy_version"])
    run.wait_until(
        "two iterations without rollout-1",
        lambda: int(run.status("trainer")["policy_version"]) >= version + 2 and run.pid("rollout-1") == stopped,
        timeout=60,
    )
    summary, err = run.finish()
    assert "rollout-1 gave no heartbeat for 12 s; killing it" in err
    assert summary["restarts"] == {"trainer": 0, "rollout": 1, "evaluator": 0, "memory": 0}
    _accounts_for_everything(summary, steps)


def test_a_restarted_worker_answers_status_and_hands_in_at_stop(tmp_path):
    run = Run(tmp_path, "restart-then-stop", ["--mode", "async", "--workers", "2", "--steps", "1000000"])
    run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
    killed = run.pid("rollout-1")
    os.kill(killed, signal.SIGKILL)
    run.wait_until(
        "rollout-1 restarted, running and reachable, its restart counted",
        lambda: (
            run.pid("rollout-1") != killed
            and _status_row(run, "rollout-1")[2:3] == ["running"]
            and _status_row(run, "rollout-1")[6] == "1"
        ),
        timeout=60,
    )
    stopped = run_cli(["stop", run.name, "--output", str(tmp_path)], timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    run.proc.communicate(timeout=120)
    summary = read_summary(run.dir)
    assert summary["exit_reason"] == "stopped"
    assert summary["restarts"]["rollout"] == 1
    assert summary["transitions_unconsumed"] == 0, "a worker did not hand in what it collected"
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary["stale_dropped"]
