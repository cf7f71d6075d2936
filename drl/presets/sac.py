"""SAC presets: small networks and a fast learning rate for classic control, the paper's sizes elsewhere."""

from __future__ import annotations

from drl.algorithms.sac.config import SACConfig
from drl.config import ExperimentConfig

CLASSIC_CONTROL = {"Pendulum-v1", "MountainCarContinuous-v0"}


def sac(env: str | None = None) -> ExperimentConfig:
    """Soft actor-critic for continuous actions (Pendulum-v1 by default)."""
    env = env or "Pendulum-v1"
    if env in CLASSIC_CONTROL:
        return ExperimentConfig(
            preset="sac",
            algorithm="sac",
            env=env,
            steps=20_000,
            random_steps=1000,
            learning_starts=1000,
            sac=SACConfig(hidden=(64, 64), lr=1e-3),
        )
    return ExperimentConfig(
        preset="sac",
        algorithm="sac",
        env=env,
        steps=1_000_000,
        random_steps=10_000,
        learning_starts=10_000,
        sac=SACConfig(hidden=(256, 256), lr=3e-4),
    )
