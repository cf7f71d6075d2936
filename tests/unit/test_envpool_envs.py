"""EnvPool's vector env (``drl.envs.PoolVecEnv``) holds to the gymnasium path's Atari rules (``drl.atari``):
the same spaces and wire dtypes, a training episode ended by each lost life while the game goes on, rewards
clipped for training, the game's real score over whole games, and stacks the frame log can rebuild. The two
paths' random streams differ, so they are compared in distribution, not step by step."""

from collections import deque

import numpy as np
import pytest

from drl import atari
from drl.envs import PoolVecEnv, VecEnv, make_vec_env
from drl.errors import UserError

pytestmark = pytest.mark.skipif(not atari.envpool_available(), reason="the envpool extra is not installed")

N = 4


def play(envs: VecEnv, games: int, max_steps: int = 60_000):
    """Random play until ``games`` whole games ended; returns the step outputs and the real scores."""
    envs.log_frames(4096)
    envs.finished_returns = deque()
    outs = []
    steps = 0
    while len(envs.finished_returns) < games and steps < max_steps:
        outs.append(envs.step(envs.random_actions()))
        steps += envs.num_envs
    return outs, list(envs.finished_returns)


@pytest.fixture(params=["gymnasium", "envpool"])
def backend(request):
    return request.param


def test_both_paths_give_the_same_spaces_and_wire_dtypes():
    gym_envs = make_vec_env("ALE/Pong-v5", N, seed=1, backend="gymnasium")
    pool = make_vec_env("ALE/Pong-v5", N, seed=1, backend="envpool", threads=1)
    try:
        assert isinstance(pool, PoolVecEnv) and type(gym_envs) is VecEnv
        assert pool.spec == gym_envs.spec
        assert pool.obs.shape == gym_envs.obs.shape == (N, 4, 84, 84) and pool.obs.dtype == np.uint8
        a, b = gym_envs.step(gym_envs.random_actions()), pool.step(pool.random_actions())
        assert {k: (v.dtype, v.shape) for k, v in a.items()} == {k: (v.dtype, v.shape) for k, v in b.items()}
    finally:
        gym_envs.close()
        pool.close()


def test_a_lost_life_ends_a_training_episode_and_the_game_goes_on(backend):
    envs = make_vec_env("ALE/Breakout-v5", N, seed=3, backend=backend, threads=1)
    try:
        outs, scores = play(envs, games=8)
    finally:
        envs.close()
    ends = sum(int(o["terminated"].sum()) for o in outs)
    rewards = np.concatenate([o["reward"] for o in outs])
    assert len(scores) >= 8
    assert 4 * len(scores) <= ends <= 5 * (len(scores) + N), (ends, len(scores))
    assert set(np.unique(rewards)) <= {0.0, 1.0}
    assert max(scores) > 0 and sum(scores) >= rewards.sum() - N * 5 * 7


def test_real_scores_count_unclipped_rewards(backend):
    """Space Invaders pays 5 to 30 points an alien: the real scores are those points, the training rewards 1s."""
    envs = make_vec_env("ALE/SpaceInvaders-v5", N, seed=5, backend=backend, threads=1)
    try:
        outs, scores = play(envs, games=N)
    finally:
        envs.close()
    rewards = np.concatenate([o["reward"] for o in outs])
    assert set(np.unique(rewards)) <= {0.0, 1.0}
    assert all(s % 5 == 0 for s in scores) and sum(scores) > 3 * rewards.sum(), (scores, rewards.sum())


def test_pong_games_look_alike_on_both_paths():
    """Random play loses Pong 21 to a handful, in about 800 agent steps a game, on either path."""
    summaries = {}
    for backend in ("gymnasium", "envpool"):
        envs = make_vec_env("ALE/Pong-v5", N, seed=7, backend=backend, threads=1)
        try:
            outs, scores = play(envs, games=N)
        finally:
            envs.close()
        steps = len(outs) * N
        summaries[backend] = (np.mean(scores), steps / len(scores))
        assert all(-21 <= s <= -15 for s in scores), (backend, scores)
    (gym_score, gym_len), (pool_score, pool_len) = summaries["gymnasium"], summaries["envpool"]
    assert abs(gym_score - pool_score) <= 3
    assert 0.6 < pool_len / gym_len < 1.6, summaries


def test_the_frame_log_rebuilds_every_stack_envpool_made():
    envs = make_vec_env("ALE/Breakout-v5", N, seed=9, backend="envpool", threads=1)
    try:
        envs.log_frames(8192)
        checked = 0
        for _ in range(600):
            out = envs.step(envs.random_actions())
            for i in range(N):
                assert np.array_equal(envs.frames.get(envs.ids[i]), envs.obs[i])
                if not out["terminated"][i] and not out["truncated"][i]:
                    continue
                checked += 1
            for j in range(N):
                assert np.array_equal(envs.frames.get(out["obs"][j][1:]), envs.frames.get(out["next_obs"][j][:-1]))
    finally:
        envs.close()
    assert checked > 0


def test_envpool_is_refused_clearly_where_it_cannot_serve():
    with pytest.raises(UserError, match="ALE -v5"):
        make_vec_env("CartPole-v1", 2, seed=0, backend="envpool")
    assert type(make_vec_env("CartPole-v1", 2, seed=0, backend="auto")) is VecEnv
