"""The run's disk refuses writes: a full ``--output`` disk, a read-only store. The run ends with one clear line
naming what was refused, exit 1 and no traceback, its summary written where it can be (else on stderr), every
transition accounted for, and the newest checkpoint that was written intact."""

from __future__ import annotations

import json
import time

from drl.store import open_store, run_store
from drl.store.checkpoint import CheckpointStore
from tests.conftest import read_summary
from tests.faults.mounts import fill, read_only, small_disk
from tests.faults.test_supervision import Run
from tests.harness import assert_balanced


def _stderr_summary(err: str) -> dict:
    head, _, text = err.partition("; here it is:\n")
    assert text, f"no summary on stderr:\n{err[-3000:]}"
    return json.JSONDecoder().raw_decode(text)[0]


def test_a_full_output_disk_ends_the_run_cleanly_and_keeps_the_newest_checkpoint(tmp_path):
    output = tmp_path / "disk"
    with small_disk(output, 64 * 1024):
        run = Run(
            output, "full", ["--mode", "async", "--workers", "2", "--steps", "100000", "--checkpoint-every-s", "1"]
        )
        checkpoints = CheckpointStore(run_store(str(output), "full"), "full")
        try:
            run.wait_until("a checkpoint", lambda: len(checkpoints.sequences()) >= 1, timeout=120)
            time.sleep(1.0)
            fill(output)
            _, err = run.proc.communicate(timeout=240)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        assert run.proc.returncode == 1, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        failure = [line for line in err.splitlines() if line.startswith("drl: the run failed:")]
        assert len(failure) == 1 and "No space left on device" in failure[0], err[-3000:]
        summary = read_summary(run.dir) if (run.dir / "summary.json").exists() else _stderr_summary(err)
        assert summary["exit_reason"].startswith("failed: No space left on device"), summary["exit_reason"]
        assert_balanced(summary)
        sequences = checkpoints.sequences()
        newest = checkpoints.latest()
        assert newest is not None and newest[0].sequence == sequences[-1], (
            f"the newest checkpoint of {sequences} does not verify"
        )


def test_a_read_only_store_ends_the_run_with_one_line_naming_it(tmp_path):
    store = tmp_path / "store"
    open_store(str(store))
    run = Run(
        tmp_path,
        "readonly",
        ["--mode", "async", "--workers", "2", "--steps", "8000", "--max-restarts", "1", "--store", str(store)],
    )
    try:
        run.wait_until("1,000 transitions consumed", lambda: run.consumed() >= 1000)
        with read_only(store):
            _, err = run.proc.communicate(timeout=300)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert run.proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    failure = [line for line in err.splitlines() if line.startswith("drl: the run failed:")]
    assert len(failure) == 1 and "Read-only file system" in failure[0], err[-3000:]
    summary = read_summary(run.dir)
    assert summary["exit_reason"].startswith("failed:"), summary["exit_reason"]
    assert_balanced(summary)
