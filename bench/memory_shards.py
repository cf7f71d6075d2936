"""Experience transport over S shards: S separate ``valkey-server`` processes, each with its own producer and
consumer, against S times one shard's rate measured in the same run.

Each shard is ``memory_throughput``'s end-to-end path on a server of its own: a producer process appending through
the real ``Producer`` (the append script, back-pressure) and a consumer process reading through the real
``Consumer``, decoding every entry, dropping duplicates, copying into a ring and committing. The S shards of one
measurement start together (each consumer process tells its producer to go when every shard is ready) and run in
parallel; the aggregate rate is the transitions of all shards over the time from the first start to the last
commit. For each S in ``--shards`` (1 first: the baseline), in rotation over ``--repeats``, the report gives the
median aggregate transitions/s and its fraction of S times the median of S = 1.

A shard costs three processes (producer, consumer, server), so on a machine with fewer cores than 3 S the shards
share cores and the fraction shows that, not the servers' limits; the machine's core count is printed with the
figures.

    python -m bench.memory_shards                      # pendulum and atari, S = 1, 2, 4; 3 repeats
    python -m bench.memory_shards --sizes pendulum --shards 1,2 --quick
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from bench.memory_throughput import SIZES, Producers, Server, machine, run_e2e, versions


def _shard(index: int, url: str, size_name: str, entries: int, ready, go, out: str) -> None:
    size = SIZES[size_name]
    cfg = argparse.Namespace(
        read_count=0, tuning={}, max_entries=256, max_bytes=1024 * 1024 * 1024, pre_encode=False, profile=None
    )
    producers = Producers(1, "spawn")
    try:
        original_go = producers.go

        def synchronized_go() -> None:
            ready.wait()
            go.wait()
            Path(out, f"start-{index}").write_text(repr(time.time()))
            original_go()

        producers.go = synchronized_go
        result = run_e2e(size, url, producers, cfg, size.batch, entries)
        result["end"] = time.time()
        result["start"] = float(Path(out, f"start-{index}").read_text())
        Path(out, f"shard-{index}.json").write_text(json.dumps(result))
    finally:
        producers.close()


def measure(size_name: str, shards: int, entries: int, work: Path) -> dict:
    """One measurement of ``shards`` shards in parallel: aggregate transitions/s and each shard's own rate."""
    ctx = mp.get_context("spawn")
    servers = [Server("unix") for _ in range(shards)]
    out = work / f"{size_name}-{shards}-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    try:
        ready, go = ctx.Barrier(shards + 1), ctx.Event()
        procs = [
            ctx.Process(target=_shard, args=(i, s.url, size_name, entries, ready, go, str(out)))
            for i, s in enumerate(servers)
        ]
        for p in procs:
            p.start()
        ready.wait()
        go.set()
        for p in procs:
            p.join(600)
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"{size_name}, {shards} shards: a shard process failed (exit codes {failed})")
        results = [json.loads((out / f"shard-{i}.json").read_text()) for i in range(shards)]
    finally:
        for s in servers:
            s.close()
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    total = sum(r["transitions"] for r in results)
    return {
        "transitions_per_s": total / span,
        "span_s": span,
        "transitions": total,
        "per_shard": [round(r["transitions_per_s"], 1) for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="pendulum,atari", help="comma-separated, of: " + ", ".join(SIZES))
    ap.add_argument("--shards", default="1,2,4", help="comma-separated shard counts (1 is always measured)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="memory_throughput's quick entry counts, 2 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 2)
    sizes = [n.strip() for n in args.sizes.split(",") if n.strip()]
    unknown = [n for n in sizes if n not in SIZES]
    if unknown:
        raise SystemExit(f"--sizes: unknown {unknown}; choose from {', '.join(SIZES)}")
    counts = sorted({1, *(int(s) for s in args.shards.split(","))})
    command = shlex.join(["python", "-m", "bench.memory_shards", *(sys.argv[1:] if argv is None else argv)])
    info = machine()
    print(f"command : {command}")
    print(f"machine : {info['cpu']}, {info['cores']} cores (a shard is 3 processes), {info['platform']}")
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"drl-bench-shards-{os.getpid()}"
    load_start = os.getloadavg()
    report = {}
    for size_name in sizes:
        size = SIZES[size_name]
        entries = size.quick_entries if args.quick else size.entries
        runs: dict[int, list[dict]] = {s: [] for s in counts}
        for rep in range(args.repeats):
            for s in counts[rep % len(counts) :] + counts[: rep % len(counts)]:
                r = measure(size_name, s, entries, work)
                runs[s].append(r)
                print(
                    f"  {size_name}, {s} shard(s): {r['transitions_per_s']:,.0f} transitions/s "
                    f"(per shard {', '.join(f'{x:,.0f}' for x in r['per_shard'])})",
                    flush=True,
                )
        one = statistics.median(r["transitions_per_s"] for r in runs[1])
        rows = {}
        print(f"\n{size_name}: {'shards':>6} {'transitions/s':>14} {'fraction of S x one':>20}")
        for s in counts:
            rate = statistics.median(r["transitions_per_s"] for r in runs[s])
            rows[str(s)] = {
                "transitions_per_s": round(rate, 1),
                "fraction_of_s_times_one": round(rate / (s * one), 3),
                "runs": [round(r["transitions_per_s"], 1) for r in runs[s]],
            }
            print(f"{'':{len(size_name) + 1}} {s:>6} {rate:>14,.0f} {rate / (s * one):>20.2f}")
        report[size_name] = {"transitions_per_entry": size.batch, "entries_per_shard": entries, "shards": rows}
    load_end = os.getloadavg()
    print(
        json.dumps(
            {
                "sizes": report,
                "repeats": args.repeats,
                "cores": info["cores"],
                "load_average": [round(load_start[0], 2), round(load_end[0], 2)],
                "command": command,
                "machine": info,
                "versions": versions(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
