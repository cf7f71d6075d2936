"""A local run's private Valkey requires a password that no other local user can learn: generated per server,
kept in a file only its owner can read, given to the server on stdin and to services through the environment,
never in any process's arguments nor in the run's logs and files. A client without it is refused (NOAUTH), and
``status`` and ``stop`` of the run still reach the server."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

from tests.conftest import run_cli
from tests.faults.test_supervision import Run


def _reply_without_password(port: int) -> bytes:
    """What the server answers a client that did not authenticate and appends to the run's stream."""
    command = [b"XADD", b"drl:{pw}:exp", b"*", b"h", b"x", b"d", b"y"]
    wire = b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in command)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(wire)
        return conn.recv(200)


def _process_texts() -> dict[str, bytes]:
    """pid -> arguments and environment of every process this user can read."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[entry.name] = (entry / "cmdline").read_bytes() + b"\0" + (entry / "environ").read_bytes()
            except OSError:
                pass
    return found


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) with a socket listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_private_server_refuses_clients_without_its_password_which_shows_nowhere(tmp_path):
    run = Run(tmp_path, "pw", ["--mode", "async", "--workers", "2", "--steps", "1000000"])
    run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
    secret_file = run.dir / "memory.password"
    assert secret_file.exists(), "the private server has no password"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    password = secret_file.read_text().strip()
    assert len(password) >= 32

    port = int(run.state()["memory_url"].rsplit(":", 1)[1].split("/")[0])
    assert _reply_without_password(port).startswith(b"-NOAUTH"), "a client without the password could append"
    assert _listening_addresses(port) == {"0100007F"}, "the private server listens beyond loopback"
    leaks = [pid for pid, text in _process_texts().items() if password.encode() in text]
    assert not leaks, f"the password is in the arguments or environment of {leaks}"

    shown = run_cli(["status", "pw", "--output", str(tmp_path)], timeout=60)
    assert shown.returncode == 0 and shown.stdout.count(" running ") >= 3, shown.stdout + shown.stderr
    stopped = run_cli(["stop", "pw", "--output", str(tmp_path)], timeout=300)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    out, err = run.proc.communicate(timeout=120)
    for text, where in (
        (out, "stdout"),
        (err, "stderr"),
        (shown.stdout + shown.stderr, "status"),
        (stopped.stdout + stopped.stderr, "stop"),
    ):
        assert password not in text, f"the password is in the orchestrator's {where}"
    for path in run.dir.rglob("*"):
        if path.is_file() and path != secret_file:
            assert password.encode() not in path.read_bytes(), f"the password is in {path}"
