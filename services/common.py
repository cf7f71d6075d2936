"""What every service shares: reading its context from the environment, logging, and exit codes.

A service learns everything from its environment (set by the orchestrator's plan): ``DRL_CONFIG`` (the
experiment configuration as a JSON object: every value, as local runs pass it, or only the preset, env and
overrides, as the helm chart's ConfigMap holds it; ``drl.presets.resolve`` fills in the rest), ``DRL_RUN``, ``DRL_RUN_DIR``, ``DRL_MEMORY_URL``, ``DRL_STORE`` and, for
rollout workers, ``DRL_WORKER_INDEX``. Credentials therefore never appear in process arguments.

A local run's orchestrator also sets ``DRL_ORCHESTRATOR_PID``: a service whose orchestrator is gone (killed
without the time to stop its processes) ends by itself (``watch_orchestrator``), since nothing would supervise,
stop or summarise it any more, and its private memory server went with the orchestrator.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from drl.algorithms import load_plugins_or_exit
from drl.config import ExperimentConfig
from drl.errors import EXIT_SUPERSEDED, EXIT_USAGE, Superseded, UserError
from drl.memory import MemoryBackend, MemoryBackendError, RunClaims, RunControl, RunStatus, RunStop, open_memory
from drl.naming import worker_name
from drl.presets import resolve
from drl.store import PolicyStore, run_store
from drl.store.cache import PolicyCache
from services.telemetry import TELEMETRY

TERMINATED = threading.Event()
"""Set once SIGTERM reached a service that called ``stop_on_sigterm``: a pod deleted, evicted or drained, or the
local orchestrator's terminate. The service decides from the run's state whether its part ends there or it exits
``EXIT_INTERRUPTED`` for a replacement to continue (docs/reliability.md)."""


def stop_on_sigterm() -> None:
    """Makes SIGTERM stop the service as its control endpoint's Stop does (``TELEMETRY.stop``), remembering in
    ``TERMINATED`` that a signal asked."""

    def terminated(signum, frame) -> None:
        TERMINATED.set()
        TELEMETRY.stop.set()

    signal.signal(signal.SIGTERM, terminated)


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
    learner_rank: int = 0

    @classmethod
    def from_env(cls, role: str) -> "ServiceContext":
        env = os.environ
        missing = [k for k in ("DRL_CONFIG", "DRL_RUN", "DRL_RUN_DIR", "DRL_MEMORY_URL", "DRL_STORE") if not env.get(k)]
        if missing:
            raise UserError(
                f"{role}: environment variable(s) {', '.join(missing)} must be set "
                "(services are started by drl-orchestrate, which sets them)"
            )
        try:
            data = json.loads(env["DRL_CONFIG"])
        except (json.JSONDecodeError, RecursionError) as exc:
            raise UserError(f"DRL_CONFIG is not valid JSON: {exc}") from None
        config = resolve(data, "DRL_CONFIG")
        numbers = {}
        for var in ("DRL_WORKER_INDEX", "DRL_STEPS_DONE", "DRL_LEARNER_RANK"):
            try:
                numbers[var] = int(env.get(var, "0"))
            except ValueError:
                raise UserError(f"{var} must be an integer, got {env[var]!r}") from None
        return cls(
            role,
            config,
            env["DRL_RUN"],
            Path(env["DRL_RUN_DIR"]),
            env["DRL_MEMORY_URL"],
            env["DRL_STORE"],
            numbers["DRL_WORKER_INDEX"],
            numbers["DRL_STEPS_DONE"],
            numbers["DRL_LEARNER_RANK"],
        )

    @property
    def name(self) -> str:
        if self.role == "rollout":
            return worker_name(self.worker_index)
        return f"learner-{self.learner_rank}" if self.role == "learner" else self.role

    def memory(self) -> MemoryBackend:
        """The run's memory backend, checked; an unreachable server is waited for up to ``memory_retry_s`` (pods
        start together, the memory server's pod may come up last), and so is every later call."""
        return open_memory(
            self.memory_url,
            self.run,
            wait_s=self.config.memory_retry_s,
            retry_s=self.config.memory_retry_s,
            shards=self.config.memory_shards,
        )

    def policy_store(self) -> PolicyStore:
        """The run's policies; a remote store is read through the node-local cache."""
        store = run_store(self.store_url, self.run)
        return PolicyStore(store, self.run, cache=PolicyCache() if store.remote else None)


