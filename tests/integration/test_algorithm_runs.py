"""Tiny end-to-end runs of every algorithm's own data path through the real CLI, processes and Valkey server:
PPO's on-policy iterations with vectorised envs and observation statistics, DQN's n-step transitions with
worker-computed priorities, prioritized replay for SAC and TD3. Transition accounting must be exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from drl.store import PolicyStore, run_store
from tests.conftest import read_summary, run_cli
from tests.harness import FULL_TIER

LAG_NOTE = "policy versions old when the trainer is the bound"


def _run(tmp_path, run: str, args: list[str], lag_noted: bool = False) -> dict:
    """The run's summary, checked to balance; ``lag_noted``: whether its start noted a large policy lag."""
    proc = run_cli([*args, "--eval-episodes", "1", "--output", str(tmp_path), "--run-name", run], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (LAG_NOTE in proc.stderr) == lag_noted, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary.get("stale_dropped", 0)
    assert summary["duplicates_dropped"] == 0
    return summary


def test_ppo_iterations_with_vectorised_envs_and_merged_statistics(tmp_path):
    run = "ppo-pendulum"
    summary = _run(
        tmp_path,
        run,
        [
            "--preset",
            "ppo",
            "--env",
            "Pendulum-v1",
            "--workers",
            "2",
            "--envs-per-worker",
            "3",
            "--steps",
            "1536",
            "--sync-steps-per-iteration",
            "512",
            "--ppo.epochs",
            "2",
            "--ppo.minibatches",
            "4",
        ],
    )
    config = json.loads((tmp_path / run / "config.json").read_text())
    assert config["ppo"]["normalize_obs"] is True
    assert summary["transitions_consumed"] == 1536
    assert summary["updates"] == 3 * 2 * 4  # 3 iterations x epochs x minibatches
    policies = PolicyStore(run_store(str(tmp_path), run), run)
    _, weights = policies.load(summary["policy_version"])
    # the statistics shipped with the final policy were merged from every transition of every worker
    assert weights["norm.count"] == 1536
    assert np.all(weights["norm.var"] > 0) and not np.allclose(weights["norm.mean"], 0)


@pytest.mark.parametrize("mode", [pytest.param("sync", marks=FULL_TIER), "async"])
def test_dqn_nstep_with_worker_priorities(tmp_path, mode):
    summary = _run(
        tmp_path,
        f"dqn-{mode}",
        [
            "--preset",
            "dqn",
            "--workers",
            "2",
            "--envs-per-worker",
            "3",
            "--mode",
            mode,
            "--steps",
            "3000",
            "--prioritized",
            "true",
            "--worker-priorities",
            "true",
            "--learning-starts",
            "500",
        ],
    )
    assert summary["transitions_consumed"] == 3000
    assert summary["updates"] == (3000 - 500) // 2  # updates_per_transition 0.5


@pytest.mark.parametrize("preset", ["sac", pytest.param("td3", marks=FULL_TIER)])
def test_prioritized_replay_runs(tmp_path, preset):
    summary = _run(
        tmp_path,
        f"{preset}-per",
        ["--preset", preset, "--workers", "2", "--mode", "async", "--steps", "1500", "--prioritized", "true"],
    )
    assert summary["transitions_consumed"] == 1500
    assert summary["updates"] == 500


def test_appo_consumes_fixed_segments_once_and_reports_the_policy_lag(tmp_path):
    """4 workers of 2 envs send segments of 16 steps (32 transitions) with their behaviour log-probabilities;
    the trainer trains on each batch of 128 transitions once (2 epochs x 2 minibatches of whole segments), so
    4,096 steps are 32 batches, and the lag of every trained transition is in the histogram."""
    from drl.tensorboard import parse_buckets
    from orchestrator.state import read_state
    from orchestrator.status import lag_line

    run = "appo-cartpole"
    summary = _run(
        tmp_path,
        run,
        [
            "--preset",
            "appo",
            "--env",
            "CartPole-v1",
            "--workers",
            "4",
            "--envs-per-worker",
            "2",
            "--steps",
            "4096",
            "--appo.segment",
            "16",
            "--appo.batch-size",
            "128",
            "--appo.epochs",
            "2",
            "--appo.minibatches",
            "2",
            "--publish-every-updates",
            "4",
        ],
    )
    assert summary["mode"] == "async" and summary["transitions_consumed"] == 4096
    assert summary["updates"] == 4096 // 128 * 2 * 2
    lag = summary["policy_lag"]
    assert sum(lag["histogram"].values()) == 4096 and lag["dropped"] == 0
    assert 0 <= lag["mean"] <= lag["max"] and lag["max"] <= summary["policy_version"]
    trainer = next(p for p in read_state(tmp_path / run).processes if p.role == "trainer").last_status
    assert sum(c for _, c in parse_buckets(trainer["policy_lag"])) == 4096
    assert lag_line(trainer).startswith("policy lag (versions): ")


def test_appo_drops_and_counts_segments_older_than_the_lag_limit(tmp_path):
    """A trainer that publishes at every update while 4 workers send faster than it learns, behind a backlog of
    32 entries (so the start notes that the data will be many versions old): with --max-policy-lag 1 the segments
    collected more than one version before the newest are dropped and counted, the rest trained, and the summary
    still balances (drops count as consumed)."""
    run = "appo-lag"
    summary = _run(
        tmp_path,
        run,
        [
            "--preset",
            "appo",
            "--env",
            "CartPole-v1",
            "--workers",
            "4",
            "--steps",
            "4096",
            "--appo.segment",
            "16",
            "--appo.batch-size",
            "64",
            "--max-policy-lag",
            "1",
            "--publish-every-updates",
            "1",
            "--max-backlog-entries",
            "32",
        ],
        lag_noted=True,
    )
    lag = summary["policy_lag"]
    assert lag["dropped"] > 0 and lag["max"] <= 1
    assert lag["dropped"] + sum(lag["histogram"].values()) + 64 > summary["transitions_consumed"]
    assert lag["dropped"] + sum(lag["histogram"].values()) <= summary["transitions_consumed"]
