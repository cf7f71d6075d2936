"""Time to score: wall-clock seconds until SAC first evaluates at a target score, drl against SB3.

Two tasks (``--env``; each with its preset, target, budgets and goal in ``PROFILES``):

- **Pendulum-v1** (default): target -200, budget 20,000 env steps, drl's ``sac`` preset (64x64, lr 1e-3); goal:
  drl needs at most half of SB3's time (median ratio <= 0.5).
- **LunarLanderContinuous-v3**: target 200, budget 500,000 env steps and ``--time-budget`` 1800 s per run, drl's
  ``sac-lunar`` preset: rl-baselines3-zoo's tuned SAC entry for LunarLanderContinuous (400x300, batch 256, lr
  7.3e-4 held constant where the zoo decays it linearly, gamma 0.99, tau 0.01, one update per env step, 10,000
  random steps, 1M replay), a version published every 1,000 updates; goal (issue 9): drl's median time to score
  <= 360 s on this 2-core CPU machine (the seed framework reported 360 s with a GTX 1060). SB3 runs the same
  values side by side, for reference (``run_all --lunar``'s ``time_to_score_lunar_fast``, which the goal is
  reported on, gives both sides 256x256 networks and drl bfloat16 products). A run that has not scored within
  the time budget (on its own time-to-score clock below) is stopped and counts as not reached. This mode takes
  long: each run lasts until it scores or its budget ends, so a full run (3 seeds x 2 sides) takes up to about
  3 hours.

The question is the user's: how long from "go" until the policy is good. Both sides train SAC with the same
hyperparameters, one seed after another, never both at once, and each is scored as drl's evaluator scores it:
10 deterministic episodes per evaluated policy, episode i reset with seed ``seed + 1_000_000 + i``.

- **drl**: the real command line as a subprocess, ``drl-orchestrate --preset sac --env Pendulum-v1 --mode async
  --workers 2 --seed S --steps 20000 --target-return -200 --trainer-threads T [--drl-args] --output TMP --run-name
  NAME`` (for LunarLander ``--preset sac-lunar --env LunarLanderContinuous-v3 ... --steps 500000 --target-return
  200``):
  a private Valkey server, two rollout workers, the trainer and the evaluator, all separate processes. The
  evaluator appends one line per evaluated policy version to ``evaluations.jsonl``, with ``wall_seconds`` since
  the orchestrator started the run. **Time to score** is that ``wall_seconds`` of the first evaluation with
  ``mean_return >= target``; it includes starting the memory server and every service process, and the
  evaluation of the scoring version itself. ``launch->score`` adds the orchestrator's own start-up (Python and
  library imports): it runs from launching the subprocess to the evaluation's ``created_at``. The evaluation's
  ``env_steps`` and ``updates`` are the trainer's counts when it published that version (transitions consumed).
  The JSON's ``first_evaluation_s`` (the untrained version 0 scored) shows how much of it is start-up.
- **sb3**: ``stable_baselines3.SAC("MlpPolicy", ENV, ...)`` in a child process with the hyperparameters
  read from drl's ``config.json`` of the first drl run (never restated here): ``net_arch`` = ``sac.hidden`` for
  actor and critics, ``learning_rate`` = ``sac.lr`` (actor, critics and temperature, as in drl), ``batch_size``,
  ``gamma``, ``tau``, ``buffer_size`` = ``replay_size``, ``learning_starts`` (SB3 acts uniformly at random until
  then, as drl does for ``random_steps``; the two must agree), ``train_freq=1`` and ``gradient_steps`` =
  ``updates_per_transition`` (or ``train_freq=1/u``, ``gradient_steps=1`` for u = 1/n),
  ``ent_coef="auto_<sac.init_alpha>"``, ``target_entropy`` = ``sac.target_entropy`` or ``"auto"`` (-action
  dimensions, drl's default too), ``seed=S``, ``device="cpu"``. A callback evaluates the policy every
  ``--sb3-eval-every`` env steps (default: drl's ``publish_every_updates / updates_per_transition``, 250 for
  Pendulum, 1,000 for LunarLander, i.e. as often as drl publishes a version, which is as often as drl's evaluator
  can see a new one; it skips versions only when evaluating is slower than training) and stops learning at the
  first mean >= the target.
  **Time to score** is the wall time from the start of ``learn()`` to the start of that evaluation *minus the
  time spent in SB3's earlier evaluations*. This favours SB3: drl's evaluator runs in parallel with training and
  its time includes the scoring evaluation and the wait for the evaluator to pick the version up, while SB3's
  excludes all evaluation and its start-up (imports, model construction). ``launch->score`` for SB3 is the
  whole thing, from launching the child to the end of the scoring evaluation, evaluations and start-up included.

Both sides use the same torch intra-op thread count: drl's trainer ``--trainer-threads`` (1 by default; rollout
workers and the evaluator always use 1) and ``torch.set_num_threads`` in the SB3 child (``--threads`` sets both).

Budget: ``--steps`` env steps (and ``--time-budget`` seconds where set). A side that does not score within them
is recorded as not reached: its time is infinite in the medians (``null`` in the JSON), never dropped. A drl run
that exits with an error counts as not reached, and its log tail is printed.

Seeds (``--seeds``, default 0,1,2) run sequentially, the order alternating per seed (drl first on even
positions, SB3 first on odd ones) so that load drift on a shared machine hits both alike. The table shows every
run, the load average when it started, the medians and the ratio drl_median / sb3_median; the goal is a ratio
<= 0.5 for Pendulum, drl's median <= 360 s for LunarLander. The last line is one JSON object with all figures,
the command, the machine (cores, load average at start and end) and the versions (python, torch, stable-baselines3,
gymnasium, drl's git commit).

Stable-Baselines3 is an optional dependency: ``pip install -e '.[bench]'``.

    python -m bench.time_to_score            # seeds 0, 1, 2 for both (a few minutes)
    python -m bench.time_to_score --quick    # seed 0 only, a smoke run
    python -m bench.time_to_score --env LunarLanderContinuous-v3 --target 200   # up to ~3 h (budget 1800 s/run)

Other hyperparameters can be tried on both sides at once with ``--drl-args`` (for example ``--drl-args
'--sac.hidden 256,256 --updates-per-transition 0.5'``): SB3 reads them from drl's ``config.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.verdicts import seconds, time_verdict

MODE = "async"
GOAL_RATIO = 0.5
# Per env: drl's preset, the score, the env-step budget, the wall-clock budget of one run (None: only the steps
# bound it) and the goal: ("ratio", r) is drl_median / sb3_median <= r, ("seconds", s) is drl_median <= s.
PROFILES = {
    "Pendulum-v1": {
        "preset": "sac",
        "target": -200.0,
        "steps": 20_000,
        "time_budget": None,
        "goal": ("ratio", GOAL_RATIO),
    },
    "LunarLanderContinuous-v3": {
        "preset": "sac-lunar",
        "target": 200.0,
        "steps": 500_000,
        "time_budget": 1800.0,
        "goal": ("seconds", 360.0),
    },
}
EVAL_SEED_OFFSET = 1_000_000  # drl's evaluator: episode i is reset with seed + 1_000_000 + i
REPO = Path(__file__).resolve().parent.parent
# Hyperparameters that SB3 must share with drl; everything else in config.json may differ per run.
SHARED_KEYS = (
    "sac",
    "replay_size",
    "learning_starts",
    "random_steps",
    "updates_per_transition",
    "eval_episodes",
    "publish_every_updates",
    "trainer_threads",
    "env",
    "algorithm",
)


# -- drl ---------------------------------------------------------------------------------------------------------
def drl_command(seed: int, args: argparse.Namespace, output: Path, run: str, mode: str = MODE) -> list[str]:
    exe = Path(sys.executable).parent / "drl-orchestrate"
    orchestrate = str(exe) if exe.exists() else (shutil.which("drl-orchestrate") or "drl-orchestrate")
    return [
        orchestrate,
        "--preset",
        args.preset,
        "--env",
        args.env,
        "--mode",
        mode,
        "--workers",
        str(args.workers),
        "--seed",
        str(seed),
        "--steps",
        str(args.steps),
        "--target-return",
        str(args.target),
        "--trainer-threads",
        str(args.threads),
        *shlex.split(args.drl_args),
        "--output",
        str(output),
        "--run-name",
        run,
    ]


def wait_within_budget(proc: subprocess.Popen, args: argparse.Namespace) -> int | str:
    """Waits for a drl run; past ``--time-budget`` (plus 30 s for the orchestrator's own start-up) it is
    interrupted like Ctrl-C (the orchestrator stops its processes and writes its summary); past ``--run-timeout``
    it is killed."""
    start = time.perf_counter()
    interrupted = False
    while True:
        try:
            code = proc.wait(timeout=1.0)
            return "budget" if interrupted else code
        except subprocess.TimeoutExpired:
            pass
        elapsed = time.perf_counter() - start
        if args.time_budget is not None and elapsed > args.time_budget + 30 and not interrupted:
            proc.send_signal(signal.SIGINT)
            interrupted = True
        if elapsed > args.run_timeout:
            proc.kill()
            proc.wait()
            return "timeout"


def run_drl(
    seed: int, args: argparse.Namespace, workdir: Path, mode: str = MODE, side: str = "drl"
) -> tuple[dict, dict | None]:
    """One drl run; returns its figures and its resolved configuration (config.json, None if never written).
    ``side`` names the run in the figures (``bench.appo_time_to_score`` runs drl's appo and ppo as two sides)."""
    run = f"tts-{side}-s{seed}-{int(time.time())}"
    cmd = drl_command(seed, args, workdir, run, mode)
    log_path = workdir / f"{run}.out"
    load = os.getloadavg()[0]
    launched = time.time()
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        code = wait_within_budget(
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), args
        )
    process_s = time.perf_counter() - start
    run_dir = workdir / run
    config = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else None
    evals = []
    if (run_dir / "evaluations.jsonl").exists():
        evals = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines() if line]
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    budget = math.inf if args.time_budget is None else args.time_budget
    hit = next((e for e in evals if e["mean_return"] >= args.target and e["wall_seconds"] <= budget), None)
    result = {
        "side": side,
        "seed": seed,
        "reached": hit is not None and code in (0, "budget"),
        "exit_code": code,
        "time_to_score_s": round(hit["wall_seconds"], 2) if hit else None,
        "launch_to_score_s": round(hit["created_at"] - launched, 2) if hit else None,
        "process_wall_s": round(process_s, 2),
        "env_steps": int(hit.get("env_steps", 0)) if hit else None,
        "updates": int(hit.get("updates", 0)) if hit else None,
        "version": int(hit.get("version", 0)) if hit else None,
        "return_at_score": round(hit["mean_return"], 1) if hit else None,
        "best_return": round(max(e["mean_return"] for e in evals), 1) if evals else None,
        "evaluations": len(evals),
        "first_evaluation_s": round(evals[0]["wall_seconds"], 2) if evals else None,
        "exit_reason": summary.get("exit_reason"),
        "env_steps_total": summary.get("env_steps"),
        "load_at_start": round(load, 2),
    }
    if code == "budget":
        print(
            f"  {side} seed {seed}: not reached within the time budget of {args.time_budget:g} s; stopped", flush=True
        )
    elif code != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        print(f"  {side} seed {seed} exited with {code}; counted as not reached. Output tail:\n{tail}", flush=True)
        result["reached"] = False
    return result, config


