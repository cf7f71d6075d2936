"""Rollout workers stepping their Atari games in EnvPool (``--vector-env envpool``) through the real command line:
an off-policy preset (n-step folding into the trainer's replay frame ring) and APPO (the actor's recorded
log-probabilities beside each row) each run to their steps with every transition counted once, frames sent once."""

from __future__ import annotations

import pytest

from drl import atari
from tests.conftest import read_summary, run_cli

pytestmark = pytest.mark.skipif(not atari.envpool_available(), reason="the envpool extra is not installed")


@pytest.mark.parametrize("preset", ["dqn-atari", "appo-atari"])
def test_a_run_steps_its_games_in_envpool_and_counts_every_transition(preset, tmp_path):
    steps = 3000
    args = ["--preset", preset, "--env", "ALE/Pong-v5", "--vector-env", "envpool", "--workers", "2"]
    args += ["--envs-per-worker", "4", "--steps", str(steps), "--eval-episodes", "1"]
    args += ["--learning-starts", "1000", "--output", str(tmp_path), "--run-name", preset]
    done = run_cli(args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = read_summary(tmp_path / preset)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == steps
    assert summary["updates"] > 0
    for worker in ("rollout-0", "rollout-1"):
        log = (tmp_path / preset / "logs" / f"{worker}.log").read_text()
        assert f"{worker} steps 4 envs: EnvPool" in log, log[-2000:]
