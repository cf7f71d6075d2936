"""PPO presets (SYNC only): the tuned classic-control settings of rl-baselines3-zoo for discrete control,
CleanRL's MuJoCo settings (with observation normalisation) for continuous control."""

from __future__ import annotations

from drl.algorithms.ppo.config import PPOConfig
from drl.config import ExperimentConfig
from drl.envs import space_spec


def ppo(env: str | None = None) -> ExperimentConfig:
    """PPO for discrete or continuous actions (CartPole-v1 by default); on-policy, SYNC mode only."""
    env = env or "CartPole-v1"
    discrete = bool(space_spec(env).discrete_actions)
    if discrete:
        return ExperimentConfig(preset="ppo", algorithm="ppo", env=env, mode="sync", workers=4, steps=150_000, random_steps=0,
                                learning_starts=0,
                                sync_steps_per_iteration=512, batch_transitions=128,
                                ppo=PPOConfig(hidden=(64, 64), lr=1e-3, gamma=0.98, gae_lambda=0.8, epochs=20,
                                              minibatches=2, ent_coef=0.0))
    return ExperimentConfig(preset="ppo", algorithm="ppo", env=env, mode="sync", workers=4, steps=1_000_000, random_steps=0,
                            learning_starts=0,
                            sync_steps_per_iteration=2048, batch_transitions=256,
                            ppo=PPOConfig(hidden=(64, 64), lr=3e-4, epochs=10, minibatches=32, normalize_obs=True))
