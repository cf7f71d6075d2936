"""Small process and socket helpers the local backend and its private servers share."""

from __future__ import annotations

import ctypes
import signal
import socket


def die_with_parent() -> None:
    """In a child before exec: ask Linux to send SIGTERM when the parent dies (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (the caller binds it next)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
