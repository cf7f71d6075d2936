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
import os
import signal
import time
from dataclasses import dataclass

import torch

from drl import device as devices
from drl.algorithms import get as get_algorithm
from drl.training.checkpointing import TrainerCheckpoints
from drl.training.collective import SOLO, broadcast_learner, join
from drl.envs import space_spec
from drl.training.ingest import Feed, Ingest, Ledger, Ledgers
from drl.training.membership import Membership
from drl.naming import shard_of
from drl.memory import codec
from drl.memory.backlog import backlog_limits
from drl.training.pacing import RateLimiter, ReadPace, Widening
from drl.errors import EXIT_INTERRUPTED, UserError
from drl.store import PolicyStore, run_store
from drl.store.base import PrefixedStore
from drl.store.checkpoint import CheckpointStore
from drl.tensorboard import ScalarLog, TrainerCurves
from services.common import Service, ServiceContext, StatusWriter
from services.telemetry import TELEMETRY
from services.trainer import summary as run_files

log = logging.getLogger("drl.trainer")

@dataclass
class Channel:
    """One experience shard as the trainer consumes it: its reader, its ledger (committed with that reader's reads
    only), the feed that reads and ingests, and the pacing of its reads."""

    shard: int
    reader: object
    ledger: Ledger
    feed: Feed
    pace: ReadPace
    widening: Widening


