"""Where a run's CPU and GPU went, for ``bench/gpu_pong.sh``.

    python -m bench.gpu_roles RUN_DIR CPU_TSV PID   # every 5 s until PID ends: CPU seconds per role into CPU_TSV
    python -m bench.gpu_roles --report OUT          # the report: time to score, the curve, cores per role, GPU busy

Roles come from the run's ``state.json`` (each service's pid and role) and its memory server's pid; CPU seconds
are ``utime + stime`` from ``/proc/PID/stat``, threads included. The report reads ``OUT/cpu.tsv``,
``OUT/gpu.csv`` (nvidia-smi's ``utilization.gpu`` every second) and ``OUT/evaluations.jsonl``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
FRAME_SKIP = 4


def cpu_s(pid: int) -> float | None:
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(rest[11]) + int(rest[12])) / TICKS


def roles(run_dir: Path) -> dict[int, str]:
    try:
        state = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    found = {int(p["pid"]): str(p["role"]) for p in state.get("processes", []) if p.get("pid")}
    if state.get("memory_pid"):
        found[int(state["memory_pid"])] = "memory"
    if state.get("orchestrator_pid"):
        found[int(state["orchestrator_pid"])] = "orchestrator"
    return found


def sample(run_dir: Path, out: Path, pid: int, every_s: float = 5.0) -> None:
    with open(out, "w") as fh:
        fh.write("t\trole\tpid\tcpu_s\n")
        start = time.time()
        while Path(f"/proc/{pid}").exists():
            for p, role in roles(run_dir).items():
                used = cpu_s(p)
                if used is not None:
                    fh.write(f"{time.time() - start:.1f}\t{role}\t{p}\t{used:.2f}\n")
            fh.flush()
            time.sleep(every_s)


def report(out: Path) -> None:
    evaluations = [json.loads(line) for line in (out / "evaluations.jsonl").read_text().splitlines() if line.strip()]
    target = json.loads((out / "config.json").read_text()).get("target_return")
    scored = next((e for e in evaluations if target is not None and e["mean_return"] >= target), None)
    best = max(evaluations, key=lambda e: e["mean_return"]) if evaluations else None
    if scored:
        print(
            f"time to score {target:g}: {scored['wall_seconds']:.0f} s, {scored['env_steps']:,} agent steps "
            f"({FRAME_SKIP * scored['env_steps']:,} frames), policy version {scored['version']}"
        )
    else:
        print(f"target {target} not reached")
    if best:
        print(
            f"best mean return {best['mean_return']:.1f} at {best['wall_seconds']:.0f} s, {best['env_steps']:,} steps"
        )
    print("curve: wall s, agent steps, frames, mean return")
    step = max(1, len(evaluations) // 25)
    for e in evaluations[::step] + ([evaluations[-1]] if evaluations else []):
        print(
            f"  {e['wall_seconds']:8.0f} {e['env_steps']:12,} {FRAME_SKIP * e['env_steps']:13,} {e['mean_return']:7.1f}"
        )
    per_pid: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    try:
        lines = (out / "cpu.tsv").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        t, role, pid, used = line.split("\t")
        per_pid[int(pid)].append((float(t), float(used), role))
    cores: dict[str, float] = defaultdict(float)
    span = 0.0
    for samples in per_pid.values():
        (t0, c0, role), (t1, c1, _) = samples[0], samples[-1]
        span = max(span, t1 - t0)
        if t1 > t0:
            cores[role] += (c1 - c0) / (t1 - t0)
    if cores:
        print(
            "cores per role (mean over each process's sampled life): "
            + ", ".join(f"{role} {value:.2f}" for role, value in sorted(cores.items(), key=lambda kv: -kv[1]))
        )
    try:
        busy = [float(row.split(",")[1].strip().rstrip(" %")) for row in (out / "gpu.csv").read_text().splitlines()]
    except (OSError, ValueError, IndexError):
        busy = []
    if busy:
        print(
            f"GPU utilisation: mean {statistics.mean(busy):.0f}%, median {statistics.median(busy):.0f}% ({len(busy)} s)"
        )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--report"]:
        report(Path(argv[1]))
        return 0
    sample(Path(argv[0]), Path(argv[1]), int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