class Service:
    """What every service holds: its context and configuration, its connection to the run's memory backend (the
    run's control state and the policy announcements), and its identity (``ctx.name``: one process at a time
    writes run state as it, see ``take_identity``)."""

    def __init__(self, ctx: ServiceContext):
        self.ctx, self.cfg = ctx, ctx.config
        self.memory = ctx.memory()
        self.control = self.memory.control()
        self.announcer = self.memory.announcements()
        self.release = take_identity(self.memory, self.control, ctx.name, give_up=self.nothing_left)

    def nothing_left(self) -> str | None:
        """Why a process waiting for this identity has nothing left to do (``take_identity``): ``run_over`` by
        default."""
        return run_over(self.control)

    def close(self) -> None:
        """Gives the identity up (a process waiting for it goes on at once) and closes the connection."""
        self.release()
        self.memory.close()


def run_over(control: RunStop) -> str | None:
    """Why a process that waits for its identity has nothing left to do: the run's stop flag is set, or the
    trainer finished; None while the run goes on."""
    reason = control.stop_reason()
    if reason is not None:
        return f"the run is stopping ({reason})"
    return None if control.trainer_done() is None else "the trainer finished"


def take_identity(
    memory: MemoryBackend, control: RunControl, name: str, give_up: Callable[[], str | None] | None = None
) -> Callable[[], None]:
    """Makes this process the one that writes run state as ``name``: the holder of ``name``'s claim (waiting
    while another live process holds it, ``hold_claim``), then the owner of a fresh fencing epoch
    (``MemoryBackend.take_identity``), which every later write of it carries. The holder wins: a second process
    with the same identity waits until the first ends or stops renewing for the claim's lease; should the first
    then wake (a paused process, a partitioned node), its next write is refused and it exits with
    ``EXIT_SUPERSEDED``. A waiter whose run ends meanwhile (``give_up``, by default ``run_over``), or that takes the identity from a
    process that reported it finished (its status ``state``: a learner of a group ends before the trainer marks
    the run done), exits 0 without having written anything. Returns the function that gives the claim up."""
    why = give_up or (lambda: run_over(control))
    release = hold_claim(control, name, give_up=why)
    if release is None:
        logging.getLogger("drl").info("%s: %s while another process held this identity; nothing to do", name, why())
        sys.exit(0)
    if control.status(name).get("state") == "finished":
        release()
        logging.getLogger("drl").info("%s: the process that held this identity finished; nothing to do", name)
        sys.exit(0)
    epoch = memory.take_identity(name)
    logging.getLogger("drl").info("%s: identity taken with fencing epoch %d", name, epoch)
    return release


class StatusWriter:
    """Publishes a service's counters to its status fields (``RunControl.write_status``) at most once per
    ``every`` seconds; the in-memory telemetry gets every write."""

    def __init__(self, control: RunStatus, name: str, every: float = 1.0):
        self.control = control
        self.name = name
        self.every = every
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every

    def write(self, fields: dict, force: bool = False) -> None:
        TELEMETRY.update(fields)
        if not force and not self.due():
            return
        self._last = time.monotonic()
        self.control.write_status(self.name, fields)


HEARTBEAT_EVERY_S = 5.0
CLAIM_S = 15.0


