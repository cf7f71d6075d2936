"""Start-up of a local run: services forked from the fork server against services started as new processes.

The local backend forks its trainer, rollout workers and evaluator from a fork server that imported torch once
(``orchestrator/backends/local/forkserver.py``); ``DRL_FORKSERVER=0`` starts each as ``python -m services.X``,
which imports torch itself. The baseline is that second way, measured in the same run, interleaved: for each
worker count and repeat, both ways run one after the other, in an order that swaps every repeat.

Each run is the real command line, ``drl-orchestrate --preset ppo --env CartPole-v1 --workers N --steps S
--eval-episodes 1 --seed R --output TMP --run-name NAME`` (a private Valkey server, N rollout workers, the trainer
and the evaluator; SYNC PPO), with ``S`` = 1,024 x N so that every worker has a little to do. Measured:

- **ready**: seconds from launching ``drl-orchestrate`` until every service has logged that its control endpoint
  is up (the log lines' clock against the launch time; the services log it after their imports and set-up);
- **wall**: seconds until ``drl-orchestrate`` exited, the whole short run included;
- **CPU**: user + system CPU seconds of ``drl-orchestrate`` and everything it started (``RUSAGE_CHILDREN``).

The figures are medians over ``--repeats``; ``fork/new`` is the fork server's median over the new processes'.

    python -m bench.startup                  # 4 and 16 workers, 3 repeats (about 5 minutes on 2 cores)
    python -m bench.startup --quick          # 4 workers, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench.time_to_score import git_commit, version

SIDES = {"fork": "1", "new": "0"}
READY_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ INFO control endpoint")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _ready_at(logs: Path) -> float | None:
    """The latest time any service logged its control endpoint (first such line per log), or None if one never did."""
    latest = 0.0
    files = list(logs.glob("*.log"))
    if not files:
        return None
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            match = READY_LINE.match(line)
            if match:
                latest = max(latest, datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
                break
        else:
            return None
    return latest


def run_one(side: str, workers: int, repeat: int, args: argparse.Namespace, workdir: Path) -> dict:
    run = f"start-{side}-{workers}-{repeat}"
    command = [
        str(Path(sys.executable).with_name("drl-orchestrate")),
        "--preset",
        "ppo",
        "--env",
        "CartPole-v1",
        "--workers",
        str(workers),
        "--steps",
        str(1024 * workers),
        "--eval-episodes",
        "1",
        "--seed",
        str(repeat),
        "--output",
        str(workdir),
        "--run-name",
        run,
    ]
    env = {**os.environ, "DRL_FORKSERVER": SIDES[side]}
    cpu = _children_cpu()
    launched = time.time()
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    wall = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    ready = _ready_at(workdir / run / "logs")
    row = {"side": side, "workers": workers, "repeat": repeat, "exit_code": proc.returncode}
    if proc.returncode != 0 or ready is None:
        return {**row, "failed": True, "log_tail": (proc.stdout + proc.stderr)[-2000:]}
    return {
        **row,
        "failed": False,
        "ready_s": round(ready - launched, 2),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
    }


def summarize(rows: list[dict], counts: list[int]) -> list[dict]:
    out = []
    for n in counts:
        entry: dict = {"workers": n}
        for side in SIDES:
            ok = [r for r in rows if r["workers"] == n and r["side"] == side and not r["failed"]]
            entry[side] = {
                k: round(statistics.median(r[k] for r in ok), 2) if ok else None for k in ("ready_s", "wall_s", "cpu_s")
            }
            entry[side]["runs"] = len(ok)
        entry["ratio"] = {
            k: round(entry["fork"][k] / entry["new"][k], 3) if entry["fork"][k] and entry["new"][k] else None
            for k in ("ready_s", "wall_s", "cpu_s")
        }
        out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="4,16", help="comma-separated worker counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="4 workers, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.repeats = "4", 1
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="drl-startup-"))
    rows = []
    try:
        for repeat in range(args.repeats):
            for n in counts:
                for side in ("fork", "new") if repeat % 2 == 0 else ("new", "fork"):
                    row = run_one(side, n, repeat, args, workdir)
                    rows.append(row)
                    shown = (
                        "failed"
                        if row["failed"]
                        else f"ready {row['ready_s']:.1f} s, wall {row['wall_s']:.1f} s, CPU {row['cpu_s']:.1f} s"
                    )
                    print(f"repeat {repeat} workers {n:>3} {side:>4}: {shown}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summarize(rows, counts)
    print("workers | ready fork / new s | wall fork / new s | CPU fork / new s | ready, wall, CPU fork/new")
    for e in summary:
        f, n, r = e["fork"], e["new"], e["ratio"]
        print(
            f"{e['workers']} | {f['ready_s']} / {n['ready_s']} | {f['wall_s']} / {n['wall_s']} | "
            f"{f['cpu_s']} / {n['cpu_s']} | {r['ready_s']}, {r['wall_s']}, {r['cpu_s']}"
        )
    for r in rows:
        if r["failed"]:
            print(
                f"{r['side']} with {r['workers']} workers, repeat {r['repeat']} failed:\n{r['log_tail']}",
                file=sys.stderr,
            )
    print(
        json.dumps(
            {
                "summary": summary,
                "rows": rows,
                "repeats": args.repeats,
                "goal": "measured, no goal: start-up with the fork server against new processes",
                "goal_met": None,
                "command": " ".join(["python", "-m", "bench.startup", *(argv if argv is not None else sys.argv[1:])]),
                "machine": {
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                },
                "versions": {"drl": git_commit(), "torch": version("torch"), "gymnasium": version("gymnasium")},
            }
        )
    )
    return 0 if all(not r["failed"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
