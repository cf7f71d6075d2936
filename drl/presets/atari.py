"""Atari presets (``ALE/...`` ids, standard preprocessing: 84x84 grayscale, frame skip 4, a stack of 4).

``dqn-atari`` takes CleanRL's ``dqn_atari.py`` (rl-baselines3-zoo's ``atari`` DQN entry shares its learning
rate, batch, update rate and exploration fraction): Nature DQN encoder, Adam lr 1e-4, replay 1,000,000, gamma
0.99, batch 32, one gradient update every 4 env steps (``--updates-per-transition 0.25``), learning from 80,000
transitions on, epsilon from 1 to 0.01 over the first 10% of the steps, 10,000,000 steps. CleanRL copies the
target network every 1,000 env steps, which at 4 env steps an update is every 250 updates (drl counts updates).
Three changes, all Ape-X's (Horgan et al. 2018), the design drl's workers follow: 3-step returns (CleanRL: 1),
double-DQN targets, Huber loss with gradient norm clipping at 10 (CleanRL: plain max targets and squared error).
The first 80,000 steps act uniformly at random (epsilon is about 1 then anyway), which spares the workers the
network until learning starts.

``ppo-atari`` takes CleanRL's ``ppo_atari.py``: Nature encoder shared by policy and value, 8 environments of 128
steps per iteration (4 workers of 2 environments: ``--sync-steps-per-iteration 1024``), Adam lr 2.5e-4 falling
linearly to 0, gamma 0.99, GAE lambda 0.95, 4 epochs of 4 minibatches, clip 0.1, entropy 0.01, value 0.5,
gradient norm 0.5, 10,000,000 steps. CleanRL also clips the value loss; drl's PPO does not.

``ppo-atari`` and ``appo-atari`` give the trainer every CPU it may use (``--trainer-threads 0``): ppo's workers
wait while it trains, appo's are niced and back-pressured most of the time, so its intra-op threads take the
cores they leave (bench/README.md, "Issue 45").
"""

from __future__ import annotations

from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.ppo.config import PPOConfig
from drl.config import ExperimentConfig

ATARI_ENTRY_TRANSITIONS = 512
"""Transitions per entry at least: an entry repeats each environment's stack history and the steps n-step
folding holds back (``drl.frames``), 5 frames per environment for a stack of 4 and 3-step returns, which at the
default 64 transitions over 4 environments is about a third more frames on the wire and in replay; at 512, a
few percent (bench/README.md, ``atari_bytes``)."""


def is_atari(env: str) -> bool:
    """An Atari game's screen (``ALE/...``); the ``-ram`` ids observe the console's 128 bytes of memory instead."""
    return env.startswith("ALE/") and "-ram" not in env


def dqn_atari(env: str | None = None, preset: str = "dqn-atari") -> ExperimentConfig:
    """DQN with the Nature encoder and CleanRL's Atari hyperparameters (ALE/Pong-v5 by default)."""
    return ExperimentConfig(
        preset=preset,
        algorithm="dqn",
        env=env or "ALE/Pong-v5",
        steps=10_000_000,
        random_steps=80_000,
        learning_starts=80_000,
        updates_per_transition=0.25,
        replay_size=1_000_000,
        batch_transitions=ATARI_ENTRY_TRANSITIONS,
        dqn=DQNConfig(
            encoder="nature",
            lr=1e-4,
            gamma=0.99,
            batch_size=32,
            n_step=3,
            double=True,
            target_update_every=250,
            max_grad_norm=10.0,
            eps_start=1.0,
            eps_end=0.01,
            eps_decay_fraction=0.1,
        ),
    )


def ppo_atari(env: str | None = None, preset: str = "ppo-atari") -> ExperimentConfig:
    """PPO with the Nature encoder and CleanRL's Atari hyperparameters (ALE/Breakout-v5 by default)."""
    return ExperimentConfig(
        preset=preset,
        algorithm="ppo",
        env=env or "ALE/Breakout-v5",
        mode="sync",
        workers=4,
        envs_per_worker=2,
        steps=10_000_000,
        random_steps=0,
        learning_starts=0,
        sync_steps_per_iteration=1024,
        batch_transitions=128,
        trainer_threads=0,
        ppo=PPOConfig(
            encoder="nature",
            lr=2.5e-4,
            anneal_lr=True,
            gamma=0.99,
            gae_lambda=0.95,
            clip=0.1,
            epochs=4,
            minibatches=4,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
            normalize_obs=False,
        ),
    )
