"""Runs a plan's services as real processes against a memory server the test controls.

Unlike drl-orchestrate, nothing here stops the run when a process dies: fault tests kill, pause and
restart processes (and the server) themselves, then check the accounting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import redis

from drl.config import ExperimentConfig
from drl.memory.redis import Keys
from orchestrator.backends.local.forkserver import ForkedProcess, Launcher
from orchestrator.plan import plan
from tests.conftest import ROOT


class ServiceRun:
    def __init__(
        self,
        cfg: ExperimentConfig,
        memory_url: str,
        run_dir: Path,
        run: str = "fault",
        store_url: str | None = None,
        learner_address: str = "127.0.0.1",
    ):
        self.cfg = cfg.validate()
        self.run = run
        self.run_dir = run_dir
        self.keys = Keys(run)
        self.memory_url = memory_url
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.workloads = {
            w.role: w
            for w in plan(
                cfg,
                run=run,
                run_dir=str(run_dir),
                memory_url=memory_url,
                store_url=store_url or str(run_dir / "store"),
                python=sys.executable,
                learner_address=learner_address,
            )
        }
        self.procs: dict[str, subprocess.Popen | ForkedProcess] = {}
        self._launcher: Launcher | None = None

    @property
    def launcher(self) -> Launcher:
        """The run's fork server, started on first use (runs placed on other hosts start none)."""
        if self._launcher is None:
            self._launcher = Launcher()
            self._launcher.warm(
                {
                    **os.environ,
                    "OMP_NUM_THREADS": "1",
                    "PYTHONUNBUFFERED": "1",
                    "DRL_RUN": self.run,
                    "DRL_RUN_DIR": str(self.run_dir),
                }
            )
        return self._launcher

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.memory_url, socket_timeout=10)

    def start(self, role: str, index: int = 0) -> subprocess.Popen | ForkedProcess:
        """Starts a replica as the local backend does (forked from the run's fork server, which makes the test
        process a child subreaper), but without a parent-death signal: a fault test's processes outlive
        nothing but the test."""
        workload = self.workloads[role]
        name = workload.replica_name(index)
        with open(self.run_dir / "logs" / f"{name}.log", "ab") as log:
            proc = self.launcher.start(
                list(workload.command),
                {**os.environ, **workload.replica_env(index)},
                log,
                die_with_parent=False,
                name=f"drl-{name}",
                cwd=str(ROOT),
            )
        self.procs[name] = proc
        return proc

    def start_all(self, evaluator: bool = False) -> None:
        self.start("trainer")
        for i in range(self.cfg.workers):
            self.start("rollout", i)
        if evaluator:
            self.start("evaluator")

    def status(self, role: str) -> dict[str, str]:
        try:
            raw = self.client().hgetall(self.keys.status(role))
        except redis.ConnectionError:
            return {}
        return {k.decode(): v.decode() for k, v in raw.items()}

    def wait_until(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            for name, proc in self.procs.items():
                if proc.poll() not in (None, 0) and proc.returncode != -signal.SIGKILL:
                    raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            time.sleep(0.05)
        raise AssertionError(
            f"timed out waiting for {what}\n" + "\n".join(f"--- {n}\n{self.log_tail(n)}" for n in self.procs)
        )

    def consumed(self) -> int:
        state = self.client().hget(self.keys.consumer_state, "consumed")
        return int(state or 0)

    def wait_all(self, timeout: float = 300) -> None:
        """Waits for every started process to exit 0."""
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{name} still running:\n{self.log_tail(name)}") from None
            assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}"

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.run_dir / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self._launcher is not None:
            self._launcher.close()

    def accounting(self) -> dict[str, int]:
        """Counters from the server: what workers produced and what the trainer committed."""
        c = self.client()
        state = {k.decode(): v.decode() for k, v in c.hgetall(self.keys.consumer_state).items()}
        produced = {k.decode(): int(v) for k, v in c.hgetall(self.keys.produced).items()}
        dead = sum(int(v) for v in c.hvals(self.keys.dead_letter_counts))
        return {
            "produced": sum(produced.values()),
            "consumed": int(state.get("consumed", 0)),
            "duplicates": int(state.get("duplicates", 0)),
            "stale": int(state.get("stale", 0)),
            "lost": int(state.get("lost", 0)),
            "dead_letter_entries": dead,
            "backlog_entries": c.xlen(self.keys.stream),
            "backlog_bytes": int(c.get(self.keys.backlog_bytes) or 0),
            "workers": len(produced),
        }


def wait_until(predicate, timeout: float, what: str, every: float = 0.3):
    """Polls ``predicate`` every ``every`` seconds until it returns something true, and returns that; fails the
    test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


FULL_TIER = pytest.mark.skipif(
    os.environ.get("DRL_TESTS_FULL") != "1",
    reason="opt-in tier (DRL_TESTS_FULL=1): another variant (mode, order, option or environment) of a case that runs "
    "in every suite, left out to keep the suite within its time budget",
)
"""Marks a variant of a test as opt-in (the other mode, the other order of two kills, another option or environment
of a learning case): the same case runs in every suite in one variant, all variants with ``DRL_TESTS_FULL=1``. The
rule and what each tier covers: tests/README.md."""


def assert_balanced(summary: dict) -> None:
    """Every summary's promise, whatever the run's exit reason: produced = consumed + unconsumed + every counted
    drop (each counter of ``drl.training.ingest.COUNTERS`` but ``consumed`` and ``duplicates``: a duplicate is a re-sent
    copy of a transition produced once). The fault suite checks it for every run that writes a summary."""
    from drl.training.ingest import COUNTERS

    produced, consumed = summary["transitions_produced"], summary["transitions_consumed"]
    unconsumed, dropped = summary["transitions_unconsumed"], summary["dropped"]
    described = (
        f"{summary.get('run')} ({summary.get('exit_reason')}): produced {produced}, consumed {consumed}, "
        f"unconsumed {unconsumed}, dropped {dropped}, duplicates {summary.get('duplicates_dropped')}"
    )
    assert set(dropped) == set(COUNTERS) - {"consumed", "duplicates"}, f"drop counters missing: {described}"
    assert min(produced, consumed, unconsumed, *dropped.values()) >= 0, f"a counter could not be read: {described}"
    assert consumed <= produced, f"more consumed than produced (counted twice): {described}"
    assert produced == consumed + unconsumed + sum(dropped.values()), f"the summary does not balance: {described}"


@contextmanager
def held(pids: list[int]) -> Iterator[None]:
    """The processes ``pids`` stopped (SIGSTOP) for the block and continued (SIGCONT) after it, whatever the
    block raised: a test holds a run's other processes so that the run cannot end while a slow one starts up."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def fast_config(**changes) -> ExperimentConfig:
    """A small, quick SAC configuration for fault tests (tiny networks, few updates)."""
    from drl.algorithms.sac.config import SACConfig

    base = dict(
        env="Pendulum-v1",
        workers=3,
        mode="async",
        steps=6000,
        batch_transitions=32,
        random_steps=6000,
        learning_starts=500,
        updates_per_transition=0.05,
        eval_episodes=1,
        max_backlog_entries=8,
        publish_every_updates=50,
        sync_steps_per_iteration=600,
        sync_deadline_s=20,
        sac=SACConfig(hidden=(16, 16), batch_size=32),
    )
    base.update(changes)
    return ExperimentConfig(**base)
