"""A fork server for the local backend's Python services: one process imports torch and the service modules'
heavy dependencies once, and every trainer, rollout worker and evaluator of the run is forked from it.

Why: each service started as ``python -m services.X`` spends seconds of CPU importing torch before it does any
work, so a run of N workers on a small machine spends most of its start (and each restart) importing the same
modules N + 2 times. A forked child shares the imported modules copy-on-write and starts at once.

The rules it keeps, so that a forked service is indistinguishable from ``subprocess.Popen`` of its command:

- Only commands of the form ``<this python> -m <module> [args]`` are forked; anything else is started with
  ``subprocess.Popen`` as before, and so is everything when the server cannot start (``DRL_FORKSERVER=0`` turns
  it off).
- The server preloads modules but runs nothing: no torch operation, no thread, no socket (a fork of a process
  with threads could inherit a lock held by a thread that does not exist in the child). ``preload`` checks
  that it is still single-threaded.
- The service is the orchestrator's own child: the orchestrator marks itself a child subreaper
  (``PR_SET_CHILD_SUBREAPER``), the server forks an intermediate that forks the service and exits, so the
  service is reparented to the orchestrator, which then waits for it, reads its exit code and signals it exactly
  as it would a ``Popen``. The service announces its pid only once it is the orchestrator's child, and only then
  arms its parent-death signal (against the orchestrator) and starts.
- The child gets what ``Popen`` would have given it: a new session, its environment (replacing the server's),
  stdin from /dev/null, stdout and stderr to its log, unbuffered, the working directory, the niceness asked
  for, ``sys.argv`` and ``__main__`` as ``python -m`` sets them, torch's intra-op threads from its
  ``OMP_NUM_THREADS``, and a normal interpreter exit (threads joined, atexit handlers run).
- The protocol is one JSON line per request on the server's stdin and one pid per line on its stdout, between
  two processes of the same user; nothing is unpickled.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import IO

from drl.process import nicer, spawn

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PRELOAD = ("torch", "numpy", "gymnasium", "drl.algorithms", "drl.training.learning", "drl.envs")
READY = "ready"
INHERITED = ("DRL_RUN", "DRL_RUN_DIR")
IMPORT_TIME = ("PYTHON", "TORCH", "CUDA", "NVIDIA", "MKL_", "OPENBLAS_", "GOTO", "KMP_", "OMP_", "LD_", "GYM", "ALE_")
"""Prefixes of the variables that modules read while they are imported (search paths, thread pools, devices): a
service whose environment differs from the server's in one of them is started as a new process. Plugins are not
among them: a service loads its own after it starts (``drl.algorithms.load_plugins_or_exit``)."""
ADJUSTED = ("OMP_NUM_THREADS",)
"""Import-time variables the forked child applies itself (torch's intra-op threads)."""
START_TIMEOUT_S = 60.0
ANNOUNCE_TIMEOUT_S = 10.0


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value) == 0
    except OSError:
        return False


