"""Environment construction and a small vectorised stepper.

Any registered gymnasium id works. The stepper keeps its own list of environments instead of gymnasium's
vector envs so that the true final observation of an episode is what goes into a transition, with no
autoreset step in between.
"""

from __future__ import annotations

import importlib
import os
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import gymnasium as gym
import numpy as np

from drl import atari
from drl.errors import UserError
from drl.frames import FrameRing
from drl.process import usable_cpus

Act = Callable[[np.ndarray], np.ndarray]
"""A policy's acting call: observations in, actions out (``Actor.act``)."""
Recorded = Callable[[], dict[str, np.ndarray]] | None
"""What the actor recorded with its last actions (``Actor.recorded``), or None."""
RECENT_RETURNS = 10  # finished episodes' returns kept for status reports: a long run must not grow a list
TRAJECTORY_FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "truncated": ("|u1", ()),  # the episode hit a time limit: bootstrap from next_obs (on-policy advantages)
    "env_index": ("<u2", ()),  # which of the worker's environments took the step (on-policy trajectories)
}
"""The optional wire fields ``VecEnv`` fills besides the five every transition has: what an on-policy learner
needs to cut its rollout into per-environment trajectories (dtype, per-transition shape)."""


@dataclass(frozen=True)
class SpaceSpec:
    """Shapes and dtypes of an environment's spaces: what the wire format and the networks need."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    act_shape: tuple[int, ...]
    act_dtype: str
    discrete_actions: int  # 0 for Box actions
    act_low: tuple[float, ...] = ()
    act_high: tuple[float, ...] = ()
    observation_space: str = ""
    action_space: str = ""
    frame_stack: int = 0
    """0: observations travel whole. k >= 1: uint8 image observations that travel as frames, each sent once
    (``drl.frames``): k frames stacked along the first axis (k = 1: the observation is one frame)."""

    @property
    def image(self) -> bool:
        """Observations with 2 or 3 dimensions (HxW, HxWxC, CxHxW): networks read them with a convolutional
        encoder."""
        return len(self.obs_shape) in (2, 3)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """The shape of one frame of a frame-stacked observation (``frame_stack`` > 0)."""
        return self.obs_shape[1:] if self.frame_stack > 1 else self.obs_shape

    def action_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Low and high of a Box action space as float32 arrays of the action's shape."""
        low = np.asarray(self.act_low, np.float32).reshape(self.act_shape)
        return low, np.asarray(self.act_high, np.float32).reshape(self.act_shape)

    @classmethod
    def from_env(cls, env: gym.Env) -> "SpaceSpec":
        """Raises UserError for an observation space drl cannot carry (Dict, Tuple, a Box of more than 3
        dimensions) or an action space it cannot act in."""
        obs, act = env.observation_space, env.action_space
        if not isinstance(obs, (gym.spaces.Box, gym.spaces.Discrete)) or len(obs.shape or ()) > 3:
            raise UserError(f"observation space {_brief(obs)} is not supported; {SUPPORTED_OBSERVATIONS}")
        obs_shape = tuple(obs.shape) if isinstance(obs, gym.spaces.Box) else ()
        obs_dtype = np.dtype(obs.dtype).newbyteorder("<").str
        frames = frame_stack(env) if obs_dtype == "|u1" and len(obs_shape) in (2, 3) else 0
        if isinstance(act, gym.spaces.Box):
            return cls(
                obs_shape,
                obs_dtype,
                tuple(act.shape),
                np.dtype(np.float32).str,
                0,
                tuple(float(x) for x in act.low.ravel()),
                tuple(float(x) for x in act.high.ravel()),
                repr(obs),
                repr(act),
                frames,
            )
        if isinstance(act, gym.spaces.Discrete):
            return cls(obs_shape, obs_dtype, (), np.dtype("<i8").str, int(act.n), (), (), repr(obs), repr(act), frames)
        raise UserError(f"action space {_brief(act)} is not supported; drl acts in Box and Discrete action spaces")


SUPPORTED_OBSERVATIONS = (
    "drl takes Box observations of at most 3 dimensions (a vector, an HxW, HxWxC or CxHxW image) and Discrete ones"
)


