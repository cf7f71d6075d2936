"""An environment of your own, in the form drl takes it: a module that registers a gymnasium id when imported.

``MyPoint-v0``: a point on a line, pushed by a continuous action towards the origin; the reward is minus its
distance, so a policy that has learned anything scores far above a random one within a few thousand steps. Run
it with the module importable in every process of the run (here: on ``PYTHONPATH``)::

    PYTHONPATH=examples/custom_env drl-orchestrate --preset sac --env point_env:MyPoint-v0 --steps 4000

``point_env:MyPoint-v0`` is gymnasium's own ``module:EnvId`` form: ``gymnasium.make`` imports ``point_env`` and
makes ``MyPoint-v0``, which the import registered. docs/custom-envs.md has the rest (Kubernetes, images).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register, registry

MAX_STEPS = 50
"""Steps of an episode before it is truncated."""
SPEED = 0.2
"""How far one action at full strength moves the point."""


class PointEnv(gym.Env):
    """Observation: the point's position and the previous action (both in [-1, 1]); action: a push in [-1, 1]."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, render_mode: str | None = None):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.render_mode = render_mode
        self.position, self.last, self.steps = 0.0, 0.0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.position, self.last], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position, self.last, self.steps = float(self.np_random.uniform(-1.0, 1.0)), 0.0, 0
        return self._obs(), {}

    def step(self, action):
        self.last = float(np.clip(np.asarray(action, dtype=np.float32).reshape(-1)[0], -1.0, 1.0))
        self.position = float(np.clip(self.position + SPEED * self.last, -1.0, 1.0))
        self.steps += 1
        return self._obs(), -abs(self.position), False, self.steps >= MAX_STEPS, {}

    def render(self) -> np.ndarray:
        """A 16x64 picture: the origin as a grey column, the point as a white one."""
        frame = np.zeros((16, 64, 3), dtype=np.uint8)
        frame[:, 32] = 96
        frame[:, int(round((self.position + 1.0) * 31.5))] = 255
        return frame


if "MyPoint-v0" not in registry:
    register(id="MyPoint-v0", entry_point=PointEnv)
