"""How the processes of a run size themselves to the machine: the CPUs a process may use (a pod's CPU limit, else
its affinity), EnvPool's threads per worker, the trainer's threads with ``--trainer-threads 0``, the evaluator
niced as the workers are (at the lowest priority beside a trainer that takes every CPU); and the benchmark helpers
that report it (bench.gpu_roles, bench.scores, bench.run_all keeping the sections other commands write)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from drl import process
from drl.config import ExperimentConfig
from drl.envs import env_threads
from orchestrator.backends.local.common import ROLLOUT_NICENESS, niceness
from orchestrator.plan import plan
from tests.conftest import ROOT


def test_usable_cpus_is_the_affinity_without_a_quota():
    cpus = process.usable_cpus()
    assert 0 < cpus <= len(os.sched_getaffinity(0))


def test_a_cgroup_quota_bounds_the_usable_cpus(monkeypatch):
    files = {"/sys/fs/cgroup/cpu.max": "150000 100000\n"}

    def read(path):
        if path not in files:
            raise OSError(path)
        return files[path]

    monkeypatch.setattr(process, "_read", read)
    assert process.usable_cpus() == 1.5
    files.clear()
    files.update({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"})
    assert process.usable_cpus() == len(os.sched_getaffinity(0))


def test_envpool_threads_share_the_cores_among_the_workers(monkeypatch):
    monkeypatch.setattr("drl.envs.usable_cpus", lambda: float(len(os.sched_getaffinity(0))))
    cores = len(os.sched_getaffinity(0))
    assert env_threads(64, 1) == cores
    assert env_threads(64, 2 * cores) == 1
    assert env_threads(1, 1) == 1
    monkeypatch.setattr("drl.envs.usable_cpus", lambda: 0.5)
    assert env_threads(8, 1) == 1


def test_trainer_threads_zero_leaves_the_trainer_to_size_itself():
    def trainer_env(threads):
        cfg = ExperimentConfig(trainer_threads=threads, run_name="r")
        workloads = plan(cfg, run="r", run_dir="/runs/r", memory_url="redis://h:1/0", store_url="/runs/r/store")
        return {w.role: w.env for w in workloads}

    assert trainer_env(3)["trainer"]["OMP_NUM_THREADS"] == "3"
    envs = trainer_env(0)
    assert "OMP_NUM_THREADS" not in envs["trainer"] and envs["rollout"]["OMP_NUM_THREADS"] == "1"
    with pytest.raises(Exception, match="--trainer-threads"):
        ExperimentConfig(trainer_threads=-1).validate()


def test_the_evaluator_is_as_nice_as_the_workers_unless_the_trainer_takes_every_cpu():
    assert niceness("evaluator", 1) == niceness("rollout", 1) == niceness("rollout", 0) == (ROLLOUT_NICENESS, False)
    assert ROLLOUT_NICENESS > 0
    assert niceness("evaluator", 0) == (19, True)
    assert niceness("trainer", 0) == niceness("learner", 0) == niceness("trainer", 1) == (0, False)


def test_gpu_roles_reports_time_to_score_cores_and_gpu(tmp_path):
    evaluations = [
        {"mean_return": -21.0, "wall_seconds": 10.0, "env_steps": 0, "version": 0},
        {"mean_return": 18.5, "wall_seconds": 400.0, "env_steps": 2_000_000, "version": 90},
    ]
    (tmp_path / "evaluations.jsonl").write_text("\n".join(json.dumps(e) for e in evaluations) + "\n")
    (tmp_path / "config.json").write_text(json.dumps({"target_return": 18.0}))
    (tmp_path / "cpu.tsv").write_text("t\trole\tpid\tcpu_s\n0\ttrainer\t7\t1.0\n10\ttrainer\t7\t10.0\n")
    (tmp_path / "gpu.csv").write_text("2026/11/29 00:00:00.000, 80 %, 9 MiB\n2026/11/29 00:00:01.000, 90 %, 9 MiB\n")
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_roles", "--report", str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "time to score 18: 400 s, 2,000,000 agent steps (8,000,000 frames)" in done.stdout
    assert "trainer 0.90" in done.stdout and "GPU utilisation: mean 85%" in done.stdout


def test_the_score_table_replaces_its_rows_and_keeps_the_others(tmp_path):
    from bench import scores

    doc = tmp_path / "b.md"
    old_row = "| dqn | CartPole-v1 | 50,000 | 500.0 (500.0) | 500.0 (500.0) | 1.0 | 500.0 | x |"
    doc.write_text(f"# B\n\n{scores.MARK_BEGIN}\n| preset | env |\n|---|---|\n{old_row}\n{scores.MARK_END}\nafter\n")
    runs = [{"seed": s, "final": -150.0 - s, "best": -140.0, "seconds": 60.0} for s in range(3)]
    row = {"preset": "sac", "env": "Pendulum-v1", "steps": 20_000, "reference": -157.0, "source": "zoo", "runs": runs}
    scores.write(doc, [row], "python -m bench.scores --only sac:Pendulum-v1")
    text = doc.read_text()
    assert old_row in text and text.endswith(f"{scores.MARK_END}\nafter\n")
    assert (
        "| sac | Pendulum-v1 | 20,000 | -151.0 (-150.0, -151.0, -152.0) | -140.0 (-140.0, -140.0, -140.0) | 1.0 |"
        in text
    )
    assert text.index("| dqn | CartPole") < text.index("| sac |")  # the rows keep bench.scores' order
    assert "| sac-lunar | LunarLanderContinuous-v3 | 500,000 | not run yet | - | - | 260.4 |" in text
    assert "| appo-atari | ALE/Pong-v5 | 10,000,000 | not run yet (a GPU machine's, `--atari`) |" in text


def test_the_score_table_keeps_a_rows_earlier_seeds_when_others_are_run_later(tmp_path):
    from bench import scores

    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\n{scores.MARK_BEGIN}\n{scores.MARK_END}\n")
    row = {"preset": "sac", "env": "Pendulum-v1", "steps": 20_000, "reference": -157.0, "source": "zoo"}
    first = [{"seed": 0, "final": -150.0, "best": -140.0, "seconds": 60.0, "exit_code": 0}]
    scores.write(doc, [{**row, "runs": first}], "python -m bench.scores --seeds 0")
    later = [{"seed": s, "final": -160.0 - s, "best": -145.0, "seconds": 120.0, "exit_code": 0} for s in (2, 1)]
    scores.write(doc, [{**row, "runs": later}], "python -m bench.scores --seeds 2,1")
    text = doc.read_text()
    assert (
        "| sac | Pendulum-v1 | 20,000 | -161.0 (-150.0, -161.0, -162.0) | -145.0 (-140.0, -145.0, -145.0) | 2.0 |"
        in text
    )
    kept = json.loads((tmp_path / "benchmarks" / "scores.json").read_text())["sac:Pendulum-v1"]
    assert [kept["runs"][s]["command"] for s in "012"] == ["python -m bench.scores --seeds 0"] + 2 * [
        "python -m bench.scores --seeds 2,1"
    ]
    again = [{"seed": 0, "final": -130.0, "best": -120.0, "seconds": 60.0, "exit_code": 0}]
    scores.write(doc, [{**row, "runs": again}], "python -m bench.scores --seeds 0")
    assert "| -161.0 (-130.0, -161.0, -162.0) | -145.0 (-120.0, -145.0, -145.0) |" in doc.read_text()
    scores.write(doc, [{**row, "steps": 40_000, "runs": first}], "python -m bench.scores --seeds 0")
    assert "| sac | Pendulum-v1 | 40,000 | -150.0 (-150.0) |" in doc.read_text()  # another budget starts afresh


def _stand_in_orchestrator(tmp_path, exit_code: int, exit_reason: str) -> str:
    """An executable in drl-orchestrate's place that writes a summary with ``exit_reason`` and exits so."""
    script = tmp_path / "drl-orchestrate"
    summary = {"exit_reason": exit_reason, "last_eval_return": -150.0, "best_eval_return": -140.0, "env_steps": 50}
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "a = sys.argv\n"
        "run = pathlib.Path(a[a.index('--output') + 1]) / a[a.index('--run-name') + 1]\n"
        "run.mkdir(parents=True)\n"
        f"(run / 'summary.json').write_text(json.dumps({summary!r}))\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(0o755)
    return str(script)


