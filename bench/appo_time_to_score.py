"""APPO time to score: drl's asynchronous V-trace APPO against drl's synchronous PPO and against RLlib's APPO.

The question is issue 25's: with N rollout workers, does drl's APPO (asynchronous: workers never wait for the
learner, V-trace corrects their lag) reach a score sooner than drl's PPO (synchronous: every worker waits for
every update), and how does it compare with a widely used implementation of the same algorithm, RLlib's? Three
sides, each trained from scratch per seed until its policy's evaluation reaches the target:

- **appo** (drl): ``drl-orchestrate --preset appo --env ENV --workers N --mode async --seed S --target-return T
  --steps STEPS --trainer-threads 1 --output TMP --run-name NAME``;
- **ppo** (drl): the same with ``--preset ppo --mode sync``;
- **rllib**: ``bench/peers/rllib_appo.py`` in the peer environment (``bash bench/peers/setup_rllib.sh`` builds it;
  ``--rllib-python`` names its interpreter): RLlib's APPO on the new API stack with N env runners of one env each
  and one learner, RLlib's tuned CartPole hyperparameters, Ray held to this machine's CPUs (that script's
  docstring gives the settings and their source).

Every side is scored as drl's evaluator scores a policy: 10 deterministic episodes, episode i reset with seed
``seed + 1_000_000 + i``. **Time to score**, drl (both sides): ``wall_seconds`` of the first evaluation with
``mean_return >= target`` in the run's ``evaluations.jsonl``, as ``bench.time_to_score`` times drl (whose helpers
run the drl sides here): it counts from the orchestrator's start of the run and includes starting the memory
server and every service process. RLlib: from just before ``ray.init`` to the start of the scoring evaluation,
minus the time of its earlier evaluations (it evaluates in the driver between training iterations; drl's
evaluator runs beside training): it includes starting Ray and building the algorithm's actors. ``launch->score``
(every side) runs from launching the subprocess to the scoring evaluation, Python's imports included.

Targets: CartPole-v1 475, LunarLander-v3 200. Budgets per run (``--time-budget`` seconds on the side's own clock,
``--steps`` env steps): CartPole 600 s and 1,000,000 steps (RLlib's APPO needs a few minutes here, start-up
included), LunarLander 1800 s and 3,000,000 steps. Seeds run one after another, the sides in rotation (seed
position p starts with side p mod 3), never two runs at once.

Verdicts, per env, on the medians over seeds:

- a run that **did not reach** the target within its budget counts as infinite time: medians keep it, never drop it;
- a run that **crashed** (a non-zero exit other than the budget's stop, no result line, killed past
  ``--run-timeout``, for RLlib plus the time budget again, its evaluations being off its clock) leaves its side
  without a median, and every ratio with that side is **no comparison**, as is a ratio with a side that did not
  run: never "met";
- ``appo / ppo`` (drl's APPO median over drl's PPO median): goal < 1, judged with 4 workers or more (with fewer
  the asynchronous mode has little waiting to save: "not judged");
- ``appo / rllib`` (drl's APPO over RLlib's APPO): goal <= 0.5.

An infinite numerator is not met. Over a baseline whose median is infinite a finite median gives only a bound:
the ratio is at most numerator / time budget; the goal is met when the bound meets it, else there is no
comparison (a longer budget is needed). ``goal_met`` is false if any goal is not met, null (no verdict) if any is
without a comparison or not judged, true only if every goal is met. The table shows every run with the load
average when it started; the last line is one JSON object with every run, the medians, ratios and verdicts per
env, the commands, the machine and the versions (RLlib's as its script reports them).

    python -m bench.appo_time_to_score --envs CartPole-v1 --seeds 0       # three runs of at most 600 s each
    python -m bench.appo_time_to_score                                    # both envs, seeds 0,1,2 (hours)
    python -m bench.appo_time_to_score --sides ppo,rllib --envs CartPole-v1 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.time_to_score import finite, fmt, git_commit, run_drl, version
from drl.errors import EXIT_USAGE, UserError

REPO = Path(__file__).resolve().parent.parent
PEER_SCRIPT = REPO / "bench" / "peers" / "rllib_appo.py"
PROFILES = {
    "CartPole-v1": {"target": 475.0, "steps": 1_000_000, "time_budget": 600.0},
    "LunarLander-v3": {"target": 200.0, "steps": 3_000_000, "time_budget": 1800.0},
}
SIDES = ("appo", "ppo", "rllib")
DRL_SIDES = {"appo": ("appo", "async"), "ppo": ("ppo", "sync")}  # side -> (preset, mode)
APPO_OVER_PPO_GOAL = 1.0  # strictly below
APPO_OVER_PPO_MIN_WORKERS = 4
APPO_OVER_RLLIB_GOAL = 0.5  # at most


# -- verdicts (pure: the unit tests drive them) ------------------------------------------------------------------
def run_seconds(run: dict) -> float | None:
    """A run's time to score: None if it crashed (no figure to compare), infinite if it did not reach the target."""
    if run.get("crashed"):
        return None
    if not run.get("reached") or run.get("time_to_score_s") is None:
        return math.inf
    return float(run["time_to_score_s"])


