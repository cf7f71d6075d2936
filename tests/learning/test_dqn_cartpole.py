"""DQN (double, 3-step returns) must learn CartPole-v1 for real through the whole distributed system, in both
modes, once with prioritized replay and worker-computed (Ape-X) priorities.

Goal (issue: algorithms): best evaluation return of at least 475 within 100,000 env steps.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import read_summary, run_cli

TARGET = 475.0
BUDGET = 100_000


@pytest.mark.learning
@pytest.mark.parametrize("mode,extra", [("sync", []), ("async", ["--prioritized", "true",
                                                                 "--worker-priorities", "true"])])
def test_dqn_cartpole_reaches_target(tmp_path, mode, extra):
    run = f"learn-dqn-cartpole-{mode}"
    proc = run_cli(["--preset", "dqn", "--env", "CartPole-v1", "--workers", "2", "--mode", mode, "--seed", "0",
                    "--steps", str(BUDGET), "--target-return", str(TARGET), "--output", str(tmp_path),
                    "--run-name", run, *extra], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    evaluations = [json.loads(line) for line in (tmp_path / run / "evaluations.jsonl").read_text().splitlines()]
    reached = [e for e in evaluations if e["mean_return"] >= TARGET]
    print(json.dumps({k: summary[k] for k in ("mode", "env_steps", "updates", "best_eval_return", "wall_seconds")}))
    assert summary["exit_reason"] == "target_reached"
    assert summary["best_eval_return"] >= TARGET
    assert reached and reached[0]["env_steps"] <= BUDGET
