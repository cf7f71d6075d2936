"""Atari and MinAtar environments: drl's envs are gymnasium's own wrapper chains, training and evaluation differ
only where the rules say (a lost life, clipped rewards), observations are uint8 frames whose stacks the frame log
can rebuild, and a rendered episode becomes a video."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

from drl.envs import check_env_id, make_env, space_spec

pytest.importorskip("ale_py", reason="the atari extra: pip install -e '.[atari]'")
pytest.importorskip("minatar", reason="the atari extra: pip install -e '.[atari]'")


def gymnasium_chain(env_id: str, terminal_on_life_loss: bool, clip: bool) -> gym.Env:
    """The preprocessing built by hand from gymnasium's wrappers, as its documentation composes them."""
    check_env_id(env_id)
    env = AtariPreprocessing(
        gym.make(env_id, frameskip=1),
        noop_max=30,
        frame_skip=4,
        screen_size=84,
        terminal_on_life_loss=terminal_on_life_loss,
        grayscale_obs=True,
        scale_obs=False,
    )
    if clip:
        env = ClipReward(env, -1, 1)
    return FrameStackObservation(env, 4)


def step_both(a: gym.Env, b: gym.Env, action: int):
    return a.step(action), b.step(action)


def test_evaluation_env_is_gymnasiums_preprocessing_over_whole_games():
    ours, ref = make_env("ALE/Breakout-v5", evaluation=True), gymnasium_chain("ALE/Breakout-v5", False, False)
    actions = np.random.default_rng(0).integers(0, 4, size=5000)
    for game, seed in enumerate((3, 4)):
        o1, _ = ours.reset(seed=seed)
        o2, _ = ref.reset(seed=seed)
        assert np.array_equal(o1, o2)
        lives = [ours.unwrapped.ale.lives()]
        for t, action in enumerate(actions):
            (o1, r1, te1, tr1, _), (o2, r2, te2, tr2, _) = step_both(ours, ref, action)
            assert np.array_equal(o1, o2) and (r1, te1, tr1) == (r2, te2, tr2), (game, t)
            lives.append(ours.unwrapped.ale.lives())
            if te1 or tr1:
                break
        assert te1, "a random game of Breakout ends within 5000 steps"
        assert lives[0] == 5 and lives[-1] == 0 and len(set(lives)) == 6, "the episode went through every life"


def test_training_env_ends_an_episode_at_a_lost_life_and_the_next_one_continues_the_game():
    """Before the first lost life the training env is gymnasium's chain with terminal_on_life_loss and clipping;
    at the step that loses it both say terminated (gymnasium's wrapper cuts that step's frame skip short, so its
    observation there is another) while evaluation does not, and the training env's reset goes on with the same
    game, where gymnasium's wrapper starts a new one."""
    train, ref = make_env("ALE/Breakout-v5"), gymnasium_chain("ALE/Breakout-v5", True, True)
    evaluation = make_env("ALE/Breakout-v5", evaluation=True)
    o1, _ = train.reset(seed=5)
    o2, _ = ref.reset(seed=5)
    o3, _ = evaluation.reset(seed=5)
    assert np.array_equal(o1, o2) and np.array_equal(o1, o3)
    rng = np.random.default_rng(1)
    for _ in range(2000):
        action = int(rng.integers(0, 4))
        (o1, r1, te1, tr1, _), (o2, r2, te2, tr2, _) = step_both(train, ref, action)
        o3, r3, te3, _, _ = evaluation.step(action)
        assert np.array_equal(o1, o3) and te1 == te2 and not tr1
        if te1:
            break
        assert np.array_equal(o1, o2) and r1 == r2 and r1 == np.sign(r3)
    assert te1 and not te3, "a lost life ends the training episode only"
    assert train.unwrapped.ale.lives() == evaluation.unwrapped.ale.lives() == 4
    train.reset()
    assert train.unwrapped.ale.lives() == 4, "the next training episode plays the same game's next life"
    ref.reset()
    assert ref.unwrapped.ale.lives() == 5


def test_training_rewards_are_the_sign_of_the_games_rewards():
    """Space Invaders scores 5 to 30 an alien: training sees 1 where evaluation sees the points."""
    train, evaluation = make_env("ALE/SpaceInvaders-v5"), make_env("ALE/SpaceInvaders-v5", evaluation=True)
    train.reset(seed=2)
    evaluation.reset(seed=2)
    rng = np.random.default_rng(2)
    seen = []
    for _ in range(3000):
        (o1, r1, te1, _, _), (o2, r2, _, _, _) = step_both(train, evaluation, int(rng.integers(0, 6)))
        assert np.array_equal(o1, o2) and r1 == np.sign(r2)
        seen.append((r1, r2))
        if te1:
            break
    assert {r for r, _ in seen} <= {-1.0, 0.0, 1.0} and max(r for _, r in seen) > 1


def test_the_step_that_ends_a_game_carries_its_real_score_across_the_training_episodes_of_its_lives():
    """Space Invaders (3 lives, 5 to 30 points an alien) played by the training env, and the same emulator
    actions played by the evaluation env (a new life's reset in training is one no-op step)."""
    train, evaluation = make_env("ALE/SpaceInvaders-v5"), make_env("ALE/SpaceInvaders-v5", evaluation=True)
    train.reset(seed=6)
    evaluation.reset(seed=6)
    rng = np.random.default_rng(6)
    episodes, clipped, score, steps = 0, 0.0, 0.0, 0
    while True:
        action = int(rng.integers(0, 6))
        _, reward, terminated, truncated, info = train.step(action)
        _, real, game_over, _, _ = evaluation.step(action)
        clipped, score, steps = clipped + reward, score + real, steps + 1
        if terminated or truncated:
            episodes += 1
            if "episode" in info:
                break
            train.reset()
            _, real, _, _, _ = evaluation.step(0)
            score, steps = score + real, steps + 1
    assert episodes == 3 and game_over, "one training episode a life, the last one ending the game"
    assert (float(info["episode"]["r"]), int(info["episode"]["l"])) == (score, steps)
    assert score > clipped > 0


