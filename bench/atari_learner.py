"""DQN learner speed on Atari batches: gradient updates per second of drl's ``DQNLearner`` with an image spec next
to Stable-Baselines3's DQN, on the same batches.

Both learners get the same problem: batches of 32 transitions with (4, 84, 84) uint8 observations (ALE Pong's
stacked frames, 6 actions), the Nature DQN network (three convolutions, 512 hidden units), Adam at 1e-4, Huber
loss to 1-step targets of a target network, gradient norm clipped to 10, CPU only, the same torch thread count
(``torch.get_num_threads()``, by default the machine's cores; ``--threads`` sets it). The transitions are
``bench.peers.atari_data.transitions(--fill, --seed)``: noise frames (a convolution costs the same whatever the
pixels), consecutive stacks sharing frames, built on both sides from the seed and checked equal by digest.

- **drl**: ``DQNLearner(spec, DQNConfig, seed)`` with the image spec of ``ALE/Pong-v5`` (``frame_stack`` 4) and
  the ``dqn-atari`` preset's DQN block where the tree has it, else ``DQNConfig``'s defaults, with ``batch_size``
  32, ``n_step`` 1 and ``double`` off so that the update is SB3's arithmetic (``--double`` keeps double DQN: one
  more forward pass of the online network on the next observations). One timed update is
  ``learner.update(replay.sample(32))``: the batch sampled inside the timed loop, as SB3's ``train()`` samples,
  from drl's frame replay (``drl.training.replay.ReplayBuffer`` with the image spec, filled as the trainer fills it: each
  frame stored once, the stacks rebuilt per batch); the batch is a dict of tensors, obs/next_obs uint8
  (32, 4, 84, 84), action int64, reward/terminated float32.
- **sb3**: ``DQN("CnnPolicy", ...)`` in a child process in the Stable-Baselines3 environment
  (``/work/venvs/sb3``, ``bench/peers/setup_atari_peers.sh``; ``bench/peers/sb3_dqn.py``), its replay buffer
  filled with the same transitions through its own ``add``; one timed block is ``model.train(gradient_steps=K,
  batch_size=32)``, SB3's own loop of replay sampling and gradient steps.

Each learner is warmed up (``--warmup`` updates), then both are timed in rotation, ``--repeats`` times,
``--updates`` updates per timed block, so load drift on a shared machine hits both alike. The table shows the
median updates/s with the spread; ``ratio`` is drl's median over SB3's (and the median of the per-repeat
ratios). The last line is one JSON object with both figures, the ratio, the command, the machine and the versions.

    python -m bench.atari_learner              # 5 repeats x 50 updates, 10,000 transitions (a few minutes)
    python -m bench.atari_learner --quick      # 3 repeats x 10 updates, 2,000 transitions
    python -m bench.atari_learner --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.peers.atari_data import ACTIONS, SIZE, STACK, digest, transitions
from bench.time_to_score import git_commit

ENV = "ALE/Pong-v5"
PRESET = "dqn-atari"
BATCH = 32
LR = 1e-4
GAMMA = 0.99
MAX_GRAD_NORM = 10.0
REPO = Path(__file__).resolve().parent.parent
SB3_PYTHON = Path(os.environ.get("DRL_PEERS", "/work/venvs")) / "sb3" / "bin" / "python"


def drl_config(double: bool):
    """The preset's DQN block where the tree has the preset, with SB3's batch, step count and target rule."""
    from drl.algorithms.dqn.config import DQNConfig
    from drl.presets import PRESETS, get_preset

    base = get_preset(PRESET, ENV).dqn if PRESET in PRESETS else DQNConfig()
    return dataclasses.replace(
        base, batch_size=BATCH, lr=LR, gamma=GAMMA, n_step=1, double=double, max_grad_norm=MAX_GRAD_NORM
    )


def image_spec():
    from drl.envs import SpaceSpec

    return SpaceSpec(
        obs_shape=(STACK, SIZE, SIZE),
        obs_dtype="|u1",
        act_shape=(),
        act_dtype="<i8",
        discrete_actions=ACTIONS,
        frame_stack=STACK,
    )


class DrlRunner:
    name = "drl"

    def __init__(self, data: dict[str, np.ndarray], seed: int, double: bool):
        from drl.algorithms.dqn.learner import DQNLearner

        spec = image_spec()
        self.cfg = drl_config(double)
        self.learner = DQNLearner(spec, self.cfg, seed=seed)
        self.params = sum(p.numel() for p in self.learner.q.parameters())
        self.sample, self.source = self._sampler(spec, data, seed)
        self.last: dict = {}

    @staticmethod
    def _sampler(spec, data: dict[str, np.ndarray], seed: int):
        """drl's frame replay filled as the trainer fills it: one entry whose frame table holds each frame once
        and whose observations are the indices of their 4 frames in it."""
        from drl.frames import INDEX_DTYPE, TABLE
        from drl.training.replay import ReplayBuffer

        n = len(data["reward"])
        rows = np.arange(n)[:, None] + np.arange(STACK)
        replay = ReplayBuffer(spec, capacity=n, seed=seed)
        replay.add(
            {
                TABLE: data["frames"],
                "obs": rows.astype(INDEX_DTYPE),
                "next_obs": (rows + 1).astype(INDEX_DTYPE),
                "action": data["action"],
                "reward": data["reward"],
                "terminated": data["terminated"],
            }
        )
        batch = replay.sample(BATCH)
        if (
            len(replay) != n
            or batch["obs"].dtype != torch.uint8
            or not torch.equal(batch["obs"][:, 1:], batch["next_obs"][:, :-1])
        ):
            raise RuntimeError("drl's replay does not give back the stacks it was given")
        return (lambda: replay.sample(BATCH)), "drl.training.replay.ReplayBuffer (frames stored once)"

    def run(self, updates: int) -> float:
        learner, sample = self.learner, self.sample
        start = time.perf_counter()
        for _ in range(updates):
            self.last = learner.update(sample())
        return time.perf_counter() - start


class Sb3Runner:
    name = "sb3"

    def __init__(self, fill: int, seed: int, threads: int, expected_digest: str):
        if not SB3_PYTHON.exists():
            raise SystemExit(
                f"no Stable-Baselines3 environment at {SB3_PYTHON.parent.parent}: run bench/peers/setup_atari_peers.sh"
            )
        job = {
            "fill": fill,
            "seed": seed,
            "threads": threads,
            "batch": BATCH,
            "lr": LR,
            "gamma": GAMMA,
            "max_grad_norm": MAX_GRAD_NORM,
        }
        self.proc = subprocess.Popen(
            [str(SB3_PYTHON), str(REPO / "bench" / "peers" / "sb3_dqn.py"), json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise SystemExit(f"the Stable-Baselines3 child did not start (exit {self.proc.wait()})")
        if ready[1] != expected_digest:
            raise SystemExit(f"the Stable-Baselines3 child built other transitions ({ready[1]} != {expected_digest})")
        self.params, self.version = int(ready[2]), ready[3]

    def run(self, updates: int) -> float:
        self.proc.stdin.write(f"{updates}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["seconds"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per learner (medians are reported)")
    parser.add_argument("--updates", type=int, default=50, help="gradient updates per timed block")
    parser.add_argument("--warmup", type=int, default=10, help="untimed updates per learner before timing")
    parser.add_argument("--fill", type=int, default=10_000, help="transitions in each replay")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's own)")
    parser.add_argument("--double", action="store_true", help="drl runs double DQN (SB3 cannot)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 repeats x 10 updates, 3 warm-up, 2,000 transitions")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.updates, args.warmup, args.fill = 3, 10, 3, 2_000
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    command = " ".join(
        [
            os.path.basename(sys.executable),
            "-m",
            "bench.atari_learner",
            *map(shlex.quote, sys.argv[1:] if argv is None else argv),
        ]
    )
    machine = {
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "drl": git_commit(),
        "stable-baselines3": "(" + str(SB3_PYTHON.parent.parent) + ")",
    }
    print(f"command:  {command}")
    print(
        f"machine:  {machine['logical_cpus']} logical CPUs, {machine['platform']}, torch CPU capability "
        f"{machine['torch_cpu_capability']}"
    )
    print(
        f"setup:    batches of {BATCH} x {STACK}x{SIZE}x{SIZE} uint8, {ACTIONS} actions, Nature CNN, Adam {LR}, "
        f"torch threads {threads} (both), {args.fill:,} transitions, warm-up {args.warmup}, {args.repeats} x "
        f"{args.updates} timed updates each, in rotation",
        flush=True,
    )
    load_start = os.getloadavg()

    data = transitions(args.fill, args.seed)
    runners: list = []
    errors: dict[str, str] = {}
    try:
        runners.append(DrlRunner(data, args.seed, args.double))
        runners[0].run(1)
    except Exception as exc:  # a tree whose DQN learner has no image encoder yet: SB3 is still measured
        runners.clear()
        errors["drl"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(f"drl:      no figure: {errors['drl']}", flush=True)
    sb3 = Sb3Runner(args.fill, args.seed, threads, digest(data))
    runners.append(sb3)
    try:
        for runner in runners:
            runner.run(args.warmup)
        rates: dict[str, list[float]] = {r.name: [] for r in runners}
        for rep in range(args.repeats):
            k = rep % len(runners)
            for runner in runners[k:] + runners[:k]:
                rates[runner.name].append(args.updates / runner.run(args.updates))
    finally:
        sb3.close()
    versions["stable-baselines3"] = f"{sb3.version} {versions['stable-baselines3']}"
    load_end = os.getloadavg()

    medians = {name: statistics.median(values) for name, values in rates.items()}
    ratio = medians["drl"] / medians["sb3"] if "drl" in medians else None
    pair_ratio = statistics.median(d / s for d, s in zip(rates["drl"], rates["sb3"])) if ratio is not None else None
    print()
    print(f"{'learner':<8} {'updates/s (median)':>19} {'min':>8} {'max':>8} {'ms/update':>10} {'parameters':>11}")
    for runner in runners:
        values = rates[runner.name]
        print(
            f"{runner.name:<8} {medians[runner.name]:>19.2f} {min(values):>8.2f} {max(values):>8.2f} "
            f"{1000 / medians[runner.name]:>10.1f} {runner.params:>11,}"
        )
    if ratio is not None:
        drl = runners[0]
        print(
            f"ratio drl/sb3: {ratio:.2f}x; median of the per-repeat ratios {pair_ratio:.2f}x "
            f"(drl: {'double' if args.double else 'plain'} DQN, batches from {drl.source})"
        )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"load average: {load_start[0]:.2f} at start, {load_end[0]:.2f} at end")
    print(
        json.dumps(
            {
                "drl_updates_per_s": round(medians["drl"], 3) if "drl" in medians else None,
                "sb3_updates_per_s": round(medians["sb3"], 3),
                "ratio": round(ratio, 3) if ratio is not None else None,
                "ratio_median_per_repeat": round(pair_ratio, 3) if pair_ratio is not None else None,
                "drl_runs": [round(v, 3) for v in rates.get("drl", [])],
                "sb3_runs": [round(v, 3) for v in rates["sb3"]],
                "errors": errors,
                "threads": threads,
                "batch_size": BATCH,
                "obs": [STACK, SIZE, SIZE],
                "actions": ACTIONS,
                "double": args.double,
                "fill": args.fill,
                "repeats": args.repeats,
                "updates_per_repeat": args.updates,
                "warmup": args.warmup,
                "load_average": [round(load_start[0], 2), round(load_end[0], 2)],
                "drl_batches": runners[0].source if "drl" in medians else None,
                "drl_config": dataclasses.asdict(runners[0].cfg) if "drl" in medians else None,
                "drl_last_metrics": {k: round(float(v), 5) for k, v in runners[0].last.items()}
                if "drl" in medians
                else {},
                "parameters": {r.name: r.params for r in runners},
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
