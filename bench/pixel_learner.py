"""The pixel learner's update speed under its options: transitions per second that ``APPOLearner.train`` trains on
(the ``appo-atari`` preset's update: batches of 1,024 Pong transitions, 4x84x84 uint8 stacks, the Nature encoder,
V-trace values over the batch, 4 epochs of 4 minibatches; with ``--preset ppo-atari`` ``PPOLearner.train`` on
that preset's rollout of 1,024 transitions, GAE instead of V-trace), each variant against plain float32 eager in
the same process.

Variants (one learner each, the same seed and the same batch):

- **eager**: float32, the encoder's input in channels-last order (what every learner does);
- **compiled**: ``--compile on`` (``drl.algorithms.convnets.compile_encoders``: torch.compile of the encoder);
- **bfloat16**: ``--appo.precision bfloat16`` (the update under autocast);
- **bfloat16-compiled**: both;
- **minibatch-512**: eager with 2 minibatches of 512 instead of 4 of 256 (the "larger batches" question).

The batch is random pixels (a convolution costs the same whatever they are), stacked as consecutive steps
are (each next observation the following step's observation). Each learner is warmed up (compiling
happens there), then the variants are timed in rotation, ``--repeats`` times, ``--batches`` batches a block, so
load drift hits all alike; the table shows each variant's median rate and its ratio to eager's (the median of the
per-repeat ratios). The last line is one JSON object with the figures, the command, the machine and the versions.

    python -m bench.pixel_learner                      # CPU, torch's threads, 5 repeats of 2 batches
    python -m bench.pixel_learner --threads 1 --quick
    python -m bench.pixel_learner --device cuda        # on a GPU machine
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time

import numpy as np
import torch

from bench.time_to_score import git_commit
from drl.algorithms.appo.learner import APPOLearner
from drl.algorithms.convnets import compile_encoders
from drl.algorithms.ppo.learner import PPOLearner
from drl.envs import space_spec
from drl.presets import get_preset

ENV = "ALE/Pong-v5"
SEGMENT = 128
PRESETS = ("appo-atari", "ppo-atari")
VARIANTS = ("eager", "compiled", "bfloat16", "bfloat16-compiled", "minibatch-512")


def batch(spec, size: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``size`` transitions as segments of ``SEGMENT`` consecutive steps, as the trainer hands them over: each
    observation the last k frames, each next observation the following step's."""
    rng = np.random.default_rng(seed)
    k = spec.obs_shape[0]
    out = []
    for _ in range(size // SEGMENT):
        film = rng.integers(0, 255, (SEGMENT + k, *spec.obs_shape[1:]), dtype=np.uint8)
        stacks = np.lib.stride_tricks.sliding_window_view(film, k, axis=0).transpose(0, 3, 1, 2)
        out.append(
            {
                "obs": np.ascontiguousarray(stacks[:SEGMENT]),
                "next_obs": np.ascontiguousarray(stacks[1 : SEGMENT + 1]),
                "action": rng.integers(0, spec.discrete_actions, SEGMENT).astype(np.int64),
                "reward": rng.standard_normal(SEGMENT).astype(np.float32),
                "terminated": np.zeros(SEGMENT, np.float32),
                "truncated": np.zeros(SEGMENT, np.float32),
                "behaviour_logp": np.full(SEGMENT, -1.79, np.float32),
            }
        )
    return out


def batch_size(preset: str) -> int:
    cfg = get_preset(preset, ENV)
    return cfg.appo.batch_size if preset == "appo-atari" else cfg.sync_steps_per_iteration


def learner(variant: str, device: str, preset: str = "appo-atari") -> PPOLearner:
    cfg = get_preset(preset, ENV)
    hyper = cfg.appo if preset == "appo-atari" else cfg.ppo
    if variant.startswith("bfloat16"):
        hyper = dataclasses.replace(hyper, precision="bfloat16")
    if variant == "minibatch-512":
        hyper = dataclasses.replace(hyper, minibatches=batch_size(preset) // 512)
    kind = APPOLearner if preset == "appo-atari" else PPOLearner
    made = kind(space_spec(ENV), hyper, seed=0, device=device)
    if variant.endswith("compiled"):
        compile_encoders(made, "on", torch.device(device).type)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=2, help="batches of 1,024 transitions per timed block")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches per learner (compiling happens here)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--preset", default="appo-atari", choices=PRESETS, help="whose update")
    parser.add_argument("--quick", action="store_true", help="3 repeats of 1 batch, 2 warm-up batches")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.batches, args.warmup = 3, 1, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = [v for v in args.variants.split(",") if v]
    if variants[0] != "eager" or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants must start with eager and name only {', '.join(VARIANTS)}")
    spec = space_spec(ENV)
    size = batch_size(args.preset)
    data = batch(spec, size, seed=0)
    learners = {}
    for v in variants:
        started = time.perf_counter()
        learners[v] = learner(v, args.device, args.preset)
        for _ in range(args.warmup):
            learners[v].train(data)
        print(f"  {v:18s} ready in {time.perf_counter() - started:5.1f} s", flush=True)
    rates: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.repeats):
        for v in variants if r % 2 == 0 else variants[::-1]:
            started = time.perf_counter()
            for _ in range(args.batches):
                learners[v].train(data)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            rates[v].append(args.batches * size / (time.perf_counter() - started))
    rows = []
    print(f"\n  {'variant':18s} {'transitions/s':>14s} {'spread':>16s} {'x eager':>8s}")
    for v in variants:
        ratio = statistics.median(b / a for a, b in zip(rates["eager"], rates[v]))
        rows.append({"variant": v, "rate": statistics.median(rates[v]), "ratio": round(ratio, 3), "all": rates[v]})
        spread = f"{min(rates[v]):,.0f}-{max(rates[v]):,.0f}"
        print(f"  {v:18s} {statistics.median(rates[v]):14,.0f} {spread:>16s} {ratio:8.2f}")
    print(
        json.dumps(
            {
                "rows": rows,
                "preset": args.preset,
                "threads": torch.get_num_threads(),
                "device": args.device,
                "command": "python -m bench.pixel_learner " + " ".join(sys.argv[1:] if argv is None else argv),
                "machine": {"platform": platform.platform(), "processor": platform.processor()},
                "versions": {"python": platform.python_version(), "torch": torch.__version__, "drl": git_commit()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
