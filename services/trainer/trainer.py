"""The trainer's process shell: consume experience, update the learner, publish policy versions.

Every entry read goes through ``drl.training.ingest`` (decoded, checked, dead-lettered, deduplicated, dropped as stale
in SYNC), the accepted ones into the algorithm's ``Learning`` (its replay or its rollout), and only then is the
read committed with the ledger, so a trainer killed at any point and restarted counts every transition exactly
once. ASYNC reads and trains paced by ``drl.training.pacing``; SYNC trains once per policy version, after every live
worker has sent its share of that version (or the deadline passed). Policies and checkpoints go to the data
store; versions are announced through the memory backend.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time

import torch

from drl import device as devices
from drl.algorithms import get as get_algorithm
from drl.envs import space_spec
from drl.errors import EXIT_INTERRUPTED
from drl.memory import codec
from drl.memory.backlog import backlog_limits
from drl.store import PolicyStore, run_store
from drl.store.base import PrefixedStore
from drl.store.checkpoint import CheckpointStore
from drl.tensorboard import ScalarLog, TrainerCurves
from drl.training import loops
from drl.training.checkpointing import TrainerCheckpoints
from drl.training.collective import any_of, join_learners, newest, start_together
from drl.training.ingest import Ingest, Ledger, Ledgers
from drl.training.membership import Membership
from drl.training.pacing import RateLimiter
from drl.training.publishing import Publisher
from drl.training.shards import Channels
from drl.training.status import trainer_fields
from drl.training.stopping import StopCheck
from services.common import Service, ServiceContext, StatusWriter
from services.telemetry import TELEMETRY
from services.trainer import summary as run_files

log = logging.getLogger("drl.trainer")

SIGTERM_REASON = "terminated"


class Trainer(Service):
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
        self.rank, self.size = ctx.learner_rank, cfg.learners
        shards = self.memory.shard_map.of_learner(self.rank, self.size)
        self.ledger = Ledgers({s: Ledger() for s in shards}, cfg.memory_shards)
        self.group = join_learners(self.learning, self.rank, self.size, cfg.algorithm, self.device, shards)
        self.membership = Membership(self.control, self.ledger, cfg.workers, cfg.member_silence_s,
                                     steps=max(0, cfg.steps - ctx.steps_done))
        limits = backlog_limits(cfg, layout, algorithm.entry_transitions(cfg))
        self.channels = Channels.open(
            self.memory, self.control, self.ledger,
            lambda ledger: Ingest(ctx.run, layout, ledger, self.membership.admits), self.learning, limits,
            reclaim_idle_s=cfg.reclaim_idle_s, max_backlog_bytes=cfg.max_backlog_bytes,
            learning_starts=cfg.learning_starts, on_reset=self.on_memory_reset)
        store = run_store(ctx.store_url, ctx.run)
        self.policies = PolicyStore(store, ctx.run)
        own = store if self.rank == 0 else PrefixedStore(store, f"learners/{self.rank}/")
        self.checkpoints = TrainerCheckpoints(CheckpointStore(own, ctx.run), cfg.algorithm, cfg.checkpoint_every_s,
                                              cfg.keep_checkpoints, cfg.checkpoint_replay, session=ctx.steps_done)
        self.status = StatusWriter(self.control, ctx.name)
        self.membership.refresh()
        self.limiter = RateLimiter(self.learning.tolerance)
        self.pub = Publisher(self.policies, self.announcer, self.learning, self.spec, cfg.algorithm, self.rank,
                             cfg.keep_policies, lambda: self.ledger.consumed, self.channels.lost_state,
                             self.on_memory_reset)
        self.started = time.monotonic()
        self.should_stop = StopCheck(self.control, TELEMETRY.stop.is_set)
        self.restore()
        self.curves = TrainerCurves(ScalarLog(ctx.run_dir / "tensorboard" / ctx.name), self.started,
                                    self.ledger.consumed, self.updates)

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
            log.info("continuing: %d transitions consumed, %d updates, policy version %d", self.ledger.consumed,
                     self.updates, self.version)

    def on_memory_reset(self, version: int | None = None) -> None:
        """The memory server restarted empty: put back what services read from it, announcing ``version`` (the
        current one by default)."""
        version = self.version if version is None else version
        log.warning("memory server lost its data; re-announcing version %d and rewriting trainer state", version)
        if hasattr(self, "channels"):
            self.channels.rewrite(self.updates, version)

    def finished(self) -> bool:
        """Every worker finished and nothing left in any stream."""
        return self.membership.all_finished() and self.channels.backlog() == 0

    def publish(self, force: bool = False, checkpoint: bool = False) -> None:
        """Publishes the learner's policy as the next version, unless nothing changed since the last one; with
        ``checkpoint``, then writes a checkpoint if one is due."""
        if self.pub.publish(force):
            self.report(force=True)
        if checkpoint and any_of(self.group, self.checkpoints.due()):
            self.save_checkpoint()

    def republish(self) -> int | None:
        """SYNC, no entry for a while: the version the workers wait for, published again if it is gone from the
        store (``Publisher.keep_published``); the new version when that published another, else None."""
        if not self.pub.keep_published():
            return None
        self.report(force=True)
        return self.version

    def save_checkpoint(self, exit_reason: str | None = None) -> None:
        """Every learner writes its own checkpoint (its shards' ledgers; learner 0's is the run's, with the
        group's counters summed, what a resumed run counts as done before it)."""
        totals = None
        if self.size > 1:
            counts = torch.tensor(list(self.ledger.counters().values()), dtype=torch.int64)
            totals = dict(zip(self.ledger.counters(), self.group.sum_(counts).tolist()))
        self.checkpoints.save(self.learning, self.ledger, self.version, exit_reason=exit_reason, totals=totals)

    def report(self, force: bool = False, state: str = "running", reason: str = "") -> None:
        if not force and not self.status.due():
            return
        fields = trainer_fields(self.ledger, self.learning, self.channels, time.monotonic() - self.started,
                                role=self.ctx.role, state=state, exit_reason=reason, policy_version=self.version,
                                device=self.device)
        self.status.write(fields, force=force)
        self.curves.add(time.monotonic(), self.ledger.consumed, self.updates, self.learning.metrics, fields,
                        final=state == "finished")

    def run_async(self) -> str:
        return loops.run_async(self)

    def run_sync(self) -> str:
        return loops.run_sync(self)

    def run(self) -> int:
        log.info("trainer of run %s: %s on %s, %s mode, %d workers; learner on %s", self.ctx.run, self.cfg.algorithm,
                 self.cfg.env, self.cfg.mode, self.cfg.workers, self.device)
        writes_run_files = self.rank == 0 and run_files.trainer_writes()
        if writes_run_files:
            run_files.write_config(self.policies.store, self.cfg)
        if self.rank == 0 and self.announcer.latest() < 0:
            self.publish(force=True)
        self.pub.version = newest(self.group, self.version)
        reason = self.run_async() if self.cfg.mode == "async" else self.run_sync()
        if reason == "steps_done":
            # Workers that saw the stop flag end their shares early; the run ended for the flag's reason.
            reason = self.should_stop(force=True) or reason
        if reason == "steps_done":
            self.publish()
        elif reason == SIGTERM_REASON:
            reason = self.should_stop.flag_reason() or SIGTERM_REASON
        self.channels.record()
        if reason == SIGTERM_REASON:
            return self.interrupted()
        self.save_checkpoint(exit_reason=reason)
        if self.rank == 0:
            self.control.mark_trainer_done(self.version)
        self.report(force=True, state="finished", reason=reason)
        log.info("finished (%s): %d transitions consumed, %d updates, policy version %d", reason,
                 self.ledger.consumed, self.updates, self.version)
        if writes_run_files:
            run_files.write_summary(self.policies.store, self.control, self.cfg, self.ctx.run,
                                    {"updates": self.updates, "policy_version": self.version},
                                    time.monotonic() - self.started, self.ctx.steps_done, reason)
        return 0

    def interrupted(self) -> int:
        """Ends a process that SIGTERM stopped while the run goes on (``serve``): a checkpoint to continue from, the
        status ``interrupted`` (a replacement takes the identity up only from a process that did not finish), no
        done marker and no summary."""
        self.save_checkpoint()
        self.report(force=True, state="interrupted", reason=SIGTERM_REASON)
        log.info("terminated while the run goes on: %d transitions consumed, %d updates, policy version %d; a "
                 "replacement continues from the checkpoint (exit code %d)", self.ledger.consumed, self.updates,
                 self.version, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED


def serve(ctx: ServiceContext) -> int:
    """SIGTERM (Kubernetes, the orchestrator) ends the run loop at the next check, with a checkpoint: with the
    run's stop flag set the run ends there (the local orchestrator sets it before it signals); without it the pod
    was deleted, evicted or drained under a run that goes on, so the trainer exits ``EXIT_INTERRUPTED`` without
    marking the run finished, and its Job's replacement pod continues from that checkpoint."""
    torch.set_num_threads(ctx.config.trainer_threads)
    trainer = Trainer(ctx)
    signal.signal(signal.SIGTERM, lambda signum, frame: trainer.should_stop.stop(SIGTERM_REASON))
    try:
        return trainer.run()
    finally:
        trainer.curves.close()
        trainer.close()
