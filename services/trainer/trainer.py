"""The trainer's process shell: consume experience, update the learner, publish policy versions.

Every entry is decoded and checked (bad ones are dead-lettered), deduplicated by (worker, seq), inserted into
replay and only then acknowledged. ASYNC keeps the replay ratio: it reads more experience only when the
learner has done the updates owed for what it already has, so producers are paced by back-pressure.
SYNC trains once per policy version, after every live worker has sent its share (or the deadline passed).
"""

from __future__ import annotations

import logging
import time

import torch

from drl.algorithms import make_learner
from drl.envs import space_spec
from drl.memory import codec
from drl.memory.redis_backend import Announcer, Consumer, retrying
from drl.replay import ReplayBuffer
from drl.store import PolicyStore, open_store
from services.common import ServiceContext, StatusWriter

log = logging.getLogger("drl.trainer")


class SeqTracker:
    """Remembers which (worker, seq) entries were inserted, in memory proportional to the gaps."""

    def __init__(self) -> None:
        self.watermark: dict[str, int] = {}
        self.above: dict[str, set[int]] = {}

    def seen(self, worker: str, seq: int) -> bool:
        """True if the entry was inserted before; otherwise records it and returns False."""
        mark = self.watermark.get(worker, 0)
        above = self.above.setdefault(worker, set())
        if seq <= mark or seq in above:
            return True
        above.add(seq)
        while mark + 1 in above:
            mark += 1
            above.discard(mark)
        self.watermark[worker] = mark
        return False


