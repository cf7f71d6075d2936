"""A run that fails still tells the truth: its summary's counts come from the ledger the trainer commits with
its acknowledgements, not from the status hash the trainer refreshes about once a second (a crashing trainer
leaves it behind), and they balance."""

from __future__ import annotations

import os
import signal

from tests.conftest import read_summary, run_client
from tests.faults.test_supervision import Run
from tests.harness import assert_balanced


def _committed(run: Run) -> int:
    client = run_client(run.dir)
    return int(client.hget(f"drl:{{{run.name}}}:trainer:state", "consumed") or 0)


def test_a_run_failed_by_a_killed_trainer_counts_what_it_committed_after_its_last_status(tmp_path):
    run = Run(tmp_path, "failed", ["--mode", "async", "--workers", "2", "--steps", "40000", "--max-restarts", "0"])
    try:
        run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
        trainer = run.pid("trainer")
        for _ in range(200):
            os.kill(trainer, signal.SIGSTOP)
            if _committed(run) > run.consumed():
                break
            os.kill(trainer, signal.SIGCONT)
            run.wait_until("the trainer to commit past its status", lambda: _committed(run) > run.consumed(), 30)
        committed, reported = _committed(run), run.consumed()
        assert committed > reported, "never caught the trainer with commits newer than its status"
        os.kill(trainer, signal.SIGKILL)
        _, err = run.proc.communicate(timeout=120)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert run.proc.returncode == 1, err[-3000:]
    summary = read_summary(run.dir)
    print(
        f"\ncommitted {committed}, status said {reported}; summary: produced {summary['transitions_produced']}, "
        f"consumed {summary['transitions_consumed']}, unconsumed {summary['transitions_unconsumed']}, dropped "
        f"{summary.get('dropped')}; {summary['exit_reason']}"
    )
    assert summary["exit_reason"].startswith("failed: trainer"), summary["exit_reason"]
    assert summary["transitions_consumed"] == committed
    assert_balanced(summary)


def test_a_memory_server_lost_after_the_trainer_ended_leaves_the_summary_the_trainers_record(tmp_path):
    """The trainer finished and exited; then the memory server died and came back empty (its ledger, status and
    done marker gone). The summary goes by the trainer's final checkpoint: its exit reason and its ledger."""
    from bench.fault_campaign import memory_server_pid

    steps = 6000
    run = Run(tmp_path, "late-loss", ["--mode", "async", "--workers", "2", "--steps", str(steps)])
    try:
        run.wait_until("4,000 transitions consumed", lambda: run.consumed() >= 4000)
        evaluator = run.pid("evaluator")
        os.kill(evaluator, signal.SIGSTOP)
        run.wait_until(
            "the trainer exited 0",
            lambda: next(p for p in run.state()["processes"] if p["name"] == "trainer")["exit_code"] == 0,
            120,
        )
        killed = memory_server_pid(run.dir)
        os.kill(killed, signal.SIGKILL)
        run.wait_until("the memory server started again", lambda: memory_server_pid(run.dir) not in (None, killed), 60)
        os.kill(evaluator, signal.SIGCONT)
        _, err = run.proc.communicate(timeout=300)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    summary = read_summary(run.dir)
    assert "the memory server exited with code -9" in err
    assert summary["exit_reason"] == "steps_done", summary
    assert summary["transitions_produced"] == steps, summary
    assert summary["transitions_consumed"] + sum(summary["dropped"].values()) == steps, summary
    assert_balanced(summary)
