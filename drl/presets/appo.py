"""APPO presets (ASYNC; V-trace targets with PPO's clipped surrogate on the ratio to the behaviour policy).

- **CartPole-v1** (the default) and other vector tasks: the ``ppo`` preset's tuned rl-baselines3-zoo CartPole
  values (tanh 64x64, Adam 1e-3, gamma 0.98, lambda 0.8 as V-trace's lambda, 20 epochs of 2 minibatches of rows
  over each batch of 512 transitions, no entropy bonus), the batch made of 16 segments of 32 steps from 4 workers of one
  environment; a version is published after every batch. The backlog holds 2 entries (an eighth of a batch):
  back-pressure then lets the workers run on only briefly while the learner trains, so most of each batch is
  collected by the newest version, which on CartPole scored in fewer env steps and less time than backlogs of 4
  and 16 entries (bench/README.md, "APPO presets"). The zoo anneals its learning rate; the ``ppo`` preset and
  this one keep it constant.
- **LunarLander-v3** (and LunarLanderContinuous): rl-baselines3-zoo's PPO LunarLander values (gamma 0.999,
  lambda 0.98, 4 epochs, entropy 0.01) on batches of 2,048 transitions (32 segments of 64 steps) in 16
  minibatches of 128 rows (the zoo: 16,384 per rollout in minibatches of 64), Adam 3e-4 held constant; the
  ``ppo`` preset's LunarLander settings are the same, so that the two differ only in how data is collected. The
  backlog holds 2 entries, as on CartPole. Minibatches of whole segments (2 segments of 64 consecutive steps
  each) rose to about 35 and fell back to a hovering lander; minibatches of rows shuffled across the batch reach
  200 (bench/README.md).
- **Atari** (``ALE/`` ids) and **MinAtar**: Sample Factory's Atari defaults (``sf_examples/atari/atari_params.py``,
  chosen there to match CleanRL's ``ppo_atari.py``): segments of 128 steps, 8 environments (4 workers of 2),
  4 epochs of 4 minibatches over 1,024 transitions, Adam 2.5e-4 falling linearly to 0, gamma 0.99, lambda 0.95,
  clip 0.1, entropy 0.01, value 0.5, gradient norm 0.5, 10M steps; the Nature encoder (MinAtar: its own, with
  Adam 1e-3 and clip 0.2 as the ``ppo`` preset's MinAtar settings). Sample Factory runs these values
  synchronously (``async_rl=False``, no V-trace); here the workers never wait and V-trace corrects for the lag.
  The trainer takes every CPU it may use (``--trainer-threads 0``; ``drl.presets.atari``).
  The backlog holds 4 entries (``ATARI_BACKLOG_ENTRIES``), which bounds the policy lag.
"""

from __future__ import annotations

from typing import Any

from drl.algorithms.appo.config import APPOConfig
from drl.config import ExperimentConfig
from drl.presets.atari import is_atari
from drl.presets.dqn import is_minatar

ONE_VERSION_PER_BATCH = 1
"""``--publish-every-updates`` for the presets: an update runs a batch's epochs and minibatches, so a version
follows every batch."""


ATARI_BACKLOG_ENTRIES = 4
"""``--max-backlog-entries`` of ``appo-atari``: a segment's policy lag is about the entries ahead of it (the
backlog's, and one held by each back-pressured worker) counted in batches, so the backlog holds 4 entries (one
batch at the preset's 2 envs per worker) instead of 16; the trainer, not the backlog, bounds the frames/s
(bench/README.md, "Issue 45")."""


def appo(env: str | None = None) -> ExperimentConfig:
    """APPO for discrete or continuous actions (CartPole-v1 by default); ASYNC mode."""
    env = env or "CartPole-v1"
    if is_atari(env):
        return appo_atari(env, preset="appo")
    common: dict[str, Any] = dict(
        preset="appo",
        algorithm="appo",
        env=env,
        mode="async",
        random_steps=0,
        learning_starts=0,
        publish_every_updates=ONE_VERSION_PER_BATCH,
    )
    if is_minatar(env):
        return ExperimentConfig(
            **common,
            workers=2,
            envs_per_worker=4,
            steps=500_000,
            appo=APPOConfig(
                encoder="minatar",
                segment=32,
                batch_size=1024,
                epochs=4,
                minibatches=4,
                lr=1e-3,
                anneal_lr=True,
                gamma=0.99,
                vtrace_lambda=0.95,
                clip=0.2,
                ent_coef=0.01,
            ),
        )
    if env.startswith("LunarLander"):
        return ExperimentConfig(
            **common,
            workers=4,
            steps=2_000_000,
            max_backlog_entries=2,
            appo=APPOConfig(
                hidden=(64, 64),
                segment=64,
                batch_size=2048,
                epochs=4,
                minibatches=16,
                lr=3e-4,
                gamma=0.999,
                vtrace_lambda=0.98,
                clip=0.2,
                ent_coef=0.01,
            ),
        )
    return ExperimentConfig(
        **common,
        workers=4,
        steps=150_000,
        max_backlog_entries=2,
        appo=APPOConfig(
            hidden=(64, 64),
            segment=32,
            batch_size=512,
            epochs=20,
            minibatches=2,
            lr=1e-3,
            gamma=0.98,
            vtrace_lambda=0.8,
            clip=0.2,
            ent_coef=0.0,
        ),
    )


def appo_atari(env: str | None = None, preset: str = "appo-atari") -> ExperimentConfig:
    """APPO with the Nature encoder and Sample Factory's Atari values (ALE/Breakout-v5 by default)."""
    return ExperimentConfig(
        preset=preset,
        algorithm="appo",
        env=env or "ALE/Breakout-v5",
        mode="async",
        workers=4,
        envs_per_worker=2,
        steps=10_000_000,
        random_steps=0,
        learning_starts=0,
        publish_every_updates=ONE_VERSION_PER_BATCH,
        trainer_threads=0,
        max_backlog_entries=ATARI_BACKLOG_ENTRIES,
        appo=APPOConfig(
            encoder="nature",
            segment=128,
            batch_size=1024,
            epochs=4,
            minibatches=4,
            lr=2.5e-4,
            anneal_lr=True,
            gamma=0.99,
            vtrace_lambda=0.95,
            clip=0.1,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
        ),
    )
