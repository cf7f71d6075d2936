"""The trainer's process shell: consume experience, update the learner, publish policy versions.

Every entry read goes through ``drl.training.ingest`` (decoded, checked, dead-lettered, deduplicated, dropped as stale
in SYNC), the accepted ones into the algorithm's ``Learning`` (its replay or its rollout), and only then is the
read committed with the ledger, so a trainer killed at any point and restarted counts every transition exactly
once. ASYNC reads and trains paced by ``drl.training.pacing``; SYNC trains once per policy version, after every live
worker has sent its share of that version (or the deadline passed). Policies and checkpoints go to the data
store; versions are announced through the memory backend.
"""

from __future__ import annotations

import logging
import signal
import time

import torch

from drl.errors import EXIT_INTERRUPTED
from drl.process import usable_cpus
from drl.training import loops
from drl.training.collective import any_of, newest
from drl.training.status import trainer_fields
from services.common import ServiceContext
from services.trainer import summary as run_files
from services.trainer.assembly import TrainerParts

log = logging.getLogger("drl.trainer")

SIGTERM_REASON = "terminated"


class Trainer(TrainerParts):
    """Runs the parts: the ASYNC or SYNC loop (``drl.training.loops``), publishing, checkpoints, status, the end."""

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
        fields = trainer_fields(
            self.ledger,
            self.learning,
            self.channels,
            time.monotonic() - self.started,
            role=self.ctx.role,
            state=state,
            exit_reason=reason,
            policy_version=self.version,
            device=self.device,
        )
        self.status.write(fields, force=force)
        self.curves.add(
            time.monotonic(),
            self.ledger.consumed,
            self.updates,
            self.learning.metrics,
            fields,
            final=state == "finished",
        )

    def run_async(self) -> str:
        return loops.run_async(self)

    def run_sync(self) -> str:
        return loops.run_sync(self)

    def run(self) -> int:
        log.info(
            "trainer of run %s: %s on %s, %s mode, %d workers; learner on %s",
            self.ctx.run,
            self.cfg.algorithm,
            self.cfg.env,
            self.cfg.mode,
            self.cfg.workers,
            self.device,
        )
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
        log.info(
            "finished (%s): %d transitions consumed, %d updates, policy version %d",
            reason,
            self.ledger.consumed,
            self.updates,
            self.version,
        )
        if writes_run_files:
            run_files.write_summary(
                self.policies.store,
                self.control,
                self.cfg,
                self.ctx.run,
                {"updates": self.updates, "policy_version": self.version},
                time.monotonic() - self.started,
                self.ctx.steps_done,
                reason,
            )
        return 0

    def interrupted(self) -> int:
        """Ends a process that SIGTERM stopped while the run goes on (``serve``): a checkpoint to continue from, the
        status ``interrupted`` (a replacement takes the identity up only from a process that did not finish), no
        done marker and no summary."""
        self.save_checkpoint()
        self.report(force=True, state="interrupted", reason=SIGTERM_REASON)
        log.info(
            "terminated while the run goes on: %d transitions consumed, %d updates, policy version %d; a "
            "replacement continues from the checkpoint (exit code %d)",
            self.ledger.consumed,
            self.updates,
            self.version,
            EXIT_INTERRUPTED,
        )
        return EXIT_INTERRUPTED


def serve(ctx: ServiceContext) -> int:
    """SIGTERM (Kubernetes, the orchestrator) ends the run loop at the next check, with a checkpoint: with the
    run's stop flag set the run ends there (the local orchestrator sets it before it signals); without it the pod
    was deleted, evicted or drained under a run that goes on, so the trainer exits ``EXIT_INTERRUPTED`` without
    marking the run finished, and its Job's replacement pod continues from that checkpoint."""
    torch.set_num_threads(ctx.config.trainer_threads or max(1, int(usable_cpus())))
    trainer = Trainer(ctx)
    signal.signal(signal.SIGTERM, lambda signum, frame: trainer.should_stop.stop(SIGTERM_REASON))
    try:
        return trainer.run()
    finally:
        trainer.curves.close()
        trainer.close()
