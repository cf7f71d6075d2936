"""PPO presets (SYNC only): the tuned classic-control settings of rl-baselines3-zoo for discrete control
(LunarLander-v3: the zoo's LunarLander values, gamma 0.999, GAE lambda 0.98, 4 epochs, entropy 0.01, on iterations
of 2,048 steps in 16 minibatches of 128, as the ``appo`` preset's batches),
CleanRL's MuJoCo settings (with observation normalisation) for continuous control, the ``ppo-atari`` values for
Atari (``ALE/`` ids but their RAM observations), and for MinAtar CleanRL's Atari settings on the MinAtar network
made quicker for short runs: learning rate 1e-3 and clip 0.2 (``ppo_atari.py``: 2.5e-4 and 0.1) over 500,000
steps, figures in bench/README.md."""

from __future__ import annotations

from drl.algorithms.ppo.config import PPOConfig
from drl.config import ExperimentConfig
from drl.envs import space_spec
from drl.presets.atari import is_atari, ppo_atari
from drl.presets.dqn import is_minatar


def ppo(env: str | None = None) -> ExperimentConfig:
    """PPO for discrete or continuous actions (CartPole-v1 by default); on-policy, SYNC mode only."""
    env = env or "CartPole-v1"
    if is_atari(env):
        return ppo_atari(env, preset="ppo")
    if is_minatar(env):
        return ExperimentConfig(
            preset="ppo",
            algorithm="ppo",
            env=env,
            mode="sync",
            workers=2,
            envs_per_worker=4,
            steps=500_000,
            random_steps=0,
            learning_starts=0,
            sync_steps_per_iteration=1024,
            batch_transitions=128,
            ppo=PPOConfig(
                encoder="minatar",
                lr=1e-3,
                anneal_lr=True,
                gamma=0.99,
                gae_lambda=0.95,
                clip=0.2,
                epochs=4,
                minibatches=4,
                ent_coef=0.01,
                vf_coef=0.5,
                max_grad_norm=0.5,
            ),
        )
    if env.startswith("LunarLander-"):
        return ExperimentConfig(
            preset="ppo",
            algorithm="ppo",
            env=env,
            mode="sync",
            workers=4,
            steps=2_000_000,
            random_steps=0,
            learning_starts=0,
            sync_steps_per_iteration=2048,
            batch_transitions=128,
            ppo=PPOConfig(
                hidden=(64, 64),
                lr=3e-4,
                anneal_lr=False,
                gamma=0.999,
                gae_lambda=0.98,
                epochs=4,
                minibatches=16,
                ent_coef=0.01,
            ),
        )
    discrete = bool(space_spec(env).discrete_actions)
    if discrete:
        return ExperimentConfig(
            preset="ppo",
            algorithm="ppo",
            env=env,
            mode="sync",
            workers=4,
            steps=150_000,
            random_steps=0,
            learning_starts=0,
            sync_steps_per_iteration=512,
            batch_transitions=128,
            ppo=PPOConfig(hidden=(64, 64), lr=1e-3, gamma=0.98, gae_lambda=0.8, epochs=20, minibatches=2, ent_coef=0.0),
        )
    return ExperimentConfig(
        preset="ppo",
        algorithm="ppo",
        env=env,
        mode="sync",
        workers=4,
        steps=1_000_000,
        random_steps=0,
        learning_starts=0,
        sync_steps_per_iteration=2048,
        batch_transitions=256,
        ppo=PPOConfig(hidden=(64, 64), lr=3e-4, epochs=10, minibatches=32, normalize_obs=True),
    )
