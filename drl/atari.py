"""Atari (ALE) and MinAtar environments as drl trains on them and scores them.

ALE ids get the standard preprocessing, the Nature DQN's (Mnih et al. 2015) as Stable-Baselines3 and CleanRL apply
it, with the sticky actions of Machado et al. (2018) that ``-v5`` sets, built from gymnasium's own wrappers:

- ``-v5``'s sticky actions are kept: with probability 0.25 the emulator repeats the previous action instead of
  the chosen one, at every emulator frame, in training and in evaluation alike;
- ``AtariPreprocessing``: up to 30 no-op actions at reset, an action repeated for 4 frames with the maximum over
  the last two, 84x84 grayscale uint8;
- ``RecordEpisodeStatistics`` beneath the training rules: the step that ends a game carries the game's real score
  and length in ``info["episode"]`` (``r``, ``l``), since a training episode's return is one life's clipped sum;
- training only: a lost life ends the episode (``EpisodicLife``) and rewards are clipped to their sign;
- ``FrameStackObservation``: the last 4 frames along the first axis, (4, 84, 84); at reset the stack holds 4
  copies of the reset frame (drl's frame log relies on it: each later stack is the previous one's last 3
  frames and the new one).

Evaluation reports the game's real score: the whole game (every life), unclipped rewards; an episode ends when
the game does or at ``-v5``'s limit of 108,000 emulator frames.

With ``--vector-env envpool`` (or ``auto`` and the ``envpool`` extra installed), a rollout worker steps its ALE
``-v5`` games in EnvPool's C++ threads with the same rules (``make_envpool``): EnvPool's own no-ops, frame skip with
max-pooling, 84x84 area-resized gray frames, stack and sticky actions, its episodic life (a lost life ends the
episode; the auto-reset step that follows continues the game) and reward clipping; the game's real score is the
sum of the unclipped rewards EnvPool reports in ``info["reward"]`` until ``info["terminated"]`` says the game is over.
Evaluation always uses the gymnasium path: it is scored on the rules above, one game at a time.

MinAtar ids (10x10xC images of five Atari games) get their boolean observations as uint8 0 and 255 and no stack:
the encoders scale every uint8 image by 1/255 (``drl.algorithms.encoders``), so the game's 0/1 planes reach the
first layer as 0/1, the MinAtar paper's input (cast to 0/1 they would reach it 255 times too small, and learning
stalls: bench/README.md); the state already carries the motion an agent needs (trail and direction channels), and
MinAtar's own DQN baseline reads it unstacked.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
    TransformObservation,
    TransformReward,
)

if TYPE_CHECKING:
    from ale_py.env import AtariEnv

STACK = 4
FRAME_SKIP = 4
"""Emulator frames per agent step (``AtariPreprocessing``'s frame skip): the field reports Atari speed in frames."""
"""Frames an ALE observation stacks."""
MINATAR_RENDER_SCALE = 16
"""Pixels per MinAtar cell in a rendered frame: a 10x10 frame is too small to watch."""


def register_ale() -> None:
    """Registers the ``ALE/`` ids (importing ale_py does) and keeps the emulator's banner off stderr, which a
    command's one-line error or output must not carry."""
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    gym.register_envs(ale_py)


ENVPOOL_IDS = re.compile(r"ALE/(\w+)-v5$")
ENVPOOL_INSTALL = "pip install 'drl[envpool]' (in a checkout of drl: pip install -e '.[envpool]')"


def envpool_task(env_id: str) -> str | None:
    """EnvPool's id for an ALE ``-v5`` id it has (``ALE/Pong-v5`` -> ``Pong-v5``), else None."""
    match = ENVPOOL_IDS.match(env_id)
    return f"{match.group(1)}-v5" if match else None


def envpool_available() -> bool:
    try:
        import envpool  # noqa: F401
    except ImportError:
        return False
    return True


def make_envpool(env_id: str, num_envs: int, seed: int, threads: int) -> Any:
    """``num_envs`` training games of an ALE ``-v5`` id in one EnvPool (gymnasium API, stepped in lock-step by
    ``threads`` C++ threads), with the rules ``make_ale`` gives the gymnasium path (this module's docstring);
    EnvPool presses no FIRE at reset, as the gymnasium path does not."""
    import envpool

    task = envpool_task(env_id)
    if task is None or task not in envpool.list_all_envs():
        raise ValueError(f"EnvPool has no game for {env_id!r}")
    return envpool.make(
        task,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=num_envs,
        num_threads=max(1, threads),
        seed=seed,
        noop_max=30,
        frame_skip=FRAME_SKIP,
        img_height=84,
        img_width=84,
        gray_scale=True,
        use_inter_area_resize=True,
        stack_num=STACK,
        repeat_action_probability=0.25,
        full_action_space=False,
        use_fire_reset=False,
        episodic_life=True,
        reward_clip=True,
        max_episode_steps=108_000 // FRAME_SKIP,
    )


def register_minatar() -> None:
    """Registers the ``MinAtar/`` ids, once: importing minatar registers nothing."""
    import minatar.gym

    if not any(name.startswith("MinAtar/") for name in gym.envs.registry):
        minatar.gym.register_envs()


def make_ale(env_id: str, render_mode: str | None, evaluation: bool) -> gym.Env:
    """An ``ALE/`` env with the preprocessing of this module's docstring."""
    env: gym.Env = gym.make(env_id, frameskip=1, render_mode=render_mode)
    env = AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=FRAME_SKIP,
        screen_size=84,
        grayscale_obs=True,
        terminal_on_life_loss=False,
        scale_obs=False,
    )
    env = RecordEpisodeStatistics(env)
    if not evaluation:
        env = EpisodicLife(env)
        env = TransformReward(env, lambda r: float(np.sign(cast(float, r))))
    return FrameStackObservation(env, stack_size=STACK)


