"""Live scaling of a local run: rollout workers added and removed while it goes on, with exact accounting."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import read_summary, run_cli, run_client
from tests.harness import FULL_TIER, wait_until

STEPS = 25_000
"""Scaling follows the run's progress and the new worker's first entry, not the clock, so that the scale down comes
well before the end on a fast machine too; the one worker left collects the rest."""
SMALL = [
    "--sac.hidden",
    "16,16",
    "--sac.batch-size",
    "32",
    "--updates-per-transition",
    "0.25",
    "--eval-episodes",
    "1",
    "--workers",
    "2",
    "--steps",
    str(STEPS),
]


def _wait_for(run_dir, what: str, check, timeout: float = 120) -> None:
    """Waits until check(client of the run's memory server) is true."""
    client = run_client(run_dir)
    try:
        wait_until(lambda: check(client), timeout, what, every=0.2)
    finally:
        client.close()


def _summary(run_dir, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (run_dir / "summary.json").exists():
        time.sleep(0.5)
    return read_summary(run_dir)


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_scale_up_and_down_during_a_run_loses_nothing(tmp_path, mode):
    run = f"scale-{mode}"
    started = run_cli([*SMALL, "--mode", mode, "--output", str(tmp_path), "--run-name", run, "--detach"], timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    run_dir = tmp_path / run
    _wait_for(
        run_dir,
        "2,000 transitions consumed",
        lambda c: int(c.hget(f"drl:{{{run}}}:status:trainer", "transitions_consumed") or 0) >= 2000,
    )
    up = run_cli(["scale", run, "--workers", "3", "--output", str(tmp_path)], timeout=180)
    assert up.returncode == 0, up.stderr[-2000:]
    assert "rollout-2" in up.stderr
    status = run_cli(["status", run, "--output", str(tmp_path)], timeout=60)
    assert "rollout-2" in status.stdout
    _wait_for(run_dir, "rollout-2 to produce", lambda c: int(c.hget(f"drl:{{{run}}}:produced", "rollout-2") or 0) > 0)
    down = run_cli(["scale", run, "--workers", "1", "--output", str(tmp_path)], timeout=180)
    assert down.returncode == 0, down.stderr[-2000:]
    assert "collects with 1 rollout workers" in down.stderr or "collects with 0" in down.stderr

    summary = _summary(run_dir)
    state = json.loads((run_dir / "state.json").read_text())
    rollouts = [p for p in state["processes"] if p["role"] == "rollout"]
    assert len(rollouts) >= 3 and all(p["exit_code"] == 0 for p in rollouts)
    assert summary["exit_reason"] == "steps_done"
    assert [h["workers"] for h in summary["workers_history"]] == [2, 3, 1] and summary["workers"] == 1
    assert summary["workers_history"][1]["env_steps"] <= summary["workers_history"][2]["env_steps"] <= STEPS
    assert summary["env_steps"] == STEPS
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary["stale_dropped"]
    assert summary["transitions_unconsumed"] == 0 and summary["duplicates_dropped"] == 0


def test_scale_refuses_bad_input(tmp_path):
    proc = run_cli(["scale", "nope", "--workers", "2", "--output", str(tmp_path)], timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    proc = run_cli(["scale", "nope", "--workers", "0", "--output", str(tmp_path)], timeout=60)
    assert proc.returncode == 2 and "--workers must be a positive integer" in proc.stderr