def _brief(space: gym.Space) -> str:
    """A space as one line of bounded length: a Dict or Tuple of many parts would fill a terminal."""
    text = " ".join(repr(space).split())
    return text if len(text) <= 120 else text[:117] + "..."


W = TypeVar("W", bound=gym.Wrapper)


def _wrapper(env: gym.Env, kind: type[W]) -> W | None:
    """The outermost wrapper of type ``kind`` around an env, if any."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, kind):
            return env
        env = env.env
    return None


def _records_episodes(env: gym.Env) -> bool:
    """Whether a ``RecordEpisodeStatistics`` among the env's wrappers reports each game's real score (Atari:
    under the training wrappers that clip rewards and end an episode at a lost life), which status reports then
    show instead of the sum of the rewards the learner sees."""
    return _wrapper(env, gym.wrappers.RecordEpisodeStatistics) is not None


def frame_stack(env: gym.Env) -> int:
    """How many frames an image environment's observation stacks: the stack size of a gymnasium
    ``FrameStackObservation`` among its wrappers, else 1."""
    stack = _wrapper(env, gym.wrappers.FrameStackObservation)
    return 1 if stack is None else int(stack.stack_size)


@dataclass(frozen=True)
class EnvFamily:
    """Environments a package provides, which a default install may lack; ``register`` registers its ids
    after ``module`` imports, ``make`` builds one of its envs with drl's preprocessing."""

    name: str
    ids: re.Pattern
    module: str
    install: str
    register: Callable[[], None] | None = None
    make: Callable[[str, str | None, bool], gym.Env] | None = None


ATARI_INSTALL = "pip install 'drl[atari]' (in a checkout of drl: pip install -e '.[atari]')"
FAMILIES = (
    EnvFamily("Atari (ALE)", re.compile(r"ALE/"), "ale_py", ATARI_INSTALL, atari.register_ale, atari.make_ale),
    EnvFamily("MinAtar", re.compile(r"MinAtar/"), "minatar", ATARI_INSTALL, atari.register_minatar, atari.make_minatar),
    EnvFamily(
        "MuJoCo",
        re.compile(
            r"(Ant|HalfCheetah|Hopper|Humanoid|HumanoidStandup|InvertedDoublePendulum|"
            r"InvertedPendulum|Pusher|Reacher|Swimmer|Walker2d)-v\d+$"
        ),
        "mujoco",
        "pip install 'gymnasium[mujoco]'",
    ),
)


def family_of(env_id: str) -> EnvFamily | None:
    return next((f for f in FAMILIES if f.ids.match(env_id)), None)


def import_env_module(env_id: str) -> str:
    """For gymnasium's ``module:EnvId`` form, imports the module (which registers its ids, as ``gymnasium.make``
    would import it) and returns ``EnvId``; other ids come back as they are. UserError when the module cannot be
    imported."""
    module, sep, name = env_id.partition(":")
    if not sep:
        return env_id
    if not module or not name:
        raise UserError(f"environment id {env_id!r}: the form is module:EnvId (a module that registers EnvId)")
    try:
        importlib.import_module(module)
    except Exception as exc:
        raise UserError(
            f"environment id {env_id!r}: module {module!r} cannot be imported ({type(exc).__name__}: {exc}); "
            "it must be importable where every process of the run starts (PYTHONPATH, an installed package or "
            "the image)"
        ) from None
    return name


def frames_per_step(env_id: str) -> int:
    """Emulator frames behind one agent step: Atari's frame skip for ``ALE/`` ids, else 1."""
    family = family_of(import_env_module(env_id) if ":" in env_id else env_id)
    return atari.FRAME_SKIP if family is not None and family.name.startswith("Atari") else 1


def check_env_id(env_id: str) -> None:
    """Raises UserError when env_id is not a registered gymnasium id, naming close matches.

    An id of a family a package provides (ALE, MinAtar, MuJoCo) imports that package and registers its ids
    first; when it is not installed, the message says what to install. ``module:EnvId`` imports the module first
    (``import_env_module``).
    """
    given, env_id = env_id, import_env_module(env_id)
    family = family_of(env_id)
    if family is not None:
        try:
            importlib.import_module(family.module)
            if family.register is not None:
                family.register()
        except ImportError:
            raise UserError(
                f"unknown environment id {env_id!r}; {family.name} environments come with a package "
                f"that is not installed: {family.install}"
            ) from None
    if env_id in gym.envs.registry:
        return
    import difflib

    close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see gymnasium.envs.registry for the ids"
    if given != env_id:
        hint = f" (module {given.partition(':')[0]!r} was imported but registers no such id){hint}"
    else:
        hint += "; an env of your own: module:EnvId, with the module registering EnvId (docs/custom-envs.md)"
    raise UserError(f"unknown environment id {env_id!r}{hint}")


