"""The data store's server unavailable for 20 seconds in the middle of a run: publications and checkpoints are
retried, and the run completes with nothing lost. Here the server hangs (SIGSTOP) on this host; the same outage
runs in every suite across hosts (``tests/hosts``: the store's host unreachable for 20 s), so this variant is in
the full tier."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

from tests.conftest import ROOT, read_summary, run_cli
from tests.harness import FULL_TIER, assert_balanced
from tests.integration.test_checkpoints_and_resume import SMALL

STEPS = 20_000  # about 8 s of this run without an outage: it must still be running when the outage starts


@FULL_TIER
def test_run_completes_through_a_20s_s3_outage(tmp_path, s3_server):
    bucket = f"drl-{uuid.uuid4().hex[:8]}"
    args = [
        *SMALL,
        "--mode",
        "async",
        "--steps",
        str(STEPS),
        "--publish-every-updates",
        "25",
        "--output",
        str(tmp_path),
        "--run-name",
        "outage",
        "--store",
        f"s3://{bucket}/drl",
    ]
    env = {**os.environ, **s3_server.env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "outage" / "logs" / "trainer.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and "trainer of run" in log.read_text()):
        time.sleep(0.2)
    time.sleep(0.5)
    os.kill(s3_server.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(20)
    finally:
        os.kill(s3_server.proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    summary = read_summary(tmp_path / "outage")
    assert_balanced(summary)
    assert summary["exit_reason"] == "steps_done" and summary["transitions_consumed"] == STEPS
    logs = "".join(p.read_text() for p in (tmp_path / "outage" / "logs").glob("*.log"))
    assert "S3 put" in logs or "S3 get" in logs, "the outage was never noticed: the test did not test it"

    shown = run_cli(
        ["evaluate", "--store", f"s3://{bucket}/drl", "--run", "outage", "--episodes", "2"],
        env=s3_server.env,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout.strip().splitlines()[-1])
    assert result["version"] == summary["policy_version"] and len(result["returns"]) == 2
