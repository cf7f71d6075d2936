"""Atari time to score: wall-clock seconds until drl first evaluates at a mean return of 18 on ALE/Pong-v5, within a
stated time budget; the best evaluated return is the figure when the score is not reached.

The question is the user's, as in ``bench.time_to_score``: how long from "go" until the policy is good. Pong's
scores run from -21 to 21 and 18 is the usual "solved" mark. On a CPU-only machine a budget of hours will not
reach it (see ``bench.atari_learner`` for the update rate); run it on a GPU machine, and record the figure
either way.

One run per seed (``--seeds``), one after the other: the real command line as a subprocess,
``drl-orchestrate --preset dqn-atari --env ALE/Pong-v5 --mode async --workers W --seed S --steps 10^9
--target-return 18 --trainer-threads T [--drl-args] --output TMP --run-name NAME`` (``--preset ppo-atari`` for
PPO; ``bench.time_to_score.run_drl`` runs it), stopped like Ctrl-C once ``--budget-s`` seconds have passed on the
run's own clock (plus 30 s for its start-up). The evaluator scores each published version with its
deterministic episodes (the preset's ``eval_episodes``; the game's real score: no reward clipping, no life-loss
terminals in evaluation) and writes ``evaluations.jsonl``. **Time to score** is the ``wall_seconds`` (since the
orchestrator started the run, start-up included) of the first evaluation with ``mean_return >= 18``; the run
also reports the best evaluated mean return, the number of evaluations, env steps and updates at the end
(``summary.json``). The last line is one JSON object with every figure, the budget, the command, the machine and
the versions.

    python -m bench.atari_time_to_score --budget-s 3600                  # seed 0, one hour
    python -m bench.atari_time_to_score --preset ppo-atari --budget-s 3600 --workers 8
    python -m bench.atari_time_to_score --quick                          # a 120 s smoke run: no score expected
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path

from bench.time_to_score import git_commit, run_drl, version

ENV = "ALE/Pong-v5"
TARGET = 18.0
FOREVER = 10**9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="dqn-atari", help="dqn-atari or ppo-atari")
    parser.add_argument("--env", default=ENV)
    parser.add_argument("--target", type=float, default=TARGET)
    parser.add_argument("--budget-s", type=float, default=3600.0, help="seconds per run on the run's own clock")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of drl's trainer")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, one run each")
    parser.add_argument("--drl-args", default="", help="extra drl-orchestrate flags")
    parser.add_argument("--keep", help="keep the runs' folders here (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="a 120 s smoke run of seed 0")
    args = parser.parse_args(argv)
    if args.quick:
        args.budget_s, args.seeds = 120.0, "0"
    from drl.presets import PRESETS

    if args.preset not in PRESETS:
        print(
            f"drl's {args.preset} preset is not on this tree yet (issue 24's frame path); presets: "
            f"{', '.join(sorted(PRESETS))}",
            file=sys.stderr,
        )
        return 1
    # bench.time_to_score.run_drl reads these names
    args.steps, args.time_budget, args.run_timeout = FOREVER, args.budget_s, args.budget_s + 300.0
    seeds = [int(s) for s in args.seeds.split(",")]

    command = " ".join(
        [
            os.path.basename(sys.executable),
            "-m",
            "bench.atari_time_to_score",
            *map(shlex.quote, sys.argv[1:] if argv is None else argv),
        ]
    )
    machine = {"cores": os.cpu_count(), "platform": platform.platform(), "load_average_start": os.getloadavg()[0]}
    versions = {
        "python": platform.python_version(),
        "torch": version("torch"),
        "gymnasium": version("gymnasium"),
        "ale-py": version("ale-py"),
        "drl": git_commit(),
    }
    print(f"command:  {command}")
    print(f"machine:  {machine['cores']} CPUs, {machine['platform']}, load average {machine['load_average_start']:.2f}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(
        f"setup:    {args.preset} on {args.env}, {args.workers} workers, target {args.target:g}, budget "
        f"{args.budget_s:g} s per run, seeds {seeds}",
        flush=True,
    )

    results = []
    with tempfile.TemporaryDirectory(prefix="drl-atari-tts-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            result, _config = run_drl(seed, args, workdir)
            results.append(result)
            reached = (
                f"reached {args.target:g} after {result['time_to_score_s']:.1f} s"
                if result["reached"]
                else f"not reached in {args.budget_s:g} s"
            )
            print(
                f"  seed {seed}: {reached}; best mean return {result['best_return']}, "
                f"{result['evaluations']} evaluations, {result['env_steps_total']} env steps, "
                f"exit {result['exit_code']} ({result['exit_reason']})",
                flush=True,
            )
    machine["load_average_end"] = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "preset": args.preset,
                "env": args.env,
                "target": args.target,
                "budget_s": args.budget_s,
                "reached": [r["reached"] for r in results],
                "time_to_score_s": [r["time_to_score_s"] for r in results],
                "best_return": [r["best_return"] for r in results],
                "runs": results,
                "workers": args.workers,
                "threads": args.threads,
                "drl_args": args.drl_args,
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
