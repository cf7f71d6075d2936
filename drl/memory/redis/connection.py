"""Connections to the memory server: URL forms, credentials and TLS from the environment, clear errors.

Accepted URLs: ``redis://HOST:PORT/DB``, ``rediss://HOST:PORT/DB`` (TLS) and ``unix:///PATH?db=N``. Credentials
and certificates never travel in process arguments; they come from the environment:

- ``DRL_MEMORY_USERNAME``: ACL user (default: the default user)
- ``DRL_MEMORY_PASSWORD`` or ``DRL_MEMORY_PASSWORD_FILE``: password (AUTH)
- ``DRL_MEMORY_TLS_CA``, ``DRL_MEMORY_TLS_CERT``, ``DRL_MEMORY_TLS_KEY``: CA bundle and client certificate/key
  for ``rediss://`` (server certificates are always verified)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import redis

from drl.errors import Superseded, UserError
from drl.memory.base import MemoryBackendError, MemoryUnavailable

log = logging.getLogger("drl.memory")

SCHEMES = ("redis", "rediss", "unix")


def redact(url: str) -> str:
    """The URL (or each of a comma-separated list) with any password replaced, for messages and logs."""
    if "," in url:
        return ",".join(redact(part) for part in url.split(","))
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{hostport}").geturl()


def url_has_password(url: str) -> bool:
    try:
        return any(urlsplit(part).password is not None for part in url.split(","))
    except ValueError:
        return False


def credentials_from_env(env: Mapping[str, str] | None = None) -> dict:
    """Keyword arguments for redis.Redis built from the DRL_MEMORY_* variables."""
    env = os.environ if env is None else env
    kwargs: dict = {}
    if env.get("DRL_MEMORY_USERNAME"):
        kwargs["username"] = env["DRL_MEMORY_USERNAME"]
    if env.get("DRL_MEMORY_PASSWORD"):
        kwargs["password"] = env["DRL_MEMORY_PASSWORD"]
    elif env.get("DRL_MEMORY_PASSWORD_FILE"):
        path = Path(env["DRL_MEMORY_PASSWORD_FILE"])
        try:
            kwargs["password"] = path.read_text().strip()
        except OSError as exc:
            raise UserError(f"DRL_MEMORY_PASSWORD_FILE {path} cannot be read: {exc.strerror}") from None
    if bool(env.get("DRL_MEMORY_TLS_CERT")) != bool(env.get("DRL_MEMORY_TLS_KEY")):
        raise UserError("DRL_MEMORY_TLS_CERT and DRL_MEMORY_TLS_KEY go together: set both for a client certificate")
    for var, key in (
        ("DRL_MEMORY_TLS_CA", "ssl_ca_certs"),
        ("DRL_MEMORY_TLS_CERT", "ssl_certfile"),
        ("DRL_MEMORY_TLS_KEY", "ssl_keyfile"),
    ):
        if env.get(var):
            if not Path(env[var]).is_file():
                raise UserError(f"{var}={env[var]} is not a readable file")
            kwargs[key] = env[var]
    return kwargs


def connect(url: str, timeout: float = 5.0, wait_s: float = 0.0, env: Mapping[str, str] | None = None) -> redis.Redis:
    """Opens and checks a connection; raises UserError naming the URL (without credentials) when it fails.

    With ``wait_s``, an unreachable server is tried again every second for that long: pods of a run start
    together, and a service should not fail because its Redis pod is still starting.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _connect(url, timeout, env)
        except _Unreachable as exc:
            if time.monotonic() >= deadline:
                raise UserError(str(exc)) from None
            log.info("%s; trying again", exc)
            time.sleep(1.0)


class _Unreachable(Exception):
    pass


def _connect(url: str, timeout: float, env: Mapping[str, str] | None = None) -> redis.Redis:
    shown = redact(url)
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in SCHEMES:
        raise UserError(
            f"memory URL {shown} is not valid; accepted: redis://HOST:PORT/DB, rediss://HOST:PORT/DB, unix:///PATH?db=N"
        )
    path = urlsplit(url).path.strip("/") if scheme != "unix" else ""
    if path and not path.isdigit():
        raise UserError(f"memory URL {shown}: the database index must be a number, got {path!r}")
    kwargs = credentials_from_env(env)
    if scheme != "rediss":
        kwargs = {k: v for k, v in kwargs.items() if not k.startswith("ssl_")}
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=timeout, socket_timeout=max(timeout, 30.0), health_check_interval=30, **kwargs
        )
    except (ValueError, TypeError) as exc:
        raise UserError(f"memory URL {shown} is not valid: {exc}") from None
    try:
        if client.ping() is not True:
            raise UserError(f"memory URL {shown} did not answer PING like a Redis server")
        client.xlen("drl:probe")
    except redis.AuthenticationError as exc:
        raise UserError(f"memory server {shown} refused the credentials: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        hint = ""
        if scheme == "rediss" and ("EOF" in str(exc) or "certificate" in str(exc).lower()):
            hint = (
                " (TLS handshake failed: check DRL_MEMORY_TLS_CA, and whether the server wants a client "
                "certificate in DRL_MEMORY_TLS_CERT/_KEY)"
            )
        raise _Unreachable(f"memory server {shown} is unreachable or not a Redis server: {exc}{hint}") from None
    except redis.ResponseError as exc:
        raise UserError(f"memory server {shown} does not behave like a Redis server with streams: {exc}") from None
    except redis.RedisError as exc:  # e.g. InvalidResponse: something else (HTTP, S3, ...) answers on that port
        client.close()
        raise UserError(
            f"memory server {shown} does not speak the Redis protocol (is this the right port?): {exc}"
        ) from None
    return client


RETRY_S = 120.0


FENCED = "FENCED "
"""The reply of a script that refused a write carrying an older fencing epoch than its identity's lease."""

HANDLED_HERE = ("NOGROUP", "BUSYGROUP")
"""Replies this package handles itself (the server lost the consumer group; the group exists already)."""


def retrying(fn: Callable, what: str, within: float = RETRY_S, base: float = 0.05, cap: float = 2.0):
    """Calls fn, retrying connection errors and timeouts with exponential backoff for up to ``within`` seconds;
    past that, ``MemoryUnavailable``. A refusal by the server (a key of the wrong type, ...) or a value it cannot
    store is ``MemoryBackendError``; a write refused for its fencing epoch is ``drl.errors.Superseded``: callers outside this package see only the protocol's errors."""
    deadline = time.monotonic() + within
    delay = base
    attempt = 0
    while True:
        try:
            return fn()
        except redis.ResponseError as exc:
            if str(exc).startswith(HANDLED_HERE):
                raise
            if str(exc).startswith(FENCED):
                raise Superseded(f"{what}: the memory server refused it: {str(exc)[len(FENCED) :]}") from None
            raise MemoryBackendError(f"{what}: the memory server refused it: {exc}") from exc
        except redis.DataError as exc:
            raise MemoryBackendError(f"{what}: the memory server cannot store it: {exc}") from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            attempt += 1
            if time.monotonic() + delay > deadline:
                raise MemoryUnavailable(f"{what}: memory server unreachable ({exc})") from exc
            log.warning("%s failed (%s); retry %d in %.2fs", what, exc, attempt, delay)
            time.sleep(delay)
            delay = min(cap, delay * 2)


def plain(fields: dict) -> dict:
    """Field values as the server should store them: a float subclass (numpy's) as a float, so it is stored as
    its digits and not as its ``repr``; other values as they are (the client refuses what it cannot store)."""
    return {k: float(v) if isinstance(v, float) and type(v) is not float else v for k, v in fields.items()}
