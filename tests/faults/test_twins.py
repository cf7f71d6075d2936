"""One identity, one writer (docs/reliability.md): a second process started with the identity of a live one (a
rollout worker, a learner of a group, the evaluator), as an operator or a Job's replacement pod would start it,
never counts anything twice. The second waits for the identity while its holder lives and exits 0 once the run
ended; a holder paused past its claim's lease loses the identity to the waiting process and, once it runs
again, has its next write refused and exits with ``EXIT_SUPERSEDED``.

On the code before the fence each of these runs counted transitions twice (consumed above produced: the two
processes numbered their entries alike and the trainer took both) or recorded a version's evaluation twice,
and the twin of a learner waited for ever."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from bench.fault_campaign import replica_launch
from drl.errors import EXIT_SUPERSEDED
from tests.conftest import ROOT, processes_mentioning, read_summary
from tests.faults.test_supervision import Run, _accounts_for_everything
from tests.harness import FULL_TIER, ServiceRun, assert_balanced, fast_config, held


class Twin:
    """A second process with the identity of a run's process ``name``, started by hand with the command and
    environment the run's plan gives it (``bench.fault_campaign.replica_launch``)."""

    def __init__(self, run: Run, name: str):
        command, env = replica_launch(run.dir, name)
        self.log = run.dir.parent / f"twin-{name}.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the twin did not end by itself:\n{self.text()[-3000:]}") from None


def _finish(run: Run, twin: Twin) -> tuple[dict, str, int]:
    """The run's summary and stderr, and the twin's exit code, once both ended by themselves."""
    try:
        _, err = run.proc.communicate(timeout=300)
        code = twin.wait()
    finally:
        if twin.proc.poll() is None:
            twin.proc.kill()
    assert run.proc.returncode == 0, err[-4000:]
    summary = read_summary(run.dir)
    assert_balanced(summary)
    assert not processes_mentioning(f"DRL_RUN={run.name}")
    return summary, err, code