@pytest.mark.parametrize("env_id, actions", [("ALE/Pong-v5", 6), ("ALE/Breakout-v5", 4)])
def test_ale_spec_is_a_uint8_stack_of_four_84x84_frames(env_id, actions):
    spec = space_spec(env_id)
    assert (spec.obs_shape, spec.obs_dtype, spec.frame_stack, spec.frame_shape, spec.image) == (
        (4, 84, 84),
        "|u1",
        4,
        (84, 84),
        True,
    )
    assert spec.discrete_actions == actions
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (4, 84, 84)
    assert space_spec(env_id) == spec, "the spec is the same every time it is asked for"


@pytest.mark.parametrize("env_id, channels", [("MinAtar/Breakout-v1", 4), ("MinAtar/SpaceInvaders-v1", 6)])
def test_minatar_spec_is_one_uint8_frame_of_10x10xc(env_id, channels):
    spec = space_spec(env_id)
    assert (spec.obs_shape, spec.obs_dtype, spec.frame_stack, spec.frame_shape, spec.image) == (
        (10, 10, channels),
        "|u1",
        1,
        (10, 10, channels),
        True,
    )


def check_frame_log_invariant(env: gym.Env, k: int, steps: int, seed: int) -> int:
    """Steps at random; asserts that a reset's observation is k copies of one frame and that every later one
    is the previous one's last k-1 frames and a new one. Returns the number of resets within the steps."""
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    resets = 0
    for _ in range(steps):
        assert obs.dtype == np.uint8
        if k > 1:
            assert all(np.array_equal(obs[i], obs[-1]) for i in range(k)), "a reset's stack repeats its frame"
        while True:
            nxt, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if k > 1:
                assert np.array_equal(nxt[:-1], obs[1:]), "a step shifts the stack by one frame"
            obs = nxt
            steps -= 1
            if terminated or truncated or steps <= 0:
                break
        if steps <= 0:
            break
        obs, _ = env.reset()
        resets += 1
    return resets


@pytest.mark.parametrize("evaluation", [False, True])
def test_ale_stacks_are_rebuilt_from_reset_frames_and_new_frames(evaluation):
    env = make_env("ALE/Breakout-v5", evaluation=evaluation)
    resets = check_frame_log_invariant(env, 4, 600, seed=11)
    assert resets >= (10 if not evaluation else 2), "lost lives (training) and lost games reset the env"


def test_minatar_observation_is_the_games_state_as_uint8_0_and_255():
    env = make_env("MinAtar/Breakout-v1")
    resets = check_frame_log_invariant(env, 1, 400, seed=3)
    assert resets >= 2
    obs, _ = env.reset(seed=4)
    for _ in range(50):
        state = env.unwrapped.game.state()
        assert obs.dtype == np.uint8 and state.dtype == bool and np.array_equal(obs, state.astype(np.uint8) * 255)
        obs, _, terminated, _, _ = env.step(env.action_space.sample())
        if terminated:
            obs, _ = env.reset()


@pytest.mark.parametrize("env_id, shape", [("ALE/Pong-v5", (210, 160, 3)), ("MinAtar/Breakout-v1", (160, 160, 3))])
def test_rendered_episodes_give_uint8_rgb_frames(env_id, shape):
    from drl.acting.evaluation import run_episodes
    from drl.algorithms.dqn import DQNActor, DQNConfig

    actor = DQNActor(space_spec(env_id), DQNConfig(hidden=(8,)), seed=0)
    frames: list[np.ndarray] = []
    run_episodes(env_id, actor, 1, seed=0, max_steps=40, on_frame=lambda _, f: frames.append(f))
    assert len(frames) == 40 if env_id.startswith("ALE/") else len(frames) > 1
    assert all(f.dtype == np.uint8 and f.shape == shape for f in frames)
    assert frames[0].max() > 0 and len({f.tobytes() for f in frames}) > 1


def test_evaluate_video_records_a_minatar_game(tmp_path, capsys):
    """``drl-orchestrate evaluate --video`` on a fresh, untrained policy of a MinAtar run: one GIF an episode,
    every frame the game's picture."""
    from PIL import Image

    from drl.algorithms import make_learner
    from drl.presets import get_preset
    from drl.store import PolicyStore, run_store
    from orchestrator.cli import main

    env_id = "MinAtar/Breakout-v1"
    cfg = get_preset("dqn", env_id)
    store = run_store(str(tmp_path / "store"), "mini")
    store.put("config.json", cfg.to_json().encode())
    weights = make_learner(cfg.algorithm, space_spec(env_id), cfg, seed=0).policy_weights()
    PolicyStore(store, "mini").publish(1, weights, algorithm=cfg.algorithm, env_steps=0, updates=0)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "evaluate",
                "--store",
                str(tmp_path / "store"),
                "--run",
                "mini",
                "--episodes",
                "2",
                "--video",
                str(tmp_path / "videos"),
            ]
        )
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["version"] == 1 and len(result["returns"]) == 2 and len(result["videos"]) == 2
    for path in result["videos"]:
        with Image.open(path) as gif:
            assert gif.format == "GIF" and gif.size == (160, 160) and gif.n_frames > 1
            pictures = set()
            for i in range(gif.n_frames):
                gif.seek(i)
                pictures.add(gif.convert("RGB").tobytes())
            assert len(pictures) > 1, "the ball moves"
