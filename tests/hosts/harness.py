"""A run whose parts sit on five hosts (network namespaces, ``tests.hosts.netns``), as on a small cluster:

- ``memory``: the Valkey server, bound to that host's address;
- ``store``: the S3 server (moto's), bound to that host's address;
- ``learner``: the trainer (and the learners of a group) and the evaluator;
- ``node-a`` and ``node-b``: the rollout workers, even indices on node-a, odd on node-b, each node with its own
  policy cache directory (``DRL_CACHE_DIR``), as two Kubernetes nodes each have theirs.

Every service is started with the command and environment the plan gives it (``orchestrator.plan``, the ones the
local backend and the pods use), pointed at the other hosts' addresses; nothing orchestrates the run, as on
Kubernetes: the services find one another through the memory server and end by themselves. ``node_memory_url``
points the nodes at another address for the memory server (a ``DelayProxy`` in front of it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import redis

from drl.config import ExperimentConfig
from drl.memory import new_password, open_memory
from drl.memory.redis.server import RedisServer
from drl.training.accounting import tally
from tests.conftest import ROOT, S3Server
from tests.harness import ServiceRun
from tests.hosts.netns import Hosts

HOSTS = ["memory", "store", "learner", "node-a", "node-b"]
MEMORY_PORT = 6379
S3_PORT = 9000
PLACE = {"trainer": "learner", "learner": "learner", "evaluator": "learner"}


def node_of(index: int) -> str:
    return "node-a" if index % 2 == 0 else "node-b"


class HostRun(ServiceRun):
    def __init__(
        self, hosts: Hosts, cfg: ExperimentConfig, workdir: Path, run: str = "hosts", node_memory_url: str | None = None
    ):
        self.hosts = hosts
        self.workdir = workdir
        self.password = new_password()
        (workdir / "redis").mkdir(parents=True, exist_ok=True)
        self.server = self._memory_server().start()
        self.s3 = S3Server(workdir, host=hosts.address["store"], port=S3_PORT, launcher=hosts.command("store", []))
        self.store_url = f"s3://drl-{run}/runs"
        super().__init__(
            cfg, self.server.url, workdir, run=run, store_url=self.store_url, learner_address=hosts.address["learner"]
        )
        self.node_memory_url = node_memory_url

    def _memory_server(self) -> RedisServer:
        return RedisServer(
            self.workdir / "redis",
            port=MEMORY_PORT,
            host=self.hosts.address["memory"],
            launcher=self.hosts.command("memory", []),
            password=self.password,
        )

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.server.url, password=self.password, socket_timeout=10)

    def host_of(self, role: str, index: int) -> str:
        return node_of(index) if role == "rollout" else PLACE[role]

    def start(self, role: str, index: int = 0) -> subprocess.Popen:
        workload = self.workloads[role]
        name = workload.replica_name(index)
        host = self.host_of(role, index)
        env = {
            **os.environ,
            **self.s3.env,
            **workload.replica_env(index),
            "DRL_MEMORY_PASSWORD": self.password,
            "DRL_CACHE_DIR": str(self.workdir / f"cache-{host}"),
        }
        if host.startswith("node-") and self.node_memory_url:
            env["DRL_MEMORY_URL"] = self.node_memory_url
        proc = self.hosts.popen(host, list(workload.command), env, self.run_dir / "logs" / f"{name}.log", cwd=str(ROOT))
        self.procs[name] = proc
        return proc

    def start_all(self, evaluator: bool = True) -> None:
        super().start_all(evaluator=evaluator)

    def restart_memory(self, down_s: float = 1.5) -> None:
        """The memory host's server killed and started again empty, as a pod without persistence restarts."""
        self.server.proc.kill()
        self.server.proc.wait()
        time.sleep(down_s)
        self.server = self._memory_server().start()

    def accounts(self) -> dict:
        """Where every transition went, from the memory server's authoritative counters (as a local run's
        summary counts them): produced = consumed + unconsumed + drops, duplicates and dead letters apart."""
        memory = open_memory(
            self.server.url,
            self.run,
            retry_s=5.0,
            shards=self.cfg.memory_shards,
            env={"DRL_MEMORY_PASSWORD": self.password},
        )
        try:
            control = memory.control()
            return tally(control.ledger(), control.produced(), control.unconsumed(), control.dead_letters())
        finally:
            memory.close()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.server.stop()
        self.s3.stop()


def assert_accounted(acc: dict, steps: int) -> None:
    """Every transition produced once and accounted for once: consumed, or counted as dropped, nothing left."""
    dropped = sum(acc["dropped"].values())
    assert acc["produced"] == steps, acc
    assert acc["produced"] == acc["consumed"] + acc["unconsumed"] + dropped, acc
    assert acc["unconsumed"] == 0, acc