def shared_part(config: dict) -> dict:
    return {k: config[k] for k in SHARED_KEYS if k in config}


# -- Stable-Baselines3 -------------------------------------------------------------------------------------------
def sb3_kwargs(config: dict) -> dict:
    """SAC(...) keyword arguments equal to drl's resolved configuration (JSON-able, passed to the child).
    ``updates_per_transition`` u >= 1 is ``train_freq=1, gradient_steps=u``; u < 1 is ``train_freq=1/u,
    gradient_steps=1`` (both whole numbers, else there is no SB3 equivalent)."""
    sac = config["sac"]
    ratio = config["updates_per_transition"]
    if ratio >= 1 and ratio == int(ratio):
        train_freq, gradient_steps = 1, int(ratio)
    elif 0 < ratio < 1 and abs(1 / ratio - round(1 / ratio)) < 1e-9:
        train_freq, gradient_steps = round(1 / ratio), 1
    else:
        raise SystemExit(f"updates_per_transition {ratio} has no SB3 equivalent (a whole number, or 1/n)")
    if config["random_steps"] != config["learning_starts"]:
        raise SystemExit(
            f"drl's random_steps ({config['random_steps']}) and learning_starts "
            f"({config['learning_starts']}) differ; SB3 has one learning_starts for both"
        )
    target_entropy = sac["target_entropy"]
    return {
        "policy_kwargs": {"net_arch": list(sac["hidden"])},
        "learning_rate": sac["lr"],
        "batch_size": sac["batch_size"],
        "gamma": sac["gamma"],
        "tau": sac["tau"],
        "buffer_size": config["replay_size"],
        "learning_starts": config["learning_starts"],
        "train_freq": train_freq,
        "gradient_steps": gradient_steps,
        "ent_coef": f"auto_{sac['init_alpha']}",
        "target_entropy": "auto" if target_entropy is None else target_entropy,
    }