def _until(what: str, check, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _twin_waits_and_run_counts_once(tmp_path, name: str, args: list[str], steps: int, started_at: int = 300):
    run = Run(tmp_path, f"twin-{name}-{args[1]}", ["--steps", str(steps), *args])
    if started_at:
        run.wait_until(f"{started_at:,} transitions consumed", lambda: run.consumed() >= started_at, timeout=180)
    else:
        run.wait_until(f"{name} to start", lambda: run.pid(name), timeout=180)
    # the run's consumers are held while the twin starts up, so that the original cannot finish its part before
    # the twin asks for the identity (the twin's imports can take longer than that on a loaded machine): a
    # worker is held back by its full backlog, a learner by its group's next collective step
    consumers = [
        p["pid"] for p in run.state()["processes"] if p["name"] != name and p["name"].startswith(("trainer", "learner"))
    ]
    twin = Twin(run, name)
    try:
        with held(consumers):
            run.wait_until("the twin to wait for the identity", lambda: "claim is held by" in twin.text(), timeout=120)
    finally:
        summary, err, code = _finish(run, twin)
    text = twin.text()
    assert code == 0, text[-3000:]
    assert "nothing to do" in text or "identity taken" in text, text[-3000:]
    _accounts_for_everything(summary, steps)
    assert summary["transitions_consumed"] <= summary["transitions_produced"], summary
    assert summary["duplicates_dropped"] == 0, summary
    return run, summary, err, text


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_a_twin_rollout_worker_waits_and_every_transition_counts_once(tmp_path, mode):
    _twin_waits_and_run_counts_once(tmp_path, "rollout-1", ["--mode", mode, "--workers", "2"], 12000)


def test_a_twin_that_took_the_identity_before_the_original_started_keeps_it_and_nothing_counts_twice(
    tmp_path, redis_server, redis_client
):
    """The other order: the twin of rollout-1 takes the identity before the original starts, so the original
    waits; the twin produces the whole share, and the original, taking the identity once the twin ended, finds
    the share done (its position) and sends nothing."""
    steps = 6000
    run = ServiceRun(fast_config(workers=2, steps=steps), redis_server.url, tmp_path, run="twin-first")
    logs = tmp_path / "logs"
    try:
        run.start("trainer")
        run.procs["twin"] = run.start("rollout", 1)
        run.wait_until(lambda: "identity taken" in run.log_tail("rollout-1"), 120, "the twin to take the identity")
        (logs / "rollout-1.log").rename(logs / "twin.log")
        run.start("rollout", 0)
        run.start("rollout", 1)
        run.wait_until(lambda: "claim is held by" in run.log_tail("rollout-1"), 120, "the original to wait")
        run.wait_all(timeout=300)
    finally:
        run.kill_all()
    acc = run.accounting()
    assert acc["produced"] == steps and acc["consumed"] + acc["stale"] == steps, acc
    assert acc["duplicates"] == 0 and acc["backlog_entries"] == 0, acc
    original, twin = run.log_tail("rollout-1", 100_000), (logs / "twin.log").read_text()
    epochs = [int(re.search(r"identity taken with fencing epoch (\d+)", text).group(1)) for text in (twin, original)]
    assert epochs[1] > epochs[0] and "share done" in original, original[-3000:]
    assert f"after {steps // 2} transitions" in (logs / "twin.log").read_text(), (logs / "twin.log").read_text()


@FULL_TIER
def test_a_twin_rollout_worker_of_a_second_shard_on_a_second_server_counts_nothing_twice(
    tmp_path, redis_server, redis_server_b
):
    _twin_waits_and_run_counts_once(
        tmp_path,
        "rollout-1",
        [
            "--mode",
            "async",
            "--workers",
            "2",
            "--memory-shards",
            "2",
            "--memory",
            f"{redis_server.url},{redis_server_b.url}",
        ],
        12000,
    )


def test_a_twin_of_a_learner_in_a_group_of_two_waits_and_ends_with_the_run(tmp_path):
    _, _, _, text = _twin_waits_and_run_counts_once(
        tmp_path, "learner-1", ["--mode", "async", "--workers", "2", "--learners", "2", "--memory-shards", "2"], 8000
    )
    assert "nothing to do" in text, text[-3000:]


def test_a_twin_evaluator_records_no_version_twice(tmp_path):
    run, summary, _, _ = _twin_waits_and_run_counts_once(
        tmp_path, "evaluator", ["--mode", "async", "--workers", "2", "--publish-every-updates", "25"], 12000
    )
    versions = [json.loads(line)["version"] for line in (run.dir / "evaluations.jsonl").read_text().splitlines()]
    assert versions and len(versions) == len(set(versions)), versions
    assert summary["evaluations"] == len(versions), summary


def test_a_worker_paused_past_its_lease_is_superseded_by_its_twin_and_counts_nothing_twice(tmp_path):
    """rollout-1 is SIGSTOPped, its twin waits out the claim's lease and takes the identity (a fresh epoch);
    SIGCONTed, rollout-1 has its next write refused and exits with ``EXIT_SUPERSEDED``, which the orchestrator
    does not restart; the twin finishes the share."""
    steps = 8000
    run = Run(
        tmp_path, "twin-paused", ["--mode", "async", "--workers", "2", "--steps", str(steps), "--hang-timeout-s", "600"]
    )
    run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000, timeout=180)
    original = run.pid("rollout-1")
    os.kill(original, signal.SIGSTOP)
    twin = Twin(run, "rollout-1")
    try:
        _until("the twin to take the identity", lambda: "identity taken" in twin.text(), timeout=60)
        consumed = run.consumed()
        run.wait_until("the twin's transitions consumed", lambda: run.consumed() >= consumed + 200, timeout=120)
    finally:
        os.kill(original, signal.SIGCONT)
    summary, err, code = _finish(run, twin)
    assert code == 0, twin.text()[-3000:]
    assert f"rollout-1 was superseded by another process with its identity (exit code {EXIT_SUPERSEDED})" in err, err[
        -3000:
    ]
    assert summary["restarts"]["rollout"] == 0, summary["restarts"]
    _accounts_for_everything(summary, steps)
    assert summary["duplicates_dropped"] == 0, summary
    log = (run.dir / "logs" / "rollout-1.log").read_text(errors="replace")
    assert "superseded" in log and "Traceback" not in log, log[-3000:]
