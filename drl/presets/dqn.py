"""DQN presets: for classic control, rl-baselines3-zoo's CartPole entry with a lower learning rate and a slower
target network (lr 1e-3, target copied every 100 updates: the zoo's 2.3e-3 and 10 reached 500 on some seeds and
stalled below 475 on others once workers acted through numpy, a change of the last float bits only); the Nature
DQN pace elsewhere."""

from __future__ import annotations

from drl.algorithms.dqn.config import DQNConfig
from drl.config import ExperimentConfig

CLASSIC_CONTROL = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3"}


def dqn(env: str | None = None) -> ExperimentConfig:
    """Double DQN with 3-step returns for discrete actions (CartPole-v1 by default)."""
    env = env or "CartPole-v1"
    if env in CLASSIC_CONTROL:
        return ExperimentConfig(preset="dqn", algorithm="dqn", env=env, steps=100_000, random_steps=1000,
                                learning_starts=1000, updates_per_transition=0.5, replay_size=100_000,
                                dqn=DQNConfig(hidden=(256, 256), lr=1e-3, batch_size=64, n_step=3,
                                              target_update_every=100, eps_end=0.04, eps_decay_fraction=0.16))
    return ExperimentConfig(preset="dqn", algorithm="dqn", env=env, steps=1_000_000, random_steps=20_000,
                            learning_starts=20_000, updates_per_transition=0.25, replay_size=1_000_000,
                            dqn=DQNConfig(hidden=(256, 256), lr=1e-4, batch_size=32, n_step=3,
                                          target_update_every=2_000))
