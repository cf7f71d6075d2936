"""Supervision of the run's processes: restarts after a back-off, hung processes, the learner group restarted
together, and the wait that watches it all."""

from __future__ import annotations

import sys
import time

from drl.errors import EXIT_SUPERSEDED, EXIT_USAGE
from drl.memory import RETIRED
from drl.naming import worker_index
from drl.process import free_port, raise_group
from orchestrator.backends.local.common import (
    BACKOFF_S,
    EVALUATOR_GRACE_S,
    STOP_REQUEST,
    Proc,
    RunParts,
    _float,
    niceness,
    refusal,
)
from orchestrator.plan import TRAINER
from orchestrator.progress import Progress


class Supervision(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): supervision of the run's processes."""

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
                self.note(progress, f"drl: {p.name} gave no heartbeat for {self.cfg.hang_timeout_s:g} s; killing it")
                p.popen.kill()
                code = p.popen.wait()
            if code in (None, 0):
                continue
            if p.role == "rollout" and retired.get(p.name) == RETIRED:
                continue
            if code == EXIT_SUPERSEDED:
                if p.name not in self.superseded:
                    self.superseded.add(p.name)
                    self.note(
                        progress,
                        f"drl: {p.name} was superseded by another process with its identity "
                        f"(exit code {code}); not restarting it (log: {p.log})",
                    )
                continue
            if code == EXIT_USAGE:
                reason = refusal(p.log)
                said = f": {reason}" if reason else ""
                return f"failed: {p.name} refused its input{said} (exit code 2; log: {p.log})"
            if p.restart_at is None:
                if p.restarts >= self.cfg.max_restarts:
                    return (
                        f"failed: {p.name} exited with code {code} after {p.restarts} restarts "
                        f"(--max-restarts {self.cfg.max_restarts}; log: {p.log})"
                    )
                p.restart_at = now + BACKOFF_S[min(p.restarts, len(BACKOFF_S) - 1)]
                self.note(
                    progress,
                    f"drl: {p.name} exited with code {code}; restarting it in "
                    f"{p.restart_at - now:g} s (restart {p.restarts + 1} of at most "
                    f"{self.cfg.max_restarts}; log: {p.log})",
                )
            elif now >= p.restart_at:
                self.restarts[p.role] = self.restarts.get(p.role, 0) + 1
                index = worker_index(p.name) if p.role in ("rollout", "learner") else 0
                self.start(p.workload or self.workloads[p.role], index, p.restarts + 1)
        return None

    def restart_learner_group(self, now: float, progress: Progress | None) -> str | None:
        """With ``--learners`` K > 1: when one learner of the group (the trainer or a ``learner-<r>``) exits
        other than 0 or 2, the others are killed and all are restarted together, as torchrun's elastic agent
        restarts a group: the survivors would only fail at their next all-reduce, one by one, and restarts out of
        step could not meet. The group meets again at a fresh port: the old rendezvous may still be held (a
        connection of the killed group in TIME_WAIT, or the port taken since by another socket). Each then
        resumes from its checkpoint and its shards' committed state."""
        if self.cfg.learners < 2:
            return None
        group = [p for p in self.procs if p.role in ("trainer", "learner")]
        crashed = [
            p for p in group if p.popen.poll() not in (None, 0, EXIT_USAGE, EXIT_SUPERSEDED) and p.restart_at is None
        ]
        if not crashed:
            return None
        first = crashed[0]
        restarts = max(p.restarts for p in group)
        if restarts >= self.cfg.max_restarts:
            return (
                f"failed: {first.name} exited with code {first.popen.poll()} after {restarts} restarts of the "
                f"learner group (--max-restarts {self.cfg.max_restarts}; log: {first.log})"
            )
        for p in group:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
        when = now + BACKOFF_S[min(restarts, len(BACKOFF_S) - 1)]
        for p in group:
            p.restart_at = when
        port = str(free_port())
        for workload in {id(w): w for p in group for w in (p.workload, self.workloads.get(TRAINER)) if w}.values():
            workload.env["MASTER_PORT"] = port
        self.note(
            progress,
            f"drl: {first.name} exited with code {first.popen.poll()}; restarting the learner group "
            f"({', '.join(p.name for p in group)}) in {when - now:g} s (restart {restarts + 1} of at "
            f"most {self.cfg.max_restarts}; log: {first.log})",
        )
        return None

    def raise_evaluator(self) -> None:
        """Once the trainer has finished, the run waits only for the evaluator's last evaluation: an evaluator
        whose session's group runs at the lowest priority beside a busy trainer (``niceness``) gets its group
        back to 0, so that a busy machine (another run, other work) cannot hold the run's end back."""
        if not niceness("evaluator", self.cfg.trainer_threads)[1]:
            return
        for p in self.procs:
            pid = p.popen.pid
            if p.role == "evaluator" and pid not in self.raised and p.popen.poll() is None and raise_group(pid):
                self.raised.add(pid)

    def hung(self, p: Proc, now: float) -> bool:
        """Whether a live process stopped touching its heartbeat file (a daemon thread touches it every few
        seconds, so a stopped or wedged process falls silent); start-up counts from the process's start."""
        try:
            last = max(p.started, p.heartbeat.stat().st_mtime) if p.heartbeat else now
        except OSError:
            last = p.started
        return now - last > self.cfg.hang_timeout_s

    @staticmethod
    def note(progress: Progress | None, text: str) -> None:
        if progress is not None:
            progress.note(text)
        else:
            print(text, file=sys.stderr)

    def show(self, progress: Progress, force: bool = False) -> None:
        t, e = self.status("trainer"), self.status("evaluator")
        progress.show(
            force=force,
            steps=int(t.get("env_steps") or 0),
            version=int(t.get("policy_version") or 0),
            updates=int(t.get("updates") or 0),
            last_eval=_float(e.get("last_eval_return")),
            best_eval=_float(e.get("best_eval_return")),
            backlog=int(t.get("backlog") or 0),
        )

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
                self.raise_evaluator()
                if all(p.popen.poll() is not None for p in self.procs):
                    return "finished"
                evaluator_done = all(p.popen.poll() is not None for p in self.procs if p.role == "evaluator")
                if evaluator_done or time.monotonic() - trainer_done_at > EVALUATOR_GRACE_S:
                    return "finished"
            time.sleep(0.2)
