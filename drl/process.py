"""Small process and socket helpers the local backend and its private servers share."""

from __future__ import annotations

import errno
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

_TRAMPOLINE = """
import ctypes, os, signal, sys
parent, die, nice, session = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4] == "1"
if die:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
if nice:
    level = os.nice(nice)
    if session and os.getsid(0) == os.getpid():
        try:
            with open("/proc/self/autogroup", "w") as fh:
                fh.write(str(level))
        except OSError:
            pass
try:
    os.execvp(sys.argv[5], sys.argv[5:])
except OSError as exc:
    sys.stderr.write(f"drl: cannot run {sys.argv[5]}: {exc.strerror}\\n")
    os._exit(127)
"""


def spawn(
    argv: list[str], *, die_with_parent: bool = True, nice: int = 0, nice_session: bool = False, **popen_kwargs
) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen_kwargs)`` whose process gets SIGTERM when this thread ends
    (PR_SET_PDEATHSIG, when ``die_with_parent``) and runs ``nice`` steps nicer, with no Python code run between
    fork and exec in this process.

    Why not ``preexec_fn``: with it, ``Popen`` uses ``fork()`` instead of ``vfork()``, so grpcio's fork handlers
    run in the child and restart its poller there; the child then closes its inherited descriptors before exec,
    the poller's among them, and grpcio aborts the child (grpc/grpc#43055). That happens now and then, whenever
    this process holds a gRPC channel or server, as the orchestrator and the test processes do. A short exec
    trampoline (a bare interpreter that sets the signal and the niceness, then execs ``argv``) keeps ``Popen``
    on ``vfork()``. A missing program still raises ``FileNotFoundError`` here, as ``Popen`` would.

    The niceness is set as ``nicer`` sets it, ``nice_session`` as its ``whole_session`` (the trampoline repeats
    its few lines: it runs without drl on its path)."""
    env = popen_kwargs.get("env")
    program = argv[0]
    if os.sep in program:
        found = os.access(program, os.X_OK)
    else:
        found = shutil.which(program, path=os.pathsep.join(os.get_exec_path(env))) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if not die_with_parent and not nice:
        return subprocess.Popen(argv, **popen_kwargs)
    head = [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), "1" if die_with_parent else "0"]
    return subprocess.Popen([*head, str(nice), "1" if nice_session else "0", *argv], **popen_kwargs)


def nicer(steps: int, whole_session: bool = False) -> int:
    """Makes this process ``steps`` nicer and returns its niceness; with ``whole_session``, a session leader's
    whole session too.

    Where the kernel groups processes by session for scheduling (``CONFIG_SCHED_AUTOGROUP``, on by default in
    most distributions' kernels), a process's niceness weighs only against the processes of its own session;
    between sessions, each session's group counts as one task of its own (the group's niceness, that of
    ``/proc/self/autogroup``). The local backend starts every service in a session of its own, so without the
    group's niceness a niced rollout worker or evaluator would take an equal share of the CPU beside the
    trainer, whatever its own niceness. Only a session leader renices its group: any other process would renice
    the session it shares with its parent. Where there are no groups the file is absent and niceness works
    alone. The local backend asks for the whole session only where it measured what it gives (the evaluator
    beside a trainer that takes every CPU, ``orchestrator.backends.local.common.niceness``)."""
    level = os.nice(steps)
    if steps and whole_session and os.getsid(0) == os.getpid():
        try:
            with open("/proc/self/autogroup", "w") as fh:
                fh.write(str(level))
        except OSError:
            pass
    return level


def raise_group(pid: int) -> bool:
    """Puts the scheduling group of the session that ``pid`` leads (``nicer``'s ``whole_session``) back at niceness
    0; True once it is there, or where that cannot be (no groups in this kernel, the process gone, no permission).
    The owner of a process may lower its group's niceness to 0 without privilege (unlike a task's own niceness,
    which only a privileged process may lower); an unprivileged write is refused (False) within a tenth of a
    second of any other group's change on the machine, so a caller tries again later."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as fh:
            fh.write("0")
    except FileNotFoundError:
        return True
    except OSError as exc:
        return exc.errno != errno.EAGAIN
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (the caller binds it next), chosen below the kernel's
    ephemeral range: a port from that range can be taken, before the caller binds it, as the local end of any
    outgoing connection on the machine, which a busy machine makes many of each second."""
    low = _ephemeral_low()
    chooser = random.SystemRandom()
    for _ in range(64):
        port = chooser.randrange(min(20000, low - 1), low)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return max(1025, int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32768


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process of this machine (a zombie, exited but not reaped, counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def usable_cpus() -> float:
    """CPUs this process may use: its cgroup's quota when one is set (a pod's CPU limit), else its affinity."""
    for path, parse in (
        ("/sys/fs/cgroup/cpu.max", lambda t: t.split()),
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", lambda t: [t.strip(), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")]),
    ):
        try:
            quota, period = parse(_read(path))
            if quota not in ("max", "-1") and float(period) > 0:
                return float(quota) / float(period)
        except (OSError, ValueError):
            continue
    return float(len(os.sched_getaffinity(0)))


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()