def test_a_score_run_stopped_before_its_budget_has_no_score_with_a_stand_in_orchestrator(tmp_path, monkeypatch):
    from bench import scores

    row = scores.ROWS[0]
    monkeypatch.setattr(scores, "orchestrate_exe", lambda: _stand_in_orchestrator(tmp_path, 0, "stopped"))
    run = scores.run_one(row, 0, tmp_path / "runs", [])
    assert "final" not in run and "stopped before its budget: stopped" in run["error"]
    monkeypatch.setattr(scores, "orchestrate_exe", lambda: _stand_in_orchestrator(tmp_path / "b", 0, "steps_done"))
    (tmp_path / "b").mkdir()
    assert scores.run_one(row, 1, tmp_path / "runs", [])["final"] == -150.0


def test_an_interrupted_score_run_leaves_the_table_as_it_was_with_a_stand_in_orchestrator(tmp_path, monkeypatch):
    from bench import scores

    doc = tmp_path / "b.md"
    doc.write_text(f"# B\n\n{scores.MARK_BEGIN}\n| preset | env |\n|---|---|\n{scores.MARK_END}\n")
    before = doc.read_text()
    monkeypatch.setattr(scores, "orchestrate_exe", lambda: _stand_in_orchestrator(tmp_path, 130, "interrupted"))
    code = scores.main(["--only", scores.ROWS[0].key, "--seeds", "0,1", "--write", str(doc)])
    assert code == scores.INTERRUPTED and doc.read_text() == before


def test_score_runs_of_a_row_run_at_once_with_jobs_and_keep_seed_order_with_a_stand_in_orchestrator(
    tmp_path, monkeypatch
):
    from bench import scores

    script = tmp_path / "drl-orchestrate"
    summary = {"exit_reason": "steps_done", "last_eval_return": 0.0, "best_eval_return": 1.0, "env_steps": 50}
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys, time\n"
        "a = sys.argv\n"
        "run = pathlib.Path(a[a.index('--output') + 1]) / a[a.index('--run-name') + 1]\n"
        "run.mkdir(parents=True)\n"
        "seed = int(a[a.index('--seed') + 1])\n"
        "started = time.time()\n"
        "time.sleep(1.5)\n"
        f"summary = {summary!r}\n"
        "summary['last_eval_return'] = float(seed)\n"
        "(run / 'summary.json').write_text(json.dumps(summary))\n"
        f"pathlib.Path({str(tmp_path)!r}, f'span{{seed}}').write_text(f'{{started}} {{time.time()}}')\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(scores, "orchestrate_exe", lambda: str(script))
    [result] = scores.run_rows([scores.ROWS[0]], [0, 1, 2], [], jobs=3)
    assert [run["final"] for run in result["runs"]] == [0.0, 1.0, 2.0]
    spans = sorted(tuple(map(float, (tmp_path / f"span{s}").read_text().split())) for s in range(3))
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), f"no two runs overlapped: {spans}"
