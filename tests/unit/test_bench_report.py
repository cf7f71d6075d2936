"""The benchmark report (``bench/run_all.py --from-results``) renders the committed figures: every section, no
renderer failure, the plots, and a headline that says how many seeds missed the target."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import run_all

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "results.json"


def test_report_renders_every_committed_section(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(COMMITTED, data / "results.json")
    doc = tmp_path / "benchmarks.md"
    assert run_all.main(["--from-results", "--doc", str(doc), "--data", str(data)]) == 0
    text = doc.read_text()
    saved = json.loads(COMMITTED.read_text())
    assert saved["results"], "no figures committed"
    for result in saved["results"]:
        assert f"## {result['title']}" in text
    assert "could not render" not in text
    assert sorted(p.name for p in data.glob("*.png")), "no plot written"


def test_time_to_score_headline_counts_the_seeds_that_missed(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    saved = json.loads(COMMITTED.read_text())
    tts = next(r for r in saved["results"] if r["name"] == "time_to_score")
    runs = [
        {"side": "drl", "seed": s, "reached": t is not None, "time_to_score_s": t}
        for s, t in enumerate((536.5, 146.3, None))
    ]
    tts = {**tts, "figures": {**tts["figures"], "runs": runs, "drl_median_s": 536.5, "sb3_median_s": None}}
    (data / "results.json").write_text(json.dumps({**saved, "results": [tts]}))
    doc = tmp_path / "benchmarks.md"
    assert run_all.main(["--from-results", "--doc", str(doc), "--data", str(data)]) == 0
    assert "drl 536.5 s (median; 1 of 3 seeds missed the target)" in doc.read_text()


# -- the Atari sections (issue 24), from fixture JSON lines shaped as the modules print them ----------------------
MACHINE = {"cores": 2, "platform": "Linux-test", "load_average_start": 1.0, "load_average_end": 1.2}


def throughput_line(rates: dict[tuple[int, str], float]) -> dict:
    """``bench.atari_throughput``'s last line, its rows and goal computed by the module's own ``summarise`` from one
    repeat of runs with these rates ((workers, side) -> frames/s)."""
    from bench import atari_throughput as tp

    runs = [
        {
            "side": side,
            "workers": n,
            "seed": 0,
            "repeat": 0,
            "rate": rate,
            **({"collected_rate": 4 * rate} if side == "sf" else {}),
            **({"summary": {"whole_run_rate": 0.6 * rate}} if side == "drl" else {}),
        }
        for (n, side), rate in rates.items()
    ]
    workers = sorted({n for n, _ in rates})
    rows, goal_met = tp.summarise(workers, runs, 2, "sf-sampler")
    return {
        "rows": rows,
        "goal": "drl >= 0.9 x raw for N <= cores, drl >= sf-sampler",
        "goal_met": goal_met,
        "peer": "sf-sampler",
        "frames": "agent steps x 4",
        "env": "ALE/Pong-v5",
        "envs_per_worker": 4,
        "workers": workers,
        "sides": list(tp.SIDES),
        "repeats": 1,
        "window_s": 30.0,
        "settle_s": 5.0,
        "raw_seconds": 10.0,
        "raw_source": "drl",
        "raw_policy": "drl",
        "drl_train": False,
        "sf_args": "",
        "drl_args": "",
        "runs": runs,
        "command": "python -m bench.atari_throughput",
        "machine": MACHINE,
        "versions": {"python": "3.12", "sample-factory": "2.1.1"},
    }


GOOD_RATES = {
    (1, "raw"): 3000.0,
    (1, "sf"): 800.0,
    (1, "sf-sampler"): 2400.0,
    (1, "drl"): 2900.0,
    (2, "raw"): 5800.0,
    (2, "sf"): 700.0,
    (2, "sf-sampler"): 4500.0,
    (2, "drl"): 5500.0,
    (4, "raw"): 5900.0,
    (4, "sf"): 650.0,
    (4, "sf-sampler"): 4400.0,
    (4, "drl"): 4600.0,
}

LEARNER = {
    "drl_updates_per_s": 14.5,
    "sb3_updates_per_s": 12.6,
    "ratio": 1.151,
    "ratio_median_per_repeat": 1.14,
    "drl_runs": [14.1, 14.5, 15.0],
    "sb3_runs": [12.2, 12.6, 13.0],
    "errors": {},
    "threads": 1,
    "batch_size": 32,
    "obs": [4, 84, 84],
    "actions": 6,
    "double": False,
    "fill": 2000,
    "repeats": 3,
    "updates_per_repeat": 10,
    "warmup": 3,
    "load_average": [1.0, 1.1],
    "drl_batches": "drl.training.replay.ReplayBuffer (frames stored once)",
    "drl_config": {"batch_size": 32},
    "drl_last_metrics": {"loss": 0.01},
    "parameters": {"drl": 1687206, "sb3": 1687206},
    "command": "python -m bench.atari_learner",
    "machine": {"logical_cpus": 2},
    "versions": {"torch": "2.13.0"},
}

BYTES = {
    "env": "ALE/Pong-v5",
    "envs": 4,
    "rows": 256,
    "n_step": 3,
    "transitions": 19988,
    "entries": 79,
    "frames_per_transition": 1.05,
    "wire_bytes_per_transition": {"none": 7650.2, "zstd": 2301.7, "lz4": 3402.9},
    "encode_us_per_transition": {"none": 1.2, "zstd": 9.8, "lz4": 3.1},
    "replay_bytes_per_transition": 7123.4,
    "replay_bytes_per_held_transition": 7300.1,
    "replay_held_of_capacity": 0.976,
    "float32_stack_pair": 225792,
    "uint8_stack_pair": 56448,
    "frame_bytes": 7056,
    "goal_met": True,
    "command": "python -m bench.atari_bytes",
    "machine": "Linux-test",
}  # machine: a string in this module


def tts_line(best_returns: list[float | None], hit_s: float | None = None) -> dict:
    runs = [
        {
            "side": "drl",
            "seed": i,
            "reached": hit_s is not None and i == 0,
            "exit_code": "budget",
            "time_to_score_s": hit_s if i == 0 else None,
            "launch_to_score_s": None,
            "process_wall_s": 631.0,
            "env_steps": None,
            "updates": None,
            "version": None,
            "return_at_score": None,
            "best_return": best,
            "evaluations": 0 if best is None else 3,
            "first_evaluation_s": None if best is None else 40.2,
            "exit_reason": "interrupted",
            "env_steps_total": 420000,
            "load_at_start": 1.5,
        }
        for i, best in enumerate(best_returns)
    ]
    return {
        "preset": "dqn-atari",
        "env": "ALE/Pong-v5",
        "target": 18.0,
        "budget_s": 600.0,
        "reached": [r["reached"] for r in runs],
        "time_to_score_s": [r["time_to_score_s"] for r in runs],
        "best_return": best_returns,
        "runs": runs,
        "workers": 2,
        "threads": 1,
        "drl_args": "",
        "command": "python -m bench.atari_time_to_score --budget-s 600",
        "machine": MACHINE,
        "versions": {},
    }


def report(tmp_path, figures: dict[str, dict]) -> str:
    """Writes results.json holding these benchmarks' lines as run_all saves them and renders the report."""
    titles = {b.name: b.title for b in run_all.BENCHES}
    results = [
        {
            "name": name,
            "title": titles[name],
            "command": f"python -m bench.{name}",
            "exit_code": 0,
            "ok": True,
            "duration_s": 60.0,
            "started_at": "2026-11-26T10:00:00+00:00",
            "load_at_start": 1.0,
            "figures": f,
            "log": f"docs/benchmarks/logs/{name}.log",
        }
        for name, f in figures.items()
    ]
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "results.json").write_text(
        json.dumps(
            {
                "command": "python -m bench.run_all --atari",
                "quick": False,
                "generated_at": "2026-11-26T11:00:00+00:00",
                "total_s": 240.0,
                "results": results,
                "skipped": [],
            }
        )
    )
    doc = tmp_path / "benchmarks.md"
    assert run_all.main(["--from-results", "--doc", str(doc), "--data", str(data)]) == 0
    return doc.read_text()


