"""APPO presets (ASYNC, V-trace with PPO's clipped surrogate).

- **CartPole-v1** (the default) and other vector tasks with discrete actions: RLlib's tuned APPO CartPole example
  (``rllib/tuned_examples/appo/cartpole_appo.py``: V-trace, clip 0.2... see bench/README.md for the values it
  sets) adapted to drl's segments; the PPO preset's tanh 64x64 networks and discount.
- **LunarLander-v3**: the same shape with rl-baselines3-zoo's PPO LunarLander discount and entropy (gamma 0.999,
  entropy 0.01) and a larger batch.
- **Atari** (``ALE/`` ids) and **MinAtar**: Sample Factory's Atari APPO settings (``sf_examples/atari``: rollout
  32 steps, batch 256, Adam 2.5e-4... see bench/README.md), on the Nature encoder (MinAtar: its own).

Every choice that differs from its source is stated in bench/README.md ("APPO presets"), with the runs behind it.
"""

from __future__ import annotations

from drl.algorithms.appo.config import APPOConfig
from drl.config import ExperimentConfig
from drl.presets.atari import is_atari
from drl.presets.dqn import is_minatar


def appo(env: str | None = None) -> ExperimentConfig:
    """APPO for discrete or continuous actions (CartPole-v1 by default); ASYNC mode."""
    env = env or "CartPole-v1"
    if is_atari(env):
        return appo_atari(env, preset="appo")
    if is_minatar(env):
        return ExperimentConfig(preset="appo", algorithm="appo", env=env, mode="async", workers=2, envs_per_worker=4,
                                steps=1_000_000, random_steps=0, learning_starts=0, publish_every_updates=1,
                                appo=APPOConfig(encoder="minatar", segment=32, batch_size=512, lr=5e-4,
                                                gamma=0.99, clip=0.2, epochs=1, minibatches=1, ent_coef=0.01))
    if env.startswith("LunarLander"):
        return ExperimentConfig(preset="appo", algorithm="appo", env=env, mode="async", workers=4, steps=2_000_000,
                                random_steps=0, learning_starts=0, publish_every_updates=1,
                                appo=APPOConfig(hidden=(64, 64), segment=64, batch_size=1024, lr=5e-4, gamma=0.999,
                                                clip=0.2, epochs=2, minibatches=2, ent_coef=0.01))
    return ExperimentConfig(preset="appo", algorithm="appo", env=env, mode="async", workers=4, steps=300_000,
                            random_steps=0, learning_starts=0, publish_every_updates=1,
                            appo=APPOConfig(hidden=(64, 64), segment=32, batch_size=512, lr=5e-4, gamma=0.98,
                                            clip=0.2, epochs=1, minibatches=1, ent_coef=0.0))


def appo_atari(env: str | None = None, preset: str = "appo-atari") -> ExperimentConfig:
    """APPO with the Nature encoder on Atari (ALE/Breakout-v5 by default)."""
    return ExperimentConfig(preset=preset, algorithm="appo", env=env or "ALE/Breakout-v5", mode="async", workers=4,
                            envs_per_worker=2, steps=10_000_000, random_steps=0, learning_starts=0,
                            publish_every_updates=1,
                            appo=APPOConfig(encoder="nature", segment=32, batch_size=256, lr=2.5e-4, gamma=0.99,
                                            clip=0.1, epochs=1, minibatches=1, ent_coef=0.01, vf_coef=0.5,
                                            max_grad_norm=0.5))
