"""Whole runs whose experience travels in two streams (``--memory-shards 2``): rollout worker i appends to stream
i mod 2, the trainer reads both, and every transition is counted once, per stream and in total; a trainer
SIGKILLed mid-run resumes each stream from what its reader committed."""

from __future__ import annotations

import json
import os
import signal

import pytest

from orchestrator.backends.local.run import latest_checkpoint_meta
from tests.conftest import read_summary, run_cli
from tests.faults.test_supervision import Run, _accounts_for_everything
from tests.harness import FULL_TIER, assert_balanced

SMALL = ["--preset", "sac", "--env", "Pendulum-v1", "--sac.hidden", "16,16", "--sac.batch-size", "32",
         "--eval-episodes", "1", "--learning-starts", "300", "--updates-per-transition", "0.25"]


def produced_by_worker(run_dir) -> dict[str, int]:
    state = json.loads((run_dir / "state.json").read_text())
    return {p["name"]: int(p["last_status"]["produced"]) for p in state["processes"] if p["role"] == "rollout"}


def shard_counters(tmp_path, run: str) -> dict[int, dict[str, int]]:
    meta = latest_checkpoint_meta(str(tmp_path), run)
    return {int(s): part["counters"] for s, part in meta["shards"].items()}


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_a_run_over_two_shards_counts_every_transition_once_per_shard(tmp_path, mode):
    steps, run = 6000, f"shards-{mode}"
    proc = run_cli([*SMALL, "--mode", mode, "--workers", "3", "--memory-shards", "2", "--steps", str(steps),
                    "--output", str(tmp_path), "--run-name", run], timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = read_summary(tmp_path / run)
    assert_balanced(summary)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == steps
    assert summary["duplicates_dropped"] == 0
    produced = produced_by_worker(tmp_path / run)
    shards = shard_counters(tmp_path, run)
    assert set(shards) == {0, 1}
    assert shards[0]["consumed"] == produced["rollout-0"] + produced["rollout-2"] > 0
    assert shards[1]["consumed"] == produced["rollout-1"] > 0
    assert latest_checkpoint_meta(str(tmp_path), run)["counters"]["consumed"] == steps


def test_a_sigkilled_trainer_resumes_both_shards_from_their_committed_state(tmp_path):
    steps = 6000
    run = Run(tmp_path, "kill-trainer-shards", ["--mode", "async", "--workers", "3", "--memory-shards", "2",
                                                 "--steps", str(steps), "--checkpoint-every-s", "1",
                                                 "--publish-every-updates", "25"])
    run.wait_until("a checkpoint and 2,000 transitions", lambda: run.consumed() >= 2000
                   and any((run.dir / "checkpoints").glob("c*/manifest.json")))
    os.kill(run.pid("trainer"), signal.SIGKILL)
    summary, _ = run.finish()
    _accounts_for_everything(summary, steps)
    assert summary["restarts"]["trainer"] == 1
    assert "continuing: " in (run.dir / "logs" / "trainer.log").read_text(), "the trainer did not resume"
    shards = shard_counters(tmp_path, run.name)
    assert sum(part["consumed"] for part in shards.values()) == summary["transitions_consumed"]
    produced = produced_by_worker(run.dir)
    assert shards[1]["consumed"] == produced["rollout-1"]
