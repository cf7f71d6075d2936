"""The score table: each preset on its reference environments, 3 seeds, a stated budget, beside a published figure.

    python -m bench.scores                          # every row that fits this machine (Atari rows need --atari)
    python -m bench.scores --only ppo:CartPole-v1,sac:Pendulum-v1 --seeds 0,1,2
    python -m bench.scores --write docs/benchmarks.md   # also rewrites the table between its markers there
    python -m bench.scores --only sac-lunar:LunarLanderContinuous-v3 --jobs 3   # the 3 seeds at once
    python -m bench.scores --only sac-lunar:LunarLanderContinuous-v3 --seeds 2 --write docs/benchmarks.md
                                                    # one more seed; the row keeps the seeds written before

Each run is the real command line, ``drl-orchestrate --preset P --env E --seed S --steps BUDGET`` with the
preset's own values (workers, envs, learning rates), one run at a time unless ``--jobs`` runs a row's seeds at
once (the presets fix the updates per transition, so learning does not depend on it; the minutes, and which
versions the evaluator gets to score, do). From its ``summary.json``: the **final** mean evaluation return (the
last version the evaluator scored, ``last_eval_return``) and the **best** one (``best_eval_return``), with the
run's wall seconds. The table gives the median over the seeds and every seed's figure, so a seed that failed to
learn shows. A run that stopped before its budget (other than at a ``--target-return``) has no score in the table
(``-``); Ctrl-C ends the benchmark and leaves the table as it was. ``--write`` keeps every seed's figures, with
the command and commit that measured it, in ``docs/benchmarks/scores.json``, and writes a row from all the seeds
measured for it at its budget: a row's missing seeds can be run another day.

The reference column is a published figure for the same environment, never measured here: RL Baselines3 Zoo's
``benchmark.md`` (DLR-RM/rl-baselines3-zoo, its "Performance of trained agents" table: one trained agent per
entry, mean return of the deterministic policy over about 150,000 evaluation steps after ``n_timesteps``; the zoo
runs LunarLander-v2 and LunarLanderContinuous-v2, gymnasium's v3 changed only bug fixes of the physics), the
algorithm named in the column. MinAtar has no published table; its reference is a uniformly random policy's
100-episode mean measured once (bench/README.md). APPO has no zoo entry: its rows quote the zoo's PPO.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.scaling import orchestrate_exe
from bench.time_to_score import git_commit

ZOO = "RL Zoo benchmark.md"
MARK_BEGIN = "<!-- bench.scores: begin -->"
MARK_END = "<!-- bench.scores: end -->"


@dataclass(frozen=True)
class Row:
    preset: str
    env: str
    steps: int
    reference: float | None
    source: str
    atari: bool = False

    @property
    def key(self) -> str:
        return f"{self.preset}:{self.env}"


ROWS = (
    Row("ppo", "CartPole-v1", 100_000, 500.0, f"{ZOO}: ppo, 100k steps"),
    Row("dqn", "CartPole-v1", 50_000, 500.0, f"{ZOO}: dqn, 50k steps"),
    Row("appo", "CartPole-v1", 100_000, 500.0, f"{ZOO}: ppo, 100k steps"),
    Row("ppo", "Acrobot-v1", 200_000, -73.5, f"{ZOO}: ppo, 1M steps"),
    Row("dqn", "Acrobot-v1", 100_000, -76.6, f"{ZOO}: dqn, 100k steps"),
    Row("ppo", "LunarLander-v3", 1_000_000, 242.1, f"{ZOO}: ppo on v2, 1M steps"),
    Row("dqn", "LunarLander-v3", 500_000, 154.4, f"{ZOO}: dqn on v2, 100k steps"),
    Row("sac", "Pendulum-v1", 20_000, -157.0, f"{ZOO}: sac, 20k steps"),
    Row("td3", "Pendulum-v1", 20_000, -151.9, f"{ZOO}: td3, 20k steps"),
    Row("sac-lunar", "LunarLanderContinuous-v3", 500_000, 260.4, f"{ZOO}: sac on v2, 500k steps"),
    Row("td3", "LunarLanderContinuous-v3", 300_000, 207.5, f"{ZOO}: td3 on v2, 300k steps"),
    Row("dqn", "MinAtar/Breakout-v1", 500_000, 0.34, "uniformly random policy (bench/README.md)"),
    Row("ppo", "MinAtar/Breakout-v1", 500_000, 0.34, "uniformly random policy (bench/README.md)"),
    Row("appo", "MinAtar/Breakout-v1", 500_000, 0.34, "uniformly random policy (bench/README.md)"),
    Row("dqn", "MinAtar/SpaceInvaders-v1", 500_000, None, "none published"),
    Row("ppo", "MinAtar/SpaceInvaders-v1", 500_000, None, "none published"),
    Row("appo", "MinAtar/SpaceInvaders-v1", 500_000, None, "none published"),
    Row("dqn-atari", "ALE/Pong-v5", 10_000_000, 20.6, f"{ZOO}: dqn on PongNoFrameskip-v4, 10M steps", atari=True),
    Row("appo-atari", "ALE/Pong-v5", 10_000_000, 21.0, f"{ZOO}: ppo on PongNoFrameskip-v4, 10M steps", atari=True),
)


INTERRUPTED = 130
"""drl-orchestrate's exit code when it was interrupted (Ctrl-C): the table is left as it was."""


