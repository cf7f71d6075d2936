"""The S3 data store over TLS against a real S3 server (moto's) serving https with a private CA: with
``DRL_S3_CA`` it works (publish, load, a tiny run through the CLI); without it, or with the wrong CA, the store
refuses at once with a ``UserError`` that names the endpoint and says what to set, never a traceback or a
300-second retry loop."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid

import numpy as np
import pytest

from drl.errors import UserError
from drl.process import free_port
from drl.store import PolicyStore, run_store
from drl.store.cache import PolicyCache
from tests.conftest import processes_mentioning, read_summary, run_cli
from tests.memory_servers import make_certs


@pytest.fixture(scope="module")
def tls_s3(tmp_path_factory):
    """moto's S3 server on https://127.0.0.1:PORT with a certificate signed by a private CA."""
    workdir = tmp_path_factory.mktemp("s3-tls")
    certs = make_certs(workdir / "certs")
    port = free_port()
    log = open(workdir / "s3.log", "ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
            "-c",
            str(certs["server_cert"]),
            "-k",
            str(certs["server_key"]),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    endpoint = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1, context=context)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(
                    f"moto https server did not start: {(workdir / 's3.log').read_text()[-2000:]}"
                ) from None
            time.sleep(0.1)
    yield {"endpoint": endpoint, "certs": certs}
    proc.kill()
    proc.wait()
    log.close()


def _env(tls_s3, ca=None) -> dict[str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": "tls-key",
        "AWS_SECRET_ACCESS_KEY": "tls-secret",
        "AWS_REGION": "us-east-1",
        "DRL_S3_ENDPOINT": tls_s3["endpoint"],
        "DRL_STORE_RETRY_S": "300",
    }
    if ca is not None:
        env["DRL_S3_CA"] = str(ca)
    return env


@pytest.fixture
def use_env(monkeypatch):
    def apply(env: dict[str, str]) -> None:
        monkeypatch.delenv("DRL_S3_CA", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)

    return apply


def _weights() -> dict[str, np.ndarray]:
    return {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, dtype=np.float32)}


def test_publish_and_load_over_https_with_the_private_ca(tls_s3, use_env, tmp_path):
    use_env(_env(tls_s3, ca=tls_s3["certs"]["ca"]))
    url = f"s3://drl-{uuid.uuid4().hex[:8]}/tls"
    store = run_store(url, "r")
    assert "https://127.0.0.1:" in store.describe()
    PolicyStore(store, "r").publish(0, _weights(), algorithm="sac", env_steps=0, updates=0)
    reader = PolicyStore(run_store(url, "r"), "r", cache=PolicyCache(tmp_path / "cache"))
    manifest, weights = reader.load(0)
    assert manifest.run == "r" and manifest.version == 0
    np.testing.assert_array_equal(weights["w"], _weights()["w"])


@pytest.mark.parametrize("ca", [None, "other_ca"])
def test_untrusted_certificate_is_a_clear_user_error_at_once(tls_s3, use_env, ca):
    use_env(_env(tls_s3, ca=tls_s3["certs"][ca] if ca else None))
    started = time.monotonic()
    with pytest.raises(UserError) as info:
        run_store(f"s3://drl-{uuid.uuid4().hex[:8]}/tls", "r")
    assert time.monotonic() - started < 10, "a certificate failure must not be retried like an outage"
    message = str(info.value)
    assert tls_s3["endpoint"] in message and "not trusted" in message and "DRL_S3_CA" in message, message


def test_ca_file_that_does_not_exist_is_named(tls_s3, use_env, tmp_path):
    use_env(_env(tls_s3, ca=tmp_path / "missing-ca.pem"))
    with pytest.raises(UserError, match="DRL_S3_CA=.*missing-ca.pem is not a readable file"):
        run_store("s3://drl-any/tls", "r")


def test_cli_without_the_ca_is_one_line_exit_2(tls_s3, tmp_path):
    run = "tls-no-ca"
    proc = run_cli(
        ["--store", "s3://drl-tls-cli/x", "--steps", "1000", "--output", str(tmp_path), "--run-name", run],
        timeout=120,
        env={**_env(tls_s3), "DRL_S3_CA": ""},
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("drl-orchestrate: error: "), proc.stderr
    assert tls_s3["endpoint"] in lines[0] and "DRL_S3_CA" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_tiny_run_through_the_cli_with_an_https_store(tls_s3, use_env, tmp_path):
    run = "tls-run"
    bucket = f"drl-{uuid.uuid4().hex[:8]}"
    env = {**_env(tls_s3, ca=tls_s3["certs"]["ca"]), "DRL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_cli(
        [
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
            "--store",
            f"s3://{bucket}/drl",
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["exit_reason"] == "steps_done" and summary["transitions_consumed"] == 300, summary
    use_env(env)
    objects = run_store(f"s3://{bucket}/drl", run).list("")
    assert "config.json" in objects, objects
    assert any(o.startswith("policies/") and o.endswith("/manifest.json") for o in objects), objects
    assert any(o.startswith("checkpoints/") and o.endswith("/manifest.json") for o in objects), objects
    assert json.loads((tmp_path / run / "config.json").read_text())["store"] == f"s3://{bucket}/drl"
    assert not processes_mentioning(f"DRL_RUN={run}")