class Trainer:
    def __init__(self, ctx: ServiceContext):
        cfg = ctx.config
        self.ctx, self.cfg = ctx, cfg
        self.client = ctx.redis()
        self.keys = ctx.keys()
        self.spec = space_spec(cfg.env)
        self.layout = codec.expected_layout(self.spec)
        self.learner = make_learner(cfg.algorithm, self.spec, cfg, seed=cfg.seed)
        self.replay = ReplayBuffer(self.spec, cfg.replay_size, seed=cfg.seed + 1)
        self.consumer = Consumer(self.client, self.keys, consumer="trainer-0")
        self.announcer = Announcer(self.client, self.keys)
        self.policies = PolicyStore(open_store(ctx.store_url), ctx.run)
        self.status = StatusWriter(self.client, self.keys.status("trainer"))
        self.workers = {f"rollout-{i}" for i in range(cfg.workers)}
        self.finished: set[str] = set()
        self.seqs = SeqTracker()
        self.version = -1
        self.published_updates = -1
        self.consumed = 0
        self.duplicates = 0
        self.stale = 0
        self.dead_letters = 0
        self.metrics: dict[str, float] = {}
        self.started = time.monotonic()
        self._stop_checked = 0.0
        self.stop_reason = ""

    # -- experience -------------------------------------------------------------------------------------
    def ingest(self, entries, sync_version: int | None = None) -> list:
        """Decodes, deduplicates and inserts entries, then acknowledges them; returns the accepted headers."""
        accepted, ids = [], []
        for entry_id, fields in entries:
            try:
                batch = codec.decode(fields, self.ctx.run, self.layout)
            except codec.DecodeError as exc:
                log.warning("entry %s dead-lettered: %s", entry_id, exc)
                self.consumer.dead_letter(entry_id, fields, exc.kind, str(exc))
                self.dead_letters += 1
                if exc.header is not None and exc.header.worker_id in self.workers:
                    self.seqs.seen(exc.header.worker_id, exc.header.seq)
                continue
            h = batch.header
            ids.append(entry_id)
            if h.worker_id not in self.workers:
                self.consumer.dead_letter(entry_id, fields, "unknown_worker", f"worker {h.worker_id!r} not in run")
                ids.pop()
                self.dead_letters += 1
                continue
            if self.seqs.seen(h.worker_id, h.seq):
                self.duplicates += h.count
                continue
            if h.final:
                self.finished.add(h.worker_id)
            if sync_version is not None and h.policy_version != sync_version:
                self.stale += h.count
                log.info("dropped %d transitions of %s for stale version %d (iteration %d)",
                         h.count, h.worker_id, h.policy_version, sync_version)
                continue
            self.replay.add(batch.arrays)
            self.consumed += h.count
            accepted.append(h)
        self.consumer.ack(ids)
        return accepted

    def all_finished(self) -> bool:
        if self.finished >= self.workers:
            return True
        done = retrying(lambda: self.client.hkeys(self.keys.workers_done), "HKEYS done")
        self.finished |= {d.decode() for d in done} & self.workers
        return self.finished >= self.workers

    # -- learning ---------------------------------------------------------------------------------------
    def owed_updates(self) -> int:
        """Updates the replay ratio asks for, given the transitions consumed so far."""
        if len(self.replay) < max(self.cfg.learning_starts, self.cfg.sac.batch_size):
            return 0
        return int(self.cfg.updates_per_transition * max(0, self.consumed - self.cfg.learning_starts))

    def update(self) -> None:
        self.metrics = self.learner.update(self.replay.sample(self.cfg.sac.batch_size))

    def publish(self, force: bool = False) -> None:
        """Publishes the learner's policy as the next version, unless nothing changed since the last one."""
        if self.learner.updates == self.published_updates and not force:
            return
        version = self.version + 1
        self.policies.publish(version, self.learner.policy_weights(), algorithm=self.cfg.algorithm,
                              env_steps=self.consumed, updates=self.learner.updates,
                              observation_space=self.spec.observation_space, action_space=self.spec.action_space)
        self.announcer.announce(version)
        self.version = version
        self.published_updates = self.learner.updates
        self.policies.retain(self.cfg.keep_policies)
        self.report(force=True)

    def should_stop(self) -> str:
        """The reason the run's stop flag gives ("target_reached" or "stopped"), or "" while it is unset."""
        now = time.monotonic()
        if not self.stop_reason and now - self._stop_checked > 0.25:
            self._stop_checked = now
            flag = retrying(lambda: self.client.get(self.keys.stop), "GET stop")
            if flag is not None:
                self.stop_reason = "target_reached" if flag.startswith(b"target_reached") else "stopped"
        return self.stop_reason

    def report(self, force: bool = False, state: str = "running", reason: str = "") -> None:
        if not force and not self.status.due():
            return
        elapsed = max(1e-9, time.monotonic() - self.started)
        self.status.write({
            "role": "trainer", "state": state, "exit_reason": reason, "policy_version": self.version,
            "env_steps": self.consumed, "transitions_consumed": self.consumed, "updates": self.learner.updates,
            "duplicates_dropped": self.duplicates, "stale_dropped": self.stale, "dead_lettered": self.dead_letters,
            "transitions_per_s": round(self.consumed / elapsed, 1), "replay_size": len(self.replay),
            "backlog": self.consumer.backlog(), **{k: round(v, 5) for k, v in self.metrics.items()},
        }, force=force)

    # -- modes ------------------------------------------------------------------------------------------
    def run_async(self) -> str:
        slack = max(1, int(self.cfg.updates_per_transition * self.cfg.batch_transitions))
        while True:
            if self.should_stop():
                return self.stop_reason
            owed = self.owed_updates()
            behind = owed - self.learner.updates
            if behind < slack:
                entries = self.consumer.read(count=4, block_ms=None if behind > 0 else 100)
                if entries:
                    self.ingest(entries)
                elif behind <= 0 and self.all_finished() and self.consumer.backlog() == 0:
                    return "steps_done"
            for _ in range(min(behind, 16)):
                self.update()
            if self.learner.updates - max(self.published_updates, 0) >= self.cfg.publish_every_updates:
                self.publish()
            self.report()

    def run_sync(self) -> str:
        while True:
            version = self.version
            waiting = set(self.workers - self.finished)
            deadline = time.monotonic() + self.cfg.sync_deadline_s
            while waiting and time.monotonic() < deadline:
                if self.should_stop():
                    return self.stop_reason
                for h in self.ingest(self.consumer.read(count=64, block_ms=100), sync_version=version):
                    if h.iteration_end:
                        waiting.discard(h.worker_id)
                waiting -= self.finished
                if waiting and self.all_finished():
                    waiting.clear()
                self.report()
            if self.all_finished():
                while entries := self.consumer.read(count=64, block_ms=None):
                    self.ingest(entries, sync_version=version)
            elif waiting:
                log.warning("iteration %d: no complete share from %s within %.0fs; training without them",
                            version, ", ".join(sorted(waiting)), self.cfg.sync_deadline_s)
            while self.learner.updates < self.owed_updates():
                self.update()
                if self.learner.updates % 200 == 0 and self.should_stop():
                    return self.stop_reason
                self.report()
            if self.all_finished() and self.consumer.backlog() == 0:
                return "steps_done"
            self.publish(force=True)

    def run(self) -> int:
        log.info("trainer of run %s: %s on %s, %s mode, %d workers", self.ctx.run, self.cfg.algorithm,
                 self.cfg.env, self.cfg.mode, self.cfg.workers)
        self.publish(force=True)
        reason = self.run_async() if self.cfg.mode == "async" else self.run_sync()
        if reason == "steps_done":
            self.publish()
        retrying(lambda: self.client.set(self.keys.trainer_done, self.version), "SET trainer done")
        self.report(force=True, state="finished", reason=reason)
        log.info("finished (%s): %d transitions consumed, %d updates, policy version %d", reason, self.consumed,
                 self.learner.updates, self.version)
        return 0


def serve(ctx: ServiceContext) -> int:
    torch.set_num_threads(ctx.config.trainer_threads)
    return Trainer(ctx).run()