def side_median(runs: list[dict]) -> float | None:
    """Median time to score of one side's runs; None when the side did not run or any of its runs crashed."""
    times = [run_seconds(r) for r in runs]
    if not times or any(t is None for t in times):
        return None
    return statistics.median(times)


def compare(
    numerator: float | None,
    denominator: float | None,
    goal: float,
    strict: bool,
    judged: bool = True,
    budget_s: float | None = None,
) -> dict:
    """A ratio of medians and its verdict: "met", "not met", "no comparison" (a side crashed or did not run, or the
    budget was too short to tell) or "not judged" (the goal does not apply). Not reached is infinite. An infinite
    numerator never meets a goal. Over an infinite baseline a finite time's ratio is only bounded: the baseline's
    median is at least the budget, so the ratio is at most numerator / budget ("bound": "at most"); the goal is met
    when that bound meets it, and without a comparison otherwise (a longer budget could still meet it)."""
    if numerator is None or denominator is None:
        return {"ratio": None, "bound": None, "verdict": "no comparison"}
    bound = None
    if math.isinf(numerator):
        ratio = None
    elif math.isinf(denominator):
        ratio, bound = (numerator / budget_s if budget_s else 0.0), "at most"
    else:
        ratio = numerator / denominator
    meets = ratio is not None and (ratio < goal if strict else ratio <= goal)
    if not judged:
        verdict = "not judged"
    elif ratio is None:
        verdict = "not met"
    elif bound:
        verdict = "met" if meets else "no comparison"
    else:
        verdict = "met" if meets else "not met"
    return {"ratio": None if ratio is None else round(ratio, 3), "bound": bound, "verdict": verdict}


def env_verdicts(runs: list[dict], workers: int, budget_s: float | None = None) -> dict:
    """Medians, env-step medians and the two ratios with their verdicts for one env's runs (``budget_s``: the time
    budget of each run, which bounds a ratio over a baseline that did not score)."""
    by_side = {side: [r for r in runs if r["side"] == side] for side in SIDES}
    medians = {side: side_median(rs) for side, rs in by_side.items()}
    steps = {
        side: statistics.median(
            r["env_steps"] if r.get("reached") and r.get("env_steps") is not None else math.inf for r in rs
        )
        if rs
        else None
        for side, rs in by_side.items()
    }
    return {
        "medians_s": {side: None if m is None else finite(m) for side, m in medians.items()},
        "not_reached": {side: sum(1 for r in rs if run_seconds(r) == math.inf) for side, rs in by_side.items()},
        "crashed": {side: sum(1 for r in rs if r.get("crashed")) for side, rs in by_side.items()},
        "median_env_steps": {side: None if s is None else finite(s) for side, s in steps.items()},
        "appo_over_ppo": compare(
            medians["appo"],
            medians["ppo"],
            APPO_OVER_PPO_GOAL,
            strict=True,
            judged=workers >= APPO_OVER_PPO_MIN_WORKERS,
            budget_s=budget_s,
        ),
        "appo_over_rllib": compare(
            medians["appo"], medians["rllib"], APPO_OVER_RLLIB_GOAL, strict=False, budget_s=budget_s
        ),
    }


def overall(per_env: dict) -> bool | None:
    """False if any goal is not met; None if any has no comparison or is not judged; True if all are met."""
    verdicts = [v[key]["verdict"] for v in per_env.values() for key in ("appo_over_ppo", "appo_over_rllib")]
    if not verdicts or "not met" in verdicts:
        return False if verdicts else None
    return True if all(v == "met" for v in verdicts) else None