def make_env(env_id: str, render_mode: str | None = None, evaluation: bool = False) -> gym.Env:
    """The env as drl trains on it, or with ``evaluation`` as it is scored: for Atari the two differ in that
        training ends an episode at a lost life and clips rewards to their sign, while evaluation reports the game's
        real score (``drl.atari``). Other ids are ``gymnasium.make``'s env, the same for both, and get a render mode
    only when one is asked for: an env class without that argument is still made for training."""
    check_env_id(env_id)
    env_id = import_env_module(env_id)
    family = family_of(env_id)
    try:
        if family is not None and family.make is not None:
            return family.make(env_id, render_mode, evaluation)
        kwargs: dict[str, Any] = {} if render_mode is None else {"render_mode": render_mode}
        return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise UserError(f"environment {env_id!r} cannot be created: {exc}") from None
    except ImportError as exc:
        raise UserError(f"environment {env_id!r} needs a missing package: {exc}") from None


def space_spec(env_id: str) -> SpaceSpec:
    """The spaces of the training env (an evaluation env has the same ones), as the wire and networks see
    them; UserError names the environment when drl cannot carry its spaces."""
    env = make_env(env_id)
    try:
        return SpaceSpec.from_env(env)
    except UserError as exc:
        raise UserError(f"environment {env_id!r}: {exc}") from None
    finally:
        env.close()


