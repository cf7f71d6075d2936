"""Whole runs with ``--device``: a trainer asked for a GPU it lacks ends the run at once with the reason (and is
not restarted); on a machine with a CUDA device, a run trains on it and publishes the same weights as ever."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from drl.store import PolicyStore, run_store
from tests.conftest import read_summary, run_cli
from tests.harness import assert_balanced

SMALL = [
    "--preset",
    "sac",
    "--env",
    "Pendulum-v1",
    "--workers",
    "2",
    "--sac.hidden",
    "32,32",
    "--sac.batch-size",
    "64",
    "--learning-starts",
    "500",
    "--eval-episodes",
    "1",
]


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has a CUDA device: a missing one cannot be shown here"
)
def test_a_run_asking_for_a_gpu_it_lacks_fails_at_once_with_the_reason(tmp_path):
    proc = run_cli(
        [*SMALL, "--steps", "2000", "--device", "cuda", "--output", str(tmp_path), "--run-name", "nogpu"], timeout=120
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "trainer refused its input: --device cuda: no CUDA device is available to this process" in out
    assert "Traceback" not in out
    summary = read_summary(tmp_path / "nogpu")
    assert summary["exit_reason"].startswith("failed: trainer refused its input")
    assert_balanced(summary)
    state = json.loads((tmp_path / "nogpu" / "state.json").read_text())
    trainer = next(p for p in state["processes"] if p["name"] == "trainer")
    assert trainer["restarts"] == 0


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: torch.cuda.is_available() is False on this machine (run it on a GPU machine)",
)
def test_a_run_on_the_gpu_publishes_host_weights(tmp_path):
    proc = run_cli(
        [*SMALL, "--steps", "4000", "--device", "cuda", "--output", str(tmp_path), "--run-name", "gpu"], timeout=300
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = read_summary(tmp_path / "gpu")
    assert summary["exit_reason"] == "steps_done" and summary["updates"] > 0
    assert_balanced(summary)
    state = json.loads((tmp_path / "gpu" / "state.json").read_text())
    trainer = next(p for p in state["processes"] if p["name"] == "trainer")
    assert trainer["last_status"]["device"] == "cuda:0"
    _, weights = PolicyStore(run_store(str(tmp_path), "gpu"), "gpu").load(summary["policy_version"])
    assert weights and all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in weights.values())
