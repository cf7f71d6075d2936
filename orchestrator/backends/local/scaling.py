"""Live scaling of a local run (``drl-orchestrate scale``): membership and shares on the memory server, the
share arithmetic of ``orchestrator.scaling``, and the scale requests that ``scale`` (``drl-orchestrate scale`` of a local run) writes for the run's
orchestrator."""

from __future__ import annotations

import json
import sys
import time

from drl.errors import UserError
from drl.memory import ACTIVE, RETIRED, MemoryBackendError
from drl.naming import check_workers, worker_index
from orchestrator.backends.local.common import HAND_IN_S, MAX_WORKERS, SCALE_REQUEST, SCALE_RESULT, RunParts
from orchestrator.backends.local.control import find_local_run
from orchestrator.backends.local.ownership import orchestrator_alive
from orchestrator.scaling import Snapshot, initial_shares, margin_transitions, plan_removal, plan_shares
from orchestrator.status import stop_service


class LocalScaling(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): live scaling of a local run (``drl-orchestrate scale``)."""

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
            print(
                f"drl: stopping {', '.join(p.name for p in removed)}; they hand in what they collected", file=sys.stderr
            )
            self.control.register({p.name: RETIRED for p in removed}, {})
            self.refresh_state(force=True)
            for p in removed:
                port = self.state.control_port(p.name) if self.state else None
                if not (port and stop_service(port, "drl-orchestrate scale")):
                    p.popen.terminate()
            deadline = time.monotonic() + HAND_IN_S
            while any(p.popen.poll() is None for p in removed) and time.monotonic() < deadline:
                time.sleep(0.1)
            snap, alive = self.snapshot()
        first = max((worker_index(p.name) for p in self.procs if p.role == "rollout"), default=-1) + 1
        plan = plan_shares(
            snap,
            steps=self.cfg.steps,
            steps_done=self.steps_done,
            workers=workers,
            margin=margin,
            next_index=first,
            alive=alive,
        )
        self.workers_history.append(
            {
                "wall_seconds": round(time.time() - self.started, 2),
                "env_steps": self.steps_done + sum(snap.produced.values()),
                "workers": workers,
            }
        )
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


def scale(run: str, workers: int, output: str, timeout: float) -> int:
    """Asks the run's orchestrator for ``workers`` rollout workers (``SCALE_REQUEST``) and waits for its answer."""
    check_workers(workers)
    run_dir, state = find_local_run(run, output)
    if (run_dir / "summary.json").exists() or not orchestrator_alive(run_dir, state):
        raise UserError(f"run {state.run} is not running")
    request, result = run_dir / SCALE_REQUEST, run_dir / SCALE_RESULT
    result.unlink(missing_ok=True)
    request.with_suffix(".tmp").write_text(json.dumps({"workers": workers}))
    request.with_suffix(".tmp").replace(request)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if result.exists() and not request.exists():
            outcome = json.loads(result.read_text())
            if "error" in outcome:
                raise UserError(f"run {state.run} refused to scale: {outcome['error']}")
            print(
                f"drl: run {state.run} collects with {len(outcome['collecting'])} rollout workers: "
                f"{', '.join(outcome['collecting'])}",
                file=sys.stderr,
            )
            return 0
        if not orchestrator_alive(run_dir, state):
            break
        time.sleep(0.2)
    print(
        f"drl-orchestrate: error: run {state.run} did not reach {workers} rollout workers within "
        f"{timeout:.0f}s; see {run_dir / 'orchestrator.log'}",
        file=sys.stderr,
    )
    return 1