class VecEnv:
    """N environments stepped in lock-step, each reset on its own when its episode ends.

    After ``log_frames`` (an image environment whose frames travel once, ``SpaceSpec.frame_stack``), transitions
    hold each observation's k frame serials instead of the observation
    (``drl.frames``); ``obs`` stays the whole observations the policy acts on. Stacking follows gymnasium's
    ``FrameStackObservation``: a step's stack is the previous one's last k - 1 frames and the new frame, and a
    reset's repeats the reset frame (a reset stack of other frames is numbered frame by frame).
    """

    def __init__(self, env_id: str, n: int, seed: int):
        self.num_envs = n
        self.envs = [make_env(env_id) for _ in range(n)]
        self.spec = SpaceSpec.from_env(self.envs[0])
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.frames: FrameRing | None = None
        self._scored = _records_episodes(self.envs[0])
        for i, env in enumerate(self.envs):
            env.action_space.seed(seed + 10_000 + i)
        self.episode_returns = np.zeros(n)
        self._low: np.ndarray | None
        self._high: np.ndarray | None
        self._low, self._high = (None, None) if self.spec.discrete_actions else self.spec.action_bounds()
        self.finished_returns: deque[float] = deque(maxlen=RECENT_RETURNS)
        self._index = np.arange(n, dtype=np.uint16)

    def describe(self) -> str:
        return "gymnasium envs, stepped one after another"

    def random_actions(self, count: int | None = None) -> np.ndarray:
        envs = self.envs if count is None else self.envs[:count]
        return np.stack([env.action_space.sample() for env in envs]).astype(self.spec.act_dtype)

    def step_with(self, act: Act, out: dict[str, np.ndarray], row: int, recorded: Recorded = None) -> None:
        """Acts on every env's observation with ``act`` and steps, writing rows ``row`` to ``row + n`` of ``out``
        as ``step_into`` does, and beside them the fields ``recorded`` gives for the actions (``Actor.records``)."""
        actions = act(self.obs)
        self.step_into(actions, out, row)
        if recorded is not None:
            for name, values in recorded().items():
                if name in out:
                    out[name][row : row + len(actions)] = values

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Steps every env once; returns the transitions (obs, action, reward, next_obs, terminated, truncated,
        env_index) in fresh arrays.

        Box actions are clipped to the space's bounds for the environment, while the transition records the
        action as given: an on-policy learner needs the sampled action to recompute its probability.
        """
        out = self.rows()
        self.step_into(actions, out, 0)
        return out

    def rows(self) -> dict[str, np.ndarray]:
        """Fresh arrays for one step's transitions (``step_into``'s ``out``)."""
        n = self.num_envs
        rows = self.obs if self.frames is None else self.ids
        return {
            "obs": np.empty_like(rows),
            "action": np.empty((n, *self.spec.act_shape), self.spec.act_dtype),
            "reward": np.empty(n, dtype=np.float32),
            "next_obs": np.empty_like(rows),
            "terminated": np.empty(n, dtype=np.uint8),
            "truncated": np.empty(n, dtype=np.uint8),
            "env_index": np.empty(n, dtype=np.uint16),
        }

    def step_into(self, actions: np.ndarray, out: dict[str, np.ndarray], row: int) -> None:
        """Steps every env once and writes its transitions into rows ``row`` to ``row + n`` of ``out``'s arrays
        (obs, action, reward, next_obs, terminated, and truncated and env_index when ``out`` has them).

        A rollout worker writes straight into the entry it is filling, so that a step allocates nothing and a
        send joins nothing: at tens of thousands of steps a second, allocating, holding and joining each step's
        arrays is a measurable part of a fast env's worker (bench/README.md, "Measurements behind the code").
        """
        n = self.num_envs
        end = row + n
        actions = np.asarray(actions, dtype=self.spec.act_dtype)
        env_actions = actions if self._low is None else np.clip(actions, self._low, self._high)
        frames = self.frames
        out["obs"][row:end] = self.obs if frames is None else self.ids
        out["action"][row:end] = actions
        next_obs, rewards, terminated = out["next_obs"], out["reward"], out["terminated"]
        truncated = out.get("truncated")
        carry = self.obs
        for i, env in enumerate(self.envs):
            o, r, term, trunc, info = env.step(env_actions[i])
            j = row + i
            if frames is None:
                next_obs[j] = o
            else:
                ids = self.ids[i]
                ids[:-1] = ids[1:]
                ids[-1] = frames.put(o[-1] if self.spec.frame_stack > 1 else o)
                next_obs[j] = ids
            rewards[j] = r
            terminated[j] = term
            if truncated is not None:
                truncated[j] = trunc and not term
            self.episode_returns[i] += r
            if term or trunc:
                if not self._scored:
                    self.finished_returns.append(float(self.episode_returns[i]))
                self.episode_returns[i] = 0.0
                o, _ = env.reset()
                if frames is not None:
                    self.ids[i] = self._number_reset(o)
            if self._scored and "episode" in info:
                self.finished_returns.append(float(info["episode"]["r"]))
            carry[i] = o
        if "env_index" in out:
            out["env_index"][row:end] = self._index

    def log_frames(self, capacity: int) -> None:
        """From now on transitions hold frame serials, the frames kept in a log of ``capacity``."""
        self.frames = FrameRing(self.spec.frame_shape, capacity)
        self.ids = np.stack([self._number_reset(o) for o in self.obs])

    def _number_reset(self, obs: np.ndarray) -> np.ndarray:
        """The serials of a reset observation's frames, each frame put in the log once."""
        k = self.spec.frame_stack
        frames = self.frames
        assert frames is not None  # called once log_frames has made the log
        if k == 1:
            return np.array([frames.put(obs)], dtype=np.int64)
        if all(np.array_equal(obs[j], obs[-1]) for j in range(k - 1)):
            return np.full(k, frames.put(obs[-1]), dtype=np.int64)
        return np.array([frames.put(frame) for frame in obs], dtype=np.int64)

    def close(self) -> None:
        for env in self.envs:
            env.close()


VECTOR_ENVS = ("auto", "gymnasium", "envpool")
"""The choices of ``--vector-env`` (``make_vec_env``'s ``backend``)."""


def envpool_refusal(env_id: str) -> str | None:
    """Why ``--vector-env envpool`` cannot step ``env_id`` (EnvPool serves ALE ``-v5`` games), or None; the
    configuration refuses it before a run, a worker's ``make_vec_env`` when called without one."""
    if atari.envpool_task(env_id) is None:
        return f"--vector-env envpool steps ALE -v5 games (ALE/Pong-v5 ...), not {env_id!r}"
    return None


