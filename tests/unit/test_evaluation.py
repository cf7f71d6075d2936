"""Evaluation episodes run side by side give the returns of the same episodes run one by one."""

from __future__ import annotations

import pytest

from drl.acting.evaluation import run_episodes
from drl.algorithms.dqn import DQNActor, DQNConfig
from drl.algorithms.sac import SACActor, SACConfig
from drl.envs import space_spec


@pytest.mark.parametrize(
    "env_id,make",
    [
        ("Pendulum-v1", lambda spec: SACActor(spec, SACConfig(hidden=(16, 16)), seed=0)),
        ("CartPole-v1", lambda spec: DQNActor(spec, DQNConfig(hidden=(16, 16)), seed=0)),
    ],
)
def test_side_by_side_episodes_equal_single_ones(env_id, make):
    actor = make(space_spec(env_id))
    together = run_episodes(env_id, actor, 4, seed=7)
    alone = [run_episodes(env_id, actor, 1, seed=7 + i)[0] for i in range(4)]
    assert together == pytest.approx(alone, rel=1e-4, abs=1e-3)
    assert len(set(together)) > 1  # different seeds, different episodes


def test_max_steps_cuts_every_episode():
    actor = DQNActor(space_spec("CartPole-v1"), DQNConfig(hidden=(8,)), seed=0)
    returns = run_episodes("CartPole-v1", actor, 3, seed=0, max_steps=5)
    assert all(r <= 5 for r in returns)
