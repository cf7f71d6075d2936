"""The private memory server's keeper: started again on its port when it dies, with the keys only the
orchestrator writes put back."""

from __future__ import annotations

import sys
import time

from drl.memory import MemoryBackendError, MemoryUnavailable, private_server
from orchestrator.backends.local.common import RunParts
from orchestrator.state import write_state


class MemoryKeeper(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): the private memory server's keeper."""

    def revive_memory_server(self) -> str | None:
        """Starts the private memory server again on its port if it died, and writes back the keys only the
        orchestrator owns; the services reconnect and re-send what the server lost. It also writes back the done
        markers of the rollout workers that exited 0: nothing else would ever tell the trainer that they finished,
        and it settles each one's entries from the total in its marker (``drl.training.ingest.Ingest.settle``). The
        trainer's final version (announced, and as ``trainer:done``) is written back from its final checkpoint
        (``write_back_final_version``), so the evaluator's wait for it ends: at once when the trainer has already
        ended, else as soon as it exits 0 (the server may have died in its last moments, after it wrote that
        version and before it exited)."""
        server = self.server
        if server is None:
            return None
        code = server.exit_code()
        if code is None:
            self.remember_done()
            if self._final_version_owed:
                self.write_back_final_version()
            return None
        if self.restarts["memory"] >= self.cfg.max_restarts:
            return (
                f"failed: the memory server exited with code {code} after "
                f"{self.restarts['memory']} restarts (log: {server.log_path})"
            )
        print(
            f"drl: the memory server exited with code {code}; starting it again on port {server.port}", file=sys.stderr
        )
        self.restarts["memory"] += 1
        self.server = private_server(self.run_dir / "redis", port=server.port, password=server.password)
        if self.state is not None:
            self.state.memory_pid = self.server.pid
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
