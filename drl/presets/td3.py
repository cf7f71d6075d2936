"""TD3 presets: small networks, fast learning rates and faster-moving targets for classic control, the paper's
settings elsewhere (256x256, 3e-4, tau 0.005, 25,000 random steps)."""

from __future__ import annotations

from drl.algorithms.td3.config import TD3Config
from drl.config import ExperimentConfig

CLASSIC_CONTROL = {"Pendulum-v1", "MountainCarContinuous-v0"}


def td3(env: str | None = None) -> ExperimentConfig:
    """TD3 (twin delayed DDPG) for continuous actions (Pendulum-v1 by default)."""
    env = env or "Pendulum-v1"
    if env in CLASSIC_CONTROL:
        return ExperimentConfig(
            preset="td3",
            algorithm="td3",
            env=env,
            steps=20_000,
            random_steps=1000,
            learning_starts=1000,
            td3=TD3Config(hidden=(64, 64), actor_lr=1e-3, critic_lr=1e-3, tau=0.02),
        )
    return ExperimentConfig(
        preset="td3",
        algorithm="td3",
        env=env,
        steps=1_000_000,
        random_steps=25_000,
        learning_starts=25_000,
        td3=TD3Config(hidden=(256, 256), actor_lr=3e-4, critic_lr=3e-4),
    )