def summary(text: str, name: str) -> list[str]:
    """The summary table's cells for one benchmark: headline, goal, goal met, duration, status."""
    title = next(b.title for b in run_all.BENCHES if b.name == name)
    line = next(line for line in text.splitlines() if line.startswith(f"| [{title}]("))
    return [cell.strip() for cell in line.strip("|").split(" | ")][1:]


def test_atari_sections_render_with_their_goals_met(tmp_path):
    text = report(
        tmp_path,
        {
            "atari_throughput": throughput_line(GOOD_RATES),
            "atari_learner": LEARNER,
            "atari_bytes": BYTES,
            "atari_time_to_score": tts_line([-20.0]),
        },
    )
    assert "could not render" not in text
    for name in ("atari_throughput", "atari_learner", "atari_bytes", "atari_time_to_score"):
        title = next(b.title for b in run_all.BENCHES if b.name == name)
        assert f"## {title}" in text
    headline, goal, met, _, status = summary(text, "atari_throughput")
    assert headline == "drl 5,500 frames/s with 2 workers: 0.95 x raw, 1.22 x Sample Factory sampler"
    assert goal == "drl >= 0.9 x raw for N <= cores, drl >= sf-sampler (2 cores)"
    assert (met, status) == ("met", "ok")
    assert "| 4 | 5,900 | 650 | 2,600 | 4,400 | 4,600 | 2,760 | 0.780 |" in text  # N > cores: no raw goal
    headline, goal, met, *_ = summary(text, "atari_learner")
    assert headline == "drl 14.5 vs SB3 12.6 DQN updates/s (x1.15)" and met == "-"
    headline, goal, met, *_ = summary(text, "atari_bytes")
    assert headline == "replay 7,123 bytes per stored transition; wire zstd 2,302, lz4 3,403, none 7,650"
    assert (goal, met) == ("replay <= 8,192 bytes per stored transition", "met")
    assert "- machine: Linux-test" in text
    headline, goal, met, *_ = summary(text, "atari_time_to_score")
    assert headline == "18 not reached in the 600 s budget; best mean return -20.0"
    assert goal == "recorded: the time to 18 within 600 s, or the best mean return reached" and met == "met"
    plots = {p.name for p in (tmp_path / "data").glob("*.png")}
    assert {"atari_throughput.png", "atari_learner.png", "atari_bytes.png"} <= plots