def sb3_child(job: dict) -> int:
    """Runs in the child process: trains SB3's SAC until it scores or the budget ends; prints one JSON line."""
    import numpy as np
    import torch

    torch.set_num_threads(job["threads"])
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = gym.make(job["env"])

    def evaluate(model) -> float:
        returns = []
        for i in range(job["episodes"]):
            obs, _ = eval_env.reset(seed=job["seed"] + EVAL_SEED_OFFSET + i)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        return float(np.mean(returns))

    class ScoreCallback(BaseCallback):
        def __init__(self):
            super().__init__()
            self.t0 = 0.0
            self.eval_s = 0.0
            self.evaluations = 0
            self.best = -math.inf
            self.hit: dict | None = None

        def _on_step(self) -> bool:
            steps = self.num_timesteps
            budget = job.get("time_budget")
            if budget is not None and time.perf_counter() - self.t0 - self.eval_s > budget:
                return False  # the time budget is spent (on the same clock as the time to score)
            if steps % job["eval_every"] and steps < job["steps"]:
                return True
            begin = time.perf_counter()
            mean = evaluate(self.model)
            end = time.perf_counter()
            self.evaluations += 1
            self.best = max(self.best, mean)
            if mean >= job["target"]:
                self.hit = {
                    "time_to_score_s": begin - self.t0 - self.eval_s,
                    "wall_to_score_s": end - self.t0,
                    "score_epoch": time.time(),
                    "env_steps": steps,
                    "return_at_score": mean,
                }
            self.eval_s += end - begin
            return self.hit is None

    model = SAC("MlpPolicy", gym.make(job["env"]), seed=job["seed"], device="cpu", verbose=0, **job["kwargs"])
    callback = ScoreCallback()
    callback.t0 = time.perf_counter()
    model.learn(total_timesteps=job["steps"], callback=callback)
    learn_s = time.perf_counter() - callback.t0
    if torch.get_num_threads() != job["threads"]:
        raise RuntimeError("SB3 changed torch's thread count")
    hit = callback.hit or {}
    print(
        json.dumps(
            {
                "hit": hit,
                "updates": int(model._n_updates),
                "eval_s": callback.eval_s,
                "evaluations": callback.evaluations,
                "best_return": callback.best,
                "learn_s": learn_s,
                "env_steps_total": int(model.num_timesteps),
                "threads": torch.get_num_threads(),
            }
        )
    )
    return 0


