"""Deterministic evaluation episodes: the same seeds for every version, so versions compare fairly."""

from __future__ import annotations

import numpy as np

from drl.algorithms import Actor
from drl.envs import make_env


def run_episodes(env_id: str, actor: Actor, episodes: int, seed: int, max_steps: int = 100_000) -> list[float]:
    env = make_env(env_id)
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, done, steps = 0.0, False, 0
            while not done and steps < max_steps:
                action = actor.act(np.asarray(obs)[None], deterministic=True)[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
                steps += 1
            returns.append(total)
    finally:
        env.close()
    return returns