def make_vec_env(
    env_id: str,
    n: int,
    seed: int,
    backend: str = "auto",
    threads: int = 0,
    workers: int = 1,
    overlap: bool = False,
) -> VecEnv:
    """A worker's ``n`` training envs: EnvPool's for ALE ``-v5`` games when ``backend`` is ``envpool``, or ``auto``
    with the package installed; gymnasium's (``VecEnv``) otherwise. UserError when EnvPool is asked for and
    cannot serve the id. ``threads`` 0 sizes EnvPool's threads by ``env_threads``; ``overlap`` lets EnvPool step
    half of the envs while the worker acts on the other half (``PoolVecEnv``) when the worker has threads for it
    (more than one: with a core per worker, measured, the overlap's two halves cost more than they hide)."""
    if backend == "gymnasium" or (backend == "auto" and not atari.envpool_available()):
        return VecEnv(env_id, n, seed)
    check_env_id(env_id)
    refusal = envpool_refusal(env_id)
    if refusal:
        if backend == "envpool":
            raise UserError(refusal)
        return VecEnv(env_id, n, seed)
    if not atari.envpool_available():
        raise UserError(f"--vector-env envpool: the envpool package is not installed; {atari.ENVPOOL_INSTALL}")
    try:
        threads = threads or env_threads(n, workers)
        return PoolVecEnv(env_id, n, seed, threads, overlap and threads > 1)
    except ValueError as exc:
        if backend == "envpool":
            raise UserError(f"--vector-env envpool: {exc}") from None
        return VecEnv(env_id, n, seed)


def env_threads(n: int, workers: int) -> int:
    """EnvPool threads for a worker of ``n`` envs: its cgroup's CPU limit when it has one (a pod), else its share of
    the machine's cores among ``workers`` workers, at least 1 and at most ``n``."""
    cpus = usable_cpus()
    share = cpus if cpus < len(os.sched_getaffinity(0)) else cpus / max(1, workers)
    return max(1, min(n, int(share)))


