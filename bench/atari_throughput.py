"""Atari throughput: env frames per second on ALE/Pong-v5 with N workers, drl against the raw loop and Sample
Factory 2.1.

The question (issue 24): once Atari frames travel through drl (rollout workers -> Valkey -> trainer), how much of
what the machine can step and act reaches the trainer, and how does that compare with Sample Factory, the
single-machine speed anchor, on the same env, worker count and machine?

**Frames** everywhere are agent steps x 4: one agent step is 4 emulator frames (frame skip 4, the max over the
last two), which is how Sample Factory reports Atari FPS (``env_frameskip`` 4, ``summaries_use_frameskip``).
Each worker steps ``--envs-per-worker`` envs (default 4) and acts on them as one batch.

The env on every side: ``ALE/Pong-v5``'s emulator settings (sticky actions 0.25, minimal action set) at frame skip
1, then gymnasium's ``AtariPreprocessing`` (up to 30 no-ops at reset, frame skip 4 with the max over the last two
frames, 84x84 grayscale, no life-loss terminal) and a stack of 4 frames: (4, 84, 84) uint8 observations.

- **raw** (per N): N fresh processes started together, each stepping E envs and acting on their stacked
  observations with one forward pass of the network, with nothing else: nothing sent, nothing stored beyond the
  step's rows. The envs are drl's own (``drl.envs.VecEnv``, the training env the workers step, stepped into
  preallocated rows as ``bench.scaling``'s raw loop does; the gymnasium chain above on a tree without
  ``drl.atari``). The network is the ``dqn-atari`` preset's DQN actor, the one drl's workers act with, with random
  weights; on a tree without the preset, the Nature DQN CNN in torch (random weights, greedy). Torch uses one
  thread in each process. Rate = the sum of the N processes' frames over ``--raw-seconds`` after a warm-up.
  **raw-overlap**: the same, each process acting on one half of its envs while EnvPool's thread steps the other.
- **raw-one**, **raw-one-overlap** (per N): **one** process stepping all N x E envs, EnvPool's threads sized for
  the machine (``drl.envs.env_threads``: one a core), acting on them with the same network (one torch thread):
  in lock-step, or on one half while the other half steps. This is issue 45's baseline, "a raw loop that steps
  the same EnvPool env and acts with the same network in one process" (what a single-process trainer such as
  CleanRL's EnvPool loop collects); ``drl/1p`` is drl's rate over the faster of the two in the same repeat.
- **sf**: Sample Factory 2.1.1 (APPO: ``--async_rl True``) in its own environment (``/work/venvs/sf``, built by
  ``bench/peers/setup_atari_peers.sh``), ``bench/peers/sf_pong.py`` with its own tuned Atari configuration
  (Nature CNN, no RNN, batch 256, rollout 128, 4 epochs of 4 minibatches), ``--num_workers N
  --num_envs_per_worker E --device cpu``; ``--sf-args`` adds flags. Its learner trains on everything collected;
  the rate is its reported "Total num frames" (frames of the samples its learner has trained on), which grows
  by a whole training batch at a time (1,024 samples, 4,096 frames) and is reported every 5 s: it is read between
  the first and the last report of the window at which it grew (between the window's ends when it grew fewer
  than twice), the window starting ``--settle`` seconds after its first trained batch and lasting ``--window``
  seconds. Its "Samples" counter (agent steps collected) is shown too (``sf collected``).
- **sf-sampler**: the same Sample Factory workers with no learner: ``sf_pong.py --sampler``, Sample Factory's
  own sampling API (``SyncSamplingAPI``, its ``sf_examples/sampler`` benchmark) with the initial policy, the
  main process taking each trajectory and counting it; rate = collected frames over ``--window`` after
  ``--settle`` seconds. This is Sample Factory's collection path alone, the like-for-like peer of drl's
  trainer when it only consumes.
- **drl**: the real command line, ``drl-orchestrate --preset dqn-atari --env ALE/Pong-v5 --mode async
  --workers N --envs-per-worker E --steps 10^9 --random-steps 0 --learning-starts 10^9 --eval-episodes 1``
  (``drl_command``): a private Valkey server, N rollout workers acting with the preset's DQN actor, the trainer and
  the evaluator. As in ``bench.scaling``, **the trainer runs no gradient update** (``--drl-train`` keeps the
  preset's learning start instead): it reads, decodes, rebuilds stacks, stores into replay and acknowledges,
  so the figure is the collection path's. The rate is the trainer's ``consumed`` counter over a ``--window``
  after every worker has appended and the evaluator has scored version 0, plus ``--settle`` seconds
  (``bench.scaling.SystemRun``); after the run is stopped, its ``summary.json`` gives produced and consumed
  transitions and the run's wall seconds, start-up included (``whole run`` column).

On this CPU-only machine Sample Factory's learner is the slowest part of it and sets its pace; drl's trainer
only consumes unless ``--drl-train``. So the goal's peer is ``sf-sampler`` (collection against collection), or
``sf`` with ``--drl-train`` (learning against learning); both ratios are shown.

The sides are measured one after the other for each N, the order rotating per N and repeat, ``--repeats``
times, so load drift on a shared machine hits all alike. The table shows medians; ``drl/raw`` and ``drl/sf`` are
medians of the per-repeat ratios. Goal (issue 24): drl at least 0.9 of the raw loop for N <= cores and at least
Sample Factory's rate. The last line is one JSON object with every figure, the goal, the command, the machine and
the versions.

    python -m bench.atari_throughput                 # 1, 2, 4 workers, 3 repeats, 30 s windows (~30 minutes)
    python -m bench.atari_throughput --quick         # 1, 2 workers, 1 repeat, 10 s windows (~3 minutes)
    python -m bench.atari_throughput --sides raw,sf  # without drl (before the dqn-atari preset exists)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.scaling import SystemRun, cores, orchestrate_exe
from bench.time_to_score import git_commit, version
from bench.verdicts import combined

ENV = "ALE/Pong-v5"
PRESET = "dqn-atari"
ARGS_PRESET = [PRESET]
"""The preset of the drl side and the raw loop's actor (``--preset``), set once the arguments are read."""
FRAMESKIP = 4
STACK = 4
FOREVER = 10**9
GOAL_RAW = 0.9
REPO = Path(__file__).resolve().parent.parent
SF_PYTHON = Path(os.environ.get("DRL_PEERS", "/work/venvs")) / "sf" / "bin" / "python"
SF_SCRIPT = REPO / "bench" / "peers" / "sf_pong.py"
SF_REPORT = re.compile(r"Total num frames: (\d+)\. .*Samples: (\d+)\.")
SF_SAMPLED = re.compile(r"^sampled (\d+)$")
SIDES = ("raw", "raw-overlap", "raw-one", "raw-one-overlap", "sf", "sf-sampler", "drl")
ONE_PROCESS = ("raw-one", "raw-one-overlap")


