"""PPO must learn CartPole-v1 for real through the whole distributed system: SYNC mode, 4 workers.

Goal (issue: algorithms): mean evaluation return of at least 475 within 150,000 env steps. The run stops once the
evaluator sees the target; the evaluated version's env steps are checked too.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import read_summary, run_cli

TARGET = 475.0
BUDGET = 150_000


@pytest.mark.learning
def test_ppo_cartpole_reaches_target(tmp_path):
    run = "learn-ppo-cartpole"
    proc = run_cli(["--preset", "ppo", "--env", "CartPole-v1", "--workers", "4", "--mode", "sync", "--seed", "0",
                    "--steps", str(BUDGET), "--target-return", str(TARGET), "--output", str(tmp_path),
                    "--run-name", run], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    config = json.loads((tmp_path / run / "config.json").read_text())
    evaluations = [json.loads(line) for line in (tmp_path / run / "evaluations.jsonl").read_text().splitlines()]
    reached = [e for e in evaluations if e["mean_return"] >= TARGET]
    print(json.dumps({k: summary[k] for k in ("mode", "env_steps", "updates", "best_eval_return", "wall_seconds")}))
    assert (config["algorithm"], config["mode"], config["workers"]) == ("ppo", "sync", 4)
    assert summary["exit_reason"] == "target_reached"
    assert summary["env_steps"] <= BUDGET
    assert reached and reached[0]["env_steps"] <= BUDGET and len(reached[0]["returns"]) == 10
