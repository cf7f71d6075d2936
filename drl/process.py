"""Small process and socket helpers the local backend and its private servers share."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
from pathlib import Path


def die_with_parent() -> None:
    """In a child before exec: ask Linux to send SIGTERM when the parent dies (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


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