# -- running -----------------------------------------------------------------------------------------------------
def side_args(args: argparse.Namespace, env: str, side: str) -> argparse.Namespace:
    """The namespace ``bench.time_to_score.run_drl`` reads, for one env and one drl side."""
    profile = PROFILES[env]
    return argparse.Namespace(
        preset=DRL_SIDES[side][0],
        env=env,
        workers=args.workers,
        threads=args.threads,
        drl_args=args.drl_args,
        target=profile["target"],
        steps=args.steps or profile["steps"],
        time_budget=args.time_budget or profile["time_budget"],
        run_timeout=run_timeout(args, env),
    )


def run_timeout(args: argparse.Namespace, env: str) -> float:
    return args.run_timeout or (args.time_budget or PROFILES[env]["time_budget"]) + 600.0


def run_drl_side(side: str, env: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    result, _ = run_drl(seed, side_args(args, env, side), workdir, mode=DRL_SIDES[side][1], side=side)
    result["crashed"] = result["exit_code"] not in (0, "budget")
    result["env"] = env
    return result


def rllib_command(env: str, seed: int, args: argparse.Namespace) -> list[str]:
    profile = PROFILES[env]
    return [
        args.rllib_python,
        str(PEER_SCRIPT),
        "--env",
        env,
        "--workers",
        str(args.workers),
        "--seed",
        str(seed),
        "--target",
        str(profile["target"]),
        "--time-budget",
        str(args.time_budget or profile["time_budget"]),
        "--steps",
        str(args.steps or profile["steps"]),
        *shlex.split(args.rllib_args),
    ]


RAY_EXIT_WAIT_S = 60.0


def wait_for_ray_to_exit(limit_s: float = RAY_EXIT_WAIT_S) -> float:
    """Seconds until none of Ray's processes (``ray::`` actors, raylet, gcs_server) is left after an RLlib run, at
    most ``limit_s``: the next side must not start beside Ray's shutdown, which would charge it Ray's cost."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        found = subprocess.run(["pgrep", "-f", "ray::|raylet|gcs_server"], capture_output=True).returncode == 0
        if not found:
            break
        time.sleep(0.5)
    return round(time.perf_counter() - start, 1)


def run_rllib(env: str, seed: int, args: argparse.Namespace) -> dict:
    cmd = rllib_command(env, seed, args)
    load = os.getloadavg()[0]
    launched = time.time()
    start = time.perf_counter()
    try:
        # Its evaluations are off its clock and may take up to as long again as its training (rllib_appo.py).
        timeout = run_timeout(args, env) + (args.time_budget or PROFILES[env]["time_budget"])
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = "timeout"
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
    process_s = time.perf_counter() - start
    ray_gone_s = wait_for_ray_to_exit()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    base = {
        "side": "rllib",
        "ray_exit_wait_s": ray_gone_s,
        "env": env,
        "seed": seed,
        "exit_code": code,
        "process_wall_s": round(process_s, 2),
        "load_at_start": round(load, 2),
    }
    if code != 0 or not lines:
        print(
            f"  rllib seed {seed} exited with {code}; crashed (no comparison). Output tail:\n{(out + err)[-2000:]}",
            flush=True,
        )
        return {**base, "crashed": True, "reached": False, "time_to_score_s": None, "launch_to_score_s": None}
    child = json.loads(lines[-1])
    reached = bool(child["reached"])
    return {
        **base,
        "crashed": False,
        "reached": reached,
        "time_to_score_s": child["time_to_score_s"],
        "train_to_score_s": child["train_to_score_s"],
        "launch_to_score_s": round(child["score_epoch"] - launched, 2) if reached else None,
        "env_steps": child["env_steps"],
        "return_at_score": child["return_at_score"],
        "best_return": child["best_return"],
        "evaluations": len(child["evaluations"]),
        "first_evaluation_s": child["evaluations"][0]["seconds"] if child["evaluations"] else None,
        "startup_s": child["startup_s"],
        "eval_s": child["eval_s"],
        "env_steps_total": child["env_steps_total"],
        "exit_reason": child["exit_reason"],
        "rllib": {
            k: child[k]
            for k in (
                "hyperparameters",
                "versions",
                "num_learners",
                "cpus_per_actor",
                "envs_per_worker",
                "poll_timeout_s",
                "iteration_s",
                "eval_every",
            )
        },
    }


# -- report ------------------------------------------------------------------------------------------------------
def print_table(results: list[dict]) -> None:
    print()
    print(
        f"{'env':<15} {'seed':>4} {'side':<5} {'result':>11} {'time to score s':>15} {'launch->score s':>15} "
        f"{'env steps':>9} {'return':>7} {'best':>7} {'evals':>5} {'load':>5}"
    )
    for r in results:
        state = "CRASHED" if r.get("crashed") else "reached" if r["reached"] else "not reached"
        print(
            f"{r['env']:<15} {r['seed']:>4} {r['side']:<5} {state:>11} {fmt(r.get('time_to_score_s')):>15} "
            f"{fmt(r.get('launch_to_score_s')):>15} {fmt(r.get('env_steps'), 'd'):>9} "
            f"{fmt(r.get('return_at_score')):>7} {fmt(r.get('best_return')):>7} "
            f"{fmt(r.get('evaluations'), 'd'):>5} {r['load_at_start']:>5.2f}"
        )


def median_text(verdicts: dict, side: str, ran: bool) -> str:
    if not ran:
        return "not run"
    if verdicts["crashed"][side]:
        return "crashed"
    median = verdicts["medians_s"][side]
    return "not reached" if median is None else f"{median:.1f} s"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(PROFILES), help=f"comma-separated, of {', '.join(PROFILES)}")
    parser.add_argument("--workers", type=int, default=4, help="rollout workers (RLlib: env runners) per run")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, each run by every side")
    parser.add_argument("--quick", action="store_true", help="CartPole-v1, seed 0 only (a smoke run)")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"which sides run, of {', '.join(SIDES)}")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds per run on the side's own clock (default: CartPole 600, LunarLander 1800)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="env steps per run (default: CartPole 1,000,000, LunarLander 3,000,000)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads of drl's trainer")
    parser.add_argument("--drl-args", default="", help="extra drl-orchestrate flags for both drl sides")
    parser.add_argument(
        "--rllib-python",
        default=str(Path(os.environ.get("PEERS", "/work/venvs")) / "rllib" / "bin" / "python"),
        help="the peer environment's interpreter (bench/peers/setup_rllib.sh builds it)",
    )
    parser.add_argument("--rllib-args", default="", help="extra flags for bench/peers/rllib_appo.py")
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before one run is killed and counted as crashed (time budget + 600)",
    )
    parser.add_argument("--keep", metavar="DIR", default=None, help="keep drl's run folders in DIR")
    args = parser.parse_args(argv)
    args.env_list = ["CartPole-v1"] if args.quick else [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in args.env_list if e not in PROFILES]
    if unknown or not args.env_list:
        raise UserError(f"--envs: unknown or no env {', '.join(unknown)}; known: {', '.join(PROFILES)}")
    args.side_list = [s.strip() for s in args.sides.split(",") if s.strip()]
    if (
        not args.side_list
        or any(s not in SIDES for s in args.side_list)
        or len(set(args.side_list)) < len(args.side_list)
    ):
        raise UserError(f"--sides must name some of {', '.join(SIDES)} once each, got {args.sides!r}")
    try:
        args.seed_list = [0] if args.quick else [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not args.seed_list:
        raise UserError("--seeds names no seed")
    if args.workers < 1 or args.threads < 1:
        raise UserError("--workers and --threads must be at least 1")
    for name in ("time_budget", "steps", "run_timeout"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if "rllib" in args.side_list and not Path(args.rllib_python).exists():
        raise UserError(
            f"no RLlib environment at {args.rllib_python}: build it with bash bench/peers/setup_rllib.sh "
            "(or leave rllib out of --sides)"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    command = " ".join(
        [
            os.path.basename(sys.executable),
            "-m",
            "bench.appo_time_to_score",
            *map(shlex.quote, sys.argv[1:] if argv is None else argv),
        ]
    )
    load_start = os.getloadavg()
    machine = {
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_start": [round(x, 2) for x in load_start],
    }
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": version("gymnasium"),
        "drl": git_commit(),
    }
    print(f"command:  {command}")
    print(
        f"machine:  {machine['logical_cpus']} logical CPUs, {machine['platform']}, load average "
        f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} at start"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(
        f"task:     envs {args.env_list}, seeds {args.seed_list}, sides {args.side_list}, {args.workers} workers",
        flush=True,
    )

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="drl-appo-tts-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    begin = time.perf_counter()
    try:
        for env in args.env_list:
            for side in args.side_list:
                if side in DRL_SIDES:
                    from bench.time_to_score import drl_command

                    shown = drl_command(0, side_args(args, env, side), Path("TMP"), "NAME", DRL_SIDES[side][1])
                else:
                    shown = rllib_command(env, 0, args)
                print(f"{side + ':':<9} {' '.join(shown)} (seed per run)", flush=True)
            for position, seed in enumerate(args.seed_list):
                k = position % len(args.side_list)
                for side in args.side_list[k:] + args.side_list[:k]:
                    t = time.perf_counter()
                    result = (
                        run_rllib(env, seed, args) if side == "rllib" else run_drl_side(side, env, seed, args, workdir)
                    )
                    results.append(result)
                    state = "CRASHED" if result["crashed"] else "reached" if result["reached"] else "NOT reached"
                    print(
                        f"  {env} seed {seed} {side}: {state}, time to score {fmt(result.get('time_to_score_s'))}"
                        f" s, env steps {fmt(result.get('env_steps'), 'd')} ({time.perf_counter() - t:.0f} s, "
                        f"load {result['load_at_start']:.2f})",
                        flush=True,
                    )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    load_end = os.getloadavg()
    machine["load_average_end"] = [round(x, 2) for x in load_end]

    print_table(results)
    per_env = {
        env: env_verdicts(
            [r for r in results if r["env"] == env], args.workers, args.time_budget or PROFILES[env]["time_budget"]
        )
        for env in args.env_list
    }
    goal_met = overall(per_env)
    print()
    for env, v in per_env.items():
        medians = ", ".join(f"{side} {median_text(v, side, side in args.side_list)}" for side in SIDES)
        print(f"{env}: median time to score (not reached = infinite): {medians}")
        for key, goal in (
            ("appo_over_ppo", f"< {APPO_OVER_PPO_GOAL:g} with >= {APPO_OVER_PPO_MIN_WORKERS} workers"),
            ("appo_over_rllib", f"<= {APPO_OVER_RLLIB_GOAL:g}"),
        ):
            bound = "at most " if v[key]["bound"] else ""
            print(
                f"  {key.replace('_over_', '/')}: {bound}{fmt(v[key]['ratio'], '.3f')} (goal {goal}): "
                f"{v[key]['verdict']}"
            )
    print(
        f"goal met: {goal_met}; load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; total "
        f"{time.perf_counter() - begin:.0f} s"
    )
    rllib_info = next((r["rllib"] for r in results if r.get("rllib")), None)
    print(
        json.dumps(
            {
                "per_env": per_env,
                "goal_met": goal_met,
                "goal": f"appo/ppo < {APPO_OVER_PPO_GOAL:g} (>= {APPO_OVER_PPO_MIN_WORKERS} workers), appo/rllib <= "
                f"{APPO_OVER_RLLIB_GOAL:g}",
                "runs": results,
                "envs": args.env_list,
                "seeds": args.seed_list,
                "sides": args.side_list,
                "workers": args.workers,
                "threads": args.threads,
                "drl_args": args.drl_args,
                "rllib_args": args.rllib_args,
                "targets": {env: PROFILES[env]["target"] for env in args.env_list},
                "budgets_s": {env: args.time_budget or PROFILES[env]["time_budget"] for env in args.env_list},
                "budgets_env_steps": {env: args.steps or PROFILES[env]["steps"] for env in args.env_list},
                "rllib": rllib_info,
                "drl_time": "evaluations.jsonl wall_seconds of the first evaluation >= target",
                "rllib_time": "ray.init to the scoring evaluation, minus its earlier evaluations",
                "command": command,
                "machine": machine,
                "versions": {
                    **versions,
                    **({f"rllib_{k}": v for k, v in rllib_info["versions"].items()} if rllib_info else {}),
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        print(f"appo_time_to_score: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
