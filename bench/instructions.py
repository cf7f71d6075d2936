"""Instructions per unit of work on two hot paths, counted by valgrind's callgrind: a figure that does not move with
the machine's speed or its neighbours, for comparing two commits on a noisy machine.

- ``step``: a rollout worker's stepping loop (``RolloutWorker.collect``: Pendulum-v1, the SAC actor, entries of
  64-256 transitions handed to a flush that sends nothing), instructions per env step.
- ``read``: the trainer's read path (``Trainer.feed.read``: read, decode, dedupe, replay insert, commit) over
  entries of 64 Pendulum transitions from 2 workers on a private Valkey server, instructions per entry (the
  server's own work is in its process and not counted; appending the entries is, the same in both commits).

Each probe runs twice under callgrind, with fewer and more units, and the difference is divided by the difference
in units, so start-up and imports cancel out; string hashing is seeded (``PYTHONHASHSEED=0``), without which the
count moves by about 1% from run to run. Needs ``valgrind`` (Debian: ``apt-get install
valgrind``); a probe under callgrind runs about 50 times slower than natively.

    python -m bench.instructions                 # both probes (a few minutes)
    python -m bench.instructions --probe step    # one
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNITS = {"step": (3000, 9000), "read": (400, 1200)}


def probe_step(steps: int) -> None:
    import numpy as np

    from drl.acting.entries import EntryBuffer, EntryFill, StepInto
    from drl.algorithms import make_actor
    from drl.config import replace
    from drl.envs import VecEnv
    from drl.memory import codec
    from drl.presets import get_preset
    from services.rollout.worker import RolloutWorker

    cfg = replace(get_preset("sac", "Pendulum-v1"), envs_per_worker=1)
    worker = object.__new__(RolloutWorker)
    envs = VecEnv(cfg.env, 1, seed=0)
    actor = make_actor("sac", envs.spec, cfg, seed=0)
    rng = np.random.default_rng(0)
    actor.load({k: (0.1 * rng.standard_normal(s)).astype(np.float32) for k, s in actor.shapes.items()})
    entry = EntryBuffer(codec.expected_layout(envs.spec), 300)
    worker.__dict__.update(
        envs=envs,
        actor=actor,
        version=0,
        random_steps=0,
        stepped=0,
        total=10**9,
        stop=False,
        entry=entry,
        write=StepInto(envs, entry),
        fill=EntryFill(64, 256, fill_s=0.01),
    )

    def flush(iteration_end: bool = False, last: bool = False) -> None:
        worker.entry.n = 0
        worker.fill.restart()

    worker.flush = flush
    worker.collect(steps, hand_in=False)


def probe_read(entries: int) -> None:
    import numpy as np

    from drl._proto import experience_pb2
    from drl.memory import codec, private_server
    from drl.naming import worker_name
    from services.common import ServiceContext
    from services.trainer.trainer import Trainer
    from tests.harness import fast_config

    workdir = Path(tempfile.mkdtemp())
    server = private_server(workdir / "redis")
    try:
        cfg = fast_config(
            workers=2,
            steps=10**7,
            learning_starts=10**7,
            max_backlog_entries=10**6,
            max_backlog_bytes=1 << 30,
            replay_size=200_000,
        )
        trainer = Trainer(ServiceContext("trainer", cfg, "probe", workdir, server.url, str(workdir / "store"), 0))
        rng = np.random.default_rng(0)
        arrays = {
            "obs": rng.standard_normal((64, 3)).astype(np.float32),
            "action": rng.uniform(-2, 2, (64, 1)).astype(np.float32),
            "reward": rng.standard_normal(64).astype(np.float32),
            "next_obs": rng.standard_normal((64, 3)).astype(np.float32),
            "terminated": np.zeros(64, dtype=np.uint8),
        }
        writers = [trainer.memory.writer(worker_name(i), 10**6, 1 << 30) for i in range(2)]
        for i in range(entries):
            seq = i // 2 + 1
            header = experience_pb2.BatchHeader(
                run="probe", worker_id=worker_name(i % 2), seq=seq, produced_total=seq * 64
            )
            writers[i % 2].send(seq, *codec.encode(header, arrays), seq * 64)
        got = 0
        while got < entries * 64:
            got += sum(h.count for h in trainer.channels[0].feed.read(16, None))
    finally:
        server.stop()


def count(probe: str, units: int) -> int:
    """Instructions callgrind collects for one run of ``probe`` with ``units``."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/out",
                sys.executable,
                "-m",
                "bench.instructions",
                "--run",
                probe,
                str(units),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"callgrind of {probe} failed (code {proc.returncode}): {proc.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", choices=sorted(UNITS), action="append", help="the probes to count (default: all)")
    parser.add_argument("--run", nargs=2, metavar=("PROBE", "UNITS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        {"step": probe_step, "read": probe_read}[args.run[0]](int(args.run[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("bench.instructions: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    results = {}
    for probe in args.probe or sorted(UNITS):
        small, large = UNITS[probe]
        per_unit = (count(probe, large) - count(probe, small)) / (large - small)
        results[probe] = round(per_unit)
        print(f"{probe}: {per_unit:,.0f} instructions per {'env step' if probe == 'step' else 'entry'}", flush=True)
    print(json.dumps({"instructions_per_unit": results, "units": {p: UNITS[p] for p in results}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
