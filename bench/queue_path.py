"""The trainer's path for pixel experience under ``appo-atari``, from an accepted entry to a trained batch, split
in three: decoding the entry (``codec.decode``, zstd as the preset's workers send it), the host side of
``QueueLearning.add`` (the entry's stacks rebuilt from its frame table, its segments split off) and
``QueueLearning.update`` (the batch assembled, handed to the device, trained on). It answers how much of the
learner's time the host side takes, so whether threads beside the gradient steps could pay.

Entries are built as a worker's arrive once decoded: ``--envs`` environments of ``segment`` (128) steps each,
Pong's 4x84x84 stacks as a frame table of 84x84 frames and k indices per observation and next observation, the
preset's batch of 1,024 transitions a couple of entries, each encoded once as the stream holds it. Frames are a
plain background with two paddles and a ball at random places (so zstd finds about what it finds in Pong).
Each block decodes and adds one batch's entries and trains on it, ``--repeats`` times after a warm-up; the
table gives microseconds per transition of each part (medians), the host side's share, and the bytes the queue
holds per transition (what a batch waiting in it costs in memory).

    python -m bench.queue_path                   # CPU, torch's threads
    python -m bench.queue_path --device cuda     # on a GPU machine

To hold two commits side by side, run this file with each tree on ``PYTHONPATH`` (it uses only
``QueueLearning(learner, cfg)``, ``add``, ``update`` and the codec, which both have):
``PYTHONPATH=OLD python bench/queue_path.py``. The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from drl import frames
from drl._proto import experience_pb2
from drl.algorithms import wire_extras
from drl.algorithms.appo.learner import APPOLearner
from drl.config import replace
from drl.envs import space_spec
from drl.memory import codec
from drl.presets import get_preset
from drl.training.learning import QueueLearning

ENV = "ALE/Pong-v5"


def entry(spec, envs: int, steps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One decoded entry of ``envs`` x ``steps`` transitions, rows alternating over the environments as a
    worker's do, with its frame table (each environment's k - 1 frames of history, then one new frame a step)."""
    k, n = spec.frame_stack, envs * steps
    table = np.full((envs * (steps + k), *spec.frame_shape), 87, dtype=np.uint8)
    for frame, (left, right, y, x) in zip(table, rng.integers(0, 68, (len(table), 4))):
        frame[left : left + 16, 8:12] = frame[right : right + 16, 72:76] = 147
        frame[y + 8 : y + 10, x + 8 : x + 10] = 236
    env = np.tile(np.arange(envs), steps)
    t = np.repeat(np.arange(steps), envs)
    first = env * (steps + k) + t
    obs = (first[:, None] + np.arange(k)).astype(frames.INDEX_DTYPE)
    return {
        "obs": obs,
        "next_obs": obs + 1,
        "action": rng.integers(0, spec.discrete_actions, n).astype(np.int64),
        "reward": rng.standard_normal(n).astype(np.float32),
        "terminated": np.zeros(n, np.uint8),
        "truncated": np.zeros(n, np.uint8),
        "behaviour_logp": np.full(n, -1.79, np.float32),
        "env_index": env.astype(np.uint16),
        frames.TABLE: table,
    }


def wire(arrays: dict[str, np.ndarray], layout: dict, compression: str, seq: int) -> dict[bytes, bytes]:
    """The entry as the stream holds it (``codec.encode``: a protobuf header, raw arrays, compressed)."""
    header = experience_pb2.BatchHeader(run="bench", worker_id="rollout-0", seq=seq)
    h, d = codec.encode(header, {name: arrays[name] for name in layout}, compression)
    return {b"h": h, b"d": d}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--envs", type=int, default=4, help="environments per entry (a worker's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = space_spec(ENV)
    cfg = get_preset("appo-atari", ENV)
    cfg = replace(cfg, device=args.device)
    steps = cfg.appo.segment
    size = cfg.appo.batch_size
    per_batch = max(1, size // (args.envs * steps))
    learning = QueueLearning(APPOLearner(spec, cfg.appo, seed=0, device=args.device), cfg)
    rng = np.random.default_rng(0)
    layout = codec.expected_layout(spec, wire_extras(cfg))
    compression = codec.compression_for(cfg.compression, spec)
    entries = [wire(entry(spec, args.envs, steps, rng), layout, compression, seq + 1) for seq in range(per_batch)]
    transitions = per_batch * args.envs * steps
    decode_us, add_us, update_us = [], [], []
    for block in range(args.warmup + args.repeats):
        started = time.perf_counter()
        decoded = [codec.decode(fields, "bench", layout) for fields in entries]
        read = time.perf_counter()
        for batch in decoded:
            learning.add("rollout-0", batch.header.seq, batch.arrays, version=0)
        added = time.perf_counter()
        held = sum(arr.nbytes for _, segment in learning.queue for arr in segment.values()) / transitions
        while learning.owed(0) > learning.learner.updates:
            learning.update(consumed=0)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        done = time.perf_counter()
        if block >= args.warmup:
            decode_us.append(1e6 * (read - started) / transitions)
            add_us.append(1e6 * (added - read) / transitions)
            update_us.append(1e6 * (done - added) / transitions)
    decode, add, update = (statistics.median(x) for x in (decode_us, add_us, update_us))
    host = decode + add
    print(f"  {'part':36s} {'us/transition':>14s} {'spread':>16s}")
    for name, value, values in (
        (f"codec.decode ({compression or 'uncompressed'})", decode, decode_us),
        ("QueueLearning.add (host side)", add, add_us),
        ("QueueLearning.update (learner)", update, update_us),
    ):
        print(f"  {name:36s} {value:14.1f} {min(values):8.1f}-{max(values):.1f}")
    print(f"  host side's share of the path (decode and add): {host / (host + update):.4f}")
    print(f"  the queue holds {held / 1024:,.1f} KiB per transition")
    print(
        json.dumps(
            {
                "decode_us": decode,
                "add_us": add,
                "update_us": update,
                "host_share": round(host / (host + update), 5),
                "queue_bytes_per_transition": held,
                "all": {"decode_us": decode_us, "add_us": add_us, "update_us": update_us},
                "transitions_per_block": transitions,
                "threads": torch.get_num_threads(),
                "device": args.device,
                "drl_tree": str(Path(frames.__file__).parent.parent),
                "command": "python -m bench.queue_path " + " ".join(sys.argv[1:] if argv is None else argv),
                "machine": {"platform": platform.platform(), "processor": platform.processor()},
                "versions": {"python": platform.python_version(), "torch": torch.__version__},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
