"""How a trainer process is put together: its parts built from the service's context, and continued from the
checkpoint and the memory server's committed state (see ``drl.training.checkpointing``)."""

from __future__ import annotations

import dataclasses
import logging
import time

import torch

from drl import device as devices
from drl.algorithms import get as get_algorithm
from drl.algorithms.convnets import compile_encoders
from drl.envs import space_spec
from drl.memory import codec
from drl.memory.backlog import backlog_limits
from drl.store import PolicyStore, run_store
from drl.store.base import PrefixedStore
from drl.store.checkpoint import CheckpointStore
from drl.tensorboard import ScalarLog, TrainerCurves
from drl.training.checkpointing import TrainerCheckpoints
from drl.training.collective import join_learners, newest, start_together
from drl.training.ingest import Ingest, Ledger, Ledgers
from drl.training.membership import Membership
from drl.training.pacing import RateLimiter
from drl.training.publishing import Publisher
from drl.training.shards import Channels
from drl.training.stopping import StopCheck
from services.common import Service, ServiceContext, StatusWriter
from services.telemetry import TELEMETRY

log = logging.getLogger("drl.trainer")


class TrainerParts(Service):
    """A trainer's parts, built in the order they depend on each other (the learning and its group of learners,
    the ledgers of the shards it reads, membership, channels, stores, publisher) and brought to where the run
    stands (``restore``); ``Trainer`` runs them."""

    def __init__(self, ctx: ServiceContext):
        super().__init__(ctx)
        if ctx.config.learners > 1:
            placed = devices.for_rank(ctx.config.device, ctx.learner_rank, torch.cuda.device_count())
            self.cfg = dataclasses.replace(self.cfg, device=placed)
        cfg = self.cfg
        algorithm = get_algorithm(cfg.algorithm)
        self.spec = space_spec(cfg.env)
        layout = codec.expected_layout(self.spec, algorithm.wire_fields(cfg))
        self.learning = algorithm.make_learning(self.spec, cfg, seed=cfg.seed)
        compiled = compile_encoders(
            getattr(self.learning, "learner", self.learning), cfg.compile, torch.device(self.device).type
        )
        log.info("--compile %s: %s", cfg.compile, compiled)
        self.rank, self.size = ctx.learner_rank, cfg.learners
        shards = self.memory.shard_map.of_learner(self.rank, self.size)
        self.ledger = Ledgers({s: Ledger() for s in shards}, cfg.memory_shards)
        self.group = join_learners(self.learning, self.rank, self.size, cfg.algorithm, self.device, shards)
        self.membership = Membership(
            self.control, self.ledger, cfg.workers, cfg.member_silence_s, steps=max(0, cfg.steps - ctx.steps_done)
        )
        limits = backlog_limits(cfg, layout, algorithm.entry_transitions(cfg))
        self.channels = Channels.open(
            self.memory,
            self.control,
            self.ledger,
            lambda ledger: Ingest(ctx.run, layout, ledger, self.membership.admits),
            self.learning,
            limits,
            reclaim_idle_s=cfg.reclaim_idle_s,
            max_backlog_bytes=cfg.max_backlog_bytes,
            learning_starts=cfg.learning_starts,
            on_reset=self.on_memory_reset,
        )
        store = run_store(ctx.store_url, ctx.run)
        self.policies = PolicyStore(store, ctx.run)
        own = store if self.rank == 0 else PrefixedStore(store, f"learners/{self.rank}/")
        self.checkpoints = TrainerCheckpoints(
            CheckpointStore(own, ctx.run),
            cfg.algorithm,
            cfg.checkpoint_every_s,
            cfg.keep_checkpoints,
            cfg.checkpoint_replay,
            session=ctx.steps_done,
        )
        self.status = StatusWriter(self.control, ctx.name)
        self.membership.refresh()
        self.limiter = RateLimiter(self.learning.tolerance)
        self.pub = Publisher(
            self.policies,
            self.announcer,
            self.learning,
            self.spec,
            cfg.algorithm,
            self.rank,
            cfg.keep_policies,
            lambda: self.ledger.consumed,
            self.channels.lost_state,
            self.on_memory_reset,
        )
        self.started = time.monotonic()
        self.should_stop = StopCheck(self.control, TELEMETRY.stop.is_set)
        self.restore()
        self.curves = TrainerCurves(
            ScalarLog(ctx.run_dir / "tensorboard" / ctx.name), self.started, self.ledger.consumed, self.updates
        )

    @property
    def version(self) -> int:
        return self.pub.version

    @property
    def device(self) -> str:
        """Where the learner's networks are (``--device`` resolved; a plugin's learner without one: the CPU)."""
        return str(getattr(self.learning.learner, "device", "cpu"))

    @property
    def updates(self) -> int:
        return self.learning.learner.updates

    def restore(self) -> None:
        """Continues a run (``drl.training.checkpointing``); the policy version continues from the highest of the
        announced one, the newest stored one and the checkpoint's."""
        committed = self.channels.committed()
        checkpoint = self.checkpoints.restore(self.learning, self.ledger, committed)
        known = [self.announcer.latest(), *self.policies.versions()[-1:]]
        self.pub.version = max(known + ([checkpoint.policy_version] if checkpoint is not None else []))
        if self.size > 1:
            # Learners restored different checkpoints and committed states: they continue from learner 0's
            # networks, update count and the newest version any of them knows, so that they step and publish
            # together.
            start_together(self.group, self.learning.learner)
            self.pub.version = newest(self.group, self.version)
        if not any(committed.values()) and self.ledger.known_workers():
            # The memory server lost the state with the trainer: put the checkpoint's back before any worker
            # process that starts now reads where to continue its numbering (it waits for the announced version).
            self.on_memory_reset()
        if any(committed.values()) or checkpoint is not None:
            log.info(
                "continuing: %d transitions consumed, %d updates, policy version %d",
                self.ledger.consumed,
                self.updates,
                self.version,
            )

    def on_memory_reset(self, version: int | None = None) -> None:
        """The memory server restarted empty: put back what services read from it, announcing ``version`` (the
        current one by default)."""
        version = self.version if version is None else version
        log.warning("memory server lost its data; re-announcing version %d and rewriting trainer state", version)
        if hasattr(self, "channels"):
            self.channels.rewrite(self.updates, version)
