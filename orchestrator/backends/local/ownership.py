"""Who owns a local run, and what is left of a run whose orchestrator is gone.

A run has one orchestrator at a time. ``RunLock`` is an exclusive ``flock`` on ``<run dir>/run.lock``, taken
before a run starts or resumes and held for the orchestrator's life: the kernel drops it when its holder dies,
however it dies (SIGKILL included), so a lock never outlives its run and never needs cleaning up. A detached run
hands the same open file to its orchestrator, so the lock is never let go between the command and the
background process. The run's memory server holds a second, timed claim (``RunControl.claim``, in
``orchestrator.backends.local.run``) for runs whose memory server is shared by several machines or folders.

A service's orchestrator can die without stopping it (SIGKILL leaves no time to). Services notice and end by
themselves within seconds (``services.common.watch_orchestrator``); ``end_orphans`` ends what is still there (a
process wedged or stopped), from the pids ``state.json`` records, each checked to be this run's process (its
environment names the run folder, or, for the private memory server, its working folder, which the server
makes its data folder) so that a pid reused by another program is never signalled.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

from drl.errors import UserError
from drl.process import pid_alive
from orchestrator.state import RunState

LOCK_FILE = "run.lock"
ORPHAN_TERM_S = 5.0


class RunLock:
    """The exclusive lock of one run folder (see the module docstring); ``fd`` is the open lock file."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir, self.fd = Path(run_dir), fd

    @classmethod
    def acquire(cls, run_dir: Path, run: str) -> "RunLock":
        """Takes the lock, or refuses with one ``UserError`` naming the orchestrator that holds it."""
        path = Path(run_dir) / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UserError(f"run folder {run_dir} cannot hold its lock file: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(
                f"run {run!r} is running (orchestrator pid {holder or 'unknown'}); one orchestrator "
                f"owns a run at a time: see drl-orchestrate status {run}, end it with "
                f"drl-orchestrate stop {run}, then resume it"
            ) from None
        lock = cls(run_dir, fd)
        lock.mark(os.getpid())
        return lock

    @classmethod
    def inherit(cls, run_dir: Path, fd_text: str | None) -> "RunLock | None":
        """The lock a detached orchestrator got from the command that started it (the open file ``fd_text``
        names), now marked with its own pid; None without one."""
        if not fd_text or not fd_text.isdigit():
            return None
        lock = cls(run_dir, int(fd_text))
        fcntl.flock(lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.mark(os.getpid())
        return lock

    def mark(self, pid: int) -> None:
        """Records the holder's pid in the lock file, for the message of a refused second orchestrator."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{pid}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _holder(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def orchestrator_alive(run_dir: Path, state: RunState) -> bool:
    """Whether the run's orchestrator still runs: its lock is held (a pid can be reused by another program; a
    lock cannot outlive its holder). Runs from before the lock existed are judged by their pid."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return pid_alive(state.orchestrator_pid)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _proc_entries(pid: int, what: str) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes().split(b"\0")
    except OSError:
        return []


def belongs_to_run(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` is a live process of the run in ``run_dir``: a service (``DRL_RUN_DIR`` in its
    environment) or the run's private memory server (working in the run's ``redis`` folder: the server changes
    into its ``--dir``, and rewrites its arguments, so they cannot tell)."""
    if not pid or not pid_alive(pid):
        return False
    if b"DRL_RUN_DIR=" + str(Path(run_dir)).encode() in _proc_entries(pid, "environ"):
        return True
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(Path(run_dir) / "redis")
    except OSError:
        return False


def leftovers(run_dir: Path, state: RunState) -> dict[str, int]:
    """name -> pid of the run's processes still alive (services and the private memory server)."""
    found = {p.name: p.pid for p in state.processes if belongs_to_run(p.pid, run_dir)}
    if state.memory_pid and belongs_to_run(state.memory_pid, run_dir):
        found["memory-server"] = state.memory_pid
    return found


def _signal(pid: int, sig: int) -> None:
    """Signals the process's group when it leads one (every process of a run is started in its own session, so
    whatever it started goes too), else the process alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_orphans(run_dir: Path, state: RunState, term_s: float = ORPHAN_TERM_S) -> dict[str, int]:
    """Ends the processes of a run whose orchestrator is gone: SIGTERM (a service hands in what it can), then
    SIGKILL after ``term_s`` for what is still there (a stopped or wedged process). Returns what it found."""
    found = leftovers(run_dir, state)
    for pid in found.values():
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + term_s
    while time.monotonic() < deadline and any(belongs_to_run(pid, run_dir) for pid in found.values()):
        time.sleep(0.1)
    for pid in found.values():
        if belongs_to_run(pid, run_dir):
            _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + term_s
    while time.monotonic() < deadline and any(belongs_to_run(pid, run_dir) for pid in found.values()):
        time.sleep(0.1)
    return found