def drl_has_preset() -> bool:
    from drl.presets import PRESETS

    return ARGS_PRESET[0] in PRESETS


def drl_has_vector_env() -> bool:
    """Whether the tree's workers choose their vector env (``--vector-env``: EnvPool or gymnasium)."""
    from drl.config import ExperimentConfig

    return hasattr(ExperimentConfig, "vector_env")


def drl_has_atari() -> bool:
    """Whether drl builds Atari envs itself (``drl.atari``: the preprocessing its workers step)."""
    import importlib.util

    return importlib.util.find_spec("drl.atari") is not None


# -- raw loop ------------------------------------------------------------------------------------------------
def local_env(env_id: str):
    """The gymnasium chain every side steps (see the module docstring), for a tree without drl's Atari env."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=FRAMESKIP, screen_size=84, grayscale_obs=True, terminal_on_life_loss=False
    )
    return gym.wrappers.FrameStackObservation(env, STACK)


def nature_cnn(actions: int):
    """The Nature DQN network (Mnih et al. 2015): three convolutions, 512 hidden units, one Q-value per action."""
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(STACK, 32, 8, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(3136, 512),
        nn.ReLU(),
        nn.Linear(512, actions),
    )


def torch_policy(actions: int, seed: int):
    """Greedy actions of the Nature CNN in torch (random weights) for a batch of uint8 stacks."""
    import torch

    torch.manual_seed(seed)
    net = nature_cnn(actions).eval()

    def act(obs):
        with torch.no_grad():
            return net(torch.from_numpy(obs).float().div_(255.0)).argmax(1).numpy()

    return act, "Nature CNN in torch"


def drl_policy(job: dict, spec):
    """The preset's actor, the one drl's workers act with, loaded with random weights where it names them."""
    import numpy as np

    from drl.algorithms import make_actor
    from drl.presets import get_preset

    cfg = get_preset(job.get("preset", PRESET), job["env"])
    actor = make_actor(cfg.algorithm, spec, cfg, seed=job["seed"])
    shapes = getattr(actor, "shapes", None)
    if shapes:
        rng = np.random.default_rng(job["seed"])
        actor.load({name: (0.05 * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()})
    return actor.act, f"{type(actor).__name__} ({job.get('preset', PRESET)} preset)"


def drl_stepper(job: dict):
    """drl's envs (``VecEnv`` over ``drl.envs.make_env``, the training env the workers step), stepped into
    preallocated rows as ``bench.scaling``'s raw loop does; the preset's actor where the tree has it."""
    import numpy as np

    from drl import envs as drl_envs

    n = job["envs_per_worker"]
    overlap = job.get("overlap", False)
    if hasattr(drl_envs, "make_vec_env"):
        backend, workers = job.get("vector_env", "auto"), job.get("workers", 1)
        envs = drl_envs.make_vec_env(job["env"], n, seed=job["seed"], backend=backend, workers=workers, overlap=overlap)
    else:
        envs = drl_envs.VecEnv(job["env"], n, seed=job["seed"])
    describe = getattr(envs, "describe", lambda: "gymnasium envs")()
    act, policy = (
        drl_policy(job, envs.spec) if job["policy"] == "drl" else torch_policy(envs.spec.discrete_actions, job["seed"])
    )
    rows = {
        "obs": np.empty_like(envs.obs),
        "next_obs": np.empty_like(envs.obs),
        "action": np.empty((n, *envs.spec.act_shape), envs.spec.act_dtype),
        "reward": np.empty(n, np.float32),
        "terminated": np.empty(n, np.uint8),
    }

    def step() -> None:
        if overlap:
            envs.step_with(act, rows, 0)
        else:
            envs.step_into(act(envs.obs), rows, 0)

    return step, f"drl {type(envs).__name__} ({describe}), {policy}"


def local_stepper(job: dict):
    """The gymnasium chain and the Nature CNN in torch, for a tree without drl's Atari envs."""
    import numpy as np

    envs = [local_env(job["env"]) for _ in range(job["envs_per_worker"])]
    obs = np.stack([env.reset(seed=job["seed"] + i)[0] for i, env in enumerate(envs)])
    act, policy = torch_policy(int(envs[0].action_space.n), job["seed"])

    def step() -> None:
        actions = act(obs)
        for i, env in enumerate(envs):
            o, _, terminated, truncated, _ = env.step(int(actions[i]))
            obs[i] = env.reset()[0] if terminated or truncated else o

    return step, f"gymnasium AtariPreprocessing + FrameStackObservation, {policy}"


