"""One owner per run: a second orchestrator of a running run (``--resume RUN`` while RUN runs, from the same run
folder, or from another folder on the same memory server) is refused with one line and exit 2, and the running
run goes on undisturbed: its state file, its memory server's data and its summary stay its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

from tests.conftest import ROOT, run_cli
from tests.faults.test_supervision import SMALL, Run
from tests.harness import ServiceRun, fast_config, held


def _has_checkpoint(run: Run) -> bool:
    return any((run.dir / "checkpoints").glob("c*/manifest.json"))


def _balances(summary: dict, steps: int) -> None:
    dropped = summary["stale_dropped"] + sum(summary["dead_lettered"].values())
    assert summary["exit_reason"] == "steps_done", summary
    assert summary["transitions_produced"] == steps, summary
    assert summary["transitions_consumed"] + dropped + summary["transitions_unconsumed"] == steps, summary


def test_resume_of_a_running_run_is_refused_with_one_line_and_the_run_goes_on(tmp_path):
    steps = 5000
    run = Run(
        tmp_path, "live", ["--mode", "async", "--workers", "2", "--steps", str(steps), "--checkpoint-every-s", "1"]
    )
    run.wait_until("a checkpoint and 1,000 transitions", lambda: run.consumed() >= 1000 and _has_checkpoint(run))
    orchestrator = run.state()["orchestrator_pid"]
    trainer = run.pid("trainer")
    os.kill(trainer, signal.SIGSTOP)  # the run must still be running when the second orchestrator starts
    try:
        for extra in ([], ["--detach"]):
            second = run_cli(
                [*SMALL, "--resume", "live", "--output", str(tmp_path), "--steps", str(2 * steps), *extra], timeout=60
            )
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 2, second.stderr[-3000:]
            assert len(lines) == 1 and "run 'live' is running" in lines[0] and str(orchestrator) in lines[0], lines
            assert "Traceback" not in second.stderr
    finally:
        os.kill(trainer, signal.SIGCONT)
    assert run.state()["orchestrator_pid"] == orchestrator, "the refused orchestrator rewrote state.json"
    summary, _ = run.finish()
    _balances(summary, steps)
    assert summary["steps_requested"] == steps
    assert json.loads((run.dir / "config.json").read_text())["steps"] == steps, "config.json was overwritten"


def test_a_second_orchestrator_of_a_run_on_the_same_memory_server_is_refused(tmp_path, redis_server):
    """Two run folders, one memory server and store: the run folder's lock cannot see the other folder, the
    claim on the memory server does."""
    steps = 1_000_000
    first, other = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    run = Run(
        first,
        "shared",
        [
            "--mode",
            "async",
            "--workers",
            "2",
            "--steps",
            str(steps),
            "--checkpoint-every-s",
            "1",
            "--memory",
            redis_server.url,
        ],
    )
    run.wait_until("a checkpoint and 1,000 transitions", lambda: run.consumed() >= 1000 and _has_checkpoint(run))
    (other / "shared").mkdir(parents=True)
    shutil.copy(run.dir / "config.json", other / "shared" / "config.json")
    second = run_cli(
        [
            *SMALL,
            "--resume",
            "shared",
            "--output",
            str(other),
            "--store",
            str(first),
            "--memory",
            redis_server.url,
            "--steps",
            str(2 * steps),
        ],
        timeout=120,
    )
    assert second.returncode == 2, second.stderr[-3000:]
    last = second.stderr.strip().splitlines()[-1]
    assert "owned by another orchestrator" in last and str(run.proc.pid) in last, second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert not (other / "shared" / "summary.json").exists()
    stopped = run_cli(["stop", "shared", "--output", str(first)], timeout=300)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    run.proc.communicate(timeout=120)
    summary = json.loads((run.dir / "summary.json").read_text())
    assert summary["exit_reason"] == "stopped", summary
    assert summary["transitions_unconsumed"] == 0
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary["stale_dropped"], summary


def test_a_second_trainer_of_a_run_waits_until_the_first_is_gone(tmp_path, redis_server, redis_client):
    """Two trainers would split the stream between them and overwrite each other's committed counters; the
    second waits on the run's trainer claim, and takes over at once when the first is killed."""
    run = ServiceRun(fast_config(mode="async", updates_per_transition=0.5), redis_server.url, tmp_path)
    run.start_all()
    first = run.procs["trainer"]
    run.wait_until(lambda: run.consumed() >= 1000, 120, "1,000 transitions consumed")
    workload = run.workloads["trainer"]
    second_log = tmp_path / "logs" / "second-trainer.log"
    # the run must not end while the second trainer starts up (its imports can take longer than the run's rest)
    workers = [proc.pid for name, proc in run.procs.items() if name.startswith("rollout")]
    with open(second_log, "ab") as log:
        second = subprocess.Popen(
            list(workload.command),
            env={**os.environ, **workload.replica_env(0)},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        with held(workers):
            run.wait_until(
                lambda: any(s in second_log.read_text() for s in ("continuing: ", "claim is held by")),
                120,
                "the second trainer to start",
            )
        consumed = run.consumed()
        run.wait_until(lambda: run.consumed() >= consumed + 500, 120, "500 more transitions consumed")
        assert second.poll() is None, second_log.read_text()[-3000:]
        assert "continuing: " not in second_log.read_text(), "the second trainer started consuming"
        assert "claim is held by" in second_log.read_text(), second_log.read_text()[-3000:]
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        run.procs["trainer"] = second
        run.wait_all(timeout=300)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
        run.kill_all()
    text = second_log.read_text()
    assert "continuing: " in text and "releasing the trainer claim" in text, text[-3000:]
    acc = run.accounting()
    assert acc["produced"] == 6000, acc
    assert acc["consumed"] + acc["stale"] == 6000, acc
    assert acc["backlog_entries"] == 0, acc
