"""The run's ``summary.json`` and final ``state.json``: where every transition went, from the authoritative
counters, and how the run ended."""

from __future__ import annotations

import sys
import time

from drl.memory import MemoryBackendError, MemoryUnavailable
from drl.training.accounting import count_fields, eval_fields, imbalance, tally, with_kept_ledger
from drl.training.ingest import COUNTERS
from orchestrator.backends.local.common import (
    OWNER_CLAIM,
    RunParts,
    _refused_write,
    latest_checkpoint_meta,
    policy_lag,
    read_evaluations,
)
from orchestrator.state import write_state


class RunSummary(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): the run's ``summary.json`` and final ``state.json``."""

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
        if not self.connected:
            raise MemoryUnavailable("no memory server")
        ledger = self.control.ledger()
        produced_by = self.control.produced()
        kept = (self.trainer_record() or {}).get("ledger") if "consumed" not in ledger else None
        if isinstance(kept, dict):
            ledger, produced_by = with_kept_ledger(kept, produced_by)
        unconsumed = self.control.unconsumed(ledger if isinstance(kept, dict) else None)
        return tally(
            ledger, produced_by, unconsumed, self.control.dead_letters(), self.resume_counters, self.steps_done
        )

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
            print(
                f"drl: the run's counters cannot be read from the memory server ({exc}); the summary's "
                "transition counts are -1",
                file=sys.stderr,
            )
            acc = {
                "produced": -1,
                "consumed": -1,
                "unconsumed": -1,
                "duplicates": -1,
                "dead_lettered": {},
                "updates": -1,
                "dropped": {n: -1 for n in COUNTERS if n not in ("consumed", "duplicates")},
            }
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
            "run": self.run,
            "preset": self.cfg.preset,
            "algorithm": self.cfg.algorithm,
            "env": self.cfg.env,
            "mode": self.cfg.mode,
            "workers": self.workers_history[-1]["workers"],
            "workers_history": list(self.workers_history),
            "envs_per_worker": self.cfg.envs_per_worker,
            "seed": self.cfg.seed,
            "steps_requested": self.cfg.steps,
            "resumed_from_env_steps": self.steps_done,
            "updates": acc["updates"] if acc["updates"] >= 0 else int(t.get("updates") or 0),
            "policy_version": int(t.get("policy_version") or -1),
            **count_fields(acc),
            **eval_fields(evals),
            "restarts": dict(self.restarts),
            "wall_seconds": round(time.time() - self.started, 2),
            "exit_reason": reason,
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
                    entry.last_status = self.control.status(entry.name) if self.connected else {}
                except MemoryUnavailable:
                    break
            write_state(self.run_dir, self.state)
        except OSError as exc:
            print(f"drl: the run's state file cannot be updated: {_refused_write(exc)}", file=sys.stderr)

    def cleanup(self) -> None:
        if self.connected:
            if self._claimed_at is not None:
                try:
                    self.control.release(OWNER_CLAIM, self.holder)
                except MemoryBackendError:
                    pass
            self.memory.close()
        if self.server:
            self.server.stop()
        self.launcher.close()
