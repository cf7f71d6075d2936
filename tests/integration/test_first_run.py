"""What a newcomer's first commands say: a run too short for its learner to start is warned about before it starts
and after it ends, and every finished run points to its curves (``plot`` and TensorBoard)."""

from __future__ import annotations

from tests.conftest import read_summary, run_cli


def test_a_run_too_short_to_learn_is_warned_about_and_every_run_points_to_its_curves(tmp_path):
    args = ["--preset", "sac", "--steps", "300", "--workers", "1", "--eval-episodes", "1", "--output", str(tmp_path)]
    proc = run_cli([*args, "--run-name", "short"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_summary(tmp_path / "short")["updates"] == 0
    before, after = proc.stderr.split("drl: run short (", 1)
    assert "warning: --learning-starts 1,000 is not below --steps 300" in before, proc.stderr
    assert "warning: the learner made no gradient update" in after, proc.stderr
    assert f"drl-orchestrate plot short --output {tmp_path}" in after, proc.stderr
    assert f"tensorboard --logdir {tmp_path / 'short' / 'tensorboard'}" in after, proc.stderr
    assert (tmp_path / "short" / "tensorboard").is_dir()

    refused = run_cli([*args, "--run-name", "short", "--workers", "0"], timeout=120)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, "a refused run's error is its one line"
