"""An environment of your own (examples/custom_env/point_env.py), named in gymnasium's ``module:EnvId`` form with
the module only on PYTHONPATH: it trains to a score through the real command line and processes, is scored and
filmed by ``evaluate``, exported as ONNX by ``export`` (acting as the policy does), continues with ``--resume``, and ``render`` carries it into the manifests."""

from __future__ import annotations

import json
import os

import yaml

from tests.conftest import ROOT, read_summary, run_cli

ENV_ID = "point_env:MyPoint-v0"
PATH = {"PYTHONPATH": os.pathsep.join([str(ROOT / "examples" / "custom_env"), str(ROOT)])}
TARGET = -8.0
"""A random policy scores about -25 over the env's 50 steps (the point wanders around half a unit from the
origin); one that pushes the point home scores above -5."""
TRAIN = [
    "--preset",
    "sac",
    "--env",
    ENV_ID,
    "--mode",
    "async",
    "--workers",
    "1",
    "--sac.hidden",
    "32,32",
    "--sac.lr",
    "1e-3",
]
TRAIN += ["--random-steps", "500", "--learning-starts", "500", "--eval-episodes", "5"]


def test_an_env_of_your_own_trains_evaluates_resumes_and_renders(tmp_path):
    run = "point"
    first = run_cli([*TRAIN, "--steps", "4000", "--output", str(tmp_path), "--run-name", run], timeout=600, env=PATH)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["env"] == ENV_ID and summary["exit_reason"] == "steps_done", summary
    assert summary["best_eval_return"] >= TARGET, f"did not learn: best evaluation {summary['best_eval_return']}"
    assert json.loads((tmp_path / run / "config.json").read_text())["env"] == ENV_ID

    videos = tmp_path / "videos"
    scored = run_cli(
        ["evaluate", "--run", run, "--output", str(tmp_path), "--episodes", "2", "--video", str(videos)],
        timeout=300,
        env=PATH,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert ENV_ID in scored.stdout and len(list(videos.glob("*.gif"))) == 2, scored.stdout

    exported_onnx = tmp_path / "point.onnx"
    written = run_cli(
        ["export", run, "--output", str(tmp_path), "--format", "onnx", "--to", str(exported_onnx)],
        timeout=300,
        env=PATH,
    )
    assert written.returncode == 0, written.stderr[-3000:]
    assert json.loads(written.stdout)["input"] == {"name": "obs", "shape": ["batch", 2], "dtype": "float32"}
    assert_exported_acts_as_the_policy(tmp_path / run, exported_onnx)
    wrong = run_cli(
        ["export", run, "--output", str(tmp_path), "--format", "onnx", "--to", "x.onnx", "--version", "9999"]
    )
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "has no version 9999" in wrong.stderr, (
        wrong.stderr
    )

    resumed = run_cli([*TRAIN, "--steps", "5000", "--output", str(tmp_path), "--resume", run], timeout=600, env=PATH)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["resumed_from_env_steps"] == 4000 and summary["env_steps"] == 5000, summary

    rendered = run_cli(["render", *TRAIN, "--steps", "4000"], timeout=120, env=PATH)
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    maps = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "ConfigMap"]
    assert any(json.loads(m["data"].get("config.json", "{}")).get("env") == ENV_ID for m in maps)


def assert_exported_acts_as_the_policy(run_dir, onnx_file) -> None:
    """The ONNX file steers the env as the published policy does: the same actions on the observations of an
    episode it drives itself (onnxruntime in this process, the env and the policy through drl's Python API)."""
    import sys

    import gymnasium as gym
    import numpy as np
    import onnxruntime

    from orchestrator.api import load_policy

    sys.path.insert(0, PATH["PYTHONPATH"].split(os.pathsep)[0])
    try:
        policy = load_policy(run_dir)
        env = gym.make(ENV_ID)
    finally:
        sys.path.pop(0)
    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    obs, _ = env.reset(seed=3)
    done = False
    while not done:
        action = session.run(["action"], {"obs": obs[None].astype(np.float32)})[0][0]
        np.testing.assert_allclose(action, policy.act(obs), rtol=0, atol=1e-5)
        obs, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated


def test_a_module_that_cannot_be_imported_or_registers_no_such_id_is_one_clear_line(tmp_path):
    missing = run_cli(["--env", "no_such_module:MyPoint-v0", "--output", str(tmp_path)], timeout=120)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "module 'no_such_module' cannot be imported" in missing.stderr and "PYTHONPATH" in missing.stderr
    wrong = run_cli(["--env", "point_env:Nope-v0", "--output", str(tmp_path)], timeout=120, env=PATH)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "module 'point_env' was imported but registers no such id" in wrong.stderr
    bare = run_cli(["--env", "MyPoint-v0", "--output", str(tmp_path)], timeout=120, env=PATH)
    assert bare.returncode == 2 and "module:EnvId" in bare.stderr, bare.stderr
