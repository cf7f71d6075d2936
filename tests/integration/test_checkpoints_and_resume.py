"""Checkpoints, resume and policy verification at the worker (an S3 outage: tests/faults)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np

from drl.store import PolicyStore, run_store
from drl.store.checkpoint import CheckpointStore
from services.common import ServiceContext
from services.rollout.worker import RolloutWorker
from tests.conftest import ROOT, read_summary, run_cli
from tests.harness import ServiceRun, fast_config

SMALL = [
    "--sac.hidden",
    "16,16",
    "--sac.batch-size",
    "32",
    "--eval-episodes",
    "1",
    "--learning-starts",
    "300",
    "--random-steps",
    "300",
    "--updates-per-transition",
    "0.25",
    "--workers",
    "2",
]


def test_trainer_sigkill_resumes_from_its_checkpoint_with_counters_continuing(tmp_path, redis_server, redis_client):
    steps = 20_000  # about 4,000 updates: the trainer is killed well before it has done them all
    run = ServiceRun(
        fast_config(steps=steps, checkpoint_every_s=0.5, publish_every_updates=20, updates_per_transition=0.2),
        redis_server.url,
        tmp_path,
    )
    checkpoints = CheckpointStore(run_store(str(tmp_path / "store"), run.run), run.run)
    run.start_all()
    run.wait_until(lambda: len(checkpoints.sequences()) >= 2 and run.consumed() > 3000, 120, "two checkpoints")
    run.procs["trainer"].kill()
    run.procs["trainer"].wait()
    saved, _, _ = checkpoints.latest()
    version_before = int(redis_client.get(run.keys.policy))
    run.start("trainer")
    run.wait_all(timeout=300)
    log = run.log_tail("trainer", 200_000)
    assert f"restored checkpoint {saved.sequence}" in log
    status = run.status("trainer")
    assert int(status["updates"]) >= saved.updates
    assert int(status["policy_version"]) > version_before
    versions = PolicyStore(run_store(str(tmp_path / "store"), run.run), run.run).versions()
    assert versions == sorted(set(versions)) and versions[-1] == int(status["policy_version"])
    acc = run.accounting()
    assert acc["produced"] == steps and acc["consumed"] + acc["stale"] == steps


def test_resume_continues_a_stopped_run(tmp_path):
    args = [*SMALL, "--steps", "20000", "--output", str(tmp_path), "--run-name", "again", "--checkpoint-every-s", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    evaluations = tmp_path / "again" / "evaluations.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not evaluations.exists() or len(evaluations.read_text().splitlines()) < 2):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    first = read_summary(tmp_path / "again")
    before = evaluations.read_text().splitlines()
    done = CheckpointStore(run_store(str(tmp_path), "again"), "again").latest()[0]
    assert 0 < done.env_steps < 20000

    resumed = run_cli(["--resume", "again", "--output", str(tmp_path)], timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = read_summary(tmp_path / "again")
    assert summary["exit_reason"] == "steps_done"
    assert summary["resumed_from_env_steps"] == done.env_steps
    assert summary["env_steps"] == summary["transitions_produced"] == 20000, "the steps before the resume count"
    assert summary["updates"] >= done.updates
    assert summary["policy_version"] > first["policy_version"]
    after = evaluations.read_text().splitlines()
    assert after[: len(before)] == before and len(after) > len(before), "evaluations were not appended"
    assert json.loads(after[-1])["version"] > json.loads(before[-1])["version"]

    again = run_cli(["--resume", "again", "--output", str(tmp_path)], timeout=60)
    assert again.returncode == 2 and "already did 20,000 of its 20,000 steps" in again.stderr


def test_worker_keeps_its_policy_when_a_version_is_corrupt(tmp_path, redis_server, redis_client):
    cfg = fast_config(workers=1)
    store_url = str(tmp_path / "store")
    ctx = ServiceContext("rollout", cfg, "corrupt", tmp_path, redis_server.url, store_url, 0)
    policies = PolicyStore(run_store(store_url, "corrupt"), "corrupt")
    worker = RolloutWorker(ctx)
    try:
        weights = dict(worker.actor.weights)
        policies.publish(0, weights, algorithm="sac", env_steps=0, updates=0)
        policies.publish(1, {k: v + 1 for k, v in weights.items()}, algorithm="sac", env_steps=1, updates=1)
        blob = policies.store.get("policies/v00000001/policy.safetensors")
        policies.store.put("policies/v00000001/policy.safetensors", blob[:-4] + b"\xff\xff\xff\xff")
        assert worker.load(0)
        obs = np.zeros((1, 3), dtype=np.float32)
        acting = worker.actor.act(obs, deterministic=True)
        assert worker.load(1) is False
        assert worker.version == 0
        np.testing.assert_array_equal(worker.actor.act(obs, deterministic=True), acting)
    finally:
        worker.close()
