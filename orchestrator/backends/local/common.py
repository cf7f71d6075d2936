"""What the parts of a local run share: its files' names, its timings and limits, the process record, and
the readers of what a run leaves in its folder and its store."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from drl.config import ExperimentConfig
from drl.memory import MemoryBackend, MemoryServer, RunControl
from drl.process import pid_alive
from drl.store import run_store
from orchestrator.backends.local.forkserver import ForkedProcess, Launcher
from orchestrator.plan import Workload
from orchestrator.state import RunState

EVALUATOR_GRACE_S = 300.0

STOP_GRACE_S = 15.0

STOP_FLAG_GRACE_S = 3.0

FINAL_CHECKPOINT_S = 60.0

MEMORY_RETRY_S = 0.0  # the supervision loop goes on without an answer; it restarts a private server that died

STOP_REQUEST = "stop.request"

SCALE_REQUEST = "scale.request"

SCALE_RESULT = "scale.result"

STOP_FLAG = "stopped"

HAND_IN_S = 60.0

BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)

HEARTBEATS = "heartbeats"

MAX_WORKERS = 4096

# Rollout workers run this many steps nicer than the trainer. With more workers than cores the scheduler would
# otherwise give the one consumer a 1/(N+2) share of the CPU: it falls behind, back-pressure holds every
# producer, and more workers collect less. Niced, the workers take what the trainer leaves (within the session
# scheduling groups of kernels that have them, drl.process.nicer: their groups stay at 0, since renicing them too
# gave the trainer nothing beside an evaluator at the lowest priority, bench/README.md).
ROLLOUT_NICENESS = 5
# The evaluator runs as nice as the workers: it is off the learning's critical path (it scores what the trainer
# published, whenever it gets to it), so on a busy machine it takes its share from the workers, not the trainer.
# On Kubernetes its pod's own CPU request and limit are its budget.
EVALUATOR_NICENESS = ROLLOUT_NICENESS
# Beside a trainer that takes every CPU (--trainer-threads 0) the evaluator runs at the lowest priority: any time it
# takes a core from one of the trainer's intra-op threads, the others wait for that thread at the end of the
# operation, so the trainer loses more than the evaluator gains (bench/README.md, "Issue 45").
IDLE_NICENESS = 19


def niceness(role: str, trainer_threads: int) -> tuple[int, bool]:
    """How much nicer than the trainer a local service of ``role`` runs, and whether its whole session (its
    scheduling group, ``drl.process.nicer``) does: only the evaluator at the lowest priority, where the gain
    was measured."""
    if role == "rollout":
        return ROLLOUT_NICENESS, False
    if role == "evaluator":
        return (IDLE_NICENESS, True) if trainer_threads == 0 else (EVALUATOR_NICENESS, False)
    return 0, False


PASSWORD_FILE = "memory.password"

OWNER_CLAIM = "orchestrator"

CLAIM_S = 15.0

CLAIM_RENEW_S = 3.0


def policy_lag(trainer: dict) -> dict:
    """The summary's ``policy_lag`` from the trainer's last status, for learners that measure it: the histogram
    of trained transitions by lag in versions (bucket upper bound: count), its mean, 95th percentile (a bucket's
    upper bound) and maximum, and ``dropped``, the transitions consumed but not learned from because they were
    older than ``--max-policy-lag`` (they count as consumed in the balance)."""
    if not trainer.get("policy_lag"):
        return {}
    from drl.tensorboard import parse_buckets

    try:
        pairs = parse_buckets(trainer["policy_lag"])
        return {
            "policy_lag": {
                "histogram": {("inf" if b == float("inf") else str(int(b))): c for b, c in pairs},
                "mean": float(trainer.get("policy_lag_mean") or 0.0),
                "p95": int(float(trainer.get("policy_lag_p95") or 0)),
                "max": int(float(trainer.get("policy_lag_max") or 0)),
                "dropped": int(float(trainer.get("lag_dropped") or 0)),
            }
        }
    except ValueError:
        return {}


def refusal(log: Path, tail_bytes: int = 8192) -> str:
    """The reason a service gave when it refused its input: the last ``drl ROLE: error: ...`` line of its log
    (``services.common`` prints one before it exits with the usage code), or "" when there is none."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail_bytes))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        head, sep, reason = line.partition(": error: ")
        if sep and head.startswith("drl "):
            return reason.strip()
    return ""


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen | ForkedProcess
    log: Path
    heartbeat: Path | None = None
    started: float = field(default_factory=time.time)
    restarts: int = 0
    restart_at: float | None = None
    workload: Workload | None = None


