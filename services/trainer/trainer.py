"""The trainer's process shell: consume experience, update the learner, publish policy versions.

Every entry is decoded and checked (bad ones are dead-lettered), deduplicated by (worker, seq), inserted into
replay and only then committed: acknowledgement, deletion and the trainer's counters and watermarks in one
transaction, so a trainer killed at any point and restarted counts every transition exactly once.

ASYNC is rate-limited as in Reverb: no update before ``learning_starts`` transitions, then updates follow
``updates_per_transition``; new experience is read only while the updates owed are at most ``ratio_tolerance``
transitions' worth ahead of those done, so producers are paced by back-pressure and the learner neither starves
nor over-trains. SYNC trains once per policy version, after every live worker has sent its share of that
version (or the deadline passed); entries of older versions are dropped and counted, never mixed in.
"""

from __future__ import annotations

import logging
import signal
import time

import torch

import numpy as np

from drl.algorithms import get as get_algorithm, make_learner, wire_extras
from drl.envs import space_spec
from drl.memory import codec
from drl.memory.backlog import ReadPace, backlog_limits
from drl.memory import seq_field
from drl.replay import PrioritizedReplay, ReplayBuffer
from drl.store import PolicyStore, run_store
from drl.store.checkpoint import CheckpointStore
from drl.errors import UserError
from drl.tensorboard import ScalarLog
from services.common import ServiceContext, StatusWriter
from services.telemetry import TELEMETRY

log = logging.getLogger("drl.trainer")

RECLAIM_EVERY_S = 5.0
ASYNC_READ_ENTRIES = 4
STARVED_READ_ENTRIES = 64
ROOM_FACTOR = 4
COUNTERS = ("consumed", "duplicates", "stale", "dead_letters", "updates")


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

    def dump(self, worker: str) -> str:
        """"mark[,seq...]": the watermark first (producers read it), then the seqs seen above it."""
        return ",".join(str(x) for x in [self.watermark.get(worker, 0), *sorted(self.above.get(worker, ()))])

    def load(self, worker: str, text: str) -> None:
        mark, *above = (int(x) for x in text.split(",") if x)
        self.watermark[worker] = mark
        self.above[worker] = set(above)


