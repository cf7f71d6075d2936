"""Starting the plan's processes, one replica at a time, and keeping ``state.json`` of them."""

from __future__ import annotations

import os
import sys

from drl.memory import MemoryUnavailable
from drl.process import free_port
from orchestrator.backends.local.common import HEARTBEATS, Proc, RunParts, niceness
from orchestrator.plan import plan
from orchestrator.state import ProcessState, RunState, write_state


class Spawning(RunParts):
    """A part of ``LocalRun`` (``orchestrator.backends.local.run``): starting the plan's processes, one replica at a time, and keeping ``state.json`` of them."""

    def spawn(self, memory_url: str, store_url: str, detached: bool = False) -> None:
        self.workloads = {
            w.role: w
            for w in plan(
                self.cfg,
                run=self.run,
                run_dir=str(self.run_dir),
                memory_url=memory_url,
                store_url=store_url,
                python=sys.executable,
                steps_done=self.steps_done,
                learner_port=free_port() if self.cfg.learners > 1 else 0,
            )
        }
        self.register_workers()
        for workload in self.workloads.values():
            for i in workload.indices():
                self.start(workload, i)
        self.state = RunState(
            run=self.run,
            orchestrator_pid=os.getpid(),
            memory_url=self.memory_url,
            started_at=self.started,
            detached=detached,
            memory_pid=self.server.pid if self.server is not None else None,
            processes=[ProcessState(p.name, p.role, p.popen.pid, None, str(p.log)) for p in self.procs],
        )
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
        env = {
            **(self.memory_env or os.environ),
            **workload.replica_env(index),
            "DRL_CONTROL_PORT": "0",
            "DRL_HEARTBEAT_FILE": str(heartbeat),
            "DRL_RESTARTS": str(restarts),
            "DRL_ORCHESTRATOR_PID": str(os.getpid()),
        }
        nice, nice_session = niceness(workload.role, self.cfg.trainer_threads)
        with open(log_path, "ab") as log:
            popen = self.launcher.start(
                list(workload.command),
                env,
                log,
                nice=nice,
                nice_session=nice_session,
                name=f"drl-{name}",
            )
        proc = Proc(
            name, workload.replica_role(index), popen, log_path, heartbeat, restarts=restarts, workload=workload
        )
        self.procs = [p for p in self.procs if p.name != name] + [proc]
        if self.state is not None:
            entry = self.state.process(name)
            if entry is None:
                self.state.processes.append(ProcessState(name, proc.role, popen.pid, None, str(log_path)))
            else:
                entry.pid, entry.control_port, entry.exit_code, entry.restarts = popen.pid, None, None, restarts
            write_state(self.run_dir, self.state)
        return proc