class RunParts:
    """The state that ``LocalRun``'s parts share, and for the type checker the methods one part calls on another;
    every part derives from it, ``LocalRun`` from every part."""

    def __init__(self, cfg: ExperimentConfig, run: str, run_dir: Path, steps_done: int = 0, resume: bool = False):
        self.cfg = cfg
        self.run = run
        self.run_dir = run_dir
        self.steps_done = steps_done
        self.resume = resume
        self.procs: list[Proc] = []
        self.launcher = Launcher()
        self.server: MemoryServer | None = None
        self._memory: MemoryBackend | None = None
        self._control: RunControl | None = None
        self.workloads: dict[str, Workload] = {}
        self.interrupted = False
        self.interrupts = 0
        self.superseded: set[str] = set()
        self.raised: set[int] = set()
        self.started = time.time()
        self.memory_url = ""
        self.state: RunState | None = None
        self._ports_checked = 0.0
        self.stop_requested = False
        self._hand_in_deadline: float | None = None
        self._trainer_stopped = False
        self.restarts = {
            "trainer": 0,
            "rollout": 0,
            "evaluator": 0,
            "memory": 0,
            **({"learner": 0} if cfg.learners > 1 else {}),
        }
        self.workers_history = [{"wall_seconds": 0.0, "env_steps": steps_done, "workers": cfg.workers}]
        self._membership: tuple[dict[str, str], dict[str, int]] = ({}, {})
        self.resume_counters: dict[str, int] = {}
        self.store_url: str | None = None
        self._trainer_record: dict | None = None
        self.memory_env: dict[str, str] | None = None
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{run_dir}"
        self._claimed_at: float | None = None
        self._done: dict[str, int] = {}
        self._final_version_owed = False  # the server was started again before the trainer exited 0
        self._done_read_at = 0.0

    @property
    def connected(self) -> bool:
        """Whether the run's memory is open (from ``open_memory_and_claim`` until ``cleanup``)."""
        return self._control is not None

    @property
    def memory(self) -> MemoryBackend:
        if self._memory is None:
            raise RuntimeError("the run's memory is not open yet")
        return self._memory

    @property
    def control(self) -> RunControl:
        if self._control is None:
            raise RuntimeError("the run's memory is not open yet")
        return self._control

    def connect(self, memory: MemoryBackend) -> None:
        self._memory, self._control = memory, memory.control()

    if TYPE_CHECKING:

        def advance_stop(self) -> None: ...
        def failed(self) -> str | None: ...
        def hung(self, p: Proc, now: float) -> bool: ...
        def keep_claim(self) -> str | None: ...
        def refresh_state(self, force: bool = False) -> None: ...
        def register_workers(self) -> None: ...
        def revive_memory_server(self) -> str | None: ...
        def start(self, workload: Workload, index: int, restarts: int = 0) -> Proc: ...
        def status(self, role: str) -> dict[str, str]: ...
        def take_scale_request(self) -> None: ...
        def trainer_finished(self) -> bool: ...
        def trainer_record(self) -> dict | None: ...


def _alive_here(holder: str) -> bool:
    """Whether a claim's holder (``host:pid:run dir``) is a live process on this machine."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and pid_alive(int(pid))


def read_evaluations(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("mean_return"), (int, float)):
            out.append(entry)
    return out


def latest_checkpoint_meta(store_url: str, run: str) -> dict | None:
    """The meta of the run's newest checkpoint that verifies, None without one."""
    from drl.store.checkpoint import CheckpointStore

    latest = CheckpointStore(run_store(store_url, run), run).latest()
    return latest[2] if latest is not None else None


def resume_counters(store_url: str, run: str) -> dict[str, int]:
    """The ledger's counters in the checkpoint a resumed trainer starts from (the newest that verifies): what the
    run had accounted for before this resume."""
    counters = (latest_checkpoint_meta(store_url, run) or {}).get("counters")
    if not isinstance(counters, dict):
        return {}
    return {str(k): int(v) for k, v in counters.items() if isinstance(v, int)}


def write_summary(run_dir: Path, summary: dict) -> bool:
    """Writes summary.json whole or not at all; where it cannot be written (a full disk, a read-only folder) the
    summary goes to stderr instead, so that a failed run still says what it did. Returns whether it was written."""
    text = json.dumps(summary, indent=2) + "\n"
    partial = run_dir / "summary.json.partial"
    try:
        partial.write_text(text)
        os.replace(partial, run_dir / "summary.json")
        return True
    except OSError as exc:
        partial.unlink(missing_ok=True)
        print(
            f"drl: the summary cannot be written to {run_dir / 'summary.json'} ({exc.strerror or exc}); here it "
            f"is:\n{text}",
            file=sys.stderr,
            end="",
        )
        return False


def last_error(reason: str) -> str:
    """The last error line of the log a failure names (``... (log: PATH)``), as "; last error: ...", so that the
    line that ends a run says why (a read-only store, a full disk) without opening the log; "" without one."""
    match = re.search(r"log: ([^;)]+)\)", reason)
    try:
        lines = Path(match.group(1)).read_text(errors="replace").splitlines()[-200:] if match else []
    except OSError:
        return ""
    errors = [line.strip() for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b.*:", line.strip())]
    return f"; last error: {errors[-1][:300]}" if errors else ""


def _refused_write(exc: OSError) -> str:
    """An OSError of the run's own files as one line: what the system said, and where."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None
