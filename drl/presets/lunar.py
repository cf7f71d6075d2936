"""SAC preset for LunarLanderContinuous: RL Baselines3 Zoo's tuned SAC entry for that env (``hyperparams/sac.yml``,
``LunarLanderContinuous``: actor and critics 400x300, batch 256, learning rate 7.3e-4, gamma 0.99, tau 0.01, one
gradient step per env step, 10,000 uniformly random steps before learning, 1M replay, learned temperature,
500,000 steps). The zoo decays the learning rate linearly to 0 over the run; drl has no schedule, so the rate
stays at 7.3e-4. ``bench/time_to_score.py --env LunarLanderContinuous-v3`` trains SB3 with the same values.

On a CPU the update is nearly all of such a run's work; ``--sac.hidden 256,256 --sac.matmul bfloat16`` makes it
faster in the running system without needing more updates to score: the settings of the benchmark's time-to-score
goal (figures in ``docs/benchmarks.md`` and ``bench/README.md``)."""

from __future__ import annotations

from drl.algorithms.sac.config import SACConfig
from drl.config import ExperimentConfig


def sac_lunar(env: str | None = None) -> ExperimentConfig:
    """SAC with rl-baselines3-zoo's LunarLanderContinuous hyperparameters (LunarLanderContinuous-v3 by default)."""
    return ExperimentConfig(
        preset="sac-lunar",
        algorithm="sac",
        env=env or "LunarLanderContinuous-v3",
        mode="async",
        steps=500_000,
        random_steps=10_000,
        learning_starts=10_000,
        updates_per_transition=1.0,
        replay_size=1_000_000,
        publish_every_updates=1000,
        sac=SACConfig(hidden=(400, 300), lr=7.3e-4, gamma=0.99, tau=0.01, batch_size=256, init_alpha=1.0),
    )
