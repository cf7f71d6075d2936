"""Bytes per Atari transition on the wire and in replay, against whole stacks of float32 and of uint8.

A worker's real path, without processes or servers: ``VecEnv`` over the preprocessed ``ALE/Pong-v5`` (84x84
gray, stack of 4) with its frame log, DQN's 3-step folding, entries of ``--rows`` transitions packed into frame
tables (``drl.frames.pack``) and encoded with no compression, zstd and lz4 (``drl.memory.codec.encode``); then
the trainer's path: every entry decoded and added to a frame replay (``drl.training.replay.ReplayBuffer``), whose bytes
per stored transition are its arrays' bytes (frame ring and per-transition columns) over the transitions it
holds once full. The baselines are what a transition's observation and next observation take as whole stacks:
float32 (225,792 bytes) and uint8 (56,448 bytes).

    .venv/bin/python -m bench.atari_bytes            # 4 envs, 256-transition entries, 20,000 steps
    .venv/bin/python -m bench.atari_bytes --quick    # 4,000 steps
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time

import numpy as np

from drl import frames
from drl._proto import experience_pb2
from drl.acting.nstep import NSTEP_FIELDS, NStepFolder
from drl.envs import VecEnv
from drl.memory import codec
from drl.training.replay import ReplayBuffer


def measure(env_id: str, envs_n: int, rows: int, steps: int, n_step: int, seed: int) -> dict:
    envs = VecEnv(env_id, envs_n, seed=seed)
    spec = envs.spec
    envs.log_frames(4 * (rows + envs_n * (spec.frame_stack + n_step + 3)))
    layout = codec.expected_layout(spec, dict(NSTEP_FIELDS))
    folder = NStepFolder(n_step, 0.99, envs_n)
    replay = ReplayBuffer(spec, max(1000, steps // 2), seed=0, extras=dict(NSTEP_FIELDS))
    rng = np.random.default_rng(seed)
    wire = {"none": 0, "zstd": 0, "lz4": 0}
    encode_s = {"none": 0.0, "zstd": 0.0, "lz4": 0.0}
    transitions = table_frames = entries = 0
    pending: list[dict] = []

    def send(parts: list[dict]) -> None:
        nonlocal transitions, table_frames, entries
        rows_ = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        packed = frames.pack(rows_, envs.frames)
        entries += 1
        transitions += len(rows_["reward"])
        table_frames += len(packed[frames.TABLE])
        for kind in wire:
            header = experience_pb2.BatchHeader(run="bench", worker_id="rollout-0", seq=entries)
            started = time.perf_counter()
            h, d = codec.encode(header, packed, "" if kind == "none" else kind)
            encode_s[kind] += time.perf_counter() - started
            wire[kind] += len(h) + len(d)
            if kind == "zstd":
                replay.add(codec.decode({b"h": h, b"d": d}, "bench", layout).arrays)

    held = 0
    for _ in range(math.ceil(steps / envs_n)):
        out = folder.push(envs.step(rng.integers(0, spec.discrete_actions, envs_n)), envs_n)
        if out is not None:
            pending.append(out)
            held += len(out["reward"])
        if held >= rows:
            send(pending)
            pending, held = [], 0
    tail = folder.flush()
    if tail is not None:
        pending.append(tail)
    if pending:
        send(pending)
    stored = sum(a.nbytes for a in replay.data.values()) + replay.ring.frames.nbytes + replay.entry_start.nbytes
    frame_bytes = math.prod(spec.frame_shape)
    envs.close()
    return {
        "env": env_id,
        "envs": envs_n,
        "rows": rows,
        "n_step": n_step,
        "transitions": transitions,
        "entries": entries,
        "frames_per_transition": round(table_frames / transitions, 3),
        "wire_bytes_per_transition": {k: round(v / transitions, 1) for k, v in wire.items()},
        "encode_us_per_transition": {k: round(v / transitions * 1e6, 2) for k, v in encode_s.items()},
        "replay_bytes_per_transition": round(stored / replay.capacity, 1),
        "replay_bytes_per_held_transition": round(stored / max(len(replay), 1), 1),
        "replay_held_of_capacity": round(len(replay) / replay.capacity, 3),
        "float32_stack_pair": 2 * 4 * math.prod(spec.obs_shape),
        "uint8_stack_pair": 2 * math.prod(spec.obs_shape),
        "frame_bytes": frame_bytes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--rows", type=int, default=256, help="transitions per entry")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--n-step", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="4,000 steps")
    args = parser.parse_args(argv)
    steps = 4_000 if args.quick else args.steps
    r = measure(args.env, args.envs, args.rows, steps, args.n_step, args.seed)
    wire = r["wire_bytes_per_transition"]
    print(
        f"{r['env']}: {r['transitions']} transitions in {r['entries']} entries of ~{r['rows']} "
        f"({r['envs']} envs, {r['n_step']}-step folding), {r['frames_per_transition']} frames per transition"
    )
    print(f"{'':28}{'bytes/transition':>18}{'vs float32 stacks':>20}{'vs uint8 stacks':>18}{'encode us':>11}")
    for kind in ("none", "zstd", "lz4"):
        print(
            f"{'wire, ' + kind:28}{wire[kind]:>18,.0f}{r['float32_stack_pair'] / wire[kind]:>19.1f}x"
            f"{r['uint8_stack_pair'] / wire[kind]:>17.1f}x{r['encode_us_per_transition'][kind]:>11.2f}"
        )
    rb = r["replay_bytes_per_transition"]
    print(
        f"{'replay (allocated/capacity)':28}{rb:>18,.0f}{r['float32_stack_pair'] / rb:>19.1f}x"
        f"{r['uint8_stack_pair'] / rb:>17.1f}x"
    )
    held = r["replay_bytes_per_held_transition"]
    print(
        f"{'replay (allocated/held)':28}{held:>18,.0f}{r['float32_stack_pair'] / held:>19.1f}x"
        f"{r['uint8_stack_pair'] / held:>17.1f}x"
    )
    r["goal_met"] = rb <= 8192
    r["command"] = " ".join(
        ["python", "-m", "bench.atari_bytes", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    r["machine"] = platform.platform()
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
