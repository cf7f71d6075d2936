"""What every service shares: reading its context from the environment, logging, and exit codes.

A service learns everything from its environment (set by the orchestrator's plan): ``DRL_CONFIG`` (the
experiment configuration as a JSON object: every value, as local runs pass it, or only the preset, env and
overrides, as the helm chart's ConfigMap holds it; ``drl.presets.resolve`` fills in the rest), ``DRL_RUN``, ``DRL_RUN_DIR``, ``DRL_MEMORY_URL``, ``DRL_STORE`` and, for
rollout workers, ``DRL_WORKER_INDEX``. Credentials therefore never appear in process arguments.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import redis

from drl.config import ExperimentConfig
from drl.presets import resolve
from drl.errors import UserError
from drl.memory.redis_backend import Keys, connect, retrying
from drl.store import PolicyStore, run_store
from drl.store.cache import PolicyCache
from services.telemetry import TELEMETRY

EXIT_USAGE = 2


@dataclass
class ServiceContext:
    role: str
    config: ExperimentConfig
    run: str
    run_dir: Path
    memory_url: str
    store_url: str
    worker_index: int
    steps_done: int = 0

    @classmethod
    def from_env(cls, role: str) -> "ServiceContext":
        env = os.environ
        missing = [k for k in ("DRL_CONFIG", "DRL_RUN", "DRL_RUN_DIR", "DRL_MEMORY_URL", "DRL_STORE") if not env.get(k)]
        if missing:
            raise UserError(f"{role}: environment variable(s) {', '.join(missing)} must be set "
                            "(services are started by drl-orchestrate, which sets them)")
        try:
            data = json.loads(env["DRL_CONFIG"])
        except (json.JSONDecodeError, RecursionError) as exc:
            raise UserError(f"DRL_CONFIG is not valid JSON: {exc}") from None
        config = resolve(data, "DRL_CONFIG")
        numbers = {}
        for var in ("DRL_WORKER_INDEX", "DRL_STEPS_DONE"):
            try:
                numbers[var] = int(env.get(var, "0"))
            except ValueError:
                raise UserError(f"{var} must be an integer, got {env[var]!r}") from None
        return cls(role, config, env["DRL_RUN"], Path(env["DRL_RUN_DIR"]), env["DRL_MEMORY_URL"], env["DRL_STORE"],
                   numbers["DRL_WORKER_INDEX"], numbers["DRL_STEPS_DONE"])

    @property
    def name(self) -> str:
        return f"{self.role}-{self.worker_index}" if self.role == "rollout" else self.role

    def redis(self) -> redis.Redis:
        """A checked connection; an unreachable server is waited for up to ``memory_retry_s`` (pods start
        together, the Redis pod may come up last)."""
        return connect(self.memory_url, wait_s=self.config.memory_retry_s)

    def keys(self) -> Keys:
        return Keys(self.run)

    def policy_store(self) -> PolicyStore:
        """The run's policies; a remote store is read through the node-local cache."""
        store = run_store(self.store_url, self.run)
        return PolicyStore(store, self.run, cache=PolicyCache() if store.remote else None)


class StatusWriter:
    """Publishes a service's counters to its status hash at most once per ``every`` seconds."""

    def __init__(self, client: redis.Redis, key: str, every: float = 1.0, retry_s: float = 120.0):
        self.client = client
        self.retry_s = retry_s
        self.key = key
        self.every = every
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every

    def write(self, fields: dict, force: bool = False) -> None:
        TELEMETRY.update(fields)
        if not force and not self.due():
            return
        self._last = time.monotonic()
        fields = {k: ("" if v is None else v) for k, v in fields.items()}
        retrying(lambda: self.client.hset(self.key, mapping=fields), "status", self.retry_s)


HEARTBEAT_EVERY_S = 5.0


def start_heartbeat(path: str) -> None:
    """Touches ``path`` every few seconds from a daemon thread: the exec probes of the Kubernetes pods check
    its age (``find PATH -mmin -1``), so a process that is wedged hard enough to stop its threads is restarted."""
    import threading

    target = Path(path)

    def beat() -> None:
        while True:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            except OSError as exc:
                logging.getLogger("drl").warning("heartbeat file %s cannot be written: %s", target, exc)
            time.sleep(HEARTBEAT_EVERY_S)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


def run_service(role: str, body: Callable[[ServiceContext], int]) -> None:
    """Runs a service body with logging set up; UserError becomes one line and exit code 2."""
    logging.basicConfig(level=os.environ.get("DRL_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s {role} %(levelname)s %(message)s", stream=sys.stderr)
    if os.environ.get("DRL_HEARTBEAT_FILE"):
        start_heartbeat(os.environ["DRL_HEARTBEAT_FILE"])
    from services.metrics import start_metrics
    start_metrics()
    try:
        TELEMETRY.restarts = int(os.environ.get("DRL_RESTARTS", "0") or 0)
    except ValueError:
        TELEMETRY.restarts = 0
    try:
        ctx = ServiceContext.from_env(role)
        TELEMETRY.role, TELEMETRY.name, TELEMETRY.run = role, ctx.name, ctx.run
        from services.control import start_control
        start_control(ctx)
        code = body(ctx)
    except UserError as exc:
        TELEMETRY.last_error = str(exc)
        print(f"drl {role}: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        TELEMETRY.last_error = f"{type(exc).__name__}: {exc}"
        raise
    sys.exit(code)


def share(total: int, parts: int, index: int) -> int:
    """Index-th of parts near-equal shares of total (the first ones get the remainder)."""
    return total // parts + (1 if index < total % parts else 0)
