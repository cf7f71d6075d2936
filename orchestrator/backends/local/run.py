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

The run is ``LocalRun``, made of parts with one job each, one module each: its claim and start (``claims``),
its processes (``spawning``), live scaling (``scaling``), stopping (``stopping``), supervision
(``supervision``), the private memory server's keeper (``keeper``) and the summary (``summary``).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from drl.config import ExperimentConfig
from drl.envs import frames_per_step
from orchestrator.backends.local.claims import RunClaim
from orchestrator.backends.local.common import _refused_write, last_error, write_summary
from orchestrator.backends.local.keeper import MemoryKeeper
from orchestrator.backends.local.scaling import LocalScaling
from orchestrator.backends.local.spawning import Spawning
from orchestrator.backends.local.stopping import Stopping
from orchestrator.backends.local.summary import RunSummary
from orchestrator.backends.local.supervision import Supervision
from orchestrator.progress import Progress

__all__ = ["LocalRun", "run_local"]


class LocalRun(RunClaim, Spawning, LocalScaling, Stopping, Supervision, MemoryKeeper, RunSummary):
    """One local run, made of its parts (see the module docstring); the state they share is ``RunParts``'."""


def run_local(
    cfg: ExperimentConfig, run: str, run_dir: Path, steps_done: int = 0, resume: bool = False, detached: bool = False
) -> tuple[int, dict]:
    """Runs a whole experiment; returns (exit code, summary). The summary is also written to summary.json."""
    job = LocalRun(cfg, run, run_dir, steps_done, resume)

    def on_signal(signum, frame):
        job.interrupted = True
        job.interrupts += 1

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    progress = Progress(cfg.steps, start=steps_done, frames_per_step=frames_per_step(cfg.env))
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
