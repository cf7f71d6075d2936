"""``<run dir>/state.json``: what a live local run is made of, for the commands that reach it from outside.

The orchestrator of a local run (in the foreground or detached) writes it once its processes are started and
again as their control ports become known and when the run ends; ``drl-orchestrate status`` and ``stop`` read
it. It holds process ids, names and ports and the memory URL without any password (credentials stay in the
environment), so a run folder can be shared. Writes are atomic (a temporary file renamed over the old one), so
a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from drl.errors import UserError

STATE_FILE = "state.json"


@dataclass
class ProcessState:
    name: str
    role: str
    pid: int
    control_port: int | None = None
    log: str = ""
    exit_code: int | None = None
    restarts: int = 0
    # The process's status hash as the run ended (the private memory server goes away with the run).
    last_status: dict[str, str] = field(default_factory=dict)


@dataclass
class RunState:
    run: str
    orchestrator_pid: int
    memory_url: str
    started_at: float = field(default_factory=time.time)
    processes: list[ProcessState] = field(default_factory=list)
    state: str = "running"  # running | finished
    exit_reason: str = ""
    detached: bool = False
    memory_pid: int | None = None  # the private memory server's, for ending it if the orchestrator is gone

    def __post_init__(self) -> None:
        self.memory_url = without_password(self.memory_url)

    def process(self, name: str) -> ProcessState | None:
        return next((p for p in self.processes if p.name == name), None)

    def control_port(self, name: str) -> int | None:
        """The control port a process reported, None while it has not (or is not in the state)."""
        entry = self.process(name)
        return entry.control_port if entry is not None else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunState":
        data = dict(data)
        procs = [
            ProcessState(**{k: v for k, v in p.items() if k in ProcessState.__dataclass_fields__})
            for p in data.pop("processes", [])
        ]
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(processes=procs, **known)


def without_password(url: str) -> str:
    """The URL with its password removed (not masked: the file is meant to be readable and copyable)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}@{hostport}" if user else hostport).geturl()


def state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def write_state(run_dir: Path, state: RunState) -> None:
    path = state_path(run_dir)
    fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(state.to_dict(), fh, indent=2)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(run_dir: Path) -> RunState | None:
    """The run's state, or None when the run has none (not a local run, or not started yet); a file that does
    not hold a run state is a ``UserError`` naming it."""
    path = state_path(run_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"{path} cannot be read as a run state: {exc}") from None
    try:
        state = RunState.from_dict(data)
        if (
            not isinstance(state.run, str)
            or not _pid(state.orchestrator_pid)
            or not _number(state.started_at)
            or not isinstance(state.state, str)
            or not isinstance(state.exit_reason, str)
            or not (state.memory_pid is None or _pid(state.memory_pid))
            or not all(
                isinstance(p.name, str)
                and _pid(p.pid)
                and (p.control_port is None or _pid(p.control_port))
                and isinstance(p.last_status, dict)
                for p in state.processes
            )
        ):
            raise TypeError("run, a process id or name, a control port or a last status has the wrong type")
    except (TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{path} does not hold a valid run state: {exc}") from None
    return state


def _pid(value) -> bool:
    """Whether value can be a process id or port (an int that os.kill and gRPC accept)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
