"""Whole runs with a group of two data-parallel learners (``--learners 2 --memory-shards 2``): the trainer and
``learner-1`` meet over gloo, each reads its own experience stream into its own replay or rollout, every update
averages their gradients, the trainer alone publishes; every transition is counted once, per stream and in
total. Configurations a group cannot run are refused with one line."""

from __future__ import annotations

import json

import pytest
import yaml

from drl.store import run_store
from drl.store.base import PrefixedStore
from drl.store.checkpoint import CheckpointStore
from orchestrator.backends.local.common import latest_checkpoint_meta
from tests.conftest import read_summary, run_cli
from tests.harness import assert_balanced

SAC = [
    "--preset",
    "sac",
    "--env",
    "Pendulum-v1",
    "--sac.hidden",
    "16,16",
    "--sac.batch-size",
    "32",
    "--eval-episodes",
    "1",
    "--learning-starts",
    "300",
    "--updates-per-transition",
    "0.25",
]
PPO = ["--preset", "ppo", "--env", "CartPole-v1", "--ppo.epochs", "2", "--eval-episodes", "1"]


def processes(run_dir) -> dict[str, dict]:
    state = json.loads((run_dir / "state.json").read_text())
    return {p["name"]: p for p in state["processes"]}


@pytest.mark.parametrize(
    "args, mode, steps", [(SAC, "async", 6000), (PPO, "sync", 4096)], ids=["sac-async", "ppo-sync"]
)
def test_two_learners_count_every_transition_once_and_only_the_trainer_publishes(tmp_path, args, mode, steps):
    run = f"group-{mode}"
    proc = run_cli(
        [
            *args,
            "--mode",
            mode,
            "--workers",
            "4",
            "--learners",
            "2",
            "--memory-shards",
            "2",
            "--steps",
            str(steps),
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = read_summary(tmp_path / run)
    assert_balanced(summary)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == steps
    assert summary["duplicates_dropped"] == 0 and summary["updates"] > 0
    procs = processes(tmp_path / run)
    assert procs["trainer"]["exit_code"] == 0 and procs["learner-1"]["exit_code"] == 0
    learner = procs["learner-1"]["last_status"]
    trainer = procs["trainer"]["last_status"]
    assert learner["role"] == "learner" and int(learner["updates"]) == int(trainer["updates"]) > 0
    assert int(learner["transitions_consumed"]) + int(trainer["transitions_consumed"]) == steps
    assert int(learner["transitions_consumed"]) > 0 and int(trainer["transitions_consumed"]) > 0
    log = (tmp_path / run / "logs" / "learner-1.log").read_text()
    assert "learner 1 of 2: joining the group" in log and "reading shards 1" in log
    assert latest_checkpoint_meta(str(tmp_path), run)["counters"]["consumed"] == steps
    own = CheckpointStore(PrefixedStore(run_store(str(tmp_path), run), "learners/1/"), run).latest()
    assert own is not None and set(json.loads(own[0].meta_json)["shards"]) == {"1"}
    assert not (tmp_path / run / "learners" / "1" / "policies").exists(), "learner 1 published a policy"


def test_a_group_gets_a_stream_per_learner_unless_told_fewer(tmp_path):
    """``--learners 3`` alone gives each learner its stream; ``--memory-shards`` given too must be enough."""
    rendered = run_cli(["render", *SAC, "--learners", "3", "--steps", "1000"], timeout=60)
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    maps = [
        d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "ConfigMap" and "config.json" in d["data"]
    ]
    assert [json.loads(m["data"]["config.json"])["memory_shards"] for m in maps] == [3]
    proc = run_cli(
        [*SAC, "--learners", "2", "--memory-shards", "1", "--steps", "1000", "--output", str(tmp_path)], timeout=60
    )
    assert proc.returncode == 2
    assert "--learners 2 needs --memory-shards 2 or more" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_kubernetes_manifests_run_a_group_as_one_indexed_trainer_job(tmp_path):
    import yaml

    proc = run_cli(["render", *SAC, "--learners", "2", "--memory-shards", "2"], timeout=60)
    assert proc.returncode == 0, proc.stderr
    jobs = {o["metadata"]["name"]: o for o in yaml.safe_load_all(proc.stdout) if o and o["kind"] == "Job"}
    trainer = next(job for name, job in jobs.items() if name.endswith("-trainer"))
    assert trainer["spec"]["completionMode"] == "Indexed" and trainer["spec"]["completions"] == 2
    assert not any(name.endswith("-learner") for name in jobs), "the learners fold into the trainer Job"


def test_a_sigkilled_learner_and_its_group_come_back_and_every_transition_counts(tmp_path):
    """Learner 1 is SIGKILLed mid-run: the trainer's next all-reduce fails, both are restarted by the
    orchestrator, meet again, restore their checkpoints and committed reader states (learner 0's networks
    broadcast to the other), and the run ends with every transition counted once."""
    import os
    import signal

    from tests.faults.test_supervision import Run, _accounts_for_everything

    steps = 6000
    run = Run(
        tmp_path,
        "kill-learner",
        [
            "--mode",
            "async",
            "--workers",
            "4",
            "--learners",
            "2",
            "--memory-shards",
            "2",
            "--steps",
            str(steps),
            "--checkpoint-every-s",
            "1",
            "--publish-every-updates",
            "25",
        ],
    )
    run.wait_until(
        "2,000 transitions and a checkpoint of each learner",
        lambda: (
            run.consumed() >= 1000
            and any((run.dir / "checkpoints").glob("c*/manifest.json"))
            and any((run.dir / "learners" / "1" / "checkpoints").glob("c*/manifest.json"))
        ),
    )
    os.kill(run.pid("learner-1"), signal.SIGKILL)
    summary, err = run.finish()
    _accounts_for_everything(summary, steps)
    assert summary["restarts"]["learner"] >= 1, summary["restarts"]
    assert "learner-1 exited with code -9" in err
