"""The memory backend: experience transport and run control between rollout workers, the trainer, the evaluator
and the orchestrator, behind the protocols of ``drl.memory.base``.

``open_memory(url, run)`` opens a backend for one run from its URL: ``redis://HOST:PORT/DB``,
``rediss://HOST:PORT/DB`` and ``unix:///PATH?db=N`` reach a Redis/Valkey server (``drl.memory.redis``, the only
code that talks Redis), several of them separated by commas spread the experience shards over servers. Other
schemes come from ``register_scheme`` (the tests' in-process implementation, ``tests/memory_inproc.py``, registers
``memory://NAME`` to run the service loops as threads). ``private_server`` starts the Valkey/Redis server a local
run uses when it is given no URL. The codec (``drl.memory.codec``) and the backlog's limits (``drl.memory.backlog``)
are the same for every backend.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable, Mapping

from drl.errors import UserError
from drl.memory.base import (
    ACTIVE,
    RETIRED,
    Announcements,
    AppendReply,
    Entry,
    ExperienceReader,
    ExperienceWriter,
    MemoryBackend,
    MemoryBackendError,
    MemoryServer,
    MemoryUnavailable,
    ReaderRecovery,
    RunAccounts,
    RunClaims,
    RunControl,
    RunMembers,
    RunStatus,
    RunStop,
    ShardMap,
    seq_field,
)

RETRY_S = 120.0
SCHEMES: dict[str, Callable[[str, str, int], MemoryBackend]] = {}
"""Openers of further URL schemes, by prefix: ``opener(rest of the URL, run, shards)``."""

__all__ = [
    "ACTIVE",
    "Announcements",
    "AppendReply",
    "Entry",
    "ExperienceReader",
    "ExperienceWriter",
    "MemoryBackend",
    "MemoryBackendError",
    "MemoryServer",
    "MemoryUnavailable",
    "RETIRED",
    "ReaderRecovery",
    "RunAccounts",
    "RunClaims",
    "RunControl",
    "RunMembers",
    "RunStatus",
    "RunStop",
    "ShardMap",
    "check_url",
    "find_server_binary",
    "new_password",
    "open_memory",
    "private_env",
    "private_server",
    "redact",
    "register_scheme",
    "seq_field",
    "url_has_password",
    "write_password_file",
]


def open_memory(
    url: str,
    run: str,
    *,
    wait_s: float = 0.0,
    retry_s: float = RETRY_S,
    timeout: float = 5.0,
    env: Mapping[str, str] | None = None,
    shards: int = 1,
) -> MemoryBackend:
    """The memory backend of ``run`` at ``url``, checked to answer; an unreachable server is waited for ``wait_s``
    seconds (pods of a run start together), then one ``UserError`` naming the URL without its credentials.
    Every later call retries an unreachable server for ``retry_s`` seconds before ``MemoryUnavailable``.
    Credentials come from the ``DRL_MEMORY_*`` variables of ``env`` (default: this process's environment), never
    from arguments: a local run's private server has its own password file (``private_env``)."""
    for prefix, opener in SCHEMES.items():
        if url.startswith(prefix):
            return opener(url[len(prefix) :], run, shards)
    from drl.memory.redis import RedisMemory

    return RedisMemory.open(url, run, wait_s=wait_s, retry_s=retry_s, timeout=timeout, env=env, shards=shards)


def register_scheme(prefix: str, opener: Callable[[str, str, int], MemoryBackend]) -> None:
    """Makes ``open_memory`` open URLs that start with ``prefix`` with ``opener``: another implementation of the
    protocols, such as the tests' in-process one, without the shipped package importing it."""
    SCHEMES[prefix] = opener


def check_url(url: str, shards: int = 1) -> None:
    """Refuses a memory URL that carries a password (it would show in process arguments and run files), and one
    whose server (or one of whose servers) does not answer; both as one ``UserError``."""
    if url_has_password(url):
        raise UserError(
            "the memory URL must not carry a password (it would show in process arguments and run "
            "files); put it in DRL_MEMORY_PASSWORD or DRL_MEMORY_PASSWORD_FILE"
        )
    open_memory(url, "drl-preflight", retry_s=0.0, shards=shards).close()


def redact(url: str) -> str:
    """The URL with any password replaced, for messages and logs."""
    from drl.memory.redis.connection import redact as _redact

    return _redact(url)


def url_has_password(url: str) -> bool:
    from drl.memory.redis.connection import url_has_password as _has

    return _has(url)


def find_server_binary() -> str:
    """The server binary a private server would run; ``UserError`` when there is none."""
    from drl.memory.redis.server import find_server_binary as _find

    return _find()


def private_server(workdir: Path, port: int | None = None, password: str | None = None) -> MemoryServer:
    """A private Valkey/Redis server for one local run, started on a free loopback port (or ``port``) with its data
    and log in ``workdir``: ``.url``, ``.port``, ``.log_path``, ``.exit_code()`` (None while it runs), ``.stop()``,
    ``.pid``. With ``password`` (``new_password``) it refuses clients that do not give it."""
    from drl.memory.redis.server import RedisServer

    return RedisServer(workdir, port=port, password=password).start()


def new_password() -> str:
    """A password for a private server: 256 random bits as hex (no character a config line would need quoted)."""
    return secrets.token_hex(32)


def write_password_file(path: Path, password: str) -> None:
    """Writes ``password`` to ``path`` readable by its owner only (0600 from the moment the file exists)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")


def private_env(password_file: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the credentials of a private server: its password file
    as ``DRL_MEMORY_PASSWORD_FILE``, and no user name or password meant for another server."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k not in ("DRL_MEMORY_PASSWORD", "DRL_MEMORY_USERNAME")
    }
    env["DRL_MEMORY_PASSWORD_FILE"] = str(password_file)
    return env
