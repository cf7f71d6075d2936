"""``--track mlflow`` against a real MLflow tracking server (``mlflow server`` on loopback, its SQLite store and
its artifact proxy in the test's folder): a run's resolved configuration comes back as parameters, every
evaluation and the trainer's throughput as metrics against env steps, the final policy as an ONNX artifact that
acts as the published policy; a resumed run continues the same MLflow run; a missing or silent server is one
clear line before anything starts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import onnxruntime
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.api import load_policy
from tests.conftest import read_summary, run_cli

EXPERIMENT = "drl-tracking-test"
RUN = "tracked"
TRAIN = [
    "--preset",
    "sac",
    "--env",
    "Pendulum-v1",
    "--workers",
    "1",
    "--mode",
    "async",
    "--sac.hidden",
    "16,16",
    "--learning-starts",
    "500",
    "--random-steps",
    "500",
    "--eval-episodes",
    "2",
    "--track",
    "mlflow",
    "--track-experiment",
    EXPERIMENT,
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``mlflow server`` on a free loopback port, its stores in a temporary folder; its URI."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    log = open(folder / "server.log", "wb")
    server = subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=folder,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    try:
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def evaluations(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines() if line.strip()]


def test_a_tracked_run_comes_back_through_mlflows_client(tmp_path, mlflow_server):
    env = {"MLFLOW_TRACKING_URI": mlflow_server}
    first = run_cli([*TRAIN, "--steps", "3000", "--output", str(tmp_path), "--run-name", RUN], timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / RUN
    summary = read_summary(run_dir)
    assert summary["exit_reason"] == "steps_done" and summary["evaluations"] >= 2, summary

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    [tracked] = client.search_runs([experiment.experiment_id])
    run_id = tracked.info.run_id
    assert tracked.info.run_name == RUN and tracked.info.status == "FINISHED"
    config = json.loads((run_dir / "config.json").read_text())
    params = tracked.data.params
    assert params["algorithm"] == "sac" and params["env"] == "Pendulum-v1" and params["steps"] == "3000"
    assert params["sac.hidden"] == "16,16" and params["track"] == "mlflow"
    assert params["sac.lr"] == str(config["sac"]["lr"]) and len(params) > 50

    results = evaluations(run_dir)
    history = client.get_metric_history(run_id, "eval/mean_return")
    assert sorted((m.step, m.value) for m in history) == sorted((r["env_steps"], r["mean_return"]) for r in results)
    throughput = client.get_metric_history(run_id, "trainer/transitions_per_s")
    assert throughput and {m.step for m in throughput} <= {r["env_steps"] for r in results}
    assert max(m.value for m in throughput) > 0
    assert client.get_metric_history(run_id, "eval/best_return")[-1].value == max(r["mean_return"] for r in results)

    folder = client.download_artifacts(run_id, "policy", str(tmp_path / "artifacts"))
    about = json.loads(open(os.path.join(folder, "policy.json")).read())
    assert about["version"] == results[-1]["version"] and about["input"]["shape"] == ["batch", 3]
    session = onnxruntime.InferenceSession(os.path.join(folder, "policy.onnx"), providers=["CPUExecutionProvider"])
    policy = load_policy(run_dir, version=about["version"])
    observations = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    actions = session.run(["action"], {"obs": observations})[0]
    np.testing.assert_allclose(actions, policy.act_batch(observations), rtol=0, atol=1e-5)

    resumed = run_cli([*TRAIN, "--steps", "4000", "--output", str(tmp_path), "--resume", RUN], timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [again] = client.search_runs([experiment.experiment_id])
    assert again.info.run_id == run_id and again.info.status == "FINISHED", "the resumed run started another"
    later = client.get_metric_history(run_id, "eval/mean_return")
    assert len(later) > len(history) and max(m.step for m in later) > max(m.step for m in history)


def test_tracking_without_a_server_is_refused_before_the_run_starts(tmp_path):
    unset = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    missing = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *TRAIN, "--steps", "1000", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=unset,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "--track mlflow needs MLFLOW_TRACKING_URI" in missing.stderr
    silent = run_cli(
        [*TRAIN, "--steps", "1000", "--output", str(tmp_path)],
        timeout=120,
        env={"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"},
    )
    assert silent.returncode == 2 and "does not answer" in silent.stderr, silent.stderr
    assert not list(tmp_path.iterdir()), "a refused run left a folder behind"