def run_sb3(seed: int, args: argparse.Namespace, kwargs: dict, config: dict) -> dict:
    job = {
        "env": args.env,
        "seed": seed,
        "steps": args.steps,
        "target": args.target,
        "threads": args.threads,
        "episodes": config["eval_episodes"],
        "eval_every": args.sb3_eval_every,
        "kwargs": kwargs,
        "time_budget": args.time_budget,
    }
    load = os.getloadavg()[0]
    launched = time.time()
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.time_to_score", "--sb3-child", json.dumps(job)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=args.run_timeout,
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", "", str(exc.stderr or "")
    process_s = time.perf_counter() - start
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        print(
            f"  sb3 seed {seed} exited with {code}; counted as not reached. Output tail:\n{(out + err)[-2000:]}",
            flush=True,
        )
        return {
            "side": "sb3",
            "seed": seed,
            "reached": False,
            "exit_code": code,
            "time_to_score_s": None,
            "launch_to_score_s": None,
            "process_wall_s": round(process_s, 2),
            "load_at_start": round(load, 2),
        }
    child = json.loads(lines[-1])
    hit = child["hit"]
    return {
        "side": "sb3",
        "seed": seed,
        "reached": bool(hit),
        "exit_code": code,
        "time_to_score_s": round(hit["time_to_score_s"], 2) if hit else None,
        "wall_to_score_with_evals_s": round(hit["wall_to_score_s"], 2) if hit else None,
        "launch_to_score_s": round(hit["score_epoch"] - launched, 2) if hit else None,
        "process_wall_s": round(process_s, 2),
        "env_steps": hit["env_steps"] if hit else None,
        "updates": child["updates"] if hit else None,
        "return_at_score": round(hit["return_at_score"], 1) if hit else None,
        "best_return": round(child["best_return"], 1),
        "evaluations": child["evaluations"],
        "eval_s": round(child["eval_s"], 2),
        "learn_s": round(child["learn_s"], 2),
        "env_steps_total": child["env_steps_total"],
        "threads": child["threads"],
        "load_at_start": round(load, 2),
    }