def run_one(row: Row, seed: int, workdir: Path, extra: list[str]) -> dict:
    """One seed's run to its whole budget; a run that stopped before it counts as failed (no score), not as a
    score at fewer steps."""
    name = f"{row.preset}-{row.env.replace('/', '-')}-s{seed}"
    command = [orchestrate_exe(), "--preset", row.preset, "--env", row.env, "--seed", str(seed)]
    command += ["--steps", str(row.steps), *extra, "--output", str(workdir), "--run-name", name]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    result: dict = {"seed": seed, "exit_code": done.returncode, "seconds": round(time.monotonic() - started, 1)}
    if done.returncode == INTERRUPTED:
        raise KeyboardInterrupt
    try:
        summary = json.loads((workdir / name / "summary.json").read_text())
    except (OSError, ValueError):
        return {**result, "error": done.stderr[-600:]}
    if summary.get("exit_reason") not in ("steps_done", "target_reached"):
        return {**result, "error": f"stopped before its budget: {summary.get('exit_reason')}"}
    return {
        **result,
        "final": summary.get("last_eval_return"),
        "best": summary.get("best_eval_return"),
        "env_steps": summary.get("env_steps"),
        "exit_reason": summary.get("exit_reason"),
    }


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(results: list[dict]) -> list[str]:
    lines = [
        "| preset | env | budget (steps) | final, median (seeds) | best, median (seeds) | minutes a run | reference | source |",
        "|---|---|---:|---|---|---:|---:|---|",
    ]
    for r in results:
        runs = r["runs"]
        finals = ", ".join(fmt(x.get("final")) for x in runs)
        bests = ", ".join(fmt(x.get("best")) for x in runs)
        minutes = median([x.get("seconds") for x in runs])
        lines.append(
            f"| {r['preset']} | {r['env']} | {r['steps']:,} | {fmt(median([x.get('final') for x in runs]))} "
            f"({finals}) | {fmt(median([x.get('best') for x in runs]))} ({bests}) | "
            f"{'-' if minutes is None else f'{minutes / 60:.1f}'} | {fmt(r['reference'])} | {r['source']} |"
        )
    return lines


def not_run(row: Row) -> str:
    where = " (a GPU machine's, `--atari`)" if row.atari else ""
    return f"| {row.preset} | {row.env} | {row.steps:,} | not run yet{where} | - | - | {fmt(row.reference)} | {row.source} |"


def seeds_file(path: Path) -> Path:
    """Where ``--write`` keeps each row's per-seed results: ``docs/benchmarks/scores.json`` beside
    ``docs/benchmarks.md``."""
    return path.parent / path.stem / "scores.json"


def merged(path: Path, results: list[dict], command: str) -> list[dict]:
    """The rows of ``results`` with the seeds measured for them before, at the same budget, so that a row's
    missing seeds can be run later (``--seeds 1,2``) without losing the others; a seed measured again replaces
    its old figure. Every seed keeps the command and commit that measured it; the file is written back."""
    store = seeds_file(path)
    kept = json.loads(store.read_text()) if store.exists() else {}
    commit = git_commit()[:12]
    rows = []
    for result in results:
        key = f"{result['preset']}:{result['env']}"
        before = kept.get(key, {})
        runs = (
            {int(s): run for s, run in before.get("runs", {}).items()} if before.get("steps") == result["steps"] else {}
        )
        for run in result["runs"]:
            runs[int(run["seed"])] = {**run, "command": command, "commit": commit}
        kept[key] = {"steps": result["steps"], "runs": {str(s): runs[s] for s in sorted(runs)}}
        rows.append({**result, "runs": [runs[s] for s in sorted(runs)]})
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    return rows


