"""Environments whose observations drl cannot carry, registered from a user's module as a plugin would register
them (``DRL_PLUGINS=tests.plugins.odd_spaces``): a Dict, a Tuple and a 4-dimensional Box observation space."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SPACES = {
    "DictObs-v0": gym.spaces.Dict(
        {"position": gym.spaces.Box(-1, 1, (2,), np.float32), "mode": gym.spaces.Discrete(3)}
    ),
    "TupleObs-v0": gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3))),
    "Box4dObs-v0": gym.spaces.Box(0, 255, (2, 3, 8, 8), np.uint8),
}


class OddSpaceEnv(gym.Env):
    """One step long, one of ``SPACES`` as its observation space, two actions; like many users' envs, it takes no
    ``render_mode``."""

    def __init__(self, name: str):
        self.observation_space = SPACES[name]
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


for _name in SPACES:
    if _name not in gym.envs.registry:
        gym.register(_name, entry_point=OddSpaceEnv, kwargs={"name": _name})
