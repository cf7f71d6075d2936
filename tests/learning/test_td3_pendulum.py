"""TD3 must learn Pendulum-v1 for real through the whole distributed system, in both modes.

Goal: mean evaluation return of at least -200 within 20,000 env steps with 2 workers, with the ``td3`` preset.
The run stops once the evaluator sees the target; the evaluated version's env steps are checked too. With the
preset, seeds 0-2 reach the target after about 3,000-7,000 env steps in either mode (roughly 15-30 s each).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import read_summary, run_cli

TARGET = -200.0
BUDGET = 20_000


@pytest.mark.learning
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_td3_pendulum_reaches_target(tmp_path, mode):
    run = f"learn-td3-pendulum-{mode}"
    proc = run_cli(["--preset", "td3", "--env", "Pendulum-v1", "--workers", "2", "--mode", mode, "--seed", "0",
                    "--steps", str(BUDGET), "--target-return", str(TARGET), "--output", str(tmp_path),
                    "--run-name", run], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    config = json.loads((tmp_path / run / "config.json").read_text())
    evaluations = [json.loads(line) for line in (tmp_path / run / "evaluations.jsonl").read_text().splitlines()]
    reached = [e for e in evaluations if e["mean_return"] >= TARGET]
    print(json.dumps({k: summary[k] for k in ("mode", "env_steps", "updates", "best_eval_return", "wall_seconds")}))
    assert config["algorithm"] == "td3"
    assert summary["exit_reason"] == "target_reached"
    assert summary["best_eval_return"] >= TARGET
    assert summary["env_steps"] <= BUDGET
    assert reached and reached[0]["env_steps"] <= BUDGET
    assert len(reached[0]["returns"]) == 10