def make_minatar(env_id: str, render_mode: str | None, evaluation: bool = False) -> gym.Env:
    """A ``MinAtar/`` env with uint8 observations, 0 and 255 (and uint8 RGB frames when rendered). Training and evaluation
    get the same env: a MinAtar game has one life, and its rewards are the game's own small counts, which MinAtar's
    baselines learn from unclipped."""
    env = gym.make(env_id, render_mode=render_mode, disable_env_checker=True)
    space = env.observation_space
    env = TransformObservation(
        env, lambda obs: obs.astype(np.uint8) * np.uint8(255), gym.spaces.Box(0, 255, space.shape, np.uint8)
    )
    return MinAtarFrames(env) if render_mode == "rgb_array" else env


class EpisodicLife(gym.Wrapper):
    """A lost life ends the training episode, while the game goes on: the next reset continues the same game
    (one no-op step) unless the game is over or a seed asks for a new one.

    This is the Nature DQN's rule as Stable-Baselines3's and CleanRL's ``EpisodicLifeEnv`` keep it. Gymnasium's
    ``AtariPreprocessing(terminal_on_life_loss=True)`` starts a new game at every lost life instead (Gymnasium
    issue #166), so training would never see a game past its first life, which evaluation plays to the end.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.ale = cast("AtariEnv", env.unwrapped).ale  # the wrapper is only put around an ALE game
        self.lives = 0
        self.game_over = True

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self.ale.lives()
        return obs, info


class MinAtarFrames(gym.Wrapper):
    """MinAtar renders float RGB in [0, 1], one pixel a cell; a video wants uint8 RGB large enough to see."""

    def render(self):
        frame = self.env.render()
        if frame is None:
            return None
        frame = np.asarray(np.asarray(frame) * 255 + 0.5, dtype=np.uint8)
        return frame.repeat(MINATAR_RENDER_SCALE, axis=0).repeat(MINATAR_RENDER_SCALE, axis=1)
