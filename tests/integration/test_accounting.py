"""The summary's accounting where it is not trivial: runs that end with transitions still in the stream (stopped
with the trainer paused, target reached early), checked by the one balance rule every run obeys
(``tests.harness.assert_balanced``: produced = consumed + unconsumed + every counted drop). A summary that wrote
0 for what is left in the stream, or left out a resumed run's earlier steps, fails here."""

from __future__ import annotations

import os
import signal

from tests.conftest import read_summary
from tests.faults.test_supervision import Run
from tests.harness import assert_balanced


def test_a_run_stopped_while_its_trainer_is_paused_counts_what_it_left_in_the_stream(tmp_path):
    run = Run(tmp_path, "left", ["--mode", "async", "--workers", "2", "--steps", "40000", "--max-backlog-entries", "6"])
    run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
    trainer = run.pid("trainer")
    os.kill(trainer, signal.SIGSTOP)
    client = None
    try:
        from tests.conftest import run_client

        client = run_client(run.dir)
        run.wait_until("entries waiting in the stream", lambda: client.xlen(f"drl:{{{run.name}}}:exp") >= 4)
    finally:
        if client is not None:
            client.close()
    run.proc.send_signal(signal.SIGINT)
    os.kill(trainer, signal.SIGKILL)
    run.proc.communicate(timeout=120)
    assert run.proc.returncode == 130
    summary = read_summary(run.dir)
    assert_balanced(summary)
    assert summary["transitions_unconsumed"] > 0, summary
    assert summary["transitions_produced"] > summary["transitions_consumed"] > 0


def test_a_run_that_reaches_its_target_early_balances_with_what_it_did_not_train_on(tmp_path):
    run = Run(
        tmp_path,
        "early",
        [
            "--mode",
            "async",
            "--workers",
            "2",
            "--steps",
            "60000",
            "--target-return",
            "-1700",
            "--publish-every-updates",
            "20",
        ],
    )
    summary, _ = run.finish(timeout=300)
    assert summary["exit_reason"].startswith("target_reached"), summary["exit_reason"]
    assert summary["transitions_produced"] < 60000
    assert_balanced(summary)
