"""URLs that answer something else: a memory URL pointing at an HTTP server, an S3 endpoint pointing at a Redis
port or at a web server that is not S3, https against a plain-http port. Each is one line
``drl-orchestrate: error: ...``, exit code 2, soon, with no traceback and no process left behind."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from tests.conftest import processes_mentioning, run_cli


@pytest.fixture(scope="module")
def web_server():
    """A plain HTTP server (Python's own file server) on a free loopback port: HTTP, but neither Redis nor S3."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _check_one_line_exit_2(proc, started: float, expected: list[str], run: str, tmp_path) -> None:
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("drl-orchestrate: error: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert elapsed < 30, f"took {elapsed:.1f}s"
    assert not processes_mentioning(f"DRL_RUN={run}")
    assert not processes_mentioning(str(tmp_path))


@pytest.mark.parametrize("target", ["s3", "web"])
def test_memory_url_that_answers_http(tmp_path, s3_server, web_server, target):
    hostport = s3_server.endpoint.split("://")[1] if target == "s3" else web_server
    run = f"wrong-memory-{target}"
    started = time.monotonic()
    proc = run_cli(
        ["--memory", f"redis://{hostport}/0", "--steps", "1000", "--output", str(tmp_path), "--run-name", run],
        timeout=120,
    )
    _check_one_line_exit_2(proc, started, [f"redis://{hostport}/0", "does not speak the Redis protocol"], run, tmp_path)
    assert not (tmp_path / run).exists(), "nothing may be written before the checks pass"


@pytest.mark.parametrize("target", ["redis", "web", "https_to_http"])
def test_s3_endpoint_that_is_something_else(tmp_path, s3_server, redis_server, web_server, target):
    endpoint, expected = {
        "redis": (f"http://127.0.0.1:{redis_server.port}", "gives no HTTP answer"),
        "web": (f"http://{web_server}", "does not answer like an S3 server"),
        "https_to_http": (s3_server.endpoint.replace("http://", "https://"), "TLS handshake failed"),
    }[target]
    run = f"wrong-s3-{target}"
    env = {**s3_server.env, "DRL_S3_ENDPOINT": endpoint}
    started = time.monotonic()
    proc = run_cli(
        ["--store", "s3://drl-wrong/x", "--steps", "1000", "--output", str(tmp_path), "--run-name", run],
        timeout=120,
        env=env,
    )
    _check_one_line_exit_2(proc, started, [endpoint, expected], run, tmp_path)
