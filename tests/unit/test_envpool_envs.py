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


def test_overlapped_halves_pair_each_action_and_record_with_the_observation_it_was_chosen_for():
    """``step_with`` acts on one half while the other steps; every row still holds the observation its action
    was chosen on, the fields recorded with that action, and the next observation the env then showed."""
    envs = make_vec_env("ALE/Breakout-v5", N, seed=11, backend="envpool", threads=2, overlap=True)
    assert len(envs.halves) == 2 and "one half while the other steps" in envs.describe()
    last: dict[str, np.ndarray] = {}

    def act(obs):
        actions = (obs.reshape(len(obs), -1).sum(1) // 7 % 4).astype(np.int64)
        last["tag"] = actions.astype(np.float32) + 0.5
        return actions

    out = envs.rows()
    out["tag"] = np.empty(N, np.float32)
    previous = None
    try:
        for _ in range(400):
            envs.step_with(act, out, 0, recorded=lambda: {"tag": last["tag"]})
            np.testing.assert_array_equal(out["action"], act(out["obs"]))
            np.testing.assert_array_equal(out["tag"], out["action"] + 0.5)
            if previous is not None:
                going = ~(previous["terminated"].astype(bool) | previous["truncated"].astype(bool))
                np.testing.assert_array_equal(out["obs"][going], previous["next_obs"][going])
            previous = {k: v.copy() for k, v in out.items()}
        with pytest.raises(RuntimeError, match="in flight"):
            envs.step_into(envs.random_actions(), out, 0)
    finally:
        envs.close()


def test_acting_through_step_with_matches_step_into_without_overlap():
    envs = make_vec_env("ALE/Pong-v5", N, seed=13, backend="envpool", threads=1)
    try:
        assert len(envs.halves) == 1
        out = envs.rows()
        envs.step_with(lambda obs: np.zeros(len(obs), np.int64), out, 0)
        assert (out["action"] == 0).all() and out["next_obs"].shape == (N, 4, 84, 84)
    finally:
        envs.close()


def test_a_worker_with_one_thread_steps_without_the_overlap():
    """With one EnvPool thread (a core per worker) acting and stepping take turns: two halves would only add
    switches between them."""
    envs = make_vec_env("ALE/Pong-v5", N, seed=15, backend="envpool", threads=1, overlap=True)
    try:
        assert len(envs.halves) == 1 and "one half" not in envs.describe()
    finally:
        envs.close()
