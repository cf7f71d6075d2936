"""The run's claim and its start: the memory server (private or named), the claim that one orchestrator owns
the run, and the configuration written to the store."""

from __future__ import annotations

import os
import sys
import time

from drl.errors import UserError
from drl.memory import MemoryBackendError, new_password, open_memory, private_env, private_server, write_password_file
from drl.store import run_store
from orchestrator.backends.local.common import (
    CLAIM_RENEW_S,
    CLAIM_S,
    MEMORY_RETRY_S,
    OWNER_CLAIM,
    PASSWORD_FILE,
    STOP_REQUEST,
    RunParts,
    _alive_here,
    resume_counters,
)


class RunClaim(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): the run's claim and its start."""

    def prepare(self) -> tuple[str, str]:
        self.launcher.warm(
            {
                **os.environ,
                "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1",
                "DRL_RUN": self.run,
                "DRL_RUN_DIR": str(self.run_dir),
            }
        )
        if self.cfg.memory:
            memory_url = self.cfg.memory
        else:
            password = new_password()
            password_file = self.run_dir / PASSWORD_FILE
            write_password_file(password_file, password)
            self.memory_env = private_env(password_file)
            self.server = private_server(self.run_dir / "redis", password=password)
            memory_url = self.server.url
        self.connect(
            open_memory(
                memory_url, self.run, retry_s=MEMORY_RETRY_S, env=self.memory_env, shards=self.cfg.memory_shards
            )
        )
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
                raise UserError(
                    f"run {self.run!r} is owned by another orchestrator ({holder}) on the memory server "
                    f"{self.memory.describe()}; one orchestrator owns a run at a time"
                )
            if not noted:
                print(
                    f"drl: run {self.run} is claimed on the memory server by {holder}; waiting up to "
                    f"{CLAIM_S:.0f} s for the claim of an orchestrator that died to expire",
                    file=sys.stderr,
                )
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
