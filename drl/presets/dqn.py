"""DQN presets: for classic control, rl-baselines3-zoo's CartPole entry with a lower learning rate and a slower
target network (lr 1e-3, target copied every 100 updates: the zoo's 2.3e-3 and 10 reached 500 on some seeds and
stalled below 475 on others once workers acted through numpy, a change of the last float bits only); for MinAtar,
the MinAtar paper's DQN (Young and Tian 2019: MinAtar network, batch 32, replay 100,000, target copied every 1,000
updates, epsilon from 1 to 0.1, learning from 5,000 transitions on) made quicker for short runs: Adam at 1e-3
(the paper: RMSprop at 2.5e-4), 3-step returns, one update every 4 steps (the paper: every step), epsilon falling
over the first 10% of 200,000 steps (the paper: 100,000 of 5,000,000), figures in bench/README.md; for Atari
(``ALE/`` ids but their RAM observations) the ``dqn-atari`` values; the Nature DQN pace elsewhere."""

from __future__ import annotations

from drl.algorithms.dqn.config import DQNConfig
from drl.config import ExperimentConfig
from drl.presets.atari import dqn_atari, is_atari

CLASSIC_CONTROL = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3"}


def is_minatar(env: str) -> bool:
    return env.startswith("MinAtar/")


def dqn(env: str | None = None) -> ExperimentConfig:
    """Double DQN with 3-step returns for discrete actions (CartPole-v1 by default)."""
    env = env or "CartPole-v1"
    if env in CLASSIC_CONTROL:
        return ExperimentConfig(
            preset="dqn",
            algorithm="dqn",
            env=env,
            steps=100_000,
            random_steps=1000,
            learning_starts=1000,
            updates_per_transition=0.5,
            replay_size=100_000,
            dqn=DQNConfig(
                hidden=(256, 256),
                lr=1e-3,
                batch_size=64,
                n_step=3,
                target_update_every=100,
                eps_end=0.04,
                eps_decay_fraction=0.16,
            ),
        )
    if is_minatar(env):
        return ExperimentConfig(
            preset="dqn",
            algorithm="dqn",
            env=env,
            steps=200_000,
            random_steps=5_000,
            learning_starts=5_000,
            updates_per_transition=0.25,
            replay_size=100_000,
            dqn=DQNConfig(
                encoder="minatar",
                lr=1e-3,
                gamma=0.99,
                batch_size=32,
                n_step=3,
                target_update_every=1_000,
                eps_end=0.1,
                eps_decay_fraction=0.1,
            ),
        )
    if is_atari(env):
        return dqn_atari(env, preset="dqn")
    return ExperimentConfig(
        preset="dqn",
        algorithm="dqn",
        env=env,
        steps=1_000_000,
        random_steps=20_000,
        learning_starts=20_000,
        updates_per_transition=0.25,
        replay_size=1_000_000,
        dqn=DQNConfig(hidden=(256, 256), lr=1e-4, batch_size=32, n_step=3, target_update_every=2_000),
    )
