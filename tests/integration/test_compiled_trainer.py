"""A run whose trainer compiles its image encoder (``--compile on``, the real torch.compile) through the real command
line: it trains to its steps with every transition counted once, and its checkpoint continues in an eager trainer
(``--resume`` with ``--compile off``), since compiling in place keeps every parameter's name."""

from __future__ import annotations

import pytest

from drl.algorithms.convnets import compiler
from tests.conftest import read_summary, run_cli

pytestmark = pytest.mark.skipif(
    compiler("cpu") is None, reason="torch.compile's CPU code generation needs a C++ compiler"
)


def test_a_compiled_trainer_trains_and_its_checkpoint_resumes_eagerly(tmp_path):
    args = ["--preset", "appo", "--env", "MinAtar/Breakout-v1", "--workers", "2", "--steps", "6144"]
    args += ["--eval-episodes", "1", "--compile", "on", "--output", str(tmp_path), "--run-name", "compiled"]
    done = run_cli(args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = read_summary(tmp_path / "compiled")
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == 6144
    assert summary["updates"] > 0
    log = tmp_path / "compiled" / "logs" / "trainer.log"
    assert "--compile on: 1 image encoder(s) compiled for cpu" in log.read_text()

    resumed = run_cli(["--resume", "compiled", "--output", str(tmp_path), "--steps", "10240", "--compile", "off"], 600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = read_summary(tmp_path / "compiled")
    assert after["exit_reason"] == "steps_done"
    assert after["resumed_from_env_steps"] > 0
    assert after["transitions_produced"] == 10240
    assert after["updates"] > summary["updates"]
    assert "--compile off: off" in log.read_text()
