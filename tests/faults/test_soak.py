"""Soak: many rollout workers for a long time; no process's resident memory grows after its warm-up.

Opt-in (it occupies the machine for its whole duration):

    DRL_SOAK=1 .venv/bin/python -m pytest tests/faults/test_soak.py -m soak -s

``DRL_SOAK_WORKERS`` (32) rollout workers run an ASYNC SAC run on Pendulum-v1 for ``DRL_SOAK_S`` seconds (600).
Every process's resident set size (``VmRSS``) is sampled every few seconds. The first ``DRL_SOAK_WARMUP``
fraction of the time (0.3) is warm-up: replay fills, allocators reach their working set, caches load. After it, no
process may exceed its size at the end of warm-up by more than 10%. The run is then ended with ``drl-orchestrate
stop`` and must account for every transition. The figures are printed per role (median and largest process).
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from tests.conftest import read_summary, run_cli
from tests.faults.test_supervision import Run
from tests.harness import assert_balanced

SOAK_S = float(os.environ.get("DRL_SOAK_S", "600"))
WORKERS = int(os.environ.get("DRL_SOAK_WORKERS", "32"))
WARMUP = float(os.environ.get("DRL_SOAK_WARMUP", "0.3"))
GROWTH = 1.10

pytestmark = [
    pytest.mark.soak,
    pytest.mark.skipif(os.environ.get("DRL_SOAK") != "1", reason="opt-in: set DRL_SOAK=1 (takes DRL_SOAK_S, 600 s)"),
]


def _rss_kib(pid: int) -> int | None:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def test_resident_memory_stays_flat_after_warm_up(tmp_path):
    run = Run(
        tmp_path,
        "soak",
        [
            "--mode",
            "async",
            "--workers",
            str(WORKERS),
            "--steps",
            "100000000",
            "--replay-size",
            "200000",
            "--eval-episodes",
            "2",
        ],
    )
    run.wait_until("every process started", lambda: len(run.state().get("processes", [])) == WORKERS + 2)
    started = time.monotonic()
    warm: dict[str, int] = {}
    peak: dict[str, int] = {}
    roles = {p["name"]: p["role"] for p in run.state()["processes"]}
    while time.monotonic() - started < SOAK_S:
        assert run.proc.poll() is None, run.proc.stderr.read()[-3000:]
        pids = {p["name"]: p["pid"] for p in run.state()["processes"]}
        sizes = {name: _rss_kib(pid) for name, pid in pids.items()}
        if time.monotonic() - started < WARMUP * SOAK_S:
            warm.update({n: s for n, s in sizes.items() if s})
        else:
            for n, s in sizes.items():
                if s:
                    peak[n] = max(peak.get(n, 0), s)
        time.sleep(5)
    restarts = {p["name"]: p["restarts"] for p in run.state()["processes"]}
    stopped = run_cli(["stop", "soak", "--output", str(tmp_path)], timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    run.proc.communicate(timeout=600)
    summary = read_summary(run.dir)
    assert_balanced(summary)

    print(
        f"\nsoak: {WORKERS} workers, {SOAK_S:.0f} s, warm-up {WARMUP * SOAK_S:.0f} s; "
        f"{summary['env_steps']:,} env steps, {summary['updates']:,} updates, restarts {summary['restarts']}"
    )
    print(f"{'role':<10} {'processes':>9} {'warm MiB (median)':>18} {'after MiB (median)':>19} {'largest growth':>15}")
    for role in ("trainer", "rollout", "evaluator"):
        names = [n for n in warm if roles.get(n) == role and n in peak]
        growth = max(peak[n] / warm[n] for n in names)
        print(
            f"{role:<10} {len(names):>9} {statistics.median(warm[n] for n in names) / 1024:>18.1f} "
            f"{statistics.median(peak[n] for n in names) / 1024:>19.1f} {100 * (growth - 1):>14.1f}%"
        )
    grown = {
        n: f"{warm[n] / 1024:.1f} -> {peak[n] / 1024:.1f} MiB" for n in peak if n in warm and peak[n] > GROWTH * warm[n]
    }
    assert not grown, f"resident memory grew by more than 10% after warm-up: {grown}"
    assert not any(restarts.values()), f"processes were restarted during the soak: {restarts}"
    assert summary["exit_reason"] == "stopped"
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary["stale_dropped"] + sum(
        summary["dead_lettered"].values()
    )
    assert summary["transitions_unconsumed"] == 0
