"""The Python API (orchestrator/api.py): the README's example runs as written, a run started in the background
is watched, scaled and stopped through its handle, and bad input is a UserError with the command line's message,
never SystemExit."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from drl.errors import UserError
from orchestrator import api
from tests.conftest import ROOT
from tests.harness import assert_balanced


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- python-example[^>]*-->\n```python\n(.*?)```\n<!-- /python-example -->", text, re.S)
    assert found, "README.md lost its Python example"
    return found.group(1)


def test_the_readme_example_runs_as_written(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _readme_example()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    reason, steps, best = lines[0].split()
    assert reason == "steps_done" and steps == "3000" and float(best) > -2000, lines
    action = np.array([float(x) for x in lines[1].strip("[] ").split()])
    assert action.shape == (1,) and -2.0 <= action[0] <= 2.0, lines
    assert lines[2] == "running" and lines[3] == "stopped", lines
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert len(runs) == 2 and all((run / "summary.json").exists() for run in runs)


def test_a_background_run_is_watched_and_ends_with_a_balanced_summary(tmp_path):
    cfg = api.config(preset="sac", env="Pendulum-v1", steps=4000, workers=1, mode="async", sac={"hidden": [16, 16]})
    assert cfg.sac.hidden == (16, 16) and cfg.workers == 1
    run = api.start(cfg, output=tmp_path)
    status = run.status()
    assert status.state in ("running", "finished") and status.run == run.name
    summary = run.wait(timeout=300)
    assert summary.exit_reason == "steps_done" and summary.env_steps == 4000
    assert summary.transitions_produced == summary.transitions_consumed + summary.transitions_unconsumed
    assert_balanced(summary.data)
    assert run.status().state == "finished"
    policy = api.load_policy(tmp_path, run=run.name, version=summary.policy_version)
    assert policy.version == summary.policy_version and policy.act_batch(np.zeros((5, 3))).shape == (5, 1)
    written = policy.export(tmp_path / "exported" / "policy.pt", format="torchscript")
    module = torch.jit.load(str(written))
    observations = np.random.default_rng(0).normal(size=(9, 3)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(
            module(torch.from_numpy(observations)).numpy(), policy.act_batch(observations), atol=1e-5
        )
    with pytest.raises(UserError, match="--format must be one of onnx, torchscript"):
        policy.export(tmp_path / "policy.tflite", format="tflite")


def test_bad_input_is_a_user_error_with_the_command_lines_message(tmp_path):
    with pytest.raises(UserError, match="--workers must be a positive integer"):
        api.config(workers=0)
    with pytest.raises(UserError, match="unknown configuration key"):
        api.config(no_such_option=1)
    with pytest.raises(UserError, match="unknown environment id"):
        api.config(env="NoSuchEnv-v0")
    with pytest.raises(UserError, match="is not a run's folder"):
        api.load_policy(tmp_path)
    with pytest.raises(UserError, match="no run 'nope'"):
        api.load_policy(tmp_path, run="nope")
    with pytest.raises(UserError, match="run 'nope' in"):
        api.Run("nope", tmp_path).scale(2)
