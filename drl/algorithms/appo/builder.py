"""APPO's builder: on-policy data collected ASYNC, consumed once from a queue (``drl.training.learning.QueueLearning``),
never replayed; workers send fixed-length segments (``segment_steps``) whose transitions carry what rebuilds
per-environment trajectories and the behaviour policy's log-probabilities."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from drl import device
from drl.algorithms.appo.actor import BEHAVIOUR_LOGP
from drl.algorithms.appo.config import APPOConfig
from drl.algorithms.base import Actor, FieldSpecs, RolloutLearner, register
from drl.algorithms.ppo.builder import PPOBuilder
from drl.envs import TRAJECTORY_FIELDS, SpaceSpec

if TYPE_CHECKING:
    from drl.config import ExperimentConfig


class APPOBuilder(PPOBuilder):
    """PPO's builder where the data differ: its networks (``parameters``) and action spaces are PPO's."""

    name = "appo"
    config = APPOConfig
    doc = "APPO / IMPALA hyperparameters (V-trace)."

    def wire_fields(self, cfg: ExperimentConfig) -> FieldSpecs:
        return {**TRAJECTORY_FIELDS, BEHAVIOUR_LOGP: ("<f4", ())}

    def segment_steps(self, cfg: ExperimentConfig) -> int:
        return self.hyper(cfg).segment

    def policy_lag(self, cfg: ExperimentConfig) -> float:
        """What lies between collecting a segment and training on it when the trainer is the bound, counted in
        batches and turned into versions: the backlog's ``--max-backlog-entries`` and one entry held by each
        back-pressured worker, each of ``entry_transitions``, and half the batch being assembled. Workers wait
        for room with their entry already collected, so on a large machine the workers' entries, not the
        backlog, make most of it: the lag grows with workers x envs per worker x segment steps. Each stream
        (``--memory-shards``) has a backlog of its own, and a group of learners shares the streams, the workers
        and the versions, each learner training batches of its own."""
        hyper = self.hyper(cfg)
        entries = cfg.memory_shards * cfg.max_backlog_entries + cfg.workers
        waiting = entries * self.entry_transitions(cfg) / cfg.learners
        batches_per_version = max(1, math.ceil(cfg.publish_every_updates / (hyper.epochs * hyper.minibatches)))
        return (waiting / hyper.batch_size + 0.5) / batches_per_version

    def make_actor(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
        from drl.algorithms.appo.actor import APPOActor

        return APPOActor(spec, self.hyper(cfg), seed)

    def make_learner(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> RolloutLearner:
        from drl.algorithms.appo.learner import APPOLearner

        return APPOLearner(spec, self.hyper(cfg), seed, device=device.of(cfg))

    def make_learning(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int):
        from drl.training.learning import QueueLearning

        return QueueLearning(self.make_learner(spec, cfg, seed), cfg)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """ASYNC only (SYNC's iterations need no correction: that is PPO), and every action must be the
        policy's own, with its probability."""
        found = []
        if cfg.mode != "async":
            found.append(
                f"{self.name} runs in --mode async (it corrects for the policy lag of asynchronous "
                "collection; for SYNC iterations use --algorithm ppo)"
            )
        if cfg.random_steps:
            found.append(
                f"--random-steps must be 0 for {self.name}: it learns from its own policy's actions and "
                f"their probabilities (got {cfg.random_steps})"
            )
        if cfg.prioritized:
            found.append(f"--prioritized applies to replay-based algorithms; {self.name} consumes each segment once")
        return found + super(PPOBuilder, self).problems(cfg)


register(APPOBuilder())
