"""The APPO time-to-score benchmark's verdicts (``bench.appo_time_to_score``): a side that crashed or did not run is
"no comparison", never "met"; a run that did not reach the target counts as infinite time. Runs without Ray: the
RLlib side's crash comes from a real subprocess that fails. And the entries ``bench.queue_path`` times."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from bench import appo_time_to_score as bench
from drl.errors import UserError


def run(side: str, seconds: float | None, crashed: bool = False, seed: int = 0) -> dict:
    return {
        "side": side,
        "env": "CartPole-v1",
        "seed": seed,
        "crashed": crashed,
        "reached": seconds is not None and not crashed,
        "time_to_score_s": seconds,
        "env_steps": None if seconds is None else 1000,
    }


def test_crashed_baseline_is_no_comparison_never_met():
    runs = [run("appo", 50.0), run("ppo", None, crashed=True), run("rllib", 200.0)]
    v = bench.env_verdicts(runs, workers=4)
    assert v["appo_over_ppo"] == {"ratio": None, "bound": None, "verdict": "no comparison"}
    assert v["appo_over_rllib"] == {"ratio": 0.25, "bound": None, "verdict": "met"}
    assert v["crashed"]["ppo"] == 1
    assert bench.overall({"CartPole-v1": v}) is None


def test_one_crashed_seed_takes_the_sides_median_away():
    runs = [run("appo", 50.0, seed=s) for s in range(3)]
    runs += [run("rllib", 100.0, seed=0), run("rllib", 90.0, seed=1), run("rllib", None, crashed=True, seed=2)]
    assert bench.side_median([r for r in runs if r["side"] == "rllib"]) is None
    assert bench.env_verdicts(runs, workers=4)["appo_over_rllib"]["verdict"] == "no comparison"


def test_side_that_did_not_run_is_no_comparison():
    v = bench.env_verdicts([run("ppo", 80.0), run("rllib", 100.0)], workers=4)
    assert v["appo_over_ppo"]["verdict"] == v["appo_over_rllib"]["verdict"] == "no comparison"
    assert bench.overall({"CartPole-v1": v}) is None


def test_not_reached_is_infinite_in_the_median():
    assert bench.run_seconds(run("appo", None)) == math.inf
    appo = [run("appo", 100.0, seed=0), run("appo", None, seed=1), run("appo", None, seed=2)]
    assert bench.side_median(appo) == math.inf
    mixed = [run("appo", 100.0, seed=0), run("appo", None, seed=1), run("appo", 120.0, seed=2)]
    assert bench.side_median(mixed) == 120.0


def test_not_reached_numerator_fails_and_not_reached_baseline_bounds_the_ratio():
    assert bench.compare(math.inf, 100.0, 0.5, strict=False) == {"ratio": None, "bound": None, "verdict": "not met"}
    assert bench.compare(math.inf, math.inf, 0.5, strict=False, budget_s=300.0)["verdict"] == "not met"
    assert bench.compare(30.0, math.inf, 0.5, strict=False, budget_s=300.0) == {
        "ratio": 0.1,
        "bound": "at most",
        "verdict": "met",
    }
    # 200 s against a baseline still unscored at 300 s: at most 0.667, which a longer budget might bring under 0.5
    assert bench.compare(200.0, math.inf, 0.5, strict=False, budget_s=300.0) == {
        "ratio": 0.667,
        "bound": "at most",
        "verdict": "no comparison",
    }
    runs = [run("appo", 30.0), run("ppo", 40.0), run("rllib", None)]
    assert bench.env_verdicts(runs, workers=4, budget_s=300.0)["appo_over_rllib"]["ratio"] == 0.1
    v = bench.env_verdicts([run("appo", None), run("ppo", 80.0), run("rllib", 90.0)], workers=4)
    assert v["appo_over_ppo"]["verdict"] == "not met"
    assert bench.overall({"CartPole-v1": v}) is False


def test_goal_edges_strict_and_inclusive():
    assert bench.compare(100.0, 100.0, 1.0, strict=True)["verdict"] == "not met"
    assert bench.compare(50.0, 100.0, 0.5, strict=False)["verdict"] == "met"
    assert bench.compare(51.0, 100.0, 0.5, strict=False)["verdict"] == "not met"


def test_appo_over_ppo_is_judged_from_four_workers():
    runs = [run("appo", 50.0), run("ppo", 100.0), run("rllib", 200.0)]
    assert bench.env_verdicts(runs, workers=2)["appo_over_ppo"]["verdict"] == "not judged"
    assert bench.env_verdicts(runs, workers=4)["appo_over_ppo"] == {"ratio": 0.5, "bound": None, "verdict": "met"}
    assert bench.overall({"CartPole-v1": bench.env_verdicts(runs, workers=4)}) is True


def test_rllib_process_that_fails_is_a_crash(tmp_path):
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'ImportError: no ray' >&2\nexit 1\n")
    failing.chmod(0o755)
    args = bench.parse(
        [
            "--envs",
            "CartPole-v1",
            "--seeds",
            "0",
            "--sides",
            "rllib",
            "--rllib-python",
            str(failing),
            "--time-budget",
            "5",
        ]
    )
    result = bench.run_rllib("CartPole-v1", 0, args)
    assert result["crashed"] and result["exit_code"] == 1 and result["time_to_score_s"] is None
    assert bench.run_seconds(result) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--envs", "Pong"],
        ["--sides", "appo,sac"],
        ["--sides", "ppo,ppo"],
        ["--seeds", "a"],
        ["--workers", "0"],
        ["--time-budget", "-1"],
        ["--sides", "rllib", "--rllib-python", "/nonexistent/python"],
    ],
)
def test_bad_input_is_a_user_error(argv):
    with pytest.raises(UserError):
        bench.parse(argv)


def test_bad_input_exits_with_one_line(tmp_path):
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "bench.appo_time_to_score", "--envs", "Pong"],
        capture_output=True,
        text=True,
        cwd=bench.REPO,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "unknown or no env Pong" in proc.stderr


def test_report_section_shows_the_crash_and_no_verdict(tmp_path):
    from tests.unit.test_bench_report import report, summary

    runs = [run("appo", 40.0), run("ppo", 90.0), run("rllib", None, crashed=True)]
    per_env = {"CartPole-v1": bench.env_verdicts(runs, workers=4)}
    line = {
        "per_env": per_env,
        "goal_met": bench.overall(per_env),
        "goal": "appo/ppo < 1, appo/rllib <= 0.5",
        "runs": [{**r, "load_at_start": 1.0} for r in runs],
        "envs": ["CartPole-v1"],
        "seeds": [0],
        "sides": list(bench.SIDES),
        "workers": 4,
        "targets": {"CartPole-v1": 475.0},
        "budgets_s": {"CartPole-v1": 300.0},
        "budgets_env_steps": {"CartPole-v1": 500000},
        "rllib": None,
        "command": "python -m bench.appo_time_to_score",
        "machine": {"logical_cpus": 2},
        "versions": {},
    }
    text = report(tmp_path, {"appo_time_to_score": line})
    assert "could not render" not in text
    headline, _, met, _, status = summary(text, "appo_time_to_score")
    assert headline == "CartPole-v1: appo/ppo 0.444 (met), appo/rllib - (no comparison)"
    assert (met, status) == ("-", "ok")
    assert "| CartPole-v1 | 40.0 | 90.0 | crashed | 0.444 (met) | - (no comparison) |" in text
    assert "| CartPole-v1 | 0 | rllib | **crashed** |" in text


def test_queue_path_entries_decode_as_the_trainer_reads_them_and_stack_each_environments_frames():
    """``bench.queue_path`` times real work only if its entries are what a worker sends: they pass the codec
    against the preset's own layout, and each environment's stacks are consecutive frames of its own."""
    from bench import queue_path
    from drl import frames
    from drl.algorithms import wire_extras
    from drl.envs import space_spec
    from drl.memory import codec
    from drl.presets import get_preset

    spec, cfg = space_spec(queue_path.ENV), get_preset("appo-atari", queue_path.ENV)
    layout = codec.expected_layout(spec, wire_extras(cfg))
    fields = queue_path.wire(queue_path.entry(spec, 3, 8, np.random.default_rng(0)), layout, "zstd", 1)
    batch = codec.decode(fields, "bench", layout)
    assert batch.count == 24 and len(fields[b"d"]) < batch.arrays[frames.TABLE].nbytes / 4  # zstd finds Pong-like
    whole = frames.expand(batch.arrays)
    for env in range(3):
        rows = np.flatnonzero(batch.arrays["env_index"] == env)
        np.testing.assert_array_equal(whole["next_obs"][rows[:-1]], whole["obs"][rows[1:]])
        np.testing.assert_array_equal(whole["obs"][rows[1:], :3], whole["obs"][rows[:-1], 1:])
    assert not np.array_equal(whole["obs"][0, 0], whole["obs"][0, 3])
