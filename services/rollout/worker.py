"""The rollout worker's process shell.

SYNC: wait for policy version k, collect this worker's share of the iteration with it, mark the last entry
``iteration_end``, wait for k+1. A version that is announced but cannot be loaded (gone from the store, corrupt)
is waited out, not a failure: the trainer publishes it again when it finds it missing, or publishes the next one
after its deadline (``wait_for_policy``). ASYNC: never wait for the trainer; switch to a newer policy as soon as an
append reports one (every append's reply carries the latest version). Either way the worker stops after its
share of ``--steps`` or when the run's stop flag is set, and records how many transitions it sent.

Asked to stop through its control endpoint, a worker hands in what it collected and its part ends there. SIGTERM
(a pod deleted, evicted or drained; a Job scaled down) hands in the same way, but ends the part only when the
orchestrator retired this worker (scale-down retires before it signals), the run is stopping or the share is done:
otherwise the process exits ``EXIT_INTERRUPTED`` without its done marker or a final entry, so that its Job replaces
the pod (a pod that exits 0 completes its index) and the replacement continues the numbering and the share.

Everything the algorithm decides comes from its builder: the acting policy (with its schedule and the fields it
adds to an entry), the extra wire fields, and whether transitions are folded before they are sent
(``drl.acting.entries.Folding``) or written as stepped (``drl.acting.entries.StepInto``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque

import numpy as np

from drl import frames
from drl._proto import experience_pb2
from drl.acting.entries import EntryBuffer, EntryFill, Folding, StepInto, StepRecording
from drl.algorithms import get as get_algorithm
from drl.envs import make_vec_env
from drl.errors import EXIT_INTERRUPTED, Superseded
from drl.memory import RETIRED, codec
from drl.memory.backlog import backlog_limits
from drl.naming import even_share
from drl.store import ManifestError
from services.common import TERMINATED, Service, ServiceContext, StatusWriter, stop_on_sigterm
from services.telemetry import TELEMETRY

log = logging.getLogger("drl.rollout")

FLUSH_TIMEOUT_S = 3600.0
ASYNC_CHUNK_ENTRIES = 16
FIRST_POLICY_TIMEOUT_S = 600.0
RELOAD_WAIT_S = 1.0
SYNC_WINDOW = 200


class RolloutWorker(Service):
    def __init__(self, ctx: ServiceContext):
        super().__init__(ctx)
        cfg = self.cfg
        self.policies = ctx.policy_store()
        algorithm = get_algorithm(cfg.algorithm)
        self.envs = make_vec_env(
            cfg.env,
            cfg.envs_per_worker,
            seed=cfg.seed * 100_003 + 1000 * ctx.worker_index,
            backend=cfg.vector_env,
            threads=cfg.env_threads,
            workers=cfg.workers,
            overlap=cfg.mode == "async",
        )
        log.info("%s steps %d envs: %s", ctx.name, cfg.envs_per_worker, self.envs.describe())
        layout = codec.expected_layout(self.envs.spec, algorithm.wire_fields(cfg))
        self.segment_rows = algorithm.entry_transitions(cfg)
        self.limits = limits = backlog_limits(cfg, layout, self.segment_rows)
        self.compression = codec.compression_for(cfg.compression, self.envs.spec)
        folder = algorithm.make_folder(cfg)
        self.held_steps = self.envs.spec.frame_stack + getattr(folder, "n", 0) + 2
        if self.envs.spec.frame_stack:
            self.envs.log_frames(self.frame_log_size(limits.most))
        self.actor = algorithm.make_actor(self.envs.spec, cfg, seed=cfg.seed + 7919 * (ctx.worker_index + 1))
        self.status = StatusWriter(self.control, ctx.name)
        self.total = even_share(max(0, cfg.steps - ctx.steps_done), cfg.workers, ctx.worker_index)
        self.random_steps = even_share(max(0, cfg.random_steps - ctx.steps_done), cfg.workers, ctx.worker_index)
        self.version = -1
        self.sync_ms: deque[float] = deque(maxlen=SYNC_WINDOW)
        self.widening = 1  # the trainer's factor on the backlog's limits, as the last append reported it
        self.batch_transitions = limits.least
        if self.segment_rows:
            self.segment_rows = limits.least
            self.fill = EntryFill(limits.least, limits.least, 0.0)
        else:
            self.fill = EntryFill(limits.least, limits.most, cfg.entry_fill_ms / 1000.0)
        self.entry = EntryBuffer(
            {k: v for k, v in frames.serial_layout(layout).items() if k not in self.actor.annotates},
            limits.most + cfg.envs_per_worker,
        )
        if folder is not None:
            self.write: Folding | StepInto = Folding(self.envs, self.entry, folder)
        elif self.actor.records:
            self.write = StepRecording(self.envs, self.entry, self.actor)
        else:
            self.write = StepInto(self.envs, self.entry)
        self.producer = self.memory.writer(ctx.name, cfg.max_backlog_entries, limits.limit_bytes)
        self.seq, self.produced = self.producer.position()
        self._started, self._produced_at_start = time.monotonic(), self.produced
        self.stepped = self.produced
        self.refresh_share()
        if self.seq:
            log.info(
                "%s continues after a restart at entry %d, %d transitions produced", ctx.name, self.seq, self.produced
            )
        self.stop = False
        self._refused: set[int] = set()
        self._waited_out: set[int] = set()

    def frame_log_size(self, most: int) -> int:
        """Frames the worker keeps for an image environment whose frames travel once: every frame an unsent
        transition can refer to (an entry of ``most`` transitions, with each environment's stack history and
        the steps a folder holds back), twice over for the frames of episodes' resets."""
        return 2 * (most + self.cfg.envs_per_worker * (self.held_steps + 1))

    def refresh_share(self) -> None:
        """Reads the share the orchestrator assigned (``RunControl.share``; it changes when the run is scaled)."""
        self.take_share(self.control.share(self.ctx.name))

    def take_share(self, value: int | None) -> None:
        """Takes up a share just read, by ``refresh_share`` or by an append; without an assignment the even share of
        ``--workers`` stands. ``_share_read_at`` is the step count of the read, for ASYNC's bound on how far a worker
        steps on an old share."""
        if value is not None:
            self.total = value
        self._share_read_at = self.stepped

    def active_workers(self) -> int:
        """Rollout workers taking part now (``RunControl.members``), for the SYNC share of an iteration."""
        active = sum(1 for state in self.control.members().values() if state == "active")
        return active or self.cfg.workers

    def load(self, version: int) -> bool:
        """Switches to a published version; on a bad manifest keeps the current policy and says why."""
        if version <= self.version:
            return True
        try:
            manifest, weights = self.policies.load(version)
            self.actor.load(weights)
        except (ManifestError, ValueError) as exc:
            if version not in self._refused:
                self._refused.add(version)
                log.error("policy version %d refused, keeping version %d: %s", version, self.version, exc)
            return False
        self.version = version
        self.sync_ms.append(max(0.0, (time.time() - manifest.created_at) * 1000.0))
        return True

    def policy(self, target: int):
        """Where actions come from until step ``target``, and up to which step: uniform random actions for the
        worker's part of ``--random-steps`` and while no policy is loaded, the actor's otherwise."""
        if self.version < 0:
            return (lambda obs: self.envs.random_actions(len(obs))), target
        if self.stepped < self.random_steps:
            return (lambda obs: self.envs.random_actions(len(obs))), min(target, self.random_steps)
        return self.actor.act, target

    def step_until(self, target: int) -> None:
        """The stepping loop: acts, steps every env and writes the transitions into the entry, until ``target``,
        a full entry (sent here: the policy may change with its reply), the end of the random steps, or a stop
        request. Its lookups are hoisted: at tens of thousands of steps a second, the bookkeeping of each step is
        a few percent of a worker. The entry has room for a step: it holds ``most`` rows plus a step's, and is
        sent once it reaches ``most``."""
        envs, entry, fill, write = self.envs, self.entry, self.fill, self.write
        if entry.n >= fill.most:
            self.flush()  # full when the last call's steps ended exactly at its target: a segment must not grow
            return
        act, limit = self.policy(target)
        progress, total = self.actor.set_progress, max(self.total, 1)
        width, stopping = envs.num_envs, TELEMETRY.stop.is_set
        stepped = self.stepped
        entry.reserve(width)
        try:
            while stepped < limit and not stopping():
                n = min(limit - stepped, width)
                progress(stepped / total)
                write(act, n)
                stepped += n
                if stepped < target and entry.n >= fill.check_at and fill.full(entry.n):
                    self.stepped = stepped
                    self.flush()
                    return
        finally:
            self.stepped = stepped

    def flush(self, iteration_end: bool = False, last: bool = False) -> None:
        """Sends the entry's transitions, with the fields the actor adds to them; ``last`` marks it final even
        before the share is done (a worker asked to stop through its control endpoint hands in what it has)."""
        count = self.entry.n
        if not count:
            return
        arrays = self.entry.filled()
        log = self.envs.frames
        if log is None:
            arrays.update(self.actor.annotate(arrays))
        else:
            arrays = frames.pack(arrays, log)
            if self.actor.annotates:
                arrays.update(self.actor.annotate(frames.expand(arrays)))
                arrays[frames.TABLE] = arrays.pop(frames.TABLE)
        self.seq += 1
        final = last or self.produced + count >= self.total
        header = experience_pb2.BatchHeader(
            run=self.ctx.run,
            worker_id=self.ctx.name,
            seq=self.seq,
            policy_version=max(self.version, 0),
            iteration_end=iteration_end or final,
            final=final,
            produced_total=self.produced + count,
        )
        h, d = codec.encode(header, arrays, self.compression)
        self.entry.n = 0
        reply = self.producer.send(self.seq, h, d, self.produced + count)
        if reply.appended:
            self.produced += count
        else:
            self.seq -= 1
        self.fill.restart()
        self.take_share(reply.share)
        if reply.widening != self.widening:
            self.widening = reply.widening
            self.fill.most = self.segment_rows or self.limits.most_in(self.widening)
            self.entry.reserve(self.fill.most + self.envs.num_envs)
            if self.envs.frames is not None:
                self.envs.frames.resize(self.frame_log_size(self.fill.most))
        self.stop = reply.stop
        if self.cfg.mode == "async" and reply.policy_version > self.version:
            self.load(reply.policy_version)
        self.report()

    def report(self, force: bool = False) -> None:
        """Refreshes the status fields and the in-memory telemetry at most once a second, like the trainer's, and
        the telemetry's counters at every entry (the control endpoint answers with them)."""
        if not force and not self.status.due():
            TELEMETRY.update({"produced": self.produced, "seq": self.seq})
            return
        returns = self.envs.finished_returns
        elapsed = time.monotonic() - self._started
        rate = round((self.produced - self._produced_at_start) / elapsed, 1) if elapsed > 0 else ""
        self.status.write(
            {
                "role": "rollout",
                "produced": self.produced,
                "total": self.total,
                "transitions_per_s": rate,
                "policy_version": self.version,
                "seq": self.seq,
                "backpressure_s": round(self.producer.waited_s, 3),
                "resent": self.producer.resent,
                "retained": self.producer.retained(),
                **self.sync_percentiles(),
                "episode_return": float(np.mean(returns)) if returns else "",
            },
            force=force,
        )

    def sync_percentiles(self) -> dict:
        """Policy sync over the last ``SYNC_WINDOW`` versions this worker loaded: milliseconds from the version's
        manifest being written (its ``created_at``, the trainer's clock) to this worker acting with it (this
        host's clock: across hosts the figure holds what the clocks disagree by)."""
        if not self.sync_ms:
            return {}
        p50, p99 = np.percentile(np.fromiter(self.sync_ms, float), [50, 99])
        return {"policy_sync_ms_p50": round(float(p50), 1), "policy_sync_ms_p99": round(float(p99), 1)}

    def collect(self, n: int, hand_in: bool = True) -> None:
        """Collects n transitions, sending full entries; with ``hand_in`` the last entry of the n is sent as
        iteration end, else it goes on filling with the next call's steps (ASYNC collects in chunks only to look
        at its share now and then: sending each chunk's remainder as an entry of its own made many of a fast
        env's entries smaller than the fill time asks)."""
        target = self.stepped + n
        while self.stepped < target and not self.stop and not TELEMETRY.stop.is_set():
            self.step_until(target)
        if hand_in:
            self.hand_in()

    def hand_in(self) -> None:
        """Sends what is held (folded transitions included) as the iteration's last entry."""
        self.write.flush()
        if not self.stop:
            self.flush(iteration_end=True, last=TELEMETRY.stop.is_set() and not self.interrupted())

    def stopped(self) -> bool:
        self.stop = self.stop or self.control.stop_reason() is not None
        return self.stop

    def asked_or_stopped(self) -> bool:
        """Whether to stop waiting for a policy: this worker was asked to stop (asked first: it needs no server,
        which may be gone), or the run's stop flag is set."""
        return TELEMETRY.stop.is_set() or self.stopped()

    def run(self) -> int:
        log.info("%s waits for a policy version (its numbering continues after entry %d)", self.ctx.name, self.seq)
        if self.cfg.mode == "async":
            first = self.announcer.wait_for(0, timeout=FIRST_POLICY_TIMEOUT_S, should_stop=self.asked_or_stopped)
        else:
            first = self.wait_for_policy(0, FIRST_POLICY_TIMEOUT_S)
        if first < 0:
            if self.asked_or_stopped():
                return self.finish("stopped before the first policy")
            raise RuntimeError(
                f"no loadable policy was announced within {FIRST_POLICY_TIMEOUT_S:.0f}s; is the trainer alive?"
            )
        self.load(first)
        self.take_position()
        if self.cfg.mode == "async":
            self.collect_async()
            self.hand_in()
            return self.finish(self.outcome())
        while self.produced < self.total and not self.stop:
            per_iteration = math.ceil(self.cfg.sync_steps_per_iteration / self.active_workers())
            self.collect(min(per_iteration, self.total - self.produced))
            self.refresh_share()
            if self.produced >= self.total or self.stop or TELEMETRY.stop.is_set():
                break
            nxt = self.wait_for_policy(self.version + 1, self.cfg.sync_deadline_s * 10)
            if nxt < 0:
                if self.asked_or_stopped():
                    break
                raise RuntimeError(
                    f"no loadable policy version >= {self.version + 1} within "
                    f"{self.cfg.sync_deadline_s * 10:.0f}s; is the trainer alive?"
                )
        return self.finish(self.outcome())

    def wait_for_policy(self, least: int, timeout: float) -> int:
        """SYNC: waits until a version >= ``least`` is announced and loads the newest one; returns it, or -1 when
        stopped or after ``timeout``. A version that cannot be loaded is tried again every ``RELOAD_WAIT_S``, as is
        any newer one announced meanwhile: the trainer republishes a version it finds missing from the store while
        it waits for the iteration, and publishes the next one after its deadline, so a worker that failed here
        instead would only use up its restarts on the same missing version."""
        deadline = time.monotonic() + timeout
        should_stop = self.asked_or_stopped
        while True:
            version = self.announcer.wait_for(
                least, timeout=max(0.0, deadline - time.monotonic()), should_stop=should_stop
            )
            if version < 0:
                return -1
            if self.load(version):
                return version
            if version not in self._waited_out:
                self._waited_out.add(version)
                log.warning("waiting for policy version %d to be published again (or a newer one)", version)
            until = min(deadline, time.monotonic() + RELOAD_WAIT_S)
            while time.monotonic() < until:
                if should_stop():
                    return -1
                time.sleep(0.1)
            if time.monotonic() >= deadline:
                return -1

    def collect_async(self) -> None:
        """Collects the share, never stepping more than ``ASYNC_CHUNK_ENTRIES`` entries of ``--batch-transitions``
        on a share read longer ago (live scaling's margin, ``orchestrator.scaling.SCALE_MARGIN_ENTRIES``, counts on
        that), and reads it again before it counts as done. Every append's reply carries the share too, so a
        worker whose entries are sent more often than that never reads it on its own."""
        chunk = self.batch_transitions * ASYNC_CHUNK_ENTRIES
        while not self.stop and not TELEMETRY.stop.is_set():
            if self.stepped >= self.total or self.stepped - self._share_read_at >= chunk:
                self.refresh_share()
                if self.stepped >= self.total:
                    return
            fresh = chunk - (self.stepped - self._share_read_at)
            self.collect(min(fresh, self.total - self.stepped), hand_in=False)

    def take_position(self) -> None:
        """Reads again where this worker's numbering continues, now that a version is announced: the trainer
        writes its state back (after the memory server lost it) before it announces, so the position counts every
        seq a trainer saw. A process continuing a worker's numbering holds none of its predecessor's entries, so
        it reports that seq as its floor (``ExperienceWriter.continue_from``): what its predecessor sent that
        the trainer never saw and the stream no longer holds is counted lost, not awaited."""
        seq, produced = self.producer.position()
        if seq > self.seq or produced > self.produced:
            log.info(
                "%s continues at entry %d, %d transitions produced (was %d, %d at start)",
                self.ctx.name,
                seq,
                produced,
                self.seq,
                self.produced,
            )
            self.stepped += produced - self.produced
            self.seq, self.produced = max(seq, self.seq), max(produced, self.produced)
        if self.seq:
            self.producer.continue_from(self.seq, self.produced)

    def interrupted(self) -> bool:
        """Whether SIGTERM stopped this process while its part goes on (see the module docstring): its share is
        not done, the orchestrator did not retire it and the run's stop flag is unset."""
        if not TERMINATED.is_set() or self.stop:
            return False
        self.refresh_share()
        return (
            self.produced < self.total and not self.stopped() and self.control.members().get(self.ctx.name) != RETIRED
        )

    def outcome(self) -> str:
        if self.produced >= self.total:
            return "share done"
        return "stop requested" if self.stop else "asked to stop (everything sent is handed in)"

    def finish(self, why: str) -> int:
        """Waits until the trainer has consumed everything this worker sent (re-sending after a memory server
        restart), so that exiting loses nothing, then records the worker as done."""
        if not self.stop and self.seq:
            if not self.producer.wait_consumed(self.seq, timeout=FLUSH_TIMEOUT_S, should_stop=self.stopped):
                why += "; stopped before the trainer consumed every entry"
        if self.interrupted():
            self.report(force=True)
            log.info(
                "%s terminated after %d of its %d transitions (%d entries); its replacement continues the "
                "share (exit code %d)",
                self.ctx.name,
                self.produced,
                self.total,
                self.seq,
                EXIT_INTERRUPTED,
            )
            return EXIT_INTERRUPTED
        self.control.mark_worker_done(self.ctx.name, self.produced)
        self.report(force=True)
        log.info("%s after %d transitions (%d entries): %s", self.ctx.name, self.produced, self.seq, why)
        return 0


def serve(ctx: ServiceContext) -> int:
    """SIGTERM (a pod deleted or drained, a Job scaled down) stops the worker: it hands in what it collected and
    waits until the trainer has it, within the grace period; whether its part ends is ``interrupted``'s rule."""
    stop_on_sigterm()
    worker = RolloutWorker(ctx)
    try:
        return worker.run()
    except Superseded as exc:
        raise Superseded(
            f"{exc}; {worker.stepped - worker.produced} transitions it had stepped were not handed "
            "in (never appended: neither produced nor consumed in the run)"
        ) from None
    finally:
        worker.close()