class Trainer:
    def __init__(self, ctx: ServiceContext):
        cfg = ctx.config
        self.ctx, self.cfg = ctx, cfg
        self.memory = ctx.memory()
        self.control = self.memory.control()
        self.spec = space_spec(cfg.env)
        extras = wire_extras(cfg)
        self.layout = codec.expected_layout(self.spec, extras)
        self.learner = make_learner(cfg.algorithm, self.spec, cfg, seed=cfg.seed)
        self.on_policy = get_algorithm(cfg.algorithm).on_policy
        self.rollout: list[tuple[str, int, dict[str, np.ndarray]]] = []
        if self.on_policy:
            self.replay = None
        elif cfg.prioritized:
            self.replay = PrioritizedReplay(self.spec, cfg.replay_size, seed=cfg.seed + 1, extras=extras,
                                            alpha=cfg.priority_alpha, beta=cfg.priority_beta)
        else:
            self.replay = ReplayBuffer(self.spec, cfg.replay_size, seed=cfg.seed + 1, extras=extras)
        self.consumer = self.memory.reader("trainer-0", on_reset=self.on_memory_reset)
        self.announcer = self.memory.announcements()
        store = run_store(ctx.store_url, ctx.run)
        self.policies = PolicyStore(store, ctx.run)
        self.checkpoints = CheckpointStore(store, ctx.run)
        self._checkpointed_at = time.monotonic()
        self.status = StatusWriter(self.control, "trainer")
        self.workers = {f"rollout-{i}" for i in range(cfg.workers)}
        self.finished: set[str] = set()
        self.final_seq: dict[str, int] = {}
        self.seqs = SeqTracker()
        self.produced: dict[str, int] = {}
        self.refresh_members()
        self.iteration_end: dict[str, int] = {}
        self.version = -1
        self.published_updates = -1
        self.consumed = self.duplicates = self.stale = self.dead_letters = 0
        self.metrics: dict[str, float] = {}
        self.started = time.monotonic()
        self._stop_checked = 0.0
        self._reclaimed_at = 0.0
        self._read_at = 0.0
        limits = backlog_limits(cfg, self.layout)
        self.limit_bytes, self.transition_bytes = limits.limit_bytes, limits.transition_bytes
        self.room_factor = max(1, min(ROOM_FACTOR, cfg.max_backlog_bytes // limits.limit_bytes))
        self.room = 1
        self.consumer.set_widening(1)
        self.read_pace = ReadPace(limits.limit_bytes)
        self.last_ingest = (0, 0)  # (entries, bytes) the last ingest took
        self.stop_reason = ""
        self.restored = self.restore()
        self.tensorboard = ScalarLog(ctx.run_dir / "tensorboard" / "trainer")
        self._scalars_at = (self.started, self.consumed, self.learner.updates)

    # -- durable state ----------------------------------------------------------------------------------
    def restore(self) -> bool:
        """Continues a run: networks, optimisers and RNG states from the newest checkpoint in the store, and the
        exact counters and watermarks a previous trainer process committed to the memory server (after SIGKILL);
        on a fresh memory server (``--resume``) the checkpoint's counters are used."""
        checkpoint = self.checkpoints.latest()
        state = self.consumer.load_state()
        if checkpoint is not None:
            manifest, tensors, meta = checkpoint
            try:
                self.learner.load_state({k[len("learner."):]: v for k, v in tensors.items()
                                         if k.startswith("learner.")}, meta["learner"])
            except ValueError as exc:
                raise UserError(f"checkpoint {manifest.sequence} cannot be restored (were network options changed "
                                f"since it was written?): {exc}") from None
            torch.set_rng_state(torch.from_numpy(tensors["rng.torch"].copy()))
            if self.replay is not None and meta.get("replay_rng"):
                self.replay.rng.bit_generator.state = meta["replay_rng"]
            if self.replay is not None and "replay.reward" in tensors:
                self.replay.load({k[len("replay."):]: v for k, v in tensors.items() if k.startswith("replay.")},
                                 meta["replay"])
            for name, value in meta["counters"].items():
                setattr(self, name, value)
            log.info("restored checkpoint %d: policy version %d, %d env steps, %d updates", manifest.sequence,
                     manifest.policy_version, manifest.env_steps, manifest.updates)
        for name in COUNTERS:
            if name in state:
                value = int(state[name])
                if name == "updates":
                    self.learner.updates = value
                else:
                    setattr(self, name, value)
        for key, value in state.items():
            kind, _, worker = key.partition(":")
            if kind == "seq":
                self.seqs.load(worker, value)
            elif kind == "produced":
                self.produced[worker] = int(value)
            elif kind == "end":
                self.iteration_end[worker] = int(value)
            elif kind == "final":
                self.final_seq[worker] = int(value)
        known = [self.announcer.latest(), *self.policies.versions()[-1:]]
        if checkpoint is not None:
            known.append(checkpoint[0].policy_version)
        self.version = max(known)
        if state or checkpoint is not None:
            log.info("continuing: %d transitions consumed, %d updates, policy version %d", self.consumed,
                     self.learner.updates, self.version)
        return bool(state) or checkpoint is not None

    def checkpoint(self) -> None:
        """Writes a full checkpoint (networks, optimisers, counters, RNG states; replay if configured)."""
        tensors, learner_meta = self.learner.state()
        tensors = {f"learner.{k}": v for k, v in tensors.items()}
        tensors["rng.torch"] = torch.get_rng_state().numpy()
        meta = {"learner": learner_meta,
                "replay_rng": self.replay.rng.bit_generator.state if self.replay is not None else None,
                "counters": {name: getattr(self, name) for name in COUNTERS if name != "updates"}}
        if self.cfg.checkpoint_replay and self.replay is not None:
            arrays, meta["replay"] = self.replay.dump()
            tensors.update({f"replay.{k}": v for k, v in arrays.items()})
        self.checkpoints.save(tensors, meta, algorithm=self.cfg.algorithm, policy_version=self.version,
                              env_steps=self.consumed, updates=self.learner.updates)
        self.checkpoints.retain(self.cfg.keep_checkpoints)
        self._checkpointed_at = time.monotonic()

    def maybe_checkpoint(self) -> None:
        if time.monotonic() - self._checkpointed_at >= self.cfg.checkpoint_every_s:
            self.checkpoint()

    def state(self, workers) -> dict[str, str | int]:
        fields: dict[str, str | int] = {name: (self.learner.updates if name == "updates" else getattr(self, name))
                                        for name in COUNTERS}
        for w in workers:
            fields[seq_field(w)] = self.seqs.dump(w)
            if w in self.produced:
                fields[f"produced:{w}"] = self.produced[w]
            if w in self.iteration_end:
                fields[f"end:{w}"] = self.iteration_end[w]
            if w in self.final_seq:
                fields[f"final:{w}"] = self.final_seq[w]
        return fields

    def on_memory_reset(self) -> None:
        """The memory server restarted empty: put back what services read from it."""
        log.warning("memory server lost its data; re-announcing version %d and rewriting trainer state", self.version)
        known = set(self.seqs.watermark) | set(self.produced)
        self.consumer.rewrite(self.state(known), self.produced, self.room, self.version)

    # -- experience -------------------------------------------------------------------------------------
    def ingest(self, entries, sync_version: int | None = None) -> list:
        """Decodes, deduplicates and inserts entries, then commits them; returns the accepted headers."""
        accepted, acks, dead, touched = [], [], [], set()
        for entry_id, fields in entries:
            acks.append((entry_id, codec.entry_size(fields)))
            try:
                batch = codec.decode(fields, self.ctx.run, self.layout)
            except codec.DecodeError as exc:
                log.warning("entry %s dead-lettered: %s", entry_id, exc)
                dead.append((entry_id, fields, exc.kind, str(exc)))
                self.dead_letters += 1
                if exc.header is not None and exc.header.worker_id in self.workers:
                    self.seqs.seen(exc.header.worker_id, exc.header.seq)
                    touched.add(exc.header.worker_id)
                continue
            h = batch.header
            if h.worker_id not in self.workers:
                self.refresh_members()
            if h.worker_id not in self.workers:
                dead.append((entry_id, fields, "unknown_worker", f"worker {h.worker_id!r} is not part of the run"))
                self.dead_letters += 1
                continue
            touched.add(h.worker_id)
            if self.seqs.seen(h.worker_id, h.seq):
                self.duplicates += h.count
                continue
            self.produced[h.worker_id] = max(self.produced.get(h.worker_id, 0), h.produced_total)
            if h.final:
                self.final_seq[h.worker_id] = h.seq
            if sync_version is not None and h.policy_version != sync_version:
                self.stale += h.count
                log.info("dropped %d transitions of %s for stale version %d (iteration %d)",
                         h.count, h.worker_id, h.policy_version, sync_version)
                continue
            if h.iteration_end:
                self.iteration_end[h.worker_id] = h.policy_version
            if self.on_policy:
                self.rollout.append((h.worker_id, h.seq, batch.arrays))
            else:
                self.replay.add(batch.arrays)
            self.consumed += h.count
            accepted.append(h)
        self.consumer.commit(acks, self.state(touched), dead)
        self.last_ingest = (len(acks), sum(size for _, size in acks))
        return accepted

    def read(self, count: int, block_ms: int | None, sync_version: int | None = None) -> list:
        """Reads and ingests entries, including, now and then, entries stranded at dead consumers."""
        now = self._read_at = time.monotonic()
        entries = []
        if now - self._reclaimed_at > RECLAIM_EVERY_S:
            self._reclaimed_at = now
            entries = self.consumer.reclaim(int(self.cfg.reclaim_idle_s * 1000), count)
            if entries:
                log.warning("reclaimed %d entries left pending by another consumer", len(entries))
        entries += self.consumer.read(count, block_ms if not entries else None)
        return self.ingest(entries, sync_version) if entries else []

    def read_starved(self) -> list:
        """Reads when no update is owed (before ``--learning-starts``, or the learner ahead of the data), after
        letting entries gather for the gap ``ReadPace`` sets from the arrival rate: about half the backlog's
        limit, within 2-50 ms. Reading every entry the moment it landed (about 190 a second from 2 Pendulum
        workers) used 11-12% of a core in the trainer; reading every 10 ms 7-10%. Nothing waits on the gap: the
        learner has no update to run until the data come, and the backlog keeps room for the producers."""
        wait = self._read_at + self.read_pace.gap_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        since = time.monotonic() - self._read_at
        self.last_ingest = (0, 0)
        got = self.read(count=STARVED_READ_ENTRIES, block_ms=100)
        entries, size = self.last_ingest
        self.read_pace.after_read(size, since, full=entries >= STARVED_READ_ENTRIES)
        return got

    def data_is_late(self) -> bool:
        """Whether the trainer waits for data with no update owed for a while: the learner ahead of the data, or
        ``--learning-starts`` farther away than the widened backlog holds (so that the first updates do not meet
        a backlog full of experience from before learning started)."""
        if self.learner.updates > 0:
            return True
        widened = self.room_factor * self.limit_bytes // self.transition_bytes
        return self.consumed + widened < self.cfg.learning_starts

    def widen(self, wide: bool) -> None:
        """Widens the backlog's limits ``ROOM_FACTOR``-fold (at most to ``--max-backlog-bytes``) while the
        trainer waits for data, and restores them when it falls behind the replay ratio by more than
        ``--ratio-tolerance`` (``Consumer.set_room``). Waiting, it reads everything every read gap, so the
        experience waiting is bounded by the gap, not by the limits; wider limits let the gap, and the entries,
        grow: with 2 Pendulum workers the trainer and Valkey used about 1.6 us of CPU per transition with the
        limits and about 0.9 with them widened fourfold. Behind, the limits bound the policy lag again."""
        room = self.room_factor if wide else 1
        if room == self.room:
            return
        self.consumer.set_widening(room)
        self.room = room
        self.read_pace.limit_bytes = room * self.limit_bytes

    def refresh_members(self) -> None:
        """Adds rollout workers the orchestrator registered since (``Keys.members``: the run was scaled up), and
        takes back the ones that return: on Kubernetes a scale-down then up re-activates a finished worker's
        name with a share above what it produced, so it is no longer finished and its new entries are awaited."""
        _, shares, members = self.control.snapshot()
        added = set(members) - self.workers
        if added:
            log.info("rollout workers joined: %s", ", ".join(sorted(added)))
            self.workers |= added
        returned = {w for w in self.finished if members.get(w) == "active" and shares.get(w, 0) > self.produced.get(w, 0)}
        if returned:
            log.info("rollout workers returned: %s", ", ".join(sorted(returned)))
            self.finished -= returned
            for w in returned:
                self.final_seq.pop(w, None)

    def all_finished(self) -> bool:
        """Whether every worker is done: its final entry and every entry before it consumed (entries re-sent
        after a memory server restart may arrive after the final one), or it said so itself."""
        self.finished |= {w for w, seq in self.final_seq.items() if self.seqs.watermark.get(w, 0) >= seq}
        if self.finished >= self.workers:
            self.refresh_members()
        if self.finished >= self.workers:
            return True
        self.finished |= set(self.control.workers_done()) & self.workers
        return self.finished >= self.workers

    # -- learning ---------------------------------------------------------------------------------------
    def owed_updates(self) -> int:
        """Updates the replay ratio asks for, given the transitions consumed so far."""
        if len(self.replay) < max(self.cfg.learning_starts, self.learner.batch_size):
            return 0
        return int(self.cfg.updates_per_transition * max(0, self.consumed - self.cfg.learning_starts))

    def update(self) -> None:
        replay = self.replay
        if isinstance(replay, PrioritizedReplay):
            cfg = self.cfg
            replay.beta = cfg.priority_beta + (1.0 - cfg.priority_beta) * min(1.0, self.consumed / cfg.steps)
            self.metrics = self.learner.update(replay.sample(self.learner.batch_size))
            replay.update_priorities(replay.last_indices, self.learner.td_errors)
        else:
            self.metrics = self.learner.update(replay.sample(self.learner.batch_size))

    def segments(self) -> list[dict[str, np.ndarray]]:
        """The iteration's rollout as per-environment trajectories: each worker's entries in sequence order,
        split by the environment that took each step."""
        by_worker: dict[str, list] = {}
        for worker, seq, arrays in self.rollout:
            by_worker.setdefault(worker, []).append((seq, arrays))
        out = []
        for worker in sorted(by_worker):
            entries = [arrays for _, arrays in sorted(by_worker[worker], key=lambda e: e[0])]
            joined = {k: np.concatenate([e[k] for e in entries]) for k in entries[0]}
            for env in np.unique(joined["env_index"]):
                mask = joined["env_index"] == env
                out.append({k: v[mask] for k, v in joined.items()})
        return out

    def train_rollout(self) -> None:
        """On-policy: one training pass over the iteration's rollout, which is then dropped."""
        if not self.rollout:
            return
        size = sum(len(arrays["reward"]) for _, _, arrays in self.rollout)
        progress = max(0, self.consumed - size) / self.cfg.steps
        self.metrics = self.learner.train(self.segments(), progress=progress)
        self.rollout.clear()

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

    def should_stop(self, force: bool = False) -> str:
        """The reason the run's stop flag gives ("target_reached" or "stopped"), or "" while it is unset; the
        flag is read at most every 0.25 s unless ``force``."""
        now = time.monotonic()
        if not self.stop_reason and TELEMETRY.stop.is_set():
            self.stop_reason = "stopped"
        if not self.stop_reason and (force or now - self._stop_checked > 0.25):
            self._stop_checked = now
            flag = self.control.stop_reason()
            if flag is not None:
                self.stop_reason = "target_reached" if flag.startswith("target_reached") else "stopped"
        return self.stop_reason

    def report(self, force: bool = False, state: str = "running", reason: str = "") -> None:
        if not force and not self.status.due():
            return
        elapsed = max(1e-9, time.monotonic() - self.started)
        fields = {
            "role": "trainer", "state": state, "exit_reason": reason, "policy_version": self.version,
            "env_steps": self.consumed, "transitions_consumed": self.consumed, "updates": self.learner.updates,
            "duplicates_dropped": self.duplicates, "stale_dropped": self.stale, "dead_lettered": self.dead_letters,
            "transitions_per_s": round(self.consumed / elapsed, 1),
            "replay_size": len(self.replay) if self.replay is not None else 0,
            "backlog": self.consumer.backlog(), "backlog_bytes": self.consumer.backlog_bytes(),
            "memory_resets": self.consumer.resets, **{k: round(v, 5) for k, v in self.metrics.items()},
        }
        self.status.write(fields, force=force)
        self.write_scalars(fields, final=state == "finished")

    def write_scalars(self, fields: dict, final: bool = False) -> None:
        """TensorBoard curves against env steps, at most once a second (reports are forced on every
        publication): the learner's last metrics, the backlog, and throughput over the interval since the
        previous point (the status hash has the average since start, which hides slowdowns)."""
        now = time.monotonic()
        at, consumed, updates = self._scalars_at
        if now - at < 1.0 and not final:
            return
        values = {f"learner/{k}": v for k, v in self.metrics.items()}
        values.update({"memory/backlog": fields["backlog"], "memory/backlog_bytes": fields["backlog_bytes"],
                       "train/updates": self.learner.updates, "train/policy_version": self.version,
                       "train/replay_size": fields["replay_size"]})
        if now > at:
            values["throughput/transitions_per_s"] = (self.consumed - consumed) / (now - at)
            values["throughput/updates_per_s"] = (self.learner.updates - updates) / (now - at)
        self._scalars_at = (now, self.consumed, self.learner.updates)
        self.tensorboard.scalars(values, step=self.consumed)

    def _on_sigterm(self, signum, frame) -> None:
        """SIGTERM (Kubernetes, the orchestrator) ends the run loop at the next check, with a final checkpoint."""
        self.stop_reason = self.stop_reason or "stopped"

    # -- modes ------------------------------------------------------------------------------------------
    def run_async(self) -> str:
        tolerance = self.cfg.updates_per_transition * self.cfg.ratio_tolerance
        while True:
            if self.should_stop():
                return self.stop_reason
            behind = self.owed_updates() - self.learner.updates
            if behind <= 0:
                self.widen(self.data_is_late())
                if not self.read_starved() and self.all_finished() and self.consumer.backlog() == 0:
                    return "steps_done"
            elif behind <= tolerance:
                self.read(count=ASYNC_READ_ENTRIES, block_ms=None)
            else:
                self.widen(False)
            for _ in range(min(max(behind, 0), 16)):
                self.update()
            if self.learner.updates - max(self.published_updates, 0) >= self.cfg.publish_every_updates:
                self.publish()
                self.maybe_checkpoint()
            self.report()

    def run_sync(self) -> str:
        while True:
            version = self.version
            self.refresh_members()
            waiting = {w for w in self.workers - self.finished if self.iteration_end.get(w, -1) < version}
            deadline = time.monotonic() + self.cfg.sync_deadline_s
            while waiting and time.monotonic() < deadline:
                if self.should_stop():
                    return self.stop_reason
                for h in self.read(count=64, block_ms=100, sync_version=version):
                    if h.iteration_end:
                        waiting.discard(h.worker_id)
                waiting -= self.finished
                if waiting and self.all_finished():
                    waiting.clear()
                self.report()
            if self.all_finished():
                while self.read(count=64, block_ms=100, sync_version=version) or self.consumer.backlog():
                    pass
            elif waiting:
                log.warning("iteration %d: no complete share from %s within %.0fs; training without them",
                            version, ", ".join(sorted(waiting)), self.cfg.sync_deadline_s)
            if self.on_policy:
                self.train_rollout()
            while not self.on_policy and self.learner.updates < self.owed_updates():
                self.update()
                if self.learner.updates % 200 == 0 and self.should_stop():
                    return self.stop_reason
                self.report()
            if self.all_finished() and self.consumer.backlog() == 0:
                return "steps_done"
            self.publish(force=True)
            self.maybe_checkpoint()

    def run(self) -> int:
        log.info("trainer of run %s: %s on %s, %s mode, %d workers", self.ctx.run, self.cfg.algorithm,
                 self.cfg.env, self.cfg.mode, self.cfg.workers)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.announcer.latest() < 0:
            self.publish(force=True)
        reason = self.run_async() if self.cfg.mode == "async" else self.run_sync()
        if reason == "steps_done":
            # Workers that saw the stop flag end their shares early; the run ended for the flag's reason.
            reason = self.should_stop(force=True) or reason
        if reason == "steps_done":
            self.publish()
        self.checkpoint()
        self.control.mark_trainer_done(self.version)
        self.report(force=True, state="finished", reason=reason)
        log.info("finished (%s): %d transitions consumed, %d updates, policy version %d", reason, self.consumed,
                 self.learner.updates, self.version)
        return 0


def serve(ctx: ServiceContext) -> int:
    torch.set_num_threads(ctx.config.trainer_threads)
    trainer = Trainer(ctx)
    try:
        return trainer.run()
    finally:
        trainer.tensorboard.close()