def hold_claim(
    control: RunClaims, name: str, ttl_s: float = CLAIM_S, give_up: Callable[[], str | None] = lambda: None
) -> Callable[[], None] | None:
    """Takes the run's claim ``name`` (``RunControl.claim``) for this process and keeps it: one process at a time
    writes as one identity (two trainers would split the stream between them and overwrite each other's
    committed counters; two rollout workers with one name would number their entries alike).

    While another live process has the claim this waits (a replaced trainer pod may still be ending); a claim
    whose holder was a process of this machine that is gone is released at once (a trainer restarted after a
    crash does not wait for the expiry), any other lapses ``ttl_s`` after its holder stopped renewing. A daemon
    thread renews the claim every third of ``ttl_s``; a process that finds its claim taken (it was stopped or cut
    off for longer than ``ttl_s``) exits with ``EXIT_SUPERSEDED`` (its fencing epoch refuses any write it makes
    before that). Returns the function that gives the claim up, or None when ``give_up`` gave a reason to stop
    waiting."""
    import socket
    import threading

    from drl.process import pid_alive

    log = logging.getLogger("drl")
    host = socket.gethostname()
    holder = f"{host}:{os.getpid()}"
    noted = False
    while (other := control.claim(name, holder, ttl_s)) is not None:
        if give_up():
            return None
        other_host, _, other_pid = other.partition(":")
        if other_host == host and other_pid.isdigit() and not pid_alive(int(other_pid)):
            log.info("releasing the %s claim of %s, a process that is gone", name, other)
            control.release(name, other)
            continue
        if not noted:
            log.warning(
                "the run's %s claim is held by %s; waiting for it (it lapses %.0f s after its holder ends)",
                name,
                other,
                ttl_s,
            )
            noted = True
        time.sleep(1.0)

    released = threading.Event()

    def renew() -> None:
        while not released.wait(ttl_s / 3):
            try:
                other = control.claim(name, holder, ttl_s)
            except MemoryBackendError:
                continue
            if other is not None and not released.is_set():
                log.error(
                    "%s: superseded: the run's %s claim went to %s; exiting so that only one %s goes on",
                    name,
                    name,
                    other,
                    name,
                )
                sys.stderr.flush()
                os._exit(EXIT_SUPERSEDED)

    threading.Thread(target=renew, name=f"{name}-claim", daemon=True).start()

    def release() -> None:
        released.set()
        try:
            control.release(name, holder)
        except MemoryBackendError:
            pass

    return release


ORPHAN_CHECK_S = 1.0
ORPHAN_GRACE_S = 10.0
EXIT_ORPHANED = 3


def watch_orchestrator(pid_text: str) -> None:
    """Ends this process within ``ORPHAN_GRACE_S`` of its orchestrator's death. A daemon thread checks once a
    second that the parent is still the orchestrator (``os.getppid``: an orphan is handed to init or a
    subreaper, and this also covers an orchestrator that died before the parent-death signal was armed). Then
    the service is asked to stop as its control endpoint would ask it (a worker hands in what it collected, the
    trainer writes its final checkpoint), and if it is still running after the grace (its memory server went
    with the orchestrator, so handing in may never finish) it exits with ``EXIT_ORPHANED``."""
    import threading

    try:
        pid = int(pid_text)
    except ValueError:
        return
    log = logging.getLogger("drl")

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(ORPHAN_CHECK_S)
        log.warning(
            "the run's orchestrator (pid %d) is gone; stopping (handing in what can be handed in within %.0f s)",
            pid,
            ORPHAN_GRACE_S,
        )
        TELEMETRY.stop.set()
        time.sleep(ORPHAN_GRACE_S)
        log.warning("still running %.0f s after the orchestrator went; exiting", ORPHAN_GRACE_S)
        sys.stderr.flush()
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="orchestrator-watch", daemon=True).start()


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
    """Runs a service body with logging set up, once the algorithm plugins are loaded; UserError becomes one line
    and exit code 2."""
    load_plugins_or_exit()
    logging.basicConfig(
        level=os.environ.get("DRL_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s {role} %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if os.environ.get("DRL_HEARTBEAT_FILE"):
        start_heartbeat(os.environ["DRL_HEARTBEAT_FILE"])
    if os.environ.get("DRL_ORCHESTRATOR_PID"):
        watch_orchestrator(os.environ["DRL_ORCHESTRATOR_PID"])
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
    except Superseded as exc:
        TELEMETRY.last_error = f"superseded: {exc}"
        print(
            f"drl {role}: superseded: another process took this identity; stopping without writing more ({exc})",
            file=sys.stderr,
        )
        sys.stderr.flush()
        os._exit(EXIT_SUPERSEDED)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        TELEMETRY.last_error = f"{type(exc).__name__}: {exc}"
        raise
    sys.exit(code)
