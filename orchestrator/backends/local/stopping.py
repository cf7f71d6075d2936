"""How a local run ends: a requested clean stop (workers hand in, then the trainer), the stop flag, and the
end of every process."""

from __future__ import annotations

import subprocess
import sys
import time

from drl.errors import EXIT_INTERRUPTED, EXIT_SUPERSEDED
from drl.memory import MemoryBackendError, MemoryUnavailable
from orchestrator.backends.local.common import (
    FINAL_CHECKPOINT_S,
    HAND_IN_S,
    STOP_FLAG,
    STOP_FLAG_GRACE_S,
    STOP_GRACE_S,
    RunParts,
)
from orchestrator.state import write_state
from orchestrator.status import stop_service


class Stopping(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): how a local run ends."""

    def status(self, role: str) -> dict[str, str]:
        try:
            return self.control.status(role)
        except MemoryUnavailable:
            return {}

    def refresh_state(self, force: bool = False) -> None:
        """Brings state.json up to date: exit codes of processes that ended, and the control ports the
        services recorded in their status hashes."""
        if self.state is None or not self.connected:
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
                port = self.state.control_port(p.name) if self.state else None
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

    def trainer_finished(self) -> bool:
        """Whether the process that superseded this run's trainer finished the run (``RunControl.trainer_done``)."""
        try:
            return self.control is not None and self.control.trainer_done() is not None
        except MemoryBackendError:
            return False

    def request_stop(self, reason: str) -> bool:
        """Sets the run's stop flag; False when the memory server cannot be reached (no service will see it)."""
        if not self.connected:
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
                running = [
                    p
                    for p in running
                    if flagged
                    and p.role == "trainer"
                    and waited < FINAL_CHECKPOINT_S
                    and self.interrupts == interrupts
                    and not self.hung(p, time.time())
                ]
                if running and not noted:
                    print(
                        f"drl: waiting up to {FINAL_CHECKPOINT_S - waited:.0f} s for the trainer's final "
                        "checkpoint (Ctrl-C again to stop it at once)",
                        file=sys.stderr,
                    )
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