def raw_child(job: dict) -> int:
    """Runs in a fresh process: steps the envs and acts, nothing else; prints one JSON line."""
    import torch

    torch.set_num_threads(1)
    step, what = (drl_stepper if job["source"] == "drl" else local_stepper)(job)
    if job.get("start_at"):
        time.sleep(max(0.0, job["start_at"] - time.time()))
    deadline = time.perf_counter() + job["warmup_s"]
    while time.perf_counter() < deadline:
        step()
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while True:
        for _ in range(10):
            step()
        steps += 10 * job["envs_per_worker"]
        elapsed = time.perf_counter() - start
        if elapsed >= job["seconds"]:
            break
    print(
        json.dumps(
            {
                "frames": FRAMESKIP * steps,
                "seconds": elapsed,
                "rate": FRAMESKIP * steps / elapsed,
                "cpu_s": time.process_time() - cpu,
                "what": what,
            }
        )
    )
    return 0


def measure_raw(n: int, seed: int, args: argparse.Namespace, overlap: bool = False, one: bool = False) -> dict:
    """N raw loops in N processes started together (after their imports and env construction); the rate is
    their sum. ``overlap`` (side ``raw-overlap``): each loop acts on half of its EnvPool envs while the other half
    steps (``VecEnv.step_with``), as drl's ASYNC workers do. ``one`` (sides ``raw-one``, ``raw-one-overlap``): one
    process steps all N x E envs with EnvPool's threads sized for the whole machine."""
    processes = 1 if one else n
    job = {
        "env": args.env,
        "envs_per_worker": args.envs_per_worker * (n if one else 1),
        "seconds": args.raw_seconds,
        "warmup_s": 1.0,
        "source": args.raw_source,
        "policy": args.raw_policy,
        "vector_env": args.vector_env,
        "workers": processes,
        "overlap": overlap,
        "preset": args.preset,
        "start_at": time.time() + 6.0 + 1.5 * processes,
    }
    result: dict = {
        "side": ("raw-one" if one else "raw") + ("-overlap" if overlap else ""),
        "workers": n,
        "seed": seed,
        "load_at_start": round(os.getloadavg()[0], 2),
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.atari_throughput",
                "--raw-child",
                json.dumps({**job, "seed": seed + 100 * i}),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    try:
        outs = [p.communicate(timeout=180 + 2 * args.raw_seconds + 5 * processes) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        return {**result, "error": "the raw loops did not finish in time"}
    if any(p.returncode != 0 for p in procs):
        return {**result, "error": "raw loop failed: " + " | ".join(o[1][-600:] for o in outs if o[1])}
    runs = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    return {
        **result,
        "rate": sum(r["rate"] for r in runs),
        "per_process": [round(r["rate"], 1) for r in runs],
        "cpu_share": round(sum(r["cpu_s"] for r in runs) / (args.raw_seconds * cores()), 3),
        "what": runs[0]["what"],
    }


# -- Sample Factory ----------------------------------------------------------------------------------------------
def sf_command(n: int, seed: int, args: argparse.Namespace, train_dir: Path, sampler: bool) -> list[str]:
    return [
        str(SF_PYTHON),
        str(SF_SCRIPT),
        *(["--sampler"] if sampler else []),
        "--num_workers",
        str(n),
        "--num_envs_per_worker",
        str(args.envs_per_worker),
        "--seed",
        str(seed),
        "--train_dir",
        str(train_dir),
        *shlex.split(args.sf_args),
    ]


class SfReports:
    """Sample Factory's periodic reports, each stamped with the time its line arrived: (time, frames consumed by
    its learner, agent steps collected) from its own reports every 5 s, or with ``--sampler`` (time, frames
    collected, agent steps collected) about once a second."""

    def __init__(self, proc: subprocess.Popen, log_path: Path):
        self.proc, self.reports, self.tail = proc, [], []
        self.thread = threading.Thread(target=self._read, args=(log_path,), daemon=True)
        self.thread.start()

    def _read(self, log_path: Path) -> None:
        with open(log_path, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                self.tail = (self.tail + [line])[-40:]
                match = SF_REPORT.search(line)
                if match:
                    self.reports.append((time.perf_counter(), int(match.group(1)), int(match.group(2))))
                match = SF_SAMPLED.match(line.strip())
                if match:
                    steps = int(match.group(1))
                    self.reports.append((time.perf_counter(), FRAMESKIP * steps, steps))

    def wait(self, test, timeout: float) -> tuple[float, int, int]:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            found = next((r for r in self.reports if test(r)), None)
            if found:
                return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"Sample Factory exited with {self.proc.returncode}")
            time.sleep(0.2)
        raise RuntimeError(f"no Sample Factory report within {timeout:.0f} s")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGINT to the process group (Sample Factory stops its workers), then SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def grown(reports: list[tuple[float, int, int]]) -> tuple[tuple, tuple]:
    """The first and last reports at which the frame counter grew (the window's ends when it grew fewer than
    twice): a counter that moves in whole training batches is best read where it moved."""
    moved = [b for a, b in zip(reports, reports[1:]) if b[1] > a[1]]
    return (moved[0], moved[-1]) if len(moved) >= 2 else (reports[0], reports[-1])


def measure_sf(n: int, seed: int, args: argparse.Namespace, workdir: Path, sampler: bool = False) -> dict:
    result: dict = {
        "side": "sf-sampler" if sampler else "sf",
        "workers": n,
        "seed": seed,
        "load_at_start": round(os.getloadavg()[0], 2),
    }
    if not SF_PYTHON.exists():
        return {
            **result,
            "error": f"no Sample Factory environment at {SF_PYTHON.parent.parent}: run "
            "bench/peers/setup_atari_peers.sh",
        }
    train_dir = workdir / f"sf-w{n}-s{seed}-{int(time.time() * 1000) % 10**8}"
    launched = time.perf_counter()
    proc = subprocess.Popen(
        sf_command(n, seed, args, train_dir, sampler),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    reports = SfReports(proc, train_dir.with_suffix(".out"))
    try:
        first = reports.wait(lambda r: r[1] > 0, args.start_timeout)
        result["startup_s"] = round(first[0] - launched, 2)
        start = reports.wait(lambda r: r[0] >= first[0] + args.settle, args.settle + 30)
        end = reports.wait(lambda r: r[0] >= start[0] + args.window - 0.5, args.window + 30)
        window = [r for r in reports.reports if start[0] <= r[0] <= end[0]]
        a, b = grown(window) if not sampler else (start, end)
        result.update(
            {
                "rate": (b[1] - a[1]) / (b[0] - a[0]),
                "collected_rate": FRAMESKIP * (end[2] - start[2]) / (end[0] - start[0]),
                "window_s": round(b[0] - a[0], 2),
                "frames_in_window": b[1] - a[1],
            }
        )
    except Exception as exc:  # recorded and shown: the row says why it has no figure
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["log_tail"] = "".join(reports.tail)[-1500:]
    finally:
        stop_group(proc)
    return result


# -- drl, through the whole system --------------------------------------------------------------------------------
# >>> drl side. Needs the dqn-atari preset and the frame path of issue 24 on the tree (drl.presets.PRESETS).
def drl_command(n: int, seed: int, args: argparse.Namespace, output: Path, run: str) -> list[str]:
    learning = [] if args.drl_train else ["--learning-starts", str(FOREVER)]
    return [
        orchestrate_exe(),
        "--preset",
        args.preset,
        "--env",
        args.env,
        "--mode",
        "async",
        "--workers",
        str(n),
        "--envs-per-worker",
        str(args.envs_per_worker),
        "--steps",
        str(FOREVER),
        "--random-steps",
        "0",
        *learning,
        "--eval-episodes",
        "1",
        "--seed",
        str(seed),
        *(["--vector-env", args.vector_env] if drl_has_vector_env() else []),
        *shlex.split(args.drl_args),
        "--output",
        str(output),
        "--run-name",
        run,
    ]


class DrlRun(SystemRun):
    """``bench.scaling``'s measured run of the whole system, started with ``drl_command``."""

    def start(self) -> None:
        self.launched = time.perf_counter()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                drl_command(self.workers, self.seed, self.args, self.run_dir.parent, self.run),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )


def read_summary(run_dir: Path) -> dict:
    """Produced and consumed transitions and wall seconds of a finished run, from its summary.json, as frames."""
    path = run_dir / "summary.json"
    if not path.exists():
        return {}
    summary = json.loads(path.read_text())
    wall = float(summary.get("wall_seconds") or 0.0)
    produced, consumed = int(summary.get("transitions_produced", -1)), int(summary.get("transitions_consumed", -1))
    return {
        "produced_frames": FRAMESKIP * produced,
        "consumed_frames": FRAMESKIP * consumed,
        "wall_seconds": wall,
        "whole_run_rate": FRAMESKIP * consumed / wall if wall > 0 and consumed >= 0 else None,
        "exit_reason": summary.get("exit_reason"),
    }


def measure_drl(n: int, seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    result: dict = {"side": "drl", "workers": n, "seed": seed, "load_at_start": round(os.getloadavg()[0], 2)}
    if not drl_has_preset():
        return {**result, "error": f"drl's {args.preset} preset is not on this tree yet (issue 24's frame path)"}
    run = DrlRun(n, seed, args, workdir)
    run.run = f"atari-w{n}-s{seed}-{int(time.time() * 1000) % 10**8}"
    run.run_dir, run.log_path = workdir / run.run, workdir / f"{run.run}.out"
    from drl.memory.redis import Keys

    run.keys = Keys(run.run)
    try:
        run.start()
        run.wait_steady()
        result["startup_s"] = run.startup_s
        time.sleep(args.settle)
        window = run.window(args.window)
        result.update(
            {
                "rate": FRAMESKIP * window["rate"],
                "produced_rate": FRAMESKIP * window["produced_rate"],
                "window_s": window["window_s"],
                "transitions_per_entry": window["transitions_per_entry"],
                "cpu_share": window["cpu_share"],
            }
        )
    except Exception as exc:  # recorded and shown: the row says why it has no figure
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["log_tail"] = run.log_tail()
    finally:
        run.stop()
    result["summary"] = read_summary(run.run_dir)
    return result


# <<< drl side


# -- report ------------------------------------------------------------------------------------------------------
def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def summarise(worker_counts: list[int], results: list[dict], n_cores: int, peer: str) -> tuple[list[dict], bool]:
    """Medians per N, and the medians of each repeat's ratios. The goal's Sample Factory figure is ``peer``; a row
    whose raw loop or peer produced no rate has no verdict (None), one where drl produced none is not met."""
    rows = []
    for n in worker_counts:
        mine = [r for r in results if r["workers"] == n]
        rate = {side: median(r.get("rate") for r in mine if r["side"] == side) for side in SIDES}
        paired = [
            {r["side"]: r.get("rate") for r in mine if r["repeat"] == rep}
            for rep in sorted({r["repeat"] for r in mine})
        ]

        def ratio(x: str, y: str, paired: list = paired) -> float | None:
            return median(p[x] / p[y] for p in paired if p.get(x) and p.get(y))

        for p in paired:
            p["raw-one-best"] = max((p[side] for side in ONE_PROCESS if p.get(side)), default=None)

        row = {
            "workers": n,
            "raw_fps": rate["raw"],
            "raw_overlap_fps": rate["raw-overlap"],
            "raw_one_fps": rate["raw-one"],
            "raw_one_overlap_fps": rate["raw-one-overlap"],
            "sf_fps": rate["sf"],
            "sf_sampler_fps": rate["sf-sampler"],
            "drl_fps": rate["drl"],
            "sf_collected_fps": median(r.get("collected_rate") for r in mine if r["side"] == "sf"),
            "drl_whole_run_fps": median(r.get("summary", {}).get("whole_run_rate") for r in mine if r["side"] == "drl"),
            "drl_over_raw": ratio("drl", "raw"),
            "drl_over_raw_overlap": ratio("drl", "raw-overlap"),
            "drl_over_raw_one": ratio("drl", "raw-one-best"),
            "drl_over_sf": ratio("drl", "sf"),
            "drl_over_sf_sampler": ratio("drl", "sf-sampler"),
            "sf_over_raw": ratio("sf", "raw"),
            "sf_sampler_over_raw": ratio("sf-sampler", "raw"),
        }
        over_peer = ratio("drl", peer)
        if not rate["drl"]:
            row["goal_met"] = False
        elif row["drl_over_raw"] is None or over_peer is None:
            row["goal_met"] = None
        else:
            over_raw = min(r for r in (row["drl_over_raw"], row["drl_over_raw_overlap"]) if r is not None)
            row["goal_met"] = (n > n_cores or over_raw >= GOAL_RAW) and over_peer >= 1.0
        rows.append(row)
    return rows, combined(row["goal_met"] for row in rows)


def print_table(rows: list[dict]) -> None:
    print()
    print(
        f"{'N':>3} {'raw':>7} {'raw-ovl':>7} {'1p':>7} {'1p-ovl':>7} {'sf':>7} {'sf coll.':>8} {'sf-samp':>8} {'drl':>7} {'drl run':>8} "
        f"{'drl/raw':>8} {'drl/ovl':>8} {'drl/1p':>7} {'drl/sf':>7} {'drl/sf-samp':>11} {'sf/raw':>7} {'sf-samp/raw':>11}"
    )
    for r in rows:
        print(
            f"{r['workers']:>3} {fmt(r['raw_fps']):>7} {fmt(r['raw_overlap_fps']):>7} "
            f"{fmt(r['raw_one_fps']):>7} {fmt(r['raw_one_overlap_fps']):>7} {fmt(r['sf_fps']):>7} {fmt(r['sf_collected_fps']):>8} "
            f"{fmt(r['sf_sampler_fps']):>8} {fmt(r['drl_fps']):>7} {fmt(r['drl_whole_run_fps']):>8} "
            f"{fmt(r['drl_over_raw'], '.3f'):>8} {fmt(r['drl_over_raw_overlap'], '.3f'):>8} "
            f"{fmt(r['drl_over_raw_one'], '.3f'):>7} "
            f"{fmt(r['drl_over_sf'], '.2f'):>7} "
            f"{fmt(r['drl_over_sf_sampler'], '.2f'):>11} {fmt(r['sf_over_raw'], '.3f'):>7} "
            f"{fmt(r['sf_sampler_over_raw'], '.3f'):>11}"
        )
    print(
        "frames/s, frames = agent steps x 4. raw: N loops acting, nothing sent (ovl: on one half while the "
        "other steps). 1p: one process stepping all the envs (drl/1p: against the faster 1p loop). sf: frames its learner trained on "
        "(sf coll.: collected). sf-samp: Sample Factory's sampler alone. drl: frames the trainer consumed in the "
        "steady window (drl run: over the whole run, start-up included, from summary.json)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--envs-per-worker", type=int, default=4, help="envs each worker steps as one batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of each system's measured window")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after start-up before the window")
    parser.add_argument("--raw-seconds", type=float, default=10.0, help="seconds of each raw measurement")
    parser.add_argument(
        "--raw-source",
        choices=("auto", "drl", "local"),
        default="auto",
        help="raw loop's envs: drl's VecEnv (needs drl.atari) or the local gymnasium chain",
    )
    parser.add_argument(
        "--raw-policy",
        choices=("auto", "drl", "torch"),
        default="auto",
        help="raw loop's network: the dqn-atari preset's actor or the Nature CNN in torch",
    )
    parser.add_argument("--sides", default=",".join(SIDES), help="which of " + ",".join(SIDES) + " to measure")
    parser.add_argument("--sf-args", default="", help="extra Sample Factory flags (e.g. '--num_epochs 1')")
    parser.add_argument("--drl-args", default="", help="extra drl-orchestrate flags")
    parser.add_argument("--drl-train", action="store_true", help="drl's trainer learns (preset's learning start)")
    parser.add_argument("--env", default=ENV)
    parser.add_argument(
        "--preset",
        default=PRESET,
        help="drl's preset (its actor acts in the raw loop too); appo-atari with --drl-train",
    )
    parser.add_argument(
        "--vector-env",
        default="auto",
        choices=("auto", "gymnasium", "envpool"),
        help="the vector env of drl's workers and of the raw loop (on a tree that has the choice)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds a system may take to start")
    parser.add_argument("--sample-s", type=float, default=0.5, help="drl: seconds between counter samples")
    parser.add_argument("--quick", action="store_true", help="1, 2 workers, 1 repeat, 10 s windows, 5 s raw")
    parser.add_argument("--raw-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ARGS_PRESET[0] = args.preset
    if args.raw_child:
        return raw_child(json.loads(args.raw_child))
    if args.quick:
        args.workers, args.repeats, args.window, args.settle, args.raw_seconds = "1,2", 1, 10.0, 3.0, 5.0
    if args.raw_source == "auto":
        args.raw_source = "drl" if drl_has_atari() else "local"
    if args.raw_policy == "auto":
        args.raw_policy = "drl" if drl_has_preset() and args.raw_source == "drl" else "torch"
    worker_counts = [int(x) for x in args.workers.split(",")]
    sides = [s for s in SIDES if s in args.sides.split(",")]
    n_cores = cores()

    command = " ".join(
        [
            os.path.basename(sys.executable),
            "-m",
            "bench.atari_throughput",
            *map(shlex.quote, sys.argv[1:] if argv is None else argv),
        ]
    )
    machine = {"cores": n_cores, "platform": platform.platform(), "load_average_start": os.getloadavg()[0]}
    versions = {
        "python": platform.python_version(),
        "torch": version("torch"),
        "gymnasium": version("gymnasium"),
        "ale-py": version("ale-py"),
        "drl": git_commit(),
        "sample-factory": "2.1.1 (" + str(SF_PYTHON.parent.parent) + ")",
    }
    print(f"command:  {command}")
    print(f"machine:  {n_cores} cores, {machine['platform']}, load average {machine['load_average_start']:.2f}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(
        f"setup:    {args.env}, {args.envs_per_worker} envs per worker, workers {worker_counts}, sides {sides}, "
        f"{args.repeats} repeats, windows {args.window:g} s after {args.settle:g} s, raw {args.raw_seconds:g} s, "
        f"raw envs {args.raw_source}, raw policy {args.raw_policy}, "
        f"drl trainer {'learning' if args.drl_train else 'consuming only'}",
        flush=True,
    )

    measure = {
        "raw": lambda n, s, d: measure_raw(n, s, args),
        "raw-overlap": lambda n, s, d: measure_raw(n, s, args, overlap=True),
        "raw-one": lambda n, s, d: measure_raw(n, s, args, one=True),
        "raw-one-overlap": lambda n, s, d: measure_raw(n, s, args, overlap=True, one=True),
        "sf": lambda n, s, d: measure_sf(n, s, args, d),
        "sf-sampler": lambda n, s, d: measure_sf(n, s, args, d, sampler=True),
        "drl": lambda n, s, d: measure_drl(n, s, args, d),
    }
    peer = "sf" if args.drl_train else "sf-sampler"
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="drl-atari-tp-") as tmp:
        for rep in range(args.repeats):
            for i, n in enumerate(worker_counts):
                k = (rep + i) % len(sides)
                for side in sides[k:] + sides[:k]:
                    r = measure[side](n, args.seed + rep, Path(tmp))
                    r["repeat"] = rep
                    results.append(r)
                    shown = (
                        f"{r['rate']:,.0f} frames/s" if r.get("rate") is not None else f"no figure: {r.get('error')}"
                    )
                    print(f"  repeat {rep} N={n} {side:<10} {shown}", flush=True)
                    if r.get("log_tail") and r.get("rate") is None:
                        print("    " + r["log_tail"][-800:].replace("\n", "\n    "), flush=True)
    rows, goal_met = summarise(worker_counts, results, n_cores, peer)
    print_table(rows)
    machine["load_average_end"] = os.getloadavg()[0]
    shown = "no comparison (a baseline failed)" if goal_met is None else "met" if goal_met else "not met"
    print(
        f"goal: drl >= {GOAL_RAW} x raw for N <= {n_cores} cores and >= Sample Factory ({peer}): "
        f"{shown}; load average {machine['load_average_start']:.2f} at start, "
        f"{machine['load_average_end']:.2f} at end"
    )
    one = [row for row in rows if row["drl_over_raw_one"] is not None]
    if one:
        print(
            f"issue 45: drl >= {GOAL_RAW} x the one-process raw loop: "
            + ", ".join(
                f"N={row['workers']} {row['drl_over_raw_one']:.3f} "
                f"({'met' if row['drl_over_raw_one'] >= GOAL_RAW else 'not met'})"
                for row in one
            )
        )
    print(
        json.dumps(
            {
                "rows": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()} for row in rows],
                "goal": f"drl >= {GOAL_RAW} x raw for N <= cores, drl >= {peer}",
                "goal_met": goal_met,
                "peer": peer,
                "frames": "agent steps x 4 (frame skip 4); sf and drl count consumed transitions",
                "env": args.env,
                "envs_per_worker": args.envs_per_worker,
                "workers": worker_counts,
                "sides": sides,
                "repeats": args.repeats,
                "window_s": args.window,
                "settle_s": args.settle,
                "raw_seconds": args.raw_seconds,
                "raw_source": args.raw_source,
                "raw_policy": args.raw_policy,
                "drl_train": args.drl_train,
                "sf_args": args.sf_args,
                "drl_args": args.drl_args,
                "runs": [{k: v for k, v in r.items() if k != "log_tail"} for r in results],
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
