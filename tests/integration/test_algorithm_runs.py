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


def _run(tmp_path, run: str, args: list[str]) -> dict:
    proc = run_cli([*args, "--eval-episodes", "1", "--output", str(tmp_path), "--run-name", run], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary.get("stale_dropped", 0)
    assert summary["duplicates_dropped"] == 0
    return summary


def test_ppo_iterations_with_vectorised_envs_and_merged_statistics(tmp_path):
    run = "ppo-pendulum"
    summary = _run(tmp_path, run, ["--preset", "ppo", "--env", "Pendulum-v1", "--workers", "2",
                                   "--envs-per-worker", "3", "--steps", "1536", "--sync-steps-per-iteration", "512",
                                   "--ppo.epochs", "2", "--ppo.minibatches", "4"])
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
    summary = _run(tmp_path, f"dqn-{mode}", ["--preset", "dqn", "--workers", "2", "--envs-per-worker", "3",
                                             "--mode", mode, "--steps", "3000", "--prioritized", "true",
                                             "--worker-priorities", "true", "--learning-starts", "500"])
    assert summary["transitions_consumed"] == 3000
    assert summary["updates"] == (3000 - 500) // 2  # updates_per_transition 0.5


@pytest.mark.parametrize("preset", ["sac", "td3"])
def test_prioritized_replay_runs(tmp_path, preset):
    summary = _run(tmp_path, f"{preset}-per", ["--preset", preset, "--workers", "2", "--mode", "async",
                                               "--steps", "1500", "--prioritized", "true"])
    assert summary["transitions_consumed"] == 1500
    assert summary["updates"] == 500