ASYNC_READ_ENTRIES = 4
STARVED_READ_ENTRIES = 64
SYNC_READ_ENTRIES = 64
MOST_UPDATES_PER_LOOP = 16
STOP_CHECK_EVERY_UPDATES = 200
STALLED_CHECK_S = 5.0
GROUP_TIMEOUT_S = 120.0
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
        shards = [s for s in range(cfg.memory_shards) if s % self.size == self.rank]
        self.ledger = Ledgers({s: Ledger() for s in shards}, cfg.memory_shards)
        self.group = self.join_group()
        self.membership = Membership(self.control, self.ledger, cfg.workers, cfg.member_silence_s,
                                     steps=max(0, cfg.steps - ctx.steps_done))
        limits = backlog_limits(cfg, layout, algorithm.entry_transitions(cfg))
        self.channels: list[Channel] = []
        for s in shards:
            reader = self.memory.reader("trainer-0", on_reset=self.on_memory_reset, shard=s)
            ledger = self.ledger.by_shard[s]
            feed = Feed(reader, Ingest(ctx.run, layout, ledger, self.membership.admits), self.learning,
                        cfg.reclaim_idle_s, done=self._done_markers(s))
            pace = ReadPace(limits.limit_bytes)
            widening = Widening(reader, limits, cfg.max_backlog_bytes, cfg.learning_starts, pace)
            self.channels.append(Channel(s, reader, ledger, feed, pace, widening))
        self._turn = 0
        store = run_store(ctx.store_url, ctx.run)
        self.policies = PolicyStore(store, ctx.run)
        own = store if self.rank == 0 else PrefixedStore(store, f"learners/{self.rank}/")
        self.checkpoints = TrainerCheckpoints(CheckpointStore(own, ctx.run), cfg.algorithm, cfg.checkpoint_every_s,
                                              cfg.keep_checkpoints, cfg.checkpoint_replay, session=ctx.steps_done)
        self.status = StatusWriter(self.control, ctx.name)
        self.membership.refresh()
        self.limiter = RateLimiter(self.learning.tolerance)
        self.version = self.published_updates = -1
        self.started = time.monotonic()
        self._stop_checked = 0.0
        self.stop_reason = ""
        self.restore()
        self.curves = TrainerCurves(ScalarLog(ctx.run_dir / "tensorboard" / ctx.name), self.started,
                                    self.ledger.consumed, self.updates)

    @property
    def version(self) -> int:
        """The newest published policy version, which the learning measures policy lag against."""
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = self.learning.policy_version = value

    def _done_markers(self, shard: int):
        """The done markers (``RunControl.workers_done``) of the workers that append to ``shard``: a shard's feed
        settles only its own workers (another shard's finished worker is not this shard's loss)."""
        shards = self.cfg.memory_shards
        if shards == 1:
            return self.control.workers_done
        return lambda: {w: n for w, n in self.control.workers_done().items() if shard_of(w, shards) == shard}

    def join_group(self):
        """With ``--learners`` K > 1: joins the group of K learners (this one rank ``ctx.learner_rank``; the
        trainer, rank 0, hosts the rendezvous at ``MASTER_ADDR:MASTER_PORT``) and gives the learner its
        collective; alone, ``SOLO``."""
        if self.size == 1:
            return SOLO
        learner = self.learning.learner
        if not hasattr(learner, "collective"):
            raise UserError(f"--learners {self.size}: the {self.cfg.algorithm} learner cannot average its gradients "
                            "with a group (it has no collective)")
        env = os.environ
        address, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
        if not address or not port.isdigit() or int(port) == 0:
            raise UserError(f"--learners {self.size}: MASTER_ADDR and MASTER_PORT must name the group's rendezvous "
                            f"(got {address!r}, {port!r}); drl-orchestrate sets them")
        log.info("learner %d of %d: joining the group at %s:%s, reading shards %s", self.rank, self.size, address,
                 port, ", ".join(str(s) for s in self.ledger.by_shard))
        try:
            group = join(self.rank, self.size, address, int(port), timeout_s=GROUP_TIMEOUT_S,
                         device=torch.device(self.device))
        except Exception as exc:
            raise UserError(f"learner {self.rank} of {self.size} could not join the group at {address}:{port} within "
                            f"{GROUP_TIMEOUT_S:.0f} s: {exc}") from None
        learner.collective = group
        return group

    def agree_any(self, flag: bool) -> bool:
        """Whether ``flag`` holds for any learner of the group (this one alone: whether it holds)."""
        return self.group.min_int(0 if flag else 1) == 0

    def agree_all(self, flag: bool) -> bool:
        """Whether ``flag`` holds for every learner of the group."""
        return self.group.min_int(1 if flag else 0) == 1

    @property
    def device(self) -> str:
        """Where the learner's networks are (``--device`` resolved; a plugin's learner without one: the CPU)."""
        return str(getattr(self.learning.learner, "device", "cpu"))

    @property
    def updates(self) -> int:
        return self.learning.learner.updates

    # -- durable state ----------------------------------------------------------------------------------
    def restore(self) -> None:
        """Continues a run (``drl.training.checkpointing``); the policy version continues from the highest of the
        announced one, the newest stored one and the checkpoint's."""
        committed = {ch.shard: ch.reader.load_state() for ch in self.channels}
        checkpoint = self.checkpoints.restore(self.learning, self.ledger, committed)
        known = [self.announcer.latest(), *self.policies.versions()[-1:]]
        self.version = max(known + ([checkpoint.policy_version] if checkpoint is not None else []))
        if self.size > 1:
            # Learners restored different checkpoints and committed states: they continue from learner 0's
            # networks, update count and the newest version any of them knows, so that they step and publish
            # together.
            broadcast_learner(self.group, self.learning.learner)
            self.learning.learner.updates = self.group.broadcast_int(self.updates)
            self.version = -self.group.min_int(-self.version)
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
        for ch in getattr(self, "channels", ()):
            ch.reader.rewrite(ch.ledger.fields(ch.ledger.known_workers(), self.updates), ch.ledger.produced,
                              ch.widening.factor, version)

    # -- experience -------------------------------------------------------------------------------------
    def finished(self) -> bool:
        """Every worker finished and nothing left in any stream."""
        return self.membership.all_finished() and self.backlog() == 0

    def backlog(self) -> int:
        return sum(ch.reader.backlog() for ch in self.channels)

    def read(self, count: int, block_ms: int | None, sync_version: int | None = None) -> list:
        """Reads every shard once without waiting (the next shard first, in turn) and, when none had anything and
        ``block_ms`` is set, waits that long on the shard whose turn it is; returns the accepted headers."""
        order = self.channels[self._turn:] + self.channels[:self._turn]
        self._turn = (self._turn + 1) % len(self.channels)
        taken = []
        for ch in order:
            taken += ch.feed.read(count, None, sync_version)
        if not taken and block_ms is not None:
            taken = order[0].feed.read(count, block_ms, sync_version)
        return taken

    def read_paced(self, count: int) -> bool:
        """ASYNC with no update owed: each shard's paced read (``Feed.read_paced``, each waiting a share of 100 ms
        for new entries, so a round over the shards waits about as long as one stream's read did); whether any
        took anything."""
        block_ms = max(10, 100 // len(self.channels))
        got = False
        for ch in self.channels:
            got = bool(ch.feed.read_paced(ch.pace, count, block_ms)) or got
        return got

    def widen(self, wide: bool) -> None:
        for ch in self.channels:
            ch.widening.widen(wide)

    # -- learning and publishing ------------------------------------------------------------------------
    def publish(self, force: bool = False, checkpoint: bool = False) -> None:
        """Publishes the learner's policy as the next version, unless nothing changed since the last one; with
        ``checkpoint``, then writes a checkpoint if one is due."""
        if force or self.updates != self.published_updates:
            version = self.version + 1
            if self.rank == 0:
                self._write_policy(version)
            self.version, self.published_updates = version, self.updates
            if self.rank == 0:
                self.policies.retain(self.cfg.keep_policies)
            self.report(force=True)
        if checkpoint and self.agree_any(self.checkpoints.due()):
            self.save_checkpoint()

    def save_checkpoint(self, exit_reason: str | None = None) -> None:
        """Every learner writes its own checkpoint (its shards' ledgers; learner 0's is the run's, with the
        group's counters summed, what a resumed run counts as done before it)."""
        totals = None
        if self.size > 1:
            counts = torch.tensor(list(self.ledger.counters().values()), dtype=torch.int64)
            totals = dict(zip(self.ledger.counters(), self.group.sum_(counts).tolist()))
        self.checkpoints.save(self.learning, self.ledger, self.version, exit_reason=exit_reason, totals=totals)

    def _write_policy(self, version: int) -> None:
        self.policies.publish(version, self.learning.learner.policy_weights(), algorithm=self.cfg.algorithm,
                              env_steps=self.ledger.consumed, updates=self.updates,
                              observation_space=self.spec.observation_space, action_space=self.spec.action_space)
        if any(ch.ledger.known_workers() and not ch.reader.load_state() for ch in self.channels):
            # The memory server lost its data and this trainer has not read from it since: a worker process
            # starting now takes its position once a version is announced, so the state goes back with it.
            self.on_memory_reset(version)
            return
        self.announcer.announce(version)

    def keep_published(self) -> bool:
        """SYNC: the workers wait for the current version; if it is gone from the store, publishes it again, so
        that they load it instead of failing: the same version (same weights) when the learner has not changed
        since it published it, else the next version. Returns True when the version changed."""
        if self.rank != 0 or self.version < 0 or self.policies.present(self.version):
            return False
        if self.updates == self.published_updates:
            log.warning("policy version %d is missing from the store; publishing it again", self.version)
            self._write_policy(self.version)
            return False
        log.warning("policy version %d is missing from the store; publishing version %d", self.version,
                    self.version + 1)
        self.publish(force=True)
        return True

    def should_stop(self, force: bool = False) -> str:
        """The reason the run's stop flag gives ("target_reached" or "stopped"), or "" while it is unset; the
        flag is read at most every 0.25 s unless ``force``."""
        now = time.monotonic()
        if not self.stop_reason and TELEMETRY.stop.is_set():
            self.stop_reason = "stopped"
        if not self.stop_reason and (force or now - self._stop_checked > 0.25):
            self._stop_checked = now
            self.stop_reason = self.flag_reason()
        return self.stop_reason

    def flag_reason(self) -> str:
        """The run's stop flag as an exit reason, "" while it is unset."""
        flag = self.control.stop_reason()
        if flag is None:
            return ""
        return "target_reached" if flag.startswith("target_reached") else "stopped"

    def stop(self, reason: str) -> None:
        """Ends the run loop at its next check (keeping a reason already found)."""
        self.stop_reason = self.stop_reason or reason

    def report(self, force: bool = False, state: str = "running", reason: str = "") -> None:
        if not force and not self.status.due():
            return
        ledger, elapsed = self.ledger, max(1e-9, time.monotonic() - self.started)
        fields = {
            "role": self.ctx.role, "state": state, "exit_reason": reason, "policy_version": self.version,
            "device": self.device,
            "env_steps": ledger.consumed, "transitions_consumed": ledger.consumed, "updates": self.updates,
            "duplicates_dropped": ledger.duplicates, "stale_dropped": ledger.stale,
            "dead_lettered": ledger.dead_letters, "lost": ledger.lost,
            "transitions_per_s": round(ledger.consumed / elapsed, 1),
            "replay_size": self.learning.size(), "backlog": self.backlog(),
            "backlog_bytes": sum(ch.reader.backlog_bytes() for ch in self.channels),
            "memory_resets": sum(ch.reader.resets for ch in self.channels),
            **{k: round(v, 5) for k, v in self.learning.metrics.items()}, **self.learning.report(),
        }
        self.status.write(fields, force=force)
        self.curves.add(time.monotonic(), ledger.consumed, self.updates, self.learning.metrics, fields,
                        final=state == "finished")

    # -- modes ------------------------------------------------------------------------------------------
    def run_async(self) -> str:
        """Reads and trains as the rate limiter says. In a group of learners every decision that the learners
        must take together is agreed each round: stopping, the number of updates (the fewest any learner owes),
        and the end (every learner's workers finished and its streams empty). Once any learner has run out of
        data for good, the group stops updating and every learner reads what is left (``draining``), so that no
        learner waits for updates another one can no longer make."""
        learning, limiter = self.learning, self.limiter
        draining = False
        while True:
            reason = self.should_stop()
            if self.agree_any(bool(reason)):
                return reason or self.should_stop(force=True) or "stopped"
            behind = learning.owed(self.ledger.consumed) - self.updates
            out = False
            if draining or limiter.starved(behind):
                self.widen(self.channels[0].widening.data_is_late(self.updates, self.ledger.consumed))
                out = not self.read_paced(STARVED_READ_ENTRIES) and self.finished()
            elif limiter.may_read(behind):
                self.read(ASYNC_READ_ENTRIES, None)
            else:
                self.widen(False)
            if self.agree_all(out):
                return "steps_done"
            draining = draining or (self.size > 1 and self.agree_any(out))
            count = 0 if draining else self.group.min_int(min(max(behind, 0), MOST_UPDATES_PER_LOOP))
            for _ in range(count):
                learning.update(self.ledger.consumed)
            if self.updates - max(self.published_updates, 0) >= self.cfg.publish_every_updates:
                self.publish(checkpoint=True)
            self.report()

    def run_sync(self) -> str:
        """Per policy version: waits for this learner's workers' shares (or the deadline), then trains. In a group
        of learners each waits for its own workers; stopping, the updates owed (the fewest any learner owes) and
        the end are agreed, and a rollout is trained only when every learner has one
        (``drl.training.learning``)."""
        membership = self.membership
        while True:
            version = self.version
            membership.refresh()
            waiting = membership.waiting_for(version)
            deadline = time.monotonic() + self.cfg.sync_deadline_s
            progressed = checked = time.monotonic()
            stopping = False
            while waiting and time.monotonic() < deadline:
                if self.should_stop():
                    stopping = True
                    break
                now = time.monotonic()
                if now - max(progressed, checked) > STALLED_CHECK_S:
                    checked = now
                    if self.keep_published():
                        version = self.version
                        waiting = membership.waiting_for(version)
                        deadline = now + self.cfg.sync_deadline_s
                taken = self.read(SYNC_READ_ENTRIES, 100, version)
                if taken:
                    progressed = time.monotonic()
                waiting -= {h.worker_id for h in taken if h.iteration_end}
                waiting -= membership.finished
                if waiting and membership.all_finished():
                    waiting.clear()
                self.report()
            if self.agree_any(stopping):
                return self.stop_reason or self.should_stop(force=True) or "stopped"
            if membership.all_finished():
                while self.read(SYNC_READ_ENTRIES, 100, version) or self.backlog():
                    pass
            elif waiting:
                log.warning("iteration %d: no complete share from %s within %.0fs; training without them",
                            version, ", ".join(sorted(waiting)), self.cfg.sync_deadline_s)
            self.learning.end_iteration(self.ledger.consumed)
            owed = self.group.min_int(max(0, self.learning.owed(self.ledger.consumed) - self.updates))
            for done in range(1, owed + 1):
                self.learning.update(self.ledger.consumed)
                if done % STOP_CHECK_EVERY_UPDATES == 0:
                    reason = self.should_stop()
                    if self.agree_any(bool(reason)):
                        return reason or self.should_stop(force=True) or "stopped"
                self.report()
            if self.agree_all(self.finished()):
                return "steps_done"
            self.publish(force=True, checkpoint=True)

    def run(self) -> int:
        log.info("trainer of run %s: %s on %s, %s mode, %d workers; learner on %s", self.ctx.run, self.cfg.algorithm,
                 self.cfg.env, self.cfg.mode, self.cfg.workers, self.device)
        writes_run_files = self.rank == 0 and run_files.in_cluster()
        if writes_run_files:
            run_files.write_config(self.policies.store, self.cfg)
        if self.rank == 0 and self.announcer.latest() < 0:
            self.publish(force=True)
        self.version = -self.group.min_int(-self.version)
        reason = self.run_async() if self.cfg.mode == "async" else self.run_sync()
        if reason == "steps_done":
            # Workers that saw the stop flag end their shares early; the run ended for the flag's reason.
            reason = self.should_stop(force=True) or reason
        if reason == "steps_done":
            self.publish()
        elif reason == SIGTERM_REASON:
            reason = self.flag_reason() or SIGTERM_REASON
        for ch in self.channels:
            ch.feed.record()
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
    signal.signal(signal.SIGTERM, lambda signum, frame: trainer.stop(SIGTERM_REASON))
    try:
        return trainer.run()
    finally:
        trainer.curves.close()
        trainer.close()
