"""Policy lag of appo with 2, 8 and 32 rollout workers: the histogram of trained transitions by lag, in
versions, as the trainer measures it (``drl.training.learning.LagHistogram``), with the run's throughput.

Each worker count runs the real command line, ``drl-orchestrate --preset appo --env CartPole-v1 --workers N
--steps S --seed 0 --output TMP --run-name lag-N`` (a private Valkey, N rollout worker processes, the trainer and
the evaluator), to its steps (no target: the run covers the same env steps whatever it learns), and reads the
summary's ``policy_lag``. Lag is counted in published versions, one per batch under the preset
(``--publish-every-updates 1``), so it says how many learner batches were trained between the policy that
collected a segment and the update that used it. The worker counts run one after another; with more workers than
cores they share the CPU, which is the point: the trainer's share shrinks as the workers' grows, and the lag with
it shows. ``--max-policy-lag`` stays 0 (no limit) so that the whole tail is seen, unless ``--max-lag`` is given.
Beside each measured mean stands the estimate the orchestrator notes at start (``Algorithm.policy_lag``, from the
run's configuration alone); ``--preset`` and ``--drl-args`` run other settings (``appo-atari`` on Pong with
``--envs-per-worker 8``, say).

    python -m bench.appo_policy_lag                      # 2, 8, 32 workers, 60,000 steps each
    python -m bench.appo_policy_lag --quick              # 2 and 8 workers, 20,000 steps
    python -m bench.appo_policy_lag --preset appo-atari --env ALE/Pong-v5 --workers 2,4 --steps 40000 \
        --drl-args '--envs-per-worker 8'
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.time_to_score import git_commit, version

REPO = Path(__file__).resolve().parent.parent


def command_line(workers: int, args: argparse.Namespace, workdir: Path, run: str) -> list[str]:
    """The options of one run (after the program's name)."""
    return [
        "--preset",
        args.preset,
        "--env",
        args.env,
        "--workers",
        str(workers),
        "--steps",
        str(args.steps),
        "--seed",
        str(args.seed),
        "--max-policy-lag",
        str(args.max_lag),
        "--output",
        str(workdir),
        "--run-name",
        run,
        *args.drl_args,
    ]


def estimate(options: list[str]) -> float | None:
    """The lag the orchestrator's start-up note reads from the same options (``Algorithm.policy_lag``)."""
    from drl.algorithms import get
    from orchestrator.cli import resolve_config

    cfg = resolve_config(options)
    return get(cfg.algorithm).policy_lag(cfg)


def run_one(workers: int, args: argparse.Namespace, workdir: Path) -> dict:
    run = f"lag-{workers}"
    options = command_line(workers, args, workdir, run)
    command = [str(Path(sys.executable).with_name("drl-orchestrate")), *options]
    expected = estimate(options)
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - started
    summary_path = workdir / run / "summary.json"
    if proc.returncode != 0 or not summary_path.exists():
        return {
            "workers": workers,
            "estimate": expected,
            "failed": True,
            "exit_code": proc.returncode,
            "log_tail": (proc.stdout + proc.stderr)[-2000:],
        }
    summary = json.loads(summary_path.read_text())
    lag = summary.get("policy_lag") or {}
    trained = sum(lag.get("histogram", {}).values())
    return {
        "workers": workers,
        "estimate": expected,
        "failed": False,
        "env_steps": summary["env_steps"],
        "wall_seconds": summary["wall_seconds"],
        "launch_seconds": round(wall, 1),
        "steps_per_s": round(summary["env_steps"] / max(summary["wall_seconds"], 1e-9), 1),
        "updates": summary["updates"],
        "policy_version": summary["policy_version"],
        "best_eval_return": summary["best_eval_return"],
        "trained": trained,
        **lag,
        "shares": {k: round(v / trained, 4) for k, v in lag.get("histogram", {}).items()} if trained else {},
    }


def print_table(rows: list[dict]) -> None:
    bounds = list(next((r["histogram"] for r in rows if not r["failed"]), {}))
    head = [
        "workers",
        "steps/s",
        "mean",
        "estimate",
        "p95",
        "max",
        "dropped",
        *[f"<={b}" if b != "inf" else ">256" for b in bounds],
    ]
    print(" | ".join(head))
    for r in rows:
        if r["failed"]:
            print(f"{r['workers']} | failed (exit {r['exit_code']})")
            continue
        cells = [
            str(r["workers"]),
            f"{r['steps_per_s']:,.0f}",
            f"{r['mean']:.2f}",
            "-" if r["estimate"] is None else f"{r['estimate']:.2f}",
            str(r["p95"]),
            str(r["max"]),
            str(r["dropped"]),
            *[f"{100 * r['shares'].get(b, 0):.1f}%" for b in bounds],
        ]
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="2,8,32", help="comma-separated worker counts")
    parser.add_argument("--preset", default="appo")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-lag", type=int, default=0, help="--max-policy-lag of the runs (0: no limit)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--drl-args", default="", help="more drl-orchestrate options, one string")
    parser.add_argument("--quick", action="store_true", help="2 and 8 workers, 20,000 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.steps = "2,8", 20_000
    args.drl_args = shlex.split(args.drl_args)
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="drl-lag-"))
    try:
        rows = [run_one(n, args, workdir) for n in counts]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(rows)
    for r in rows:
        if r["failed"]:
            print(f"workers {r['workers']} failed:\n{r['log_tail']}", file=sys.stderr)
    print(
        json.dumps(
            {
                "rows": rows,
                "preset": args.preset,
                "env": args.env,
                "steps": args.steps,
                "seed": args.seed,
                "max_policy_lag": args.max_lag,
                "goal": "measured, no goal: the lag histogram with 2, 8 and 32 workers (issue 25)",
                "goal_met": None,
                "command": " ".join(
                    ["python", "-m", "bench.appo_policy_lag", *(argv if argv is not None else sys.argv[1:])]
                ),
                "machine": {
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "cpus": __import__("os").cpu_count(),
                },
                "versions": {"drl": git_commit(), "torch": version("torch"), "gymnasium": version("gymnasium")},
            }
        )
    )
    return 0 if all(not r["failed"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