def test_atari_goals_can_fail(tmp_path):
    slow_drl = {**GOOD_RATES, (2, "drl"): 4400.0}  # 0.76 x raw at N = cores, below the sampler
    short_replay = {k: v for k, v in BYTES.items() if k != "goal_met"}  # the section judges the figure itself
    short_replay["replay_bytes_per_transition"] = 9000.0
    text = report(
        tmp_path,
        {
            "atari_throughput": throughput_line(slow_drl),
            "atari_bytes": short_replay,
            "atari_time_to_score": tts_line([None]),
        },
    )
    assert "could not render" not in text
    headline, _, met, *_ = summary(text, "atari_throughput")
    assert met == "**not met**" and "0.76 x raw" in headline
    assert "| 2 | 5,800 | 700 | 2,800 | 4,500 | 4,400 |" in text and "| **not met** |" in text
    assert summary(text, "atari_bytes")[2] == "**not met**"
    headline, _, met, *_ = summary(text, "atari_time_to_score")  # no evaluation at all: nothing recorded
    assert headline == "18 not reached in the 600 s budget; no evaluation" and met == "**not met**"
    # beyond the 2 cores only Sample Factory counts: drl at 0.78 x raw with 4 workers meets the goal there, and
    # misses it once the sampler is faster
    good = throughput_line(GOOD_RATES)["rows"][2]
    assert good["drl_over_raw"] < 0.9 and good["goal_met"] is True
    beyond = throughput_line({**GOOD_RATES, (4, "sf-sampler"): 4700.0})
    assert beyond["rows"][2]["goal_met"] is False and beyond["goal_met"] is False


def test_atari_time_to_score_headline_when_reached(tmp_path):
    text = report(tmp_path, {"atari_time_to_score": tts_line([19.0, -5.0], hit_s=512.3)})
    headline, _, met, *_ = summary(text, "atari_time_to_score")
    assert headline == "18 reached after 512.3 s (1 of 2 seeds; budget 600 s), best mean return 19.0"
    assert met == "met"


def test_atari_benchmarks_are_opt_in():
    atari = ["atari_throughput", "atari_learner", "atari_bytes", "atari_time_to_score"]
    default = [b.name for b in run_all.select(set(), set())]
    assert not set(atari) & set(default) and "scaling" in default
    with_atari = [b.name for b in run_all.select(set(), {"atari"})]
    assert with_atari[-4:] == atari and "time_to_score_lunar" not in with_atari
    assert [b.name for b in run_all.select(set(atari), set())] == atari
    tts = next(b for b in run_all.BENCHES if b.name == "atari_time_to_score")
    assert tts.args == ["--budget-s", "600"]


def test_startup_medians_ratios_and_section(tmp_path):
    from bench import startup

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "trainer.log").write_text(
        "2026-11-25 10:00:01,500 trainer INFO metrics on x\n"
        "2026-11-25 10:00:02,000 trainer INFO control endpoint (drl.v1.Control) on y\n"
    )
    (logs / "rollout-0.log").write_text("2026-11-25 10:00:03,250 rollout INFO control endpoint (drl.v1.Control) on z\n")
    from datetime import datetime

    assert startup._ready_at(logs) == datetime(2026, 11, 25, 10, 0, 3, 250000).timestamp()
    (logs / "evaluator.log").write_text("2026-11-25 10:00:01,000 evaluator INFO metrics on x\n")
    assert startup._ready_at(logs) is None, "a service that never came up counted as ready"
    rows = [
        {
            "side": side,
            "workers": 4,
            "repeat": r,
            "failed": False,
            "ready_s": ready,
            "wall_s": 2 * ready,
            "cpu_s": 3 * ready,
        }
        for side, values in (("fork", (2.0, 3.0, 4.0)), ("new", (6.0, 8.0, 7.0)))
        for r, ready in enumerate(values)
    ]
    rows.append({"side": "new", "workers": 4, "repeat": 3, "failed": True})
    summary = startup.summarize(rows, [4])
    assert summary[0]["fork"] == {"ready_s": 3.0, "wall_s": 6.0, "cpu_s": 9.0, "runs": 3}
    assert summary[0]["new"]["ready_s"] == 7.0 and summary[0]["new"]["runs"] == 3
    assert summary[0]["ratio"]["ready_s"] == round(3 / 7, 3)
    lines, headline, goal, met = run_all.section_startup({"summary": summary, "repeats": 3}, None)
    assert "4 workers: ready x0.43" in headline and met is None
    assert any("3.0 / 7.0" in line for line in lines)
