"""Data-parallel learners: gradient updates per second of K learners in one torch.distributed group against one.

Each learner is a process with its own replay (Pendulum-shaped random transitions, as ``learner_speed``), drl's
``SACLearner`` (hidden 256x256, batch 256 per learner) on the CPU with ``--threads`` torch threads, joined in a
gloo group over loopback (``drl.training.collective.join``): every update averages the critics' and the actor's flat
gradients over the group (two all-reduces), so K learners make one update on K x 256 transitions. For each K
in ``--learners`` (1 is the baseline, measured in the same run), the group warms up, then times ``--updates``
updates, ``--repeats`` times, the K values in rotation. Reported: group updates/s (each a step of every learner),
transitions/s learned from (updates/s x K x 256), and the efficiency against K times one learner's transitions/s.

On a machine with fewer cores than K x threads the learners share cores, so the efficiency there shows the
contention as well as the all-reduce; the figure to look for on such a machine is the cost of the exchange itself
(``--learners 1,2 --threads 1`` on 2 cores: each learner has a core).

    python -m bench.learner_group                  # K = 1, 2; 3 repeats x 200 updates
    python -m bench.learner_group --learners 1,2,4 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from bench.learner_speed import BATCH, ENV, HIDDEN, LR, cpu_model, random_transitions, version


def _learner(rank: int, size: int, port: int, updates: int, warmup: int, fill: int, threads: int, out: str) -> None:
    from drl.algorithms.sac import SACConfig, SACLearner
    from drl.envs import space_spec
    from drl.training.collective import join
    from drl.training.replay import ReplayBuffer

    torch.set_num_threads(threads)
    group = join(rank, size, "127.0.0.1", port, backend="gloo", timeout_s=300) if size > 1 else None
    spec = space_spec(ENV)
    learner = SACLearner(spec, SACConfig(hidden=HIDDEN, batch_size=BATCH, lr=LR), seed=0, device="cpu")
    if group is not None:
        learner.collective = group
    replay = ReplayBuffer(spec, capacity=fill, seed=rank)
    replay.add(random_transitions(fill, seed=rank))
    for _ in range(warmup):
        learner.update(replay.sample(BATCH))
    if group is not None:
        group.min_int(0)
    start = time.perf_counter()
    for _ in range(updates):
        learner.update(replay.sample(BATCH))
    elapsed = time.perf_counter() - start
    if group is not None:
        group.min_int(0)
        group.leave()
    Path(out, f"rank-{rank}.json").write_text(json.dumps({"seconds": elapsed, "updates": updates}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(size: int, args: argparse.Namespace) -> float:
    """Group updates per second of ``size`` learners (the slowest learner's time)."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(
            _learner,
            args=(size, free_port(), args.updates, args.warmup, args.fill, args.threads, out),
            nprocs=size,
            join=True,
        )
        seconds = max(json.loads(p.read_text())["seconds"] for p in Path(out).glob("rank-*.json"))
    return args.updates / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", default="1,2", help="comma-separated group sizes (1: the baseline)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=200, help="timed updates per learner and repeat")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--fill", type=int, default=20_000, help="random transitions in each learner's replay")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each learner")
    parser.add_argument("--quick", action="store_true", help="2 repeats x 60 updates")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.updates = 2, 60
    sizes = sorted({int(k) for k in args.learners.split(",")})
    if sizes[0] != 1:
        sizes = [1, *sizes]
    command = " ".join(
        ["python", "-m", "bench.learner_group", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    machine = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform()}
    print(f"command:  {command}")
    print(f"machine:  {machine['cpu']}, {machine['logical_cpus']} logical CPUs; torch {torch.__version__}")
    print(
        f"setup:    SAC on {ENV} spaces, hidden {HIDDEN}, batch {BATCH} per learner, {args.threads} thread(s) each, "
        f"gloo over loopback; K = {sizes}; {args.repeats} x {args.updates} updates, in rotation"
    )
    load_start = os.getloadavg()
    rates: dict[int, list[float]] = {k: [] for k in sizes}
    for rep in range(args.repeats):
        for k in sizes[rep % len(sizes) :] + sizes[: rep % len(sizes)]:
            rates[k].append(timed(k, args))
            print(f"  K={k}: {rates[k][-1]:.1f} group updates/s", flush=True)
    load_end = os.getloadavg()
    medians = {k: statistics.median(v) for k, v in rates.items()}
    single = medians[1] * BATCH
    print(f"\n{'K':>3} {'group updates/s':>16} {'transitions/s':>14} {'efficiency':>11}")
    rows = {}
    for k in sizes:
        transitions = medians[k] * k * BATCH
        rows[k] = {
            "updates_per_s": round(medians[k], 2),
            "transitions_per_s": round(transitions, 1),
            "efficiency": round(transitions / (k * single), 3),
            "runs": [round(v, 2) for v in rates[k]],
        }
        print(f"{k:>3} {medians[k]:>16.1f} {transitions:>14.0f} {rows[k]['efficiency']:>11.2f}")
    print(f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end")
    print(
        json.dumps(
            {
                "learners": {str(k): v for k, v in rows.items()},
                "batch_per_learner": BATCH,
                "hidden": list(HIDDEN),
                "threads": args.threads,
                "repeats": args.repeats,
                "updates": args.updates,
                "load_average": [round(load_start[0], 2), round(load_end[0], 2)],
                "command": command,
                "machine": machine,
                "versions": {
                    "python": platform.python_version(),
                    "torch": torch.__version__,
                    "numpy": np.__version__,
                    "drl": version("drl"),
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