# -- report ------------------------------------------------------------------------------------------------------
def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        # The report itself (docs/benchmarks/, rewritten while the benchmarks run) is not code under test.
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)docs/benchmarks",
                ":(exclude)docs/benchmarks.md",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+uncommitted changes" if dirty else "")


def fmt(value, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "-"
    return format(value, spec)


def finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 2)


def print_table(results: list[dict]) -> None:
    print()
    print(
        f"{'seed':>4} {'side':<4} {'reached':>7} {'time to score s':>15} {'launch->score s':>15} "
        f"{'process s':>9} {'env steps':>9} {'updates':>7} {'return':>7} {'evals':>5} {'eval s':>6} "
        f"{'load':>5}"
    )
    for r in results:
        print(
            f"{r['seed']:>4} {r['side']:<4} {'yes' if r['reached'] else 'NO':>7} "
            f"{fmt(r.get('time_to_score_s')):>15} {fmt(r.get('launch_to_score_s')):>15} "
            f"{fmt(r.get('process_wall_s')):>9} {fmt(r.get('env_steps'), 'd'):>9} {fmt(r.get('updates'), 'd'):>7} "
            f"{fmt(r.get('return_at_score')):>7} {fmt(r.get('evaluations'), 'd'):>5} "
            f"{fmt(r.get('eval_s'), '.1f') if r['side'] == 'sb3' else 'par.':>6} {r['load_at_start']:>5.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, each run by both sides")
    parser.add_argument("--quick", action="store_true", help="seed 0 only (a smoke run)")
    parser.add_argument(
        "--env",
        default="Pendulum-v1",
        choices=sorted(PROFILES),
        help="the task: its drl preset, target, budgets and goal come from PROFILES",
    )
    parser.add_argument("--preset", default=None, help="drl preset (default: the env's, sac or sac-lunar)")
    parser.add_argument(
        "--steps", type=int, default=None, help="env step budget per run (Pendulum 20,000; LunarLander 500,000)"
    )
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="mean evaluation return that counts as scored (Pendulum -200; LunarLander 200)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="wall-clock seconds one run may take to score, each side on its own time-to-score "
        "clock (LunarLander 1800; Pendulum none: the steps bound it); 0 means none",
    )
    parser.add_argument(
        "--drl-args",
        default="",
        help="extra drl-orchestrate flags, e.g. '--sac.hidden 256,256'; hyperparameters set "
        "here reach SB3 too (it reads drl's config.json)",
    )
    parser.add_argument("--workers", type=int, default=2, help="drl rollout workers")
    parser.add_argument(
        "--sides",
        default="drl,sb3",
        help="which learners run: drl,sb3 (default) or drl alone (only for a goal in seconds, "
        "LunarLander's: e.g. a drl variant through --drl-args beside an earlier SB3 run)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of drl's trainer (--trainer-threads) and of SB3"
    )
    parser.add_argument(
        "--sb3-eval-every",
        type=int,
        default=None,
        help="SB3 env steps between evaluations (default: drl's publish_every_updates / updates_per_transition)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before one run is killed (900, or the time budget + 600)",
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        default=None,
        help="write drl's run folders to DIR and keep them (default: a temporary folder, removed)",
    )
    parser.add_argument("--sb3-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sb3_child is not None:
        return sb3_child(json.loads(args.sb3_child))
    if importlib.util.find_spec("stable_baselines3") is None:
        raise SystemExit("stable-baselines3 is not installed: .venv/bin/pip install -e '.[bench]'")
    import torch

    profile = PROFILES[args.env]
    args.preset = args.preset or profile["preset"]
    args.steps = args.steps or profile["steps"]
    args.target = profile["target"] if args.target is None else args.target
    if args.time_budget is None:
        args.time_budget = profile["time_budget"]
    args.time_budget = args.time_budget or None
    if args.run_timeout is None:
        args.run_timeout = 900.0 if args.time_budget is None else args.time_budget + 600.0
    goal_kind, goal_value = profile["goal"]
    sides = tuple(x.strip() for x in args.sides.split(",") if x.strip())
    if sides not in (("drl", "sb3"), ("sb3", "drl"), ("drl",)):
        raise SystemExit(f"--sides must be drl,sb3 or drl, got {args.sides!r}")
    if goal_kind == "ratio" and "sb3" not in sides:
        raise SystemExit(f"--sides drl: the {args.env} goal is a ratio to SB3's time, which needs SB3's runs")
    goal_text = (
        f"drl_median / sb3_median <= {goal_value}"
        if goal_kind == "ratio"
        else f"drl median time to score <= {goal_value:g} s"
    )
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",") if s.strip()]
    command = " ".join(
        [
            os.path.basename(sys.executable),
            "-m",
            "bench.time_to_score",
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
        "stable-baselines3": version("stable-baselines3"),
        "gymnasium": version("gymnasium"),
        "drl": git_commit(),
    }
    print(f"command:  {command}")
    print(
        f"machine:  {machine['logical_cpus']} logical CPUs, {machine['platform']}, load average "
        f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} at start"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    budget_text = "" if args.time_budget is None else f" and {args.time_budget:g} s"
    print(
        f"task:     SAC on {args.env}, target mean return >= {args.target:g} over drl's eval episodes, budget "
        f"{args.steps:,} env steps{budget_text}, seeds {seeds}, torch threads {args.threads} (drl trainer and "
        f"SB3); goal: {goal_text}"
    )
    print(f"drl:      {' '.join(drl_command(0, args, Path('TMP'), 'NAME'))} (seed per run)", flush=True)

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="drl-tts-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    config: dict | None = None
    kwargs: dict | None = None
    begin = time.perf_counter()
    try:
        for position, seed in enumerate(seeds):
            order = ("drl", "sb3") if position % 2 == 0 or config is None else ("sb3", "drl")
            for side in (s for s in order if s in sides):
                t = time.perf_counter()
                if side == "drl":
                    result, run_config = run_drl(seed, args, workdir)
                    if run_config is None:
                        raise SystemExit(f"drl seed {seed} wrote no config.json; see {workdir}")
                    if config is None:
                        config = run_config
                        kwargs = sb3_kwargs(config)
                        if args.sb3_eval_every is None:
                            args.sb3_eval_every = max(
                                1, round(config["publish_every_updates"] / config["updates_per_transition"])
                            )
                        print(
                            f"sb3:      SAC('MlpPolicy', '{args.env}', "
                            + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                            + f", seed=S, device='cpu'); 10-episode evaluation every {args.sb3_eval_every} "
                            f"env steps, its time excluded",
                            flush=True,
                        )
                    elif shared_part(run_config) != shared_part(config):
                        raise SystemExit(
                            f"drl seed {seed} resolved other hyperparameters than the first run: "
                            f"{shared_part(run_config)} != {shared_part(config)}"
                        )
                else:
                    result = run_sb3(seed, args, kwargs, config)
                results.append(result)
                print(
                    f"  seed {seed} {side}: {'reached' if result['reached'] else 'NOT reached'} "
                    f"time to score {fmt(result.get('time_to_score_s'))} s, env steps "
                    f"{fmt(result.get('env_steps'), 'd')}, process {result['process_wall_s']:.1f} s "
                    f"({time.perf_counter() - t:.0f} s, load {result['load_at_start']:.2f})",
                    flush=True,
                )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    load_end = os.getloadavg()
    machine["load_average_end"] = [round(x, 2) for x in load_end]

    print_table(results)
    by_side = {side: [r for r in results if r["side"] == side] for side in ("drl", "sb3")}
    medians = {side: statistics.median(seconds(r) for r in rs) if rs else math.inf for side, rs in by_side.items()}
    launch = {
        side: statistics.median(seconds(r, "launch_to_score_s") for r in rs) if rs else math.inf
        for side, rs in by_side.items()
    }
    steps = {
        side: statistics.median(r["env_steps"] if r["reached"] else math.inf for r in rs) if rs else math.inf
        for side, rs in by_side.items()
    }
    ratio, goal_met, why = time_verdict(by_side, goal_kind, goal_value)
    launch_ratio = launch["drl"] / launch["sb3"] if not any(math.isinf(x) for x in launch.values()) else None
    per_seed = {}
    for seed in seeds if "sb3" in sides else []:
        d, s = (next(r for r in by_side[side] if r["seed"] == seed) for side in ("drl", "sb3"))
        per_seed[str(seed)] = finite(seconds(d) / seconds(s)) if d["reached"] and s["reached"] else None
    print()
    print(
        f"median time to score: drl {fmt(medians['drl'], '.2f')} s, sb3 {fmt(medians['sb3'], '.2f')} s "
        f"(sb3 without its own evaluations); env steps drl {fmt(steps['drl'], '.0f')}, sb3 "
        f"{fmt(steps['sb3'], '.0f')}"
    )
    print("per-seed ratios drl/sb3: " + ", ".join(f"seed {k} {fmt(v, '.2f')}" for k, v in per_seed.items()))
    print(
        f"median launch->score (start-up included; sb3 with its evaluations): drl {fmt(launch['drl'], '.2f')} s, "
        f"sb3 {fmt(launch['sb3'], '.2f')} s, ratio {fmt(launch_ratio, '.2f')}"
    )
    shown = "no comparison" if goal_met is None else "met" if goal_met else "NOT met"
    print(f"ratio drl/sb3 of the medians: {fmt(ratio, '.3f')}; goal {goal_text}: {shown} ({why})")
    print(
        f"load average: {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; total "
        f"{time.perf_counter() - begin:.0f} s"
    )
    print(
        json.dumps(
            {
                "drl_median_s": finite(medians["drl"]),
                "sb3_median_s": finite(medians["sb3"]),
                "ratio": None if ratio is None else round(ratio, 3),
                "goal": goal_text,
                "goal_met": goal_met,
                "verdict": why,
                "per_seed_ratio": per_seed,
                "drl_median_env_steps": finite(steps["drl"]),
                "sb3_median_env_steps": finite(steps["sb3"]),
                "drl_median_launch_to_score_s": finite(launch["drl"]),
                "sb3_median_launch_to_score_s": finite(launch["sb3"]),
                "launch_to_score_ratio": None if launch_ratio is None else round(launch_ratio, 3),
                "runs": results,
                "seeds": seeds,
                "sides": list(sides),
                "target": args.target,
                "budget_env_steps": args.steps,
                "budget_s": args.time_budget,
                "preset": args.preset,
                "drl_args": args.drl_args,
                "env": args.env,
                "drl_mode": MODE,
                "drl_workers": args.workers,
                "threads": args.threads,
                "sb3_eval_every": args.sb3_eval_every,
                "sb3_kwargs": kwargs,
                "sb3_time": "learn() start to the scoring evaluation, minus its earlier evaluations",
                "drl_time": "evaluations.jsonl wall_seconds of the first evaluation >= target",
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