def write(path: Path, results: list[dict], command: str) -> None:
    """Replaces the rows of the table between the markers in ``path`` with these, each with the seeds measured
    for it before (``merged``); rows not measured this time stay as they were, and a row never measured is
    listed as not run, with its budget and reference."""
    text = path.read_text()
    if MARK_BEGIN not in text or MARK_END not in text:
        raise SystemExit(f"bench.scores: {path} has no {MARK_BEGIN} ... {MARK_END} section")
    lines = table(merged(path, results, command))
    head, rest = text.split(MARK_BEGIN, 1)
    old, tail = rest.split(MARK_END, 1)
    kept = {
        tuple(cell.strip() for cell in line.split("|")[1:3]): line
        for line in old.splitlines()
        if line.startswith("| ") and not line.startswith("| preset")
    }
    for line in lines[2:]:
        kept[tuple(cell.strip() for cell in line.split("|")[1:3])] = line
    for row in ROWS:
        if (row.preset, row.env) not in kept:
            kept[(row.preset, row.env)] = not_run(row)
    order = {(row.preset, row.env): i for i, row in enumerate(ROWS)}
    rows = sorted(kept.values(), key=lambda line: order.get(tuple(c.strip() for c in line.split("|")[1:3]), 999))
    footer = (
        f"Last written by `{command}` at {git_commit()[:12]}; the command and commit of each seed are in "
        f"`{path.stem}/{seeds_file(path).name}` beside this file."
    )
    body = "\n".join([lines[0], lines[1], *rows, "", footer])
    path.write_text(f"{head}{MARK_BEGIN}\n{body}\n{MARK_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scores", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--only", default="", help="comma-separated preset:env rows (default: all that fit)")
    parser.add_argument("--atari", action="store_true", help="include the Atari rows (a GPU machine's budget)")
    parser.add_argument("--drl-args", default="", help="extra drl-orchestrate flags for every run")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="seeds of a row run at once (default 1; the runs then share the machine, so their minutes grow)",
    )
    parser.add_argument("--write", type=Path, help="rewrite the table in this markdown file (docs/benchmarks.md)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    wanted = {k.strip() for k in args.only.split(",") if k.strip()}
    rows = [r for r in ROWS if (r.key in wanted if wanted else (args.atari or not r.atari))]
    unknown = wanted - {r.key for r in ROWS}
    if unknown:
        parser.error(f"no such rows: {', '.join(sorted(unknown))} (rows: {', '.join(r.key for r in ROWS)})")
    command = "python -m bench.scores " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        results = run_rows(rows, seeds, args.drl_args.split(), args.jobs)
    except KeyboardInterrupt:
        print("bench.scores: interrupted; nothing written", file=sys.stderr)
        return INTERRUPTED
    print("\n".join(table(results)))
    if args.write:
        write(args.write, results, command)
    print(json.dumps({"rows": results, "seeds": seeds, "command": command, "drl": git_commit()}))
    return 0


def run_rows(rows: list[Row], seeds: list[int], extra: list[str], jobs: int = 1) -> list[dict]:
    """Each row's seeds, ``jobs`` of them at a time (the results in seed order)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="drl-scores-") as tmp, ThreadPoolExecutor(max(jobs, 1)) as pool:
        for row in rows:

            def one(seed: int, row: Row = row) -> dict:
                run = run_one(row, seed, Path(tmp), extra)
                print(
                    f"{row.key} seed {seed}: final {fmt(run.get('final'))}, best {fmt(run.get('best'))}, "
                    f"{run['seconds']:.0f} s, exit {run['exit_code']}"
                    + (f" ({run['error'][-200:]})" if "error" in run else ""),
                    flush=True,
                )
                return run

            runs = list(pool.map(one, seeds))
            results.append({**row.__dict__, "runs": runs})
    return results


if __name__ == "__main__":
    sys.exit(main())