def become_subreaper() -> bool:
    """Makes this process the reaper of its orphaned descendants (Linux 3.4+)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


class ForkedProcess:
    """The part of ``subprocess.Popen``'s interface the local backend uses, for a child it did not start with
    ``Popen`` (it was reparented to this process)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """The orchestrator's side: starts the server (lazily, once) and asks it for children. Falls back to
    ``subprocess.Popen`` for any command it cannot fork and after any failure of the server."""

    def __init__(self, python: str = sys.executable, enabled: bool | None = None):
        self.python = python
        self.enabled = (os.environ.get("DRL_FORKSERVER", "1") != "0") if enabled is None else enabled
        self.server: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.failure: str | None = None
        self.ready = False
        self.server_env: dict[str, str] = {}

    def warm(self, env: dict[str, str]) -> None:
        """Starts the server without waiting for it (its imports overlap whatever the caller does next).
        ``env`` is the environment it imports torch in (``OMP_NUM_THREADS`` is read then). Of its ``DRL_``
        variables only the run's name and folder are kept: Linux shows a process's environment
        as it was at ``exec`` (``/proc/PID/environ``), so every forked service is still found by its run, as a
        ``Popen``-started one is, and no credential is copied into the server."""
        if self.server is not None or not self.enabled or not become_subreaper():
            return
        server_env = {k: v for k, v in env.items() if not k.startswith("DRL_") or k in INHERITED}
        self.server_env = server_env
        self.server = spawn(
            [self.python, "-m", __name__, env.get("DRL_RUN", "")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=server_env,
            start_new_session=True,
        )

    def _ensure(self, env: dict[str, str]) -> bool:
        if self.server is None:
            self.warm(env)
        if self.server is None or self.server.poll() is not None:
            return False
        if not self.ready:
            if self._read_line(START_TIMEOUT_S) != READY:
                self._give_up("it did not start")
                return False
            self.ready = True
        return True

    def _same_imports(self, env: dict[str, str]) -> bool:
        """Whether the modules the server imported would have been imported alike in ``env``."""
        server = self.server_env

        def relevant(k: str) -> bool:
            return k.startswith(IMPORT_TIME) and k not in ADJUSTED

        return {k: v for k, v in env.items() if relevant(k)} == {k: v for k, v in server.items() if relevant(k)}

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        """The server's stdin and stdout; OSError once it is gone."""
        server = self.server
        if server is None or server.stdin is None or server.stdout is None:
            raise OSError("the fork server is not running")
        return server.stdin, server.stdout

    def _read_line(self, timeout: float) -> str | None:
        stdout = self._pipes()[1]
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            return None
        line = stdout.readline()
        return line.decode().strip() if line else None

    def _give_up(self, why: str) -> None:
        self.failure = why
        print(f"drl: the fork server failed ({why}); starting services as new processes", file=sys.stderr)
        self.close()

    def start(
        self,
        command: list[str],
        env: dict[str, str],
        log,
        nice: int = 0,
        die_with_parent: bool = True,
        name: str = "",
        cwd: str | None = None,
        nice_session: bool = False,
    ):
        """A running child for ``command`` (a ``ForkedProcess``, or a ``Popen`` where it could not be forked);
        ``log`` is an open binary file for its stdout and stderr."""
        with self.lock:
            forkable = len(command) >= 3 and command[0] == self.python and command[1] == "-m"
            if forkable and self.failure is None and self._ensure(env) and self._same_imports(env):
                request = {
                    "module": command[2],
                    "argv": command[3:],
                    "env": env,
                    "cwd": cwd or os.getcwd(),
                    "log": log.name,
                    "nice": nice,
                    "nice_session": nice_session,
                    "parent": os.getpid(),
                    "pdeathsig": die_with_parent,
                    "name": name,
                }
                try:
                    stdin = self._pipes()[0]
                    stdin.write(json.dumps(request).encode() + b"\n")
                    stdin.flush()
                    answer = self._read_line(ANNOUNCE_TIMEOUT_S)
                except OSError:
                    answer = None
                if answer and answer.isdigit():
                    return ForkedProcess(int(answer))
                self._give_up("no pid for a child")

            return spawn(
                command,
                die_with_parent=die_with_parent,
                nice=nice,
                nice_session=nice_session,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=cwd,
            )

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            if self.server.stdin is not None:
                self.server.stdin.close()
            try:
                self.server.wait(5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()


# -- the server process ---------------------------------------------------------------------------------------
def preload() -> None:
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("the fork server started threads while preloading; it cannot fork safely")


def serve() -> dict | None:
    """Answers requests until stdin closes (returns None); returns the request in the forked service."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = sys.stdin.buffer
    answers = sys.stdout.buffer
    answers.write(READY.encode() + b"\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        middle = os.fork()
        if middle == 0:
            if os.fork() == 0:
                return request
            os._exit(0)
        os.waitpid(middle, 0)
    return None


def _prctl_name(name: str) -> None:
    """The thread name ``ps -o comm`` and ``top`` show (the command line stays the server's)."""
    if name:
        try:
            ctypes.CDLL("libc.so.6").prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
        except OSError:
            pass


def _unbuffered(fd: int, errors: str):
    """A text stream on ``fd`` as ``PYTHONUNBUFFERED`` makes it: every write goes straight to the file."""
    import io

    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors=errors, line_buffering=True, write_through=True
    )


def become(request: dict) -> None:
    """In the forked service: wait until it is the orchestrator's child, announce its pid, then turn into
    ``python -m <module> <argv>`` as the request describes."""
    parent = request["parent"]
    deadline = time.monotonic() + ANNOUNCE_TIMEOUT_S
    while os.getppid() != parent:
        if time.monotonic() > deadline:
            os._exit(1)
        time.sleep(0.001)
    if request["pdeathsig"]:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)
    os.write(1, f"{os.getpid()}\n".encode())
    os.setsid()
    _prctl_name(request.get("name", ""))
    if request["nice"]:
        nicer(request["nice"], request.get("nice_session", False))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # the child's own streams, also as the interpreter's originals (what a freshly started service would have)
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _unbuffered(1, "strict")  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _unbuffered(2, "backslashreplace")  # type: ignore[misc]
    import numpy
    import torch

    numpy.random.seed()
    threads = request["env"].get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    import runpy

    sys.argv = [request["module"], *request["argv"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    preload()
    forked = serve()
    if forked is not None:
        become(forked)