class PoolVecEnv(VecEnv):
    """``VecEnv``'s contract (lock-step steps, transitions written in place, frames logged once, real scores in
    ``finished_returns``) over EnvPool's C++ envs (``drl.atari.make_envpool``).

    EnvPool resets an env on the step after its episode ended (the action is ignored; after a lost life the
    game continues, after game over a new one starts): the envs that ended are stepped once more at once, alone,
    so that every transition's next observation is the true final one and the next step starts from the reset
    observation, as gymnasium's path does.

    With ``overlap`` the envs are two halves, each its own pool, and ``step_with`` acts on one half while the
    other's threads step it (EnvPool's ``send``/``recv``): a step's rows are still one per env in env order, but
    half of a step's actions were chosen one acting call earlier, before a policy the worker loaded in between;
    the actor's ``recorded`` fields travel with the actions they belong to. An on-policy iteration, which must act
    with one version only, steps without overlap."""

    def __init__(self, env_id: str, n: int, seed: int, threads: int, overlap: bool = False):
        self.num_envs = n
        self.envs = []
        self.spec = space_spec(env_id)
        self.threads = threads
        cuts = [0, n // 2, n] if overlap and n >= 2 else [0, n]
        self.halves = [(lo, hi) for lo, hi in zip(cuts, cuts[1:])]
        share = max(1, threads // len(self.halves))
        self.pools = [
            atari.make_envpool(env_id, hi - lo, seed + 7 * k, share) for k, (lo, hi) in enumerate(self.halves)
        ]
        obs = np.concatenate([pool.reset()[0] for pool in self.pools])
        if tuple(obs.shape[1:]) != self.spec.obs_shape:
            raise ValueError(f"EnvPool's observations {obs.shape[1:]} differ from {self.spec.obs_shape}")
        self.obs = np.array(obs)
        self.frames = None
        self._rng = np.random.default_rng(seed + 10_000)
        self.episode_returns = np.zeros(n)
        self._low, self._high = None, None
        self.finished_returns = deque(maxlen=RECENT_RETURNS)
        self._index = np.arange(n, dtype=np.uint16)
        self._sent: list[tuple[np.ndarray, dict[str, np.ndarray]]] | None = None

    def describe(self) -> str:
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        return f"EnvPool, {threads}" + (", acting on one half while the other steps" if len(self.halves) > 1 else "")

    def random_actions(self, count: int | None = None) -> np.ndarray:
        count = self.num_envs if count is None else count
        return self._rng.integers(0, self.spec.discrete_actions, count).astype(self.spec.act_dtype)

    def step_into(self, actions: np.ndarray, out: dict[str, np.ndarray], row: int) -> None:
        if self._sent is not None:
            raise RuntimeError("step_into after step_with: the overlapped halves have actions in flight")
        actions = np.asarray(actions, dtype=self.spec.act_dtype)
        for k, (lo, hi) in enumerate(self.halves):
            self._rows_before(actions[lo:hi], out, row, lo, hi)
            self.pools[k].send(actions[lo:hi].astype(np.int32))
            self._rows_after(k, out, row)

    def step_with(self, act: Act, out: dict[str, np.ndarray], row: int, recorded: Recorded = None) -> None:
        if len(self.halves) == 1:
            super().step_with(act, out, row, recorded)
            return
        if self._sent is None:
            self._sent = [self._act(k, act, recorded) for k in range(len(self.halves))]
        for k, (lo, hi) in enumerate(self.halves):
            actions, fields = self._sent[k]
            self._rows_before(actions, out, row, lo, hi)
            for name, values in fields.items():
                if name in out:
                    out[name][row + lo : row + hi] = values
            self._rows_after(k, out, row)
            self._sent[k] = self._act(k, act, recorded)

    def _act(self, k: int, act: Act, recorded: Recorded) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Chooses half ``k``'s actions and sends them: its envs step while the caller acts on the other half."""
        lo, hi = self.halves[k]
        actions = np.asarray(act(self.obs[lo:hi]), dtype=self.spec.act_dtype)
        fields = {name: np.array(v) for name, v in recorded().items()} if recorded is not None else {}
        self.pools[k].send(actions.astype(np.int32))
        return actions, fields

    def _rows_before(self, actions: np.ndarray, out: dict[str, np.ndarray], row: int, lo: int, hi: int) -> None:
        out["obs"][row + lo : row + hi] = self.obs[lo:hi] if self.frames is None else self.ids[lo:hi]
        out["action"][row + lo : row + hi] = actions

    def _rows_after(self, k: int, out: dict[str, np.ndarray], row: int) -> None:
        """Receives half ``k``'s step and writes the rest of its rows; resets the envs whose episode ended."""
        lo, hi = self.halves[k]
        pool, frames = self.pools[k], self.frames
        obs, reward, terminated, truncated, info = pool.recv()
        order = np.argsort(info["env_id"])
        if not np.array_equal(order, np.arange(hi - lo)):
            obs, reward, terminated, truncated = obs[order], reward[order], terminated[order], truncated[order]
            info = {key: info[key][order] for key in ("reward", "terminated")}
        a, b = row + lo, row + hi
        out["reward"][a:b] = reward
        out["terminated"][a:b] = terminated
        if "truncated" in out:
            out["truncated"][a:b] = truncated & ~terminated
        if frames is None:
            out["next_obs"][a:b] = obs
        else:
            ids = self.ids[lo:hi]
            ids[:, :-1] = ids[:, 1:]
            ids[:, -1] = frames.extend(obs[:, -1]) + np.arange(hi - lo)
            out["next_obs"][a:b] = ids
        self.obs[lo:hi] = obs
        returns = self.episode_returns[lo:hi]
        returns += info["reward"]
        if "env_index" in out:
            out["env_index"][a:b] = self._index[lo:hi]
        ended = terminated | truncated
        if not ended.any():
            return
        for i in np.flatnonzero(truncated | (info["terminated"] != 0)):
            self.finished_returns.append(float(returns[i]))
            returns[i] = 0.0
        which = np.flatnonzero(ended).astype(np.int32)
        reset, *_, reset_info = pool.step(np.zeros(len(which), np.int32), which)
        for i, o in zip(reset_info["env_id"], reset):
            self.obs[lo + i] = o
            if frames is not None:
                self.ids[lo + i] = self._number_reset(o)

    def close(self) -> None:
        for pool in self.pools:
            pool.close()
