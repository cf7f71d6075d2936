"""The orchestrator of one local run: every workload replica as an OS process on this machine.

It starts a private memory server (``drl.memory.private_server``) unless ``--memory`` names one, and reaches the
run's shared state only through the memory backend's ``RunControl``. It starts the plan's commands with their
environments (logs under ``<run dir>/logs``), shows progress, and stops every process it started when the
trainer finishes, on Ctrl-C, or as soon as any process fails. Children die with the orchestrator even if it
is killed (PR_SET_PDEATHSIG).

It keeps ``<run dir>/state.json`` (``orchestrator.state``: its pid, the memory URL, each process's pid and
control port) for ``drl-orchestrate status`` and ``stop``. ``stop`` asks for a clean end by creating
``<run dir>/stop.request``; the orchestrator then stops the rollout workers through their control endpoints
(each hands in what it collected and waits until the trainer consumed it), then the trainer (final
checkpoint) and sets the run's stop flag, and ends the run as usual with the exit reason ``stopped``.

It supervises what it started. A process that crashes or is killed is started again after a short back-off
(``DRL_RESTARTS`` tells it how many times; a rollout worker continues its sequence numbers, the trainer resumes
from its newest checkpoint and the committed memory state, the evaluator jumps to the newest version); one that
stops touching its heartbeat file (``<run dir>/heartbeats/<name>``) for ``hang_timeout_s`` is killed and started
again; a private memory server that dies is started again on its port, and the orchestrator writes back the keys
only it owns (start time, membership, shares). A process that exits with code 2 (bad input) or needs more than
``max_restarts`` restarts fails the run. ``summary.json`` counts the restarts per role.

``scale`` writes ``<run dir>/scale.request`` (the wanted number of rollout workers). The orchestrator owns the
membership (``RunControl.members``) and each worker's share of the steps (``RunControl.shares``): it registers new workers
before starting them, asks removed ones to stop through their control endpoints (each hands in everything it
collected), and spreads the steps not yet produced evenly over the workers that remain.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from drl.config import ExperimentConfig
from drl.errors import EXIT_INTERRUPTED, EXIT_SUPERSEDED, EXIT_USAGE, UserError
from drl.training.ingest import COUNTERS
from drl.memory import (MemoryBackend, MemoryBackendError, MemoryUnavailable, RunControl, new_password, open_memory,
                        private_env, private_server, write_password_file)
from drl.naming import worker_index
from drl.process import pid_alive
from drl.store import run_store
from drl.training.accounting import count_fields, eval_fields, imbalance, tally, with_kept_ledger
from orchestrator.backends.local.forkserver import ForkedProcess, Launcher
from orchestrator.plan import plan
from orchestrator.progress import Progress
from orchestrator.scaling import (Snapshot, initial_shares, margin_transitions, plan_removal,
                                  plan_shares)
from drl.memory import ACTIVE, RETIRED
from orchestrator.state import ProcessState, RunState, write_state
from orchestrator.status import stop_service

EVALUATOR_GRACE_S = 300.0
STOP_GRACE_S = 15.0
STOP_FLAG_GRACE_S = 3.0
FINAL_CHECKPOINT_S = 60.0
MEMORY_RETRY_S = 0.0  # the supervision loop goes on without an answer; it restarts a private server that died
STOP_REQUEST = "stop.request"
SCALE_REQUEST = "scale.request"
SCALE_RESULT = "scale.result"
STOP_FLAG = "stopped"
HAND_IN_S = 60.0
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
HEARTBEATS = "heartbeats"
MAX_WORKERS = 4096
# Rollout workers run this many steps nicer than the trainer. With more workers than cores the scheduler would
# otherwise give the one consumer a 1/(N+2) share of the CPU: it falls behind, back-pressure holds every
# producer, and more workers collect less. Niced, the workers take what the trainer leaves.
ROLLOUT_NICENESS = 5
PASSWORD_FILE = "memory.password"
OWNER_CLAIM = "orchestrator"
CLAIM_S = 15.0
CLAIM_RENEW_S = 3.0


def policy_lag(trainer: dict) -> dict:
    """The summary's ``policy_lag`` from the trainer's last status, for learners that measure it: the histogram
    of trained transitions by lag in versions (bucket upper bound: count), its mean, 95th percentile (a bucket's
    upper bound) and maximum, and ``dropped``, the transitions consumed but not learned from because they were
    older than ``--max-policy-lag`` (they count as consumed in the balance)."""
    if not trainer.get("policy_lag"):
        return {}
    from drl.tensorboard import parse_buckets

    try:
        pairs = parse_buckets(trainer["policy_lag"])
        return {"policy_lag": {"histogram": {("inf" if b == float("inf") else str(int(b))): c for b, c in pairs},
                               "mean": float(trainer.get("policy_lag_mean") or 0.0),
                               "p95": int(float(trainer.get("policy_lag_p95") or 0)),
                               "max": int(float(trainer.get("policy_lag_max") or 0)),
                               "dropped": int(float(trainer.get("lag_dropped") or 0))}}
    except ValueError:
        return {}


def free_port() -> int:
    """A free TCP port on loopback (the learners' rendezvous; the trainer binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refusal(log: Path, tail_bytes: int = 8192) -> str:
    """The reason a service gave when it refused its input: the last ``drl ROLE: error: ...`` line of its log
    (``services.common`` prints one before it exits with the usage code), or "" when there is none."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail_bytes))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        head, sep, reason = line.partition(": error: ")
        if sep and head.startswith("drl "):
            return reason.strip()
    return ""


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen | ForkedProcess
    log: Path
    heartbeat: Path | None = None
    started: float = field(default_factory=time.time)
    restarts: int = 0
    restart_at: float | None = None


class LocalRun:
    def __init__(self, cfg: ExperimentConfig, run: str, run_dir: Path, steps_done: int = 0, resume: bool = False):
        self.cfg = cfg
        self.run = run
        self.run_dir = run_dir
        self.steps_done = steps_done
        self.resume = resume
        self.procs: list[Proc] = []
        self.launcher = Launcher()
        self.server = None
        self.memory: MemoryBackend | None = None
        self.control: RunControl | None = None
        self.interrupted = False
        self.interrupts = 0
        self.superseded: set[str] = set()
        self.started = time.time()
        self.memory_url = ""
        self.state: RunState | None = None
        self._ports_checked = 0.0
        self.stop_requested = False
        self._hand_in_deadline: float | None = None
        self._trainer_stopped = False
        self.restarts = {"trainer": 0, "rollout": 0, "evaluator": 0, "memory": 0,
                         **({"learner": 0} if cfg.learners > 1 else {})}
        self.workers_history = [{"wall_seconds": 0.0, "env_steps": steps_done, "workers": cfg.workers}]
        self._membership: tuple[dict[str, str], dict[str, int]] = ({}, {})
        self.resume_counters: dict[str, int] = {}
        self.store_url: str | None = None
        self._trainer_record: dict | None = None
        self.memory_env: dict[str, str] | None = None
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{run_dir}"
        self._claimed_at: float | None = None
        self._done: dict[str, int] = {}
        self._final_version_owed = False  # the server was started again before the trainer exited 0
        self._done_read_at = 0.0

    # -- setup ------------------------------------------------------------------------------------------
    def prepare(self) -> tuple[str, str]:
        self.launcher.warm({**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "DRL_RUN": self.run,
                            "DRL_RUN_DIR": str(self.run_dir)})
        if self.cfg.memory:
            memory_url = self.cfg.memory
        else:
            password = new_password()
            password_file = self.run_dir / PASSWORD_FILE
            write_password_file(password_file, password)
            self.memory_env = private_env(password_file)
            self.server = private_server(self.run_dir / "redis", password=password)
            memory_url = self.server.url
        self.memory = open_memory(memory_url, self.run, retry_s=MEMORY_RETRY_S, env=self.memory_env,
                                  shards=self.cfg.memory_shards)
        self.control = self.memory.control()
        self.memory_url = memory_url
        self.claim_run()
        (self.run_dir / STOP_REQUEST).unlink(missing_ok=True)
        if self.resume:
            self.control.clear()
        elif self.control.has_data():
            raise UserError(f"run {self.run!r} already has data on the memory server; pick another --run-name")
        self.control.set_started_at(self.started)
        store_url = self.cfg.store or str(self.run_dir.resolve().parent)
        self.store_url = store_url
        run_store(store_url, self.run).put("config.json", self.cfg.to_json().encode())
        if self.resume:
            self.resume_counters = resume_counters(store_url, self.run)
        return memory_url, store_url

    def claim_run(self) -> None:
        """Takes the run's claim on its memory server (``RunControl.claim``), which another orchestrator of the
        same run, from another run folder or machine, cannot take while this one renews it. A claim whose
        orchestrator died expires within ``CLAIM_S``, so it is waited for that long before the run is refused (at
        once when the holder is a live process of this machine)."""
        deadline, noted = time.monotonic() + CLAIM_S + 1.0, False
        while True:
            holder = self.control.claim(OWNER_CLAIM, self.holder, CLAIM_S)
            if holder is None:
                self._claimed_at = time.monotonic()
                return
            if time.monotonic() >= deadline or _alive_here(holder):
                raise UserError(f"run {self.run!r} is owned by another orchestrator ({holder}) on the memory server "
                                f"{self.memory.describe()}; one orchestrator owns a run at a time")
            if not noted:
                print(f"drl: run {self.run} is claimed on the memory server by {holder}; waiting up to "
                      f"{CLAIM_S:.0f} s for the claim of an orchestrator that died to expire", file=sys.stderr)
                noted = True
            time.sleep(0.5)

    def keep_claim(self) -> str | None:
        """Renews the run's claim every ``CLAIM_RENEW_S``; returns why the run fails if another orchestrator has
        it (this one lost it while the memory server could not be reached for longer than ``CLAIM_S``)."""
        if self._claimed_at is None or time.monotonic() - self._claimed_at < CLAIM_RENEW_S:
            return None
        try:
            holder = self.control.claim(OWNER_CLAIM, self.holder, CLAIM_S)
        except MemoryBackendError:
            return None
        if holder is not None:
            return f"failed: another orchestrator ({holder}) owns run {self.run} on its memory server"
        self._claimed_at = time.monotonic()
        return None

    def spawn(self, memory_url: str, store_url: str, detached: bool = False) -> None:
        self.workloads = {w.role: w for w in plan(self.cfg, run=self.run, run_dir=str(self.run_dir),
                                                  memory_url=memory_url, store_url=store_url,
                                                  python=sys.executable, steps_done=self.steps_done,
                                                  learner_port=free_port() if self.cfg.learners > 1 else 0)}
        self.register_workers()
        for workload in self.workloads.values():
            for i in workload.indices():
                self.start(workload, i)
        self.state = RunState(run=self.run, orchestrator_pid=os.getpid(), memory_url=self.memory_url,
                              started_at=self.started, detached=detached,
                              memory_pid=self.server.proc.pid if self.server is not None else None,
                              processes=[ProcessState(p.name, p.role, p.popen.pid, None, str(p.log))
                                         for p in self.procs])
        write_state(self.run_dir, self.state)

    def start(self, workload, index: int, restarts: int = 0) -> Proc:
        """Starts one replica; with ``restarts`` it replaces the replica's previous process (same name)."""
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        name = workload.replica_name(index)
        log_path = logs / f"{name}.log"
        heartbeat = self.run_dir / HEARTBEATS / name
        heartbeat.unlink(missing_ok=True)
        if restarts:
            try:
                self.control.forget_status_field(name, "control_port")
            except MemoryUnavailable:
                pass
        env = {**(self.memory_env or os.environ), **workload.replica_env(index), "DRL_CONTROL_PORT": "0",
               "DRL_HEARTBEAT_FILE": str(heartbeat), "DRL_RESTARTS": str(restarts),
               "DRL_ORCHESTRATOR_PID": str(os.getpid())}
        with open(log_path, "ab") as log:
            popen = self.launcher.start(list(workload.command), env, log,
                                        nice=ROLLOUT_NICENESS if workload.role == "rollout" else 0,
                                        name=f"drl-{name}")
        proc = Proc(name, workload.role, popen, log_path, heartbeat, restarts=restarts)
        self.procs = [p for p in self.procs if p.name != name] + [proc]
        if self.state is not None:
            entry = self.state.process(name)
            if entry is None:
                self.state.processes.append(ProcessState(name, proc.role, popen.pid, None, str(log_path)))
            else:
                entry.pid, entry.control_port, entry.exit_code, entry.restarts = popen.pid, None, None, restarts
            write_state(self.run_dir, self.state)
        return proc

    # -- scaling ----------------------------------------------------------------------------------------
    def register_workers(self) -> None:
        """Members and shares of a fresh run (a resumed one keeps what its memory server holds)."""
        if not self.control.members():
            shares = initial_shares(self.cfg.steps, self.steps_done, self.cfg.workers)
            self.control.register({n: ACTIVE for n in shares}, shares)
        self.remember_membership()

    def remember_membership(self) -> None:
        """Keeps a copy of the membership and shares, the keys only the orchestrator writes, so that they can
        be written back if the private memory server dies and comes back empty."""
        _, shares, members = self.control.snapshot()
        self._membership = (members, shares)

    def snapshot(self) -> tuple[Snapshot, list[str]]:
        """One consistent read of the scaling state, and the names of the live rollout processes."""
        alive = [p.name for p in self.procs if p.role == "rollout" and p.popen.poll() is None]
        return Snapshot(*self.control.snapshot()), alive

    def scale(self, workers: int) -> list[str]:
        """Adds or removes rollout workers while the run goes on (see the module docstring; the arithmetic is
        ``orchestrator.scaling``).

        Removed workers are stopped first and waited for (each hands in what it collected), so that the
        steps left are counted exactly before they are shared out.
        """
        margin = margin_transitions(self.cfg.batch_transitions)
        snap, alive = self.snapshot()
        removed = [p for p in self.procs if p.name in set(plan_removal(snap, workers, margin, alive))]
        if removed:
            print(f"drl: stopping {', '.join(p.name for p in removed)}; they hand in what they collected",
                  file=sys.stderr)
            self.control.register({p.name: RETIRED for p in removed}, {})
            self.refresh_state(force=True)
            for p in removed:
                port = self.state.process(p.name).control_port if self.state else None
                if not (port and stop_service(port, "drl-orchestrate scale")):
                    p.popen.terminate()
            deadline = time.monotonic() + HAND_IN_S
            while any(p.popen.poll() is None for p in removed) and time.monotonic() < deadline:
                time.sleep(0.1)
            snap, alive = self.snapshot()
        first = max((worker_index(p.name) for p in self.procs if p.role == "rollout"), default=-1) + 1
        plan = plan_shares(snap, steps=self.cfg.steps, steps_done=self.steps_done, workers=workers, margin=margin,
                           next_index=first, alive=alive)
        self.workers_history.append({"wall_seconds": round(time.time() - self.started, 2),
                                     "env_steps": self.steps_done + sum(snap.produced.values()), "workers": workers})
        if not plan.names:
            return []
        print(f"drl: {len(plan.names)} rollout workers share the {plan.remaining:,} steps left", file=sys.stderr)
        self.control.register({n: ACTIVE for n in plan.added}, plan.shares)
        for n in plan.added:
            self.start(self.workloads["rollout"], worker_index(n))
        return list(plan.names)

    def take_scale_request(self) -> None:
        path = self.run_dir / SCALE_REQUEST
        if not path.exists():
            return
        try:
            workers = int(json.loads(path.read_text())["workers"])
            if workers > MAX_WORKERS:
                raise ValueError(f"at most {MAX_WORKERS} workers, got {workers}")
        except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            print(f"drl: ignoring a bad scale request: {exc}", file=sys.stderr)
            workers = 0
        result: dict = {"workers": workers}
        if workers >= 1 and not self.stop_requested:
            try:
                result["collecting"] = self.scale(workers)
                self.remember_membership()
            except (MemoryBackendError, OSError) as exc:
                print(f"drl: scaling failed: {exc}", file=sys.stderr)
                result["error"] = f"scaling failed: {exc}"
        else:
            result["error"] = "bad request" if workers < 1 else "the run is stopping"
        (self.run_dir / SCALE_RESULT).write_text(json.dumps(result))
        path.unlink(missing_ok=True)

    # -- monitoring -------------------------------------------------------------------------------------
    def status(self, role: str) -> dict[str, str]:
        try:
            return self.control.status(role)
        except MemoryUnavailable:
            return {}

    def refresh_state(self, force: bool = False) -> None:
        """Brings state.json up to date: exit codes of processes that ended, and the control ports the
        services recorded in their status hashes."""
        if self.state is None or self.control is None:
            return
        ended = False
        for proc in self.procs:
            entry = self.state.process(proc.name)
            code = proc.popen.poll()
            if entry is not None and code is not None and entry.exit_code is None:
                entry.exit_code, ended = code, True
        if ended:
            write_state(self.run_dir, self.state)
        missing = [p for p in self.state.processes if p.control_port is None and p.exit_code is None]
        now = time.monotonic()
        if not missing or (not force and now - self._ports_checked < 1.0):
            return
        self._ports_checked = now
        try:
            statuses = self.control.statuses(p.name for p in missing)
        except MemoryUnavailable:
            return
        changed = False
        for p in missing:
            port = statuses.get(p.name, {}).get("control_port")
            if port:
                p.control_port, changed = int(port), True
        if changed:
            write_state(self.run_dir, self.state)

    def advance_stop(self) -> None:
        """One step of a requested clean stop: first every rollout worker is asked to stop through its control
        endpoint, or with SIGTERM where that cannot be reached (either way it hands in what it has and waits
        until it is consumed, so no transition is left behind); once they have exited, or after ``HAND_IN_S``,
        the trainer is asked to stop (final checkpoint) and the run's stop flag is set, which also ends the
        evaluator."""
        if self._trainer_stopped:
            return
        workers = [p for p in self.procs if p.role == "rollout"]
        if self._hand_in_deadline is None:
            print("drl: stop requested; rollout workers hand in what they collected", file=sys.stderr)
            self._hand_in_deadline = time.monotonic() + HAND_IN_S
            self.refresh_state(force=True)
            for p in workers:
                port = self.state.process(p.name).control_port if self.state else None
                if p.popen.poll() is None and not (port and stop_service(port, "drl-orchestrate stop")):
                    p.popen.terminate()
        if any(p.popen.poll() is None for p in workers) and time.monotonic() < self._hand_in_deadline:
            return
        self._trainer_stopped = True
        self.request_stop(STOP_FLAG)
        trainer = self.state.process("trainer") if self.state else None
        if trainer and trainer.control_port:
            stop_service(trainer.control_port, "drl-orchestrate stop")

    def failed(self) -> str | None:
        """While the run is stopping nothing is restarted: a process that fails then fails the run (one that
        SIGTERM stopped, ``EXIT_INTERRUPTED``, handed in what it had: the stop asked for that)."""
        for p in self.procs:
            code = p.popen.poll()
            if code not in (None, 0, EXIT_SUPERSEDED, EXIT_INTERRUPTED):
                return f"failed: {p.name} exited with code {code} (log: {p.log})"
        return None

    # -- supervision ------------------------------------------------------------------------------------
    def supervise(self, progress: Progress | None = None) -> str | None:
        """Restarts what crashed, was killed or hung (see the module docstring); returns why the run fails when
        a process cannot be restarted."""
        now = time.time()
        failure = self.revive_memory_server()
        if failure:
            return failure
        retired = self._membership[0]
        failure = self.restart_learner_group(now, progress)
        if failure:
            return failure
        for p in list(self.procs):
            code = p.popen.poll()
            if code is None and self.hung(p, now):
                self.note(progress, f"drl: {p.name} gave no heartbeat for {self.cfg.hang_timeout_s:g} s; "
                                    "killing it")
                p.popen.kill()
                code = p.popen.wait()
            if code in (None, 0):
                continue
            if p.role == "rollout" and retired.get(p.name) == RETIRED:
                continue
            if code == EXIT_SUPERSEDED:
                if p.name not in self.superseded:
                    self.superseded.add(p.name)
                    self.note(progress, f"drl: {p.name} was superseded by another process with its identity "
                                        f"(exit code {code}); not restarting it (log: {p.log})")
                continue
            if code == EXIT_USAGE:
                reason = refusal(p.log)
                said = f": {reason}" if reason else ""
                return f"failed: {p.name} refused its input{said} (exit code 2; log: {p.log})"
            if p.restart_at is None:
                if p.restarts >= self.cfg.max_restarts:
                    return (f"failed: {p.name} exited with code {code} after {p.restarts} restarts "
                            f"(--max-restarts {self.cfg.max_restarts}; log: {p.log})")
                p.restart_at = now + BACKOFF_S[min(p.restarts, len(BACKOFF_S) - 1)]
                self.note(progress, f"drl: {p.name} exited with code {code}; restarting it in "
                                    f"{p.restart_at - now:g} s (restart {p.restarts + 1} of at most "
                                    f"{self.cfg.max_restarts}; log: {p.log})")
            elif now >= p.restart_at:
                self.restarts[p.role] = self.restarts.get(p.role, 0) + 1
                index = worker_index(p.name) if p.role in ("rollout", "learner") else 0
                self.start(self.workloads[p.role], index, p.restarts + 1)
        return None

    def restart_learner_group(self, now: float, progress: Progress | None) -> str | None:
        """With ``--learners`` K > 1: when one learner of the group (the trainer or a ``learner-<r>``) exits
        other than 0 or 2, the others are killed and all are restarted together, as torchrun's elastic agent
        restarts a group: the survivors would only fail at their next all-reduce, one by one, and restarts out of
        step could not meet. Each then resumes from its checkpoint and its shards' committed state."""
        if self.cfg.learners < 2:
            return None
        group = [p for p in self.procs if p.role in ("trainer", "learner")]
        crashed = [p for p in group if p.popen.poll() not in (None, 0, EXIT_USAGE, EXIT_SUPERSEDED)
                   and p.restart_at is None]
        if not crashed:
            return None
        first = crashed[0]
        restarts = max(p.restarts for p in group)
        if restarts >= self.cfg.max_restarts:
            return (f"failed: {first.name} exited with code {first.popen.poll()} after {restarts} restarts of the "
                    f"learner group (--max-restarts {self.cfg.max_restarts}; log: {first.log})")
        for p in group:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
        when = now + BACKOFF_S[min(restarts, len(BACKOFF_S) - 1)]
        for p in group:
            p.restart_at = when
        self.note(progress, f"drl: {first.name} exited with code {first.popen.poll()}; restarting the learner group "
                            f"({', '.join(p.name for p in group)}) in {when - now:g} s (restart {restarts + 1} of at "
                            f"most {self.cfg.max_restarts}; log: {first.log})")
        return None

    def hung(self, p: Proc, now: float) -> bool:
        """Whether a live process stopped touching its heartbeat file (a daemon thread touches it every few
        seconds, so a stopped or wedged process falls silent); start-up counts from the process's start."""
        try:
            last = max(p.started, p.heartbeat.stat().st_mtime) if p.heartbeat else now
        except OSError:
            last = p.started
        return now - last > self.cfg.hang_timeout_s

    def revive_memory_server(self) -> str | None:
        """Starts the private memory server again on its port if it died, and writes back the keys only the
        orchestrator owns; the services reconnect and re-send what the server lost. It also writes back the done
        markers of the rollout workers that exited 0: nothing else would ever tell the trainer that they finished,
        and it settles each one's entries from the total in its marker (``drl.training.ingest.Ingest.settle``). The
        trainer's final version (announced, and as ``trainer:done``) is written back from its final checkpoint
        (``write_back_final_version``), so the evaluator's wait for it ends: at once when the trainer has already
        ended, else as soon as it exits 0 (the server may have died in its last moments, after it wrote that
        version and before it exited)."""
        code = self.server.exit_code() if self.server is not None else None
        if code is None:
            if self.server is not None:
                self.remember_done()
                if self._final_version_owed:
                    self.write_back_final_version()
            return None
        if self.restarts["memory"] >= self.cfg.max_restarts:
            return (f"failed: the memory server exited with code {code} after "
                    f"{self.restarts['memory']} restarts (log: {self.server.log_path})")
        print(f"drl: the memory server exited with code {code}; starting it again on port {self.server.port}",
              file=sys.stderr)
        self.restarts["memory"] += 1
        self.server = private_server(self.run_dir / "redis", port=self.server.port, password=self.server.password)
        if self.state is not None:
            self.state.memory_pid = self.server.proc.pid
            write_state(self.run_dir, self.state)
        if self._claimed_at is not None:
            self._claimed_at = 0.0  # the server came back empty: claim the run again at once
        self._final_version_owed = True
        self.write_back_final_version()
        members, shares = self._membership
        self.control.register(members, shares, started_at=self.started)
        for p in self.procs:
            if p.role == "rollout" and p.popen.poll() == 0 and p.name in self._done:
                self.control.mark_worker_done(p.name, self._done[p.name])
        return None

    def write_back_final_version(self) -> None:
        """Writes the trainer's final version back to a memory server that was started again (announced, and as
        ``trainer:done``), from the checkpoint the trainer wrote at exit, once it has exited 0; until then it stays
        owed. A trainer still running at the restart may already have written that version to the server that
        died (it was killed between the trainer's last writes and its exit); nothing else would write it again,
        and the evaluator would wait for it until ``EVALUATOR_GRACE_S``. A server that cannot be reached now is
        tried again on the next round."""
        record = self.trainer_record()
        if record is None:
            return
        version = int(record["exit"]["policy_version"])
        try:
            announcements = self.memory.announcements()
            try:
                announcements.announce(version)
            finally:
                announcements.close()
            self.control.mark_trainer_done(version)
        except MemoryBackendError:
            return
        self._final_version_owed = False

    def remember_done(self) -> None:
        """Keeps a copy of the workers' done markers (each worker writes its own before it exits), read once a
        second and as soon as a rollout worker is seen to have exited 0, for ``revive_memory_server``."""
        now = time.monotonic()
        exited = any(p.role == "rollout" and p.name not in self._done and p.popen.poll() == 0 for p in self.procs)
        if not exited and now - self._done_read_at < 1.0:
            return
        self._done_read_at = now
        try:
            self._done.update(self.control.workers_done())
        except MemoryUnavailable:
            pass

    @staticmethod
    def note(progress: Progress | None, text: str) -> None:
        if progress is not None:
            progress.note(text)
        else:
            print(text, file=sys.stderr)

    def show(self, progress: Progress, force: bool = False) -> None:
        t, e = self.status("trainer"), self.status("evaluator")
        progress.show(force=force, steps=int(t.get("env_steps") or 0), version=int(t.get("policy_version") or 0),
                      updates=int(t.get("updates") or 0), last_eval=_float(e.get("last_eval_return")),
                      best_eval=_float(e.get("best_eval_return")), backlog=int(t.get("backlog") or 0))

    def wait(self, progress: Progress) -> str:
        trainer_done_at = None
        while True:
            if self.interrupted:
                return "interrupted"
            if not self.stop_requested and (self.run_dir / STOP_REQUEST).exists():
                self.stop_requested = True
            if self.stop_requested:
                self.advance_stop()
            else:
                self.take_scale_request()
            self.refresh_state()
            failure = self.keep_claim() or (self.failed() if self.stop_requested else self.supervise(progress))
            if failure:
                return failure
            self.show(progress)
            trainer = next(p for p in self.procs if p.role == "trainer")
            if trainer.popen.poll() == 0 or (trainer.popen.poll() == EXIT_SUPERSEDED and self.trainer_finished()):
                trainer_done_at = trainer_done_at or time.monotonic()
                if all(p.popen.poll() is not None for p in self.procs):
                    return "finished"
                evaluator_done = all(p.popen.poll() is not None for p in self.procs if p.role == "evaluator")
                if evaluator_done or time.monotonic() - trainer_done_at > EVALUATOR_GRACE_S:
                    return "finished"
            time.sleep(0.2)

    def trainer_finished(self) -> bool:
        """Whether the process that superseded this run's trainer finished the run (``RunControl.trainer_done``)."""
        try:
            return self.control is not None and self.control.trainer_done() is not None
        except MemoryBackendError:
            return False

    def request_stop(self, reason: str) -> bool:
        """Sets the run's stop flag; False when the memory server cannot be reached (no service will see it)."""
        if self.control is None:
            return False
        try:
            self.control.request_stop(reason)
        except MemoryUnavailable:
            return False
        return True

    def stop_all(self) -> None:
        """Asks services to stop through the run's stop flag, then terminates, then kills what remains.

        Every process gets ``STOP_FLAG_GRACE_S`` to end by itself; the trainer gets up to ``FINAL_CHECKPOINT_S``
        (the grace Kubernetes gives its pod), as long as its heartbeat goes on: it writes its final checkpoint
        before it exits, which on a busy machine takes longer than the others' grace, and a trainer terminated
        in its last moments would be reported as killed although its checkpoint is written. A second Ctrl-C
        ends that wait.
        """
        alive = [p for p in self.procs if p.popen.poll() is None]
        if not alive:
            return
        flagged = self.request_stop("orchestrator")
        started, interrupts, noted = time.monotonic(), self.interrupts, False
        while True:
            waited = time.monotonic() - started
            running = [p for p in alive if p.popen.poll() is None]
            if waited >= STOP_FLAG_GRACE_S:
                running = [p for p in running if flagged and p.role == "trainer" and waited < FINAL_CHECKPOINT_S
                           and self.interrupts == interrupts and not self.hung(p, time.time())]
                if running and not noted:
                    print(f"drl: waiting up to {FINAL_CHECKPOINT_S - waited:.0f} s for the trainer's final "
                          "checkpoint (Ctrl-C again to stop it at once)", file=sys.stderr)
                    noted = True
            if not running:
                break
            time.sleep(0.1)
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()

    # -- summary ----------------------------------------------------------------------------------------
    def accounts(self) -> dict:
        """Where every transition went, from the authoritative counters: the workers' produced totals, the
        ledger the trainer commits with its acknowledgements (``RunControl.ledger``, never the status hash, which
        a crashing trainer stops refreshing), and what is still in the stream. Every counter of
        ``drl.training.ingest.COUNTERS`` but ``consumed`` and ``duplicates`` (a duplicate is a re-sent copy, not a
        transition produced twice) is a drop, so that produced = consumed + unconsumed + the drops. A resumed run
        counts what its checkpoint accounted for (``resume_counters``) as produced before it; its ledger starts
        from that checkpoint's counters. When the server has no ledger and the trainer exited 0 (the server was
        lost after the trainer ended), the ledger, and the produced counts it saw, come from the trainer's final
        checkpoint (``trainer_record``). Raises ``MemoryBackendError`` when the memory server cannot answer."""
        if self.control is None:
            raise MemoryUnavailable("no memory server")
        ledger = self.control.ledger()
        produced_by = self.control.produced()
        kept = (self.trainer_record() or {}).get("ledger") if "consumed" not in ledger else None
        if isinstance(kept, dict):
            ledger, produced_by = with_kept_ledger(kept, produced_by)
        unconsumed = self.control.unconsumed(ledger if isinstance(kept, dict) else None)
        return tally(ledger, produced_by, unconsumed, self.control.dead_letters(), self.resume_counters,
                     self.steps_done)

    def trainer_record(self) -> dict | None:
        """The meta of the checkpoint a trainer that exited 0 wrote at exit (its ledger and exit reason), read once:
        what the summary goes by when the memory server lost the trainer's state and status after the trainer
        ended (a server that died and was started again empty). None while the trainer has not exited 0."""
        trainer = next((p for p in self.procs if p.role == "trainer"), None)
        if trainer is None or trainer.popen.poll() != 0 or self.store_url is None:
            return None
        if self._trainer_record is None:
            self._trainer_record = latest_checkpoint_meta(self.store_url, self.run) or {}
        return self._trainer_record if isinstance(self._trainer_record.get("exit"), dict) else None

    def summary(self, outcome: str) -> dict:
        t = self.status("trainer")
        evals = read_evaluations(self.run_dir / "evaluations.jsonl")
        try:
            acc = self.accounts()
        except (MemoryBackendError, ValueError) as exc:
            print(f"drl: the run's counters cannot be read from the memory server ({exc}); the summary's "
                  "transition counts are -1", file=sys.stderr)
            acc = {"produced": -1, "consumed": -1, "unconsumed": -1, "duplicates": -1, "dead_lettered": {},
                   "updates": -1, "dropped": {n: -1 for n in COUNTERS if n not in ("consumed", "duplicates")}}
        problem = imbalance(acc) if acc["produced"] >= 0 else None
        if problem:
            print(f"drl: the run's accounts do not balance: {problem}", file=sys.stderr)
        reason = t.get("exit_reason") if outcome == "finished" else outcome
        if outcome == "finished" and t.get("state") != "finished":
            record = self.trainer_record()
            reason = (record or {}).get("exit", {}).get("reason") or "failed: trainer did not report a final state"
        elif outcome == "finished" and self.stop_requested:
            reason = "stopped"
        return {
            "run": self.run, "preset": self.cfg.preset, "algorithm": self.cfg.algorithm, "env": self.cfg.env,
            "mode": self.cfg.mode, "workers": self.workers_history[-1]["workers"],
            "workers_history": list(self.workers_history), "envs_per_worker": self.cfg.envs_per_worker,
            "seed": self.cfg.seed, "steps_requested": self.cfg.steps,
            "resumed_from_env_steps": self.steps_done,
            "updates": acc["updates"] if acc["updates"] >= 0 else int(t.get("updates") or 0),
            "policy_version": int(t.get("policy_version") or -1),
            **count_fields(acc), **eval_fields(evals),
            "restarts": dict(self.restarts),
            "wall_seconds": round(time.time() - self.started, 2), "exit_reason": reason,
            **policy_lag(t),
        }

    def final_state(self, exit_reason: str) -> None:
        """Marks state.json finished, with each process's exit code and last status hash (read while the
        memory server is still up, so that ``status`` shows a finished run's final counters). A state file
        that cannot be written (a full disk) is said once and left as it was: the run is ending anyway."""
        if self.state is None:
            return
        self.state.state, self.state.exit_reason = "finished", exit_reason
        try:
            self.refresh_state()
            for entry in self.state.processes:
                try:
                    entry.last_status = self.control.status(entry.name) if self.control is not None else {}
                except MemoryUnavailable:
                    break
            write_state(self.run_dir, self.state)
        except OSError as exc:
            print(f"drl: the run's state file cannot be updated: {_refused_write(exc)}", file=sys.stderr)

    def cleanup(self) -> None:
        if self.memory is not None:
            if self._claimed_at is not None:
                try:
                    self.control.release(OWNER_CLAIM, self.holder)
                except MemoryBackendError:
                    pass
            self.memory.close()
        if self.server:
            self.server.stop()
        self.launcher.close()


def _alive_here(holder: str) -> bool:
    """Whether a claim's holder (``host:pid:run dir``) is a live process on this machine."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and pid_alive(int(pid))


def read_evaluations(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("mean_return"), (int, float)):
            out.append(entry)
    return out


def latest_checkpoint_meta(store_url: str, run: str) -> dict | None:
    """The meta of the run's newest checkpoint that verifies, None without one."""
    from drl.store.checkpoint import CheckpointStore

    latest = CheckpointStore(run_store(store_url, run), run).latest()
    return latest[2] if latest is not None else None


def resume_counters(store_url: str, run: str) -> dict[str, int]:
    """The ledger's counters in the checkpoint a resumed trainer starts from (the newest that verifies): what the
    run had accounted for before this resume."""
    counters = (latest_checkpoint_meta(store_url, run) or {}).get("counters")
    if not isinstance(counters, dict):
        return {}
    return {str(k): int(v) for k, v in counters.items() if isinstance(v, int)}


def write_summary(run_dir: Path, summary: dict) -> bool:
    """Writes summary.json whole or not at all; where it cannot be written (a full disk, a read-only folder) the
    summary goes to stderr instead, so that a failed run still says what it did. Returns whether it was written."""
    text = json.dumps(summary, indent=2) + "\n"
    partial = run_dir / "summary.json.partial"
    try:
        partial.write_text(text)
        os.replace(partial, run_dir / "summary.json")
        return True
    except OSError as exc:
        partial.unlink(missing_ok=True)
        print(f"drl: the summary cannot be written to {run_dir / 'summary.json'} ({exc.strerror or exc}); here it "
              f"is:\n{text}", file=sys.stderr, end="")
        return False


def last_error(reason: str) -> str:
    """The last error line of the log a failure names (``... (log: PATH)``), as "; last error: ...", so that the
    line that ends a run says why (a read-only store, a full disk) without opening the log; "" without one."""
    match = re.search(r"log: ([^;)]+)\)", reason)
    try:
        lines = Path(match.group(1)).read_text(errors="replace").splitlines()[-200:] if match else []
    except OSError:
        return ""
    errors = [line.strip() for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b.*:", line.strip())]
    return f"; last error: {errors[-1][:300]}" if errors else ""


def _refused_write(exc: OSError) -> str:
    """An OSError of the run's own files as one line: what the system said, and where."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def run_local(cfg: ExperimentConfig, run: str, run_dir: Path, steps_done: int = 0,
              resume: bool = False, detached: bool = False) -> tuple[int, dict]:
    """Runs a whole experiment; returns (exit code, summary). The summary is also written to summary.json."""
    job = LocalRun(cfg, run, run_dir, steps_done, resume)

    def on_signal(signum, frame):
        job.interrupted = True
        job.interrupts += 1

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    progress = Progress(cfg.steps, start=steps_done)
    summary: dict = {}
    try:
        try:
            memory_url, store_url = job.prepare()
            job.spawn(memory_url, store_url, detached=detached)
            outcome = job.wait(progress)
        except OSError as exc:
            outcome = f"failed: {_refused_write(exc)}"
        job.show(progress, force=True)
        progress.close()
        if outcome.startswith("failed:"):
            print(f"drl: the run {outcome}{last_error(outcome)}", file=sys.stderr)
        job.stop_all()
        summary = job.summary(outcome)
        job.final_state(summary["exit_reason"])
        write_summary(run_dir, summary)
    finally:
        job.stop_all()
        if job.state is not None and job.state.state != "finished":
            job.final_state(summary.get("exit_reason", "failed: the orchestrator stopped on an error"))
        job.cleanup()
        for s, handler in previous.items():
            signal.signal(s, handler)
    reason = summary.get("exit_reason") or ""
    code = 0 if reason in ("steps_done", "target_reached") else (130 if reason == "interrupted" else 1)
    return code, summary
