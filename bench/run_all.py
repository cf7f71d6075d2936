"""Every benchmark in one report: runs each ``bench`` module as a subprocess and writes ``docs/benchmarks.md``.

Benchmarks, in this order (each its own module, documented in ``bench/README.md``):

- ``memory_throughput``: experience transport, end to end and raw (issue: memory backend);
- ``memory_shards``: experience transport over S = 1, 2, 4 shards (separate servers), as a fraction of S x one;
- ``policy_sync``: publish-to-act latency with 1, 8, 32 workers, local and S3 stores;
- ``learner_speed``: SAC gradient updates per second, drl against SB3;
- ``ppo_learner``: PPO rollouts trained per second (the CartPole preset's sizes), drl against SB3;
- ``learner_group``: SAC updates/s of K = 1, 2 data-parallel learners (gloo), transitions/s and efficiency;
- ``network`` (only with ``--network``; root): a run across five network namespaces with added latency (1, 5,
  20 ms) and capped bandwidth (100, 10 Mbit/s): env steps/s and policy-sync p99 against the plain bridge;
- ``learner_speed_gpu`` (only with ``--gpu``, on a machine with a CUDA device): ``learner_speed`` with both learners
  on the GPU (``--device cuda``), against the GPU's own matrix-product floor;
- ``time_to_score``: SAC on Pendulum-v1 to -200, drl against SB3;
- ``scaling``: env steps per second through the system with N workers against the raw env + actor rate;
- ``startup``: a local run's start-up with services forked from the fork server against new processes;
- ``time_to_score_lunar`` (only with ``--lunar``; hours): SAC on LunarLanderContinuous-v3 to 200;
- ``time_to_score_lunar_bf16`` (only with ``--lunar``): the same, drl alone with ``--sac.matmul bfloat16``;
- ``time_to_score_lunar_fast`` (only with ``--lunar``): both sides with 256x256 networks (SB3's default size)
  instead of the zoo's 400x300, drl with ``--sac.matmul bfloat16``, two torch threads each and 600 s per run:
  the settings the 360 s goal is judged on;
- ``atari_throughput`` (only with ``--atari``): frames/s on ALE/Pong-v5 with 1, 2, 4 workers, the raw loop, Sample
  Factory APPO, Sample Factory's sampler and drl;
- ``atari_learner`` (only with ``--atari``): DQN updates/s on 32 x 4x84x84 batches, drl against SB3;
- ``atari_bytes`` (only with ``--atari``): bytes per Atari transition on the wire (none, zstd, lz4) and in replay;
- ``atari_time_to_score`` (only with ``--atari``): DQN on ALE/Pong-v5 to a mean return of 18 within a budget
  (``--budget-s 600`` here; on a CPU machine not reached: the best return is the figure).
- ``appo_time_to_score`` (only with ``--appo``; hours): drl's APPO (async) against drl's PPO (sync) and RLlib's
  APPO on CartPole-v1 (475) and LunarLander-v3 (200) with 4 workers; goals appo/ppo < 1 and appo/rllib <= 0.5;
- ``appo_policy_lag`` (only with ``--appo``): the policy-lag histogram of appo runs with 2, 8 and 32 workers.

The ``--atari`` benchmarks are not in the default run: ``atari_throughput`` and ``atari_learner`` need the peers'
environments (Sample Factory, Stable-Baselines3) built once by ``bash bench/peers/setup_atari_peers.sh`` (without
them ``atari_learner`` fails and ``atari_throughput`` has no Sample Factory figures), and all four need drl's
``atari`` extra (ale-py). ``--only`` with their names runs them alone and keeps the other sections' saved figures.
``appo_time_to_score`` is not in the default run either: its RLlib side needs the peer environment built once by
``bash bench/peers/setup_rllib.sh`` (without it the benchmark stops at once with one line and is reported failed).

Each runs as ``python -m bench.NAME [--quick] [extra]`` with its output saved to ``<data dir>/logs/NAME.log``;
its last JSON line (every benchmark ends with one: figures, goal, command, machine, versions) is collected. A
benchmark that exits non-zero, prints no JSON line or passes its timeout is reported as failed in the report, with
the tail of its output: never dropped. Then ``run_all`` writes:

- ``docs/benchmarks.md``: a summary table (headline figure, goal, met or not, duration, status), then one section
  per benchmark with its table of medians, seeds or repeats, the exact command, machine and versions, and a plot;
- ``docs/benchmarks/*.png``: the plots (matplotlib, Agg backend);
- ``docs/benchmarks/results.json``: every benchmark's JSON line as printed, with its command, exit code and
  duration, for anyone who wants the raw figures.

``--quick`` passes ``--quick`` to every benchmark (smoke sizes: one seed, fewer repeats, shorter windows; a few
minutes in all on 2 idle cores) and marks the report as quick figures. Without it the full measurements run
(about 30-45 minutes on 2 cores without ``--lunar``; ``--lunar`` adds up to about 3 hours, ``--atari`` about an
hour, ``--appo`` up to about 6 hours, most of it LunarLander).

    python -m bench.run_all --quick                 # smoke run of everything, a few minutes
    python -m bench.run_all                         # full figures (about 30-45 minutes)
    python -m bench.run_all --lunar                 # plus LunarLander time to score (up to ~3 more hours)
    python -m bench.run_all --atari                 # plus the four Atari benchmarks (about an hour more)
    python -m bench.run_all --appo                  # plus APPO time to score (needs bench/peers/setup_rllib.sh)
    python -m bench.run_all --only scaling,learner_speed   # re-runs these, keeps the others' saved figures
    python -m bench.run_all --only atari_throughput,atari_learner,atari_bytes,atari_time_to_score
    python -m bench.run_all --only atari_time_to_score --extra 'atari_time_to_score=--budget-s 3600'
    python -m bench.run_all --only appo_time_to_score --extra 'appo_time_to_score=--envs CartPole-v1'
    python -m bench.run_all --quick --extra 'policy_sync=--workers 1,4' --extra 'scaling=--workers 1,2'
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

KEPT = "<!-- Below: sections other commands write (bench.scores, bench/gpu_pong.sh); bench.run_all keeps them. -->"
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Bench:
    name: str
    title: str
    module: str
    args: list[str] = field(default_factory=list)
    timeout_quick: float = 600.0
    timeout_full: float = 3600.0
    opt_in: str = ""  # the flag that adds it to a run without --only ("lunar": --lunar); "" = always run


BENCHES = [
    Bench(
        "memory_throughput",
        "Experience transport (memory backend)",
        "bench.memory_throughput",
        timeout_quick=600,
        timeout_full=2400,
    ),
    Bench(
        "memory_shards", "Experience transport over shards", "bench.memory_shards", timeout_quick=600, timeout_full=1800
    ),
    Bench("policy_sync", "Policy sync latency", "bench.policy_sync", timeout_quick=600, timeout_full=1800),
    Bench("learner_speed", "SAC learner speed", "bench.learner_speed", timeout_quick=600, timeout_full=1200),
    Bench("ppo_learner", "PPO learner speed", "bench.ppo_learner", timeout_quick=600, timeout_full=1200),
    Bench(
        "learner_group",
        "Data-parallel learners: SAC with K = 1, 2",
        "bench.learner_group",
        timeout_quick=600,
        timeout_full=1200,
    ),
    Bench(
        "network",
        "Across hosts: latency and bandwidth",
        "bench.network",
        timeout_quick=1200,
        timeout_full=2400,
        opt_in="network",
    ),
    Bench(
        "learner_speed_gpu",
        "SAC learner speed on a GPU",
        "bench.learner_speed",
        args=["--device", "cuda"],
        timeout_quick=600,
        timeout_full=1200,
        opt_in="gpu",
    ),
    Bench(
        "time_to_score",
        "Time to score: SAC on Pendulum-v1",
        "bench.time_to_score",
        timeout_quick=600,
        timeout_full=2400,
    ),
    Bench("scaling", "Scaling with rollout workers", "bench.scaling", timeout_quick=600, timeout_full=3600),
    Bench(
        "startup",
        "Start-up: services forked from the fork server against new processes",
        "bench.startup",
        timeout_quick=600,
        timeout_full=1800,
    ),
    Bench(
        "time_to_score_lunar",
        "Time to score: SAC on LunarLanderContinuous-v3",
        "bench.time_to_score",
        args=["--env", "LunarLanderContinuous-v3", "--target", "200"],
        timeout_quick=2 * 3600,
        timeout_full=4 * 3600,
        opt_in="lunar",
    ),
    Bench(
        "time_to_score_lunar_bf16",
        "Time to score: SAC on LunarLanderContinuous-v3, drl with bfloat16 products",
        "bench.time_to_score",
        args=[
            "--env",
            "LunarLanderContinuous-v3",
            "--target",
            "200",
            "--sides",
            "drl",
            "--drl-args",
            "--sac.matmul bfloat16",
        ],
        timeout_quick=2 * 3600,
        timeout_full=4 * 3600,
        opt_in="lunar",
    ),
    Bench(
        "time_to_score_lunar_fast",
        "Time to score: SAC on LunarLanderContinuous-v3, 256x256 networks, drl with bfloat16 products",
        "bench.time_to_score",
        args=[
            "--env",
            "LunarLanderContinuous-v3",
            "--target",
            "200",
            "--threads",
            "2",
            "--time-budget",
            "600",
            "--drl-args",
            "--sac.hidden 256,256 --sac.matmul bfloat16",
        ],
        timeout_quick=2 * 3600,
        timeout_full=4 * 3600,
        opt_in="lunar",
    ),
    Bench(
        "atari_throughput",
        "Atari throughput: frames/s on ALE/Pong-v5, drl against the raw loop and Sample Factory",
        "bench.atari_throughput",
        timeout_quick=1800,
        timeout_full=2 * 3600,
        opt_in="atari",
    ),
    Bench(
        "atari_learner",
        "Atari learner speed: DQN on 32 x 4x84x84 batches, drl against SB3",
        "bench.atari_learner",
        timeout_quick=900,
        timeout_full=1800,
        opt_in="atari",
    ),
    Bench(
        "atari_bytes",
        "Atari bytes per transition: wire and replay",
        "bench.atari_bytes",
        timeout_quick=900,
        timeout_full=1800,
        opt_in="atari",
    ),
    Bench(
        "atari_time_to_score",
        "Atari time to score: DQN on ALE/Pong-v5 to 18",
        "bench.atari_time_to_score",
        args=["--budget-s", "600"],
        timeout_quick=900,
        timeout_full=2 * 3600,
        opt_in="atari",
    ),
    Bench(
        "appo_time_to_score",
        "APPO time to score: drl APPO against drl PPO and RLlib APPO",
        "bench.appo_time_to_score",
        timeout_quick=3600,
        timeout_full=8 * 3600,
        opt_in="appo",
    ),
    Bench(
        "appo_policy_lag",
        "APPO policy lag with 2, 8 and 32 workers",
        "bench.appo_policy_lag",
        timeout_quick=1200,
        timeout_full=3600,
        opt_in="appo",
    ),
]
OPT_IN = ("lunar", "atari", "appo", "gpu", "network")  # the flags of the opt-in groups, in BENCHES' order


# -- running -----------------------------------------------------------------------------------------------------
def run_bench(bench: Bench, quick: bool, logs: Path, extra: list[str]) -> dict:
    args = [*bench.args, *(["--quick"] if quick else []), *extra]
    cmd = [sys.executable, "-m", bench.module, *args]
    shown = " ".join(["python", "-m", bench.module, *map(shlex.quote, args)])
    timeout = bench.timeout_quick if quick else bench.timeout_full
    log_path = logs / f"{bench.name}.log"
    print(f"== {bench.name}: {shown} (timeout {timeout:.0f} s, output in {log_path})", flush=True)
    start = time.perf_counter()
    started_at = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load = os.getloadavg()[0]
    code: int | str
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    shown_upto = 0
    while True:
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        text = log_path.read_text(errors="replace")
        upto = len(text) if code is not None else text.rfind("\n") + 1  # whole lines only while it runs
        for line in text[shown_upto:upto].splitlines():
            if line and not line.startswith("{"):
                print(f"   {line[:160]}", flush=True)
        shown_upto = max(shown_upto, upto)
        if code is not None:
            break
        if time.perf_counter() - start > timeout:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = "timeout"
            break
    lines = log_path.read_text(errors="replace").splitlines()
    duration = time.perf_counter() - start
    figures = None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                figures = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    ok = code == 0 and figures is not None
    result = {
        "name": bench.name,
        "title": bench.title,
        "command": shown,
        "exit_code": code,
        "ok": ok,
        "duration_s": round(duration, 1),
        "started_at": started_at,
        "load_at_start": round(load, 2),
        "figures": figures,
        "log": str(log_path.relative_to(REPO)) if log_path.is_relative_to(REPO) else str(log_path),
    }
    if not ok:
        why = "timed out" if code == "timeout" else f"exit code {code}" if code != 0 else "no JSON line"
        result["failure"] = why
        result["tail"] = "\n".join(lines[-30:])
    print(f"   -> {'ok' if ok else 'FAILED (' + result['failure'] + ')'} in {duration:.0f} s", flush=True)
    return result


# -- formatting helpers -------------------------------------------------------------------------------------------
def num(value, spec: str = ",.0f") -> str:
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return "-"
    return format(value, spec)


def met(value) -> str:
    return "-" if value is None else ("met" if value else "**not met**")


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]


def provenance(result: dict) -> list[str]:
    f = result["figures"] or {}
    own = f.get("command", result["command"])
    lines = [
        f"- command: `{own}`" + ("" if own == result["command"] else f" (run by run_all as `{result['command']}`)")
    ]
    machine = f.get("machine")
    if machine:
        lines.append(
            "- machine: "
            + (", ".join(f"{k} {v}" for k, v in machine.items()) if isinstance(machine, dict) else str(machine))
        )
    versions = f.get("versions")
    if versions:
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    seeds = f.get("seeds", f.get("seed"))
    if seeds is not None:
        lines.append(f"- seeds: {seeds}")
    lines.append(
        f"- started {result['started_at']}, {result['duration_s']:.0f} s, load average "
        f"{result['load_at_start']} at start; full output: `{result['log']}`"
    )
    return lines


# -- per-benchmark sections: (markdown lines, headline, goal text, goal met) ----------------------------------------
def section_memory(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    sizes = [k for k in ("pendulum", "lunarlander", "atari") if k in f] or [
        k for k, v in f.items() if isinstance(v, dict) and "transitions_per_s" in v
    ]
    rows = [
        [
            name,
            num(f[name].get("batch")),
            num(f[name]["transitions_per_s"]),
            f"{num(min(f[name]['e2e_runs']))}-{num(max(f[name]['e2e_runs']))}" if f[name].get("e2e_runs") else "-",
            num(f[name]["raw_transitions_per_s"]),
            num(f[name]["ratio_to_raw"], ".3f"),
            num(f[name].get("mb_per_s"), ",.1f"),
        ]
        for name in sizes
    ]
    lines = table(
        [
            "size",
            "transitions/entry",
            "end to end transitions/s (median)",
            "spread",
            "raw transitions/s",
            "ratio to raw",
            "MB/s",
        ],
        rows,
    )
    lines += [
        "",
        f"{f.get('repeats', '?')} repeats, medians; goals: "
        + ", ".join(f"{k} {met(v)}" for k, v in (f.get("goals") or {}).items()),
    ]
    if plot:
        import numpy as np

        fig, ax = plot.subplots(figsize=(7, 3.5))
        x = np.arange(len(sizes))
        ax.bar(x - 0.2, [f[s]["transitions_per_s"] for s in sizes], 0.4, label="end to end")
        ax.bar(x + 0.2, [f[s]["raw_transitions_per_s"] for s in sizes], 0.4, label="raw XADD")
        ax.set_xticks(x, sizes)
        ax.set_yscale("log")
        ax.set_ylabel("transitions / s (median)")
        ax.set_title("Experience transport")
        ax.legend()
        lines += ["", plot.save(fig, "memory_throughput.png")]
    head = "pendulum" if "pendulum" in f else (sizes[0] if sizes else None)
    headline = (
        (
            f"{num(f[head]['transitions_per_s'])} {head}-like transitions/s end to end, ratio to raw "
            f"{num(f[head]['ratio_to_raw'], '.2f')}"
        )
        if head
        else "-"
    )
    return lines, headline, ">= 1M Pendulum-like transitions/s, ratio >= 0.5 for every size", f.get("goal_met")


def section_policy_sync(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    stores = [s for s in ("local", "s3") if isinstance(f.get(s), dict)]
    counts = f.get("workers") or sorted({int(n) for s in stores for n in f[s]})
    rows = []
    for s in stores:
        for n in counts:
            r = f[s].get(str(n))
            if r:
                rows.append(
                    [
                        s,
                        n,
                        num(r["p50_ms"], ".1f"),
                        num(r["p99_ms"], ".1f"),
                        num(r["max_ms"], ".1f"),
                        r.get("publications", "-"),
                    ]
                )
    lines = table(["store", "workers", "p50 ms", "p99 ms", "max ms", "publications"], rows)
    if plot and stores:
        fig, ax = plot.subplots(figsize=(7, 3.5))
        for s in stores:
            ns = [n for n in counts if str(n) in f[s]]
            ax.plot(ns, [f[s][str(n)]["p50_ms"] for n in ns], "o--", label=f"{s} p50")
            ax.plot(ns, [f[s][str(n)]["p99_ms"] for n in ns], "o-", label=f"{s} p99")
        ax.axhline(f.get("goal_p99_ms", 250), color="grey", lw=0.8, ls=":", label="goal p99")
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_xlabel("rollout workers")
        ax.set_ylabel("publish -> every worker acted, ms")
        ax.set_title("Policy sync latency")
        ax.legend(fontsize=8)
        lines += ["", plot.save(fig, "policy_sync.png")]
    biggest = str(max(counts)) if counts else None
    headline = ", ".join(f"{s} p99 {num(f[s][biggest]['p99_ms'], '.1f')} ms" for s in stores if biggest in f[s]) + (
        f" with {biggest} workers" if biggest else ""
    )
    return (
        lines,
        headline,
        f"p99 <= {num(f.get('goal_p99_ms', 250))} ms with 32 workers, local and S3",
        f.get("goal_met"),
    )


def device_of(f: dict) -> str:
    """Where a learner benchmark ran: the GPU's name and device, or the CPU."""
    machine = f.get("machine") or {}
    return f"{machine['gpu']} ({f.get('device')})" if machine.get("gpu") else "the CPU"


def section_learner(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    rows = [
        ["drl", num(f["drl_updates_per_s"], ".1f"), ", ".join(num(v, ".1f") for v in f.get("drl_runs", []))],
        ["SB3", num(f["sb3_updates_per_s"], ".1f"), ", ".join(num(v, ".1f") for v in f.get("sb3_runs", []))],
    ]
    if f.get("drl_bfloat16_updates_per_s") is not None:
        rows.append(
            [
                "drl, `--sac.matmul bfloat16`",
                num(f["drl_bfloat16_updates_per_s"], ".1f"),
                ", ".join(num(v, ".1f") for v in f.get("drl_bfloat16_runs", [])),
            ]
        )
    lines = table(["learner", "updates/s (median)", "repeats"], rows)
    bf16 = (
        f"; with `--sac.matmul bfloat16` (the wide products in bfloat16 with float32 sums, SB3 still float32) "
        f"{num(f['ratio_bfloat16'], '.2f')}x, not counted for the goal"
        if f.get("ratio_bfloat16") is not None
        else ""
    )
    lines += [
        "",
        f"ratio {num(f['ratio'], '.2f')} (median of per-repeat ratios "
        f"{num(f.get('ratio_median_per_repeat'), '.2f')}){bf16}; networks {f.get('hidden')}, batch "
        f"{f.get('batch_size')}, {f.get('threads')} threads, on {device_of(f)}; one 256x256x256 float32 "
        f"product "
        f"{f.get('gemm_256_ms')} ms, so no exact float32 update exceeds "
        f"{num(f.get('gemm_floor_updates_per_s'), '.0f')} updates/s here",
    ]
    if plot:
        fig, ax = plot.subplots(figsize=(5, 3.2))
        names, values = ["drl", "SB3"], [f["drl_updates_per_s"], f["sb3_updates_per_s"]]
        if f.get("drl_bfloat16_updates_per_s") is not None:
            names.append("drl bf16")
            values.append(f["drl_bfloat16_updates_per_s"])
        ax.bar(names, values, color=["C0", "C1", "C2"][: len(names)])
        if f.get("gemm_floor_updates_per_s"):
            ax.axhline(f["gemm_floor_updates_per_s"], color="grey", ls=":", lw=0.8, label="matrix-product bound")
            ax.legend(fontsize=8)
        ax.set_ylabel("SAC updates / s (median)")
        gpu = (f.get("machine") or {}).get("gpu")
        ax.set_title(f"Learner speed on {gpu}" if gpu else "Learner speed")
        lines += ["", plot.save(fig, "learner_speed_gpu.png" if gpu else "learner_speed.png")]
    return (
        lines,
        f"drl {num(f['drl_updates_per_s'], '.1f')} vs SB3 {num(f['sb3_updates_per_s'], '.1f')} updates/s "
        f"(x{num(f['ratio'], '.2f')})",
        f"drl >= {f.get('goal')} x SB3",
        f.get("goal_met"),
    )


def section_ppo_learner(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    rates, runs = f["rollouts_per_s"], f.get("runs", {})
    steps = f.get("minibatch_steps_per_rollout") or 1
    rows = [
        [name, num(rate, ".2f"), num(1000 / rate / steps, ".3f"), ", ".join(num(v, ".2f") for v in runs.get(name, []))]
        for name, rate in rates.items()
    ]
    lines = table(["learner", "rollouts/s (median)", "ms per minibatch step", "repeats"], rows)
    lines += [
        "",
        f"drl/sb3 {num(f['ratio_drl_over_sb3'], '.2f')}x; drl/drl-per-param (the same learner with a "
        f"per-parameter Adam, as before its parameters shared one flat tensor) "
        f"{num(f['ratio_drl_over_per_param'], '.2f')}x; {f.get('threads')} torch thread(s)",
    ]
    return (
        lines,
        f"drl {num(rates['drl'], '.2f')} vs SB3 {num(rates['sb3'], '.2f')} rollouts/s "
        f"(x{num(f['ratio_drl_over_sb3'], '.2f')})",
        "measured (no goal)",
        None,
    )


def section_memory_shards(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    rows, heads = [], []
    for size, v in f["sizes"].items():
        for s, r in v["shards"].items():
            rows.append(
                [
                    size,
                    s,
                    num(r["transitions_per_s"]),
                    num(r["fraction_of_s_times_one"], ".2f"),
                    ", ".join(num(x) for x in r.get("runs", [])),
                ]
            )
        top = max(v["shards"], key=int)
        heads.append(f"{size} {top} shards: {num(v['shards'][top]['fraction_of_s_times_one'], '.2f')} of {top} x one")
    lines = table(["size", "shards", "transitions/s (median)", "fraction of S x one", "repeats"], rows)
    lines += [
        "",
        f"{f.get('cores')} cores; each shard a valkey-server of its own with one producer and one consumer "
        f"process (3 processes a shard); {f.get('repeats')} repeats, shard counts in rotation",
    ]
    return lines, "; ".join(heads), "measured (no goal)", None


def section_learner_group(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    groups = f["learners"]
    rows = [
        [
            k,
            num(v["updates_per_s"], ".1f"),
            num(v["transitions_per_s"]),
            num(v["efficiency"], ".2f"),
            ", ".join(num(x, ".1f") for x in v.get("runs", [])),
        ]
        for k, v in groups.items()
    ]
    lines = table(["learners K", "group updates/s (median)", "transitions/s", "efficiency", "repeats"], rows)
    lines += [
        "",
        f"SAC, hidden {f.get('hidden')}, batch {f.get('batch_per_learner')} per learner, "
        f"{f.get('threads')} torch thread(s) each, gloo over loopback; efficiency = transitions/s over K "
        f"times one learner's, measured in the same run",
    ]
    top = max(groups, key=int)
    return (
        lines,
        f"K={top}: {num(groups[top]['transitions_per_s'])} transitions/s, efficiency "
        f"{num(groups[top]['efficiency'], '.2f')}",
        "measured (no goal)",
        None,
    )


def section_network(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    conds = f["conditions"]
    rows = [
        [
            name,
            num(c["env_steps_per_s"]),
            num(c["steps_ratio_to_baseline"], ".2f"),
            num(c["policy_sync_p50_ms"], ".1f"),
            num(c["policy_sync_p99_ms"], ".1f"),
            num(c.get("p99_ratio_to_baseline"), ".2f"),
            ", ".join(num(r["env_steps_per_s"]) for r in c.get("runs", [])),
        ]
        for name, c in conds.items()
    ]
    lines = table(
        [
            "condition",
            "env steps/s (median)",
            "of baseline",
            "policy sync p50 ms",
            "p99 ms",
            "p99 of baseline",
            "repeats (steps/s)",
        ],
        rows,
    )
    lines += [
        "",
        f"{f.get('mode')} SAC on Pendulum-v1, {f.get('workers')} workers on two node namespaces, actor "
        f"{f.get('hidden')}, {f.get('steps')} steps a run, {f.get('repeats')} repeat(s), conditions in "
        "rotation; latency from a delaying TCP proxy between the nodes and the memory host (half each "
        "way), bandwidth from tc tbf on both nodes' links",
    ]
    if plot:
        fig, (ax, ax2) = plot.subplots(1, 2, figsize=(9, 3.5))
        names = list(conds)
        ax.bar(names, [conds[n]["env_steps_per_s"] for n in names])
        ax.set_ylabel("env steps/s")
        ax2.bar(names, [conds[n]["policy_sync_p99_ms"] for n in names], color="tab:orange")
        ax2.set_ylabel("policy sync p99, ms")
        for a in (ax, ax2):
            a.tick_params(axis="x", rotation=45, labelsize=8)
        fig.suptitle("Across hosts: added latency and capped bandwidth")
        fig.tight_layout()
        lines += ["", plot.save(fig, "network.png")]
    worst = min(conds, key=lambda n: conds[n]["steps_ratio_to_baseline"])
    return (
        lines,
        f"worst {worst}: {num(conds[worst]['steps_ratio_to_baseline'], '.2f')} of baseline steps/s, "
        f"p99 {num(conds[worst]['policy_sync_p99_ms'], '.1f')} ms",
        "measured (no goal)",
        None,
    )


def section_tts(f: dict, plot, stem: str) -> tuple[list[str], str, str, bool | None]:
    runs = f.get("runs", [])
    rows = [
        [
            r["seed"],
            r["side"],
            "yes" if r["reached"] else "**no**",
            num(r.get("time_to_score_s"), ".1f"),
            num(r.get("launch_to_score_s"), ".1f"),
            num(r.get("env_steps")),
            num(r.get("updates")),
            num(r.get("return_at_score"), ".1f"),
            num(r.get("best_return"), ".1f"),
            num(r.get("load_at_start"), ".2f"),
        ]
        for r in runs
    ]
    lines = table(
        [
            "seed",
            "side",
            "reached",
            "time to score s",
            "launch->score s",
            "env steps",
            "updates",
            "return",
            "best return",
            "load",
        ],
        rows,
    )
    budget = f" and {f['budget_s']:g} s" if f.get("budget_s") else ""
    lines += [
        "",
        f"target {f.get('target')} on {f.get('env')}, budget {num(f.get('budget_env_steps'))} env "
        f"steps{budget}; medians: drl {num(f.get('drl_median_s'), '.1f')} s, SB3 "
        f"{num(f.get('sb3_median_s'), '.1f')} s (SB3's own evaluations excluded), ratio "
        f"{num(f.get('ratio'), '.3f')}; launch->score (start-up included) drl "
        f"{num(f.get('drl_median_launch_to_score_s'), '.1f')} s, SB3 "
        f"{num(f.get('sb3_median_launch_to_score_s'), '.1f')} s. Not reached counts as infinite.",
        "",
        f"drl: {f.get('preset', 'sac')} preset, {f.get('drl_mode')} mode, {f.get('drl_workers')} workers"
        f"{', extra flags ' + repr(f['drl_args']) if f.get('drl_args') else ''}; SB3: "
        f"`{json.dumps(f.get('sb3_kwargs'))}`",
    ]
    if plot and runs:
        import numpy as np

        seeds = sorted({r["seed"] for r in runs})
        fig, ax = plot.subplots(figsize=(6, 3.2))
        x = np.arange(len(seeds))
        for i, side in enumerate(("drl", "sb3")):
            vals = [
                next(
                    (
                        r.get("time_to_score_s") or 0.0
                        for r in runs
                        if r["seed"] == s and r["side"] == side and r["reached"]
                    ),
                    0.0,
                )
                for s in seeds
            ]
            ax.bar(x + (i - 0.5) * 0.4, vals, 0.4, label=side.upper() if side == "sb3" else side)
        ax.set_xticks(x, [f"seed {s}" for s in seeds])
        ax.set_ylabel("time to score, s (0 = not reached)")
        ax.set_title(f"Time to score: {f.get('env')} to {f.get('target')}")
        ax.legend(fontsize=8)
        lines += ["", plot.save(fig, f"{stem}.png")]

    def median_text(side: str) -> str:
        side_runs = [r for r in runs if r["side"] == side]
        missed = sum(1 for r in side_runs if not r["reached"])
        misses = f"{missed} of {len(side_runs)} seeds missed the target"
        if f.get(f"{side}_median_s") is None:
            return f"not reached (median; {misses})"
        return f"{num(f[f'{side}_median_s'], '.1f')} s" + (f" (median; {misses})" if missed else "")

    headline = f"drl {median_text('drl')}"
    if any(r["side"] == "sb3" for r in runs):
        headline += f", SB3 {median_text('sb3')}"
    if f.get("goal_met") is None and str(f.get("verdict", "")).startswith("no comparison"):
        headline += f"; **{f['verdict']}**"
    return lines, headline, str(f.get("goal")), f.get("goal_met")


def section_scaling(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    rows_in = f.get("rows", [])
    cores = f.get("cores")
    base = f.get("base_workers")
    rows = [
        [
            r["workers"],
            num(r["system_rate"]),
            f"{num(min(r['system_rates']))}-{num(max(r['system_rates']))}" if r["system_rates"] else "-",
            num(r.get("raw_rate_paired")),
            num(r["efficiency"], ".3f"),
            num(r.get("vs_cores_rate"), ".3f"),
            num(r.get("alternating"), ".3f"),
            num(r.get("ceiling"), ".3f"),
            num(r.get("of_ceiling"), ".3f"),
            num(r.get("raw_parallel_rate")),
            num(r.get("vs_raw_parallel"), ".3f"),
            num(r.get("cpu_efficiency"), ".3f"),
            f"{num(r.get('system_cpu_us_per_step'), '.1f')} / {num(r.get('raw_cpu_us_per_step'), '.1f')}",
            num((r.get("cpu_share") or {}).get("others"), ".2f"),
            num(r.get("transitions_per_entry")),
            met(r.get("goal_met")),
            f"{r['repeats_ok']}/{r['repeats']}",
        ]
        for r in rows_in
    ]
    lines = table(
        [
            "workers",
            "system steps/s (median)",
            "spread",
            "raw steps/s before these runs",
            "efficiency",
            f"vs N={base}",
            "alternating (goal's figure)",
            "machine ceiling",
            "alternating / ceiling",
            "N raw loops at once, steps/s",
            "system / N raw loops",
            "CPU efficiency",
            "CPU us/step system / raw",
            "others' CPU share",
            "transitions per entry",
            "goal",
            "repeats ok",
        ],
        rows,
    )
    fill = f.get("entry_fill_ms")
    entry_text = (
        f"entries of at least {f.get('batch_transitions')} transitions filled for {fill:g} ms of CPU "
        "time (`--entry-fill-ms`)"
        if fill is not None
        else f"{f.get('batch_transitions')} transitions per entry"
    )
    lines += [
        "",
        f"{cores} cores; raw rate {num(f.get('raw_rate'))} steps/s (median of every raw measurement of "
        f"the run); efficiency = system / (raw x min(N, {cores})), median over repeats; "
        f"{f.get('repeats')} repeats of a {f.get('window_s')} s steady window; {f.get('env')}, "
        f"{f.get('envs_per_worker')} env(s) per worker, {entry_text}; the trainer only consumes (no "
        "gradient updates). CPU efficiency = raw CPU per step / the "
        "whole system's CPU per collected step (independent of other load); others' CPU share = the "
        "fraction of all cores other processes on the machine took during the window. N raw loops at "
        "once = the raw loop in N processes started together, with nothing of drl, right before each run "
        "(the machine ceiling below measures the same in alternating windows).",
    ]
    if f.get("alternating"):
        lines += [
            "",
            f"Alternating = the median over {f.get('alternations')} rounds of {f.get('alt_window_s')} s "
            "windows taken in turn with a reference, the other side frozen (SIGSTOP): for N <= cores the "
            "system against one raw loop (system / (raw x N)), beyond the cores against the system with "
            f"N = {base}. Windows seconds apart see the same machine, where the repeats' runs minutes "
            "apart do not on this drifting VM, so the goal is judged on this column where it was "
            "measured.",
        ]
    if f.get("ceilings"):
        lines += [
            "",
            "Machine ceiling = the same alternating protocol with N raw loops at once against one raw "
            "loop alone: N loops / (N x one loop), for 1 < N <= cores. It is what this machine gives N "
            "acting processes with nothing of drl (vCPUs that share a physical core, or a host that runs "
            "a lone busy vCPU faster, put it below 1), so no system reaches an efficiency above it; "
            "alternating / ceiling is the share of it the system delivers. The goal is still judged on "
            "the efficiency itself.",
        ]
    errors = [e for r in rows_in for e in r.get("errors", [])]
    if errors:
        lines += ["", "Failed repeats: " + "; ".join(f"`{e}`" for e in errors)]
    ok_rows = [r for r in rows_in if r["system_rate"] is not None]
    if plot and ok_rows:
        fig, (ax, ax2) = plot.subplots(1, 2, figsize=(10, 3.6))
        ns = [r["workers"] for r in ok_rows]
        ax.plot(ns, [r["system_rate"] for r in ok_rows], "o-", label="system (median)")
        ax.plot(ns, [f["raw_rate"] * min(n, cores) for n in ns], "s--", label="raw x min(N, cores)")
        if all(r.get("raw_parallel_rate") for r in ok_rows):
            ax.plot(ns, [r["raw_parallel_rate"] for r in ok_rows], "v:", label="N raw loops at once")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("rollout workers")
        ax.set_ylabel("env steps / s")
        ax.set_title("Collected through the system")
        ax.legend(fontsize=8)
        ax2.plot(ns, [r["efficiency"] for r in ok_rows], "o-", label="efficiency")
        ax2.plot(ns, [r.get("cpu_efficiency") for r in ok_rows], "^:", label="CPU efficiency")
        beyond = [(r["workers"], r["vs_cores_rate"]) for r in ok_rows if r.get("vs_cores_rate") is not None]
        if beyond:
            ax2.plot(*zip(*beyond), "d-", label=f"rate / rate at N={base}")
        alternating = [(r["workers"], r["alternating"]) for r in ok_rows if r.get("alternating") is not None]
        if alternating:
            ax2.plot(*zip(*alternating), "*-", label="alternating (goal's figure)")
        ceiling = [(r["workers"], r["ceiling"]) for r in ok_rows if r.get("ceiling") is not None]
        if ceiling:
            ax2.plot(*zip(*ceiling), "x", color="black", label="machine ceiling")
        ax2.axhline(0.9, color="grey", ls=":", lw=0.8)
        ax2.axhline(0.8, color="grey", ls="--", lw=0.8)
        ax2.set_xscale("log", base=2)
        ax2.set_xticks(ns, [str(n) for n in ns])
        ax2.set_ylim(0, 1.2)
        ax2.set_xlabel("rollout workers")
        ax2.set_title("Efficiency (goals 0.9 up to the cores, 0.8 beyond)")
        ax2.legend(fontsize=8)
        lines += ["", plot.save(fig, "scaling.png")]
    at_cores = next((r for r in rows_in if r["workers"] == base), None)
    last = rows_in[-1] if rows_in else None
    headline = "-"
    if at_cores and last:
        alt = at_cores.get("alternating") is not None and last.get("alternating") is not None
        if alt:
            headline = (
                f"efficiency {num(at_cores['alternating'], '.2f')} at N={base}; N={last['workers']}: "
                f"{num(last['alternating'], '.2f')} of N={base} (alternating windows)"
            )
        else:
            headline = (
                f"efficiency {num(at_cores['efficiency'], '.2f')} at N={base}; N={last['workers']}: "
                f"{num(last['system_rate'])} steps/s"
                + (f" ({num(last.get('vs_cores_rate'), '.2f')} of N={base})" if last.get("vs_cores_rate") else "")
            )
    return lines, headline, str(f.get("goal")), f.get("goal_met")


# -- Atari (issue 24; only with --atari or --only) ------------------------------------------------------------------
ATARI_SIDES = (
    ("raw", "raw_fps", "raw loop"),
    ("sf", "sf_fps", "Sample Factory APPO"),
    ("sf-sampler", "sf_sampler_fps", "Sample Factory sampler"),
    ("drl", "drl_fps", "drl"),
)
ATARI_REPLAY_GOAL_BYTES = 8192


def section_atari_throughput(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    rows_in = f.get("rows", [])
    cores = (f.get("machine") or {}).get("cores")
    peer = f.get("peer", "sf-sampler")
    peer_name = "Sample Factory sampler" if peer == "sf-sampler" else "Sample Factory APPO"
    rows = [
        [
            r["workers"],
            num(r.get("raw_fps")),
            num(r.get("sf_fps")),
            num(r.get("sf_collected_fps")),
            num(r.get("sf_sampler_fps")),
            num(r.get("drl_fps")),
            num(r.get("drl_whole_run_fps")),
            num(r.get("drl_over_raw"), ".3f"),
            num(r.get("drl_over_sf"), ".2f"),
            num(r.get("drl_over_sf_sampler"), ".2f"),
            num(r.get("sf_over_raw"), ".3f"),
            num(r.get("sf_sampler_over_raw"), ".3f"),
            met(r.get("goal_met")),
        ]
        for r in rows_in
    ]
    lines = table(
        [
            "workers",
            "raw frames/s",
            "SF APPO (trained on)",
            "SF APPO collected",
            "SF sampler",
            "drl",
            "drl whole run",
            "drl / raw",
            "drl / SF APPO",
            "drl / SF sampler",
            "SF APPO / raw",
            "SF sampler / raw",
            "goal",
        ],
        rows,
    )
    lines += [
        "",
        f"Frames/s on {f.get('env')}, frames = agent steps x 4 (frame skip 4, as Sample Factory counts); "
        f"{f.get('envs_per_worker')} envs per worker; medians of {f.get('repeats')} repeats, the sides in "
        f"rotation, {f.get('window_s')} s windows after {f.get('settle_s')} s, raw {f.get('raw_seconds')} s; "
        "ratios are medians of the per-repeat ratios. raw = N processes stepping and acting with nothing "
        f"sent (envs {f.get('raw_source')}, network {f.get('raw_policy')}); SF APPO = frames Sample "
        "Factory's learner trained on (collected: its samples counter); SF sampler = Sample Factory's "
        "sampling API with no learner; drl = frames drl's trainer consumed in the steady window "
        f"({'learning' if f.get('drl_train') else 'no gradient update: the collection path'}; whole run = "
        "start-up included, from summary.json). The goal's Sample Factory figure is the "
        f"{peer_name} ({peer})."
        + (f" Extra drl flags `{f['drl_args']}`." if f.get("drl_args") else "")
        + (f" Extra Sample Factory flags `{f['sf_args']}`." if f.get("sf_args") else ""),
    ]
    errors = [
        f"repeat {r.get('repeat')} N={r.get('workers')} {r.get('side')}: {r['error']}"
        for r in f.get("runs", [])
        if r.get("error")
    ]
    if errors:
        lines += ["", "Runs without a figure: " + "; ".join(f"`{e}`" for e in errors)]
    if plot and rows_in:
        import numpy as np

        fig, (ax, ax2) = plot.subplots(1, 2, figsize=(10, 3.6))
        ns = [r["workers"] for r in rows_in]
        x = np.arange(len(ns))
        shown = [(key, label) for _, key, label in ATARI_SIDES if any(r.get(key) for r in rows_in)]
        width = 0.8 / max(len(shown), 1)
        for i, (key, label) in enumerate(shown):
            ax.bar(x + (i - (len(shown) - 1) / 2) * width, [r.get(key) or 0.0 for r in rows_in], width, label=label)
        ax.set_xticks(x, [str(n) for n in ns])
        ax.set_xlabel("workers")
        ax.set_ylabel("frames / s (median)")
        ax.set_title("Atari throughput")
        ax.legend(fontsize=8)
        ratios = [("drl_over_raw", "drl / raw"), (f"drl_over_{peer.replace('-', '_')}", f"drl / {peer_name}")]
        for i, (key, label) in enumerate(ratios):
            ax2.bar(x + (i - 0.5) * 0.4, [r.get(key) or 0.0 for r in rows_in], 0.4, label=label)
        ax2.axhline(0.9, color="grey", ls=":", lw=0.8, label="0.9 (raw goal)")
        ax2.axhline(1.0, color="grey", ls="--", lw=0.8, label="1.0 (peer goal)")
        ax2.set_xticks(x, [str(n) for n in ns])
        ax2.set_ylim(0, 1.45 * max([1.0, *(r.get(key) or 0.0 for r in rows_in for key, _ in ratios)]))
        ax2.set_xlabel("workers")
        ax2.set_title("drl's ratios (0 = no figure)")
        ax2.legend(fontsize=8, ncol=2, loc="upper center")
        lines += ["", plot.save(fig, "atari_throughput.png")]
    within = [r for r in rows_in if cores is None or r["workers"] <= cores]
    head = max(within or rows_in, key=lambda r: r["workers"]) if rows_in else None
    headline = "-"
    if head:
        headline = (
            f"drl {num(head.get('drl_fps'))} frames/s with {head['workers']} workers: "
            f"{num(head.get('drl_over_raw'), '.2f')} x raw, "
            f"{num(head.get('drl_over_' + peer.replace('-', '_')), '.2f')} x {peer_name}"
        )
    goal = str(f.get("goal", "drl >= 0.9 x raw for N <= cores, drl >= Sample Factory"))
    return lines, headline, goal + (f" ({cores} cores)" if cores else ""), f.get("goal_met")


def section_atari_learner(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    params = f.get("parameters") or {}

    def row(name: str, key: str) -> list[str]:
        runs = f.get(f"{key}_runs") or []
        rate = f.get(f"{key}_updates_per_s")
        return [
            name,
            num(rate, ".2f"),
            num(1000 / rate if rate else None, ".1f"),
            f"{num(min(runs), '.2f')}-{num(max(runs), '.2f')}" if runs else "-",
            num(params.get(key)),
        ]

    lines = table(
        ["learner", "updates/s (median)", "ms/update", "spread", "parameters"], [row("drl", "drl"), row("SB3", "sb3")]
    )
    obs = "x".join(str(d) for d in f.get("obs") or [])
    lines += [
        "",
        f"ratio {num(f.get('ratio'), '.2f')} (median of per-repeat ratios "
        f"{num(f.get('ratio_median_per_repeat'), '.2f')}); batches of {f.get('batch_size')} x {obs} uint8, "
        f"{f.get('actions')} actions, Nature CNN, {'double' if f.get('double') else 'plain'} DQN on drl's "
        f"side; {f.get('threads')} torch threads each; {f.get('repeats')} repeats x "
        f"{f.get('updates_per_repeat')} updates in rotation after {f.get('warmup')} warm-up, "
        f"{num(f.get('fill'))} transitions in each replay; drl's batches from {f.get('drl_batches')}, "
        "SB3's from its own replay buffer (sampling inside the timed loop on both sides).",
    ]
    errors = f.get("errors") or {}
    if errors:
        lines += ["", "No figure: " + "; ".join(f"{k}: `{v}`" for k, v in errors.items())]
    if plot:
        fig, ax = plot.subplots(figsize=(5, 3.2))
        ax.bar(
            ["drl", "SB3"], [f.get("drl_updates_per_s") or 0.0, f.get("sb3_updates_per_s") or 0.0], color=["C0", "C1"]
        )
        ax.set_ylabel("DQN updates / s (median)")
        ax.set_title("Atari learner speed (batch 32, 4x84x84)")
        lines += ["", plot.save(fig, "atari_learner.png")]
    headline = (
        f"drl {num(f.get('drl_updates_per_s'), '.1f')} vs SB3 {num(f.get('sb3_updates_per_s'), '.1f')} DQN "
        f"updates/s (x{num(f.get('ratio'), '.2f')})"
    )
    return lines, headline, "none set: drl and SB3 compared", None


def section_atari_bytes(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    wire = f.get("wire_bytes_per_transition") or {}
    encode = f.get("encode_us_per_transition") or {}
    f32, u8 = f.get("float32_stack_pair"), f.get("uint8_stack_pair")

    def times(base, value) -> str:
        return f"{num(base / value, '.1f')}x" if base and value else "-"

    measured = [(f"wire, {kind}", wire.get(kind), num(encode.get(kind), ".2f")) for kind in ("none", "zstd", "lz4")]
    measured += [
        ("replay, allocated / capacity (the goal's figure)", f.get("replay_bytes_per_transition"), "-"),
        ("replay, allocated / held", f.get("replay_bytes_per_held_transition"), "-"),
    ]
    lines = table(
        [
            "where",
            "bytes/transition",
            "smaller than float32 stacks",
            "smaller than uint8 stacks",
            "encode us/transition",
        ],
        [[name, num(value), times(f32, value), times(u8, value), us] for name, value, us in measured],
    )
    lines += [
        "",
        f"{f.get('env')}: {num(f.get('transitions'))} transitions from {f.get('envs')} envs in "
        f"{num(f.get('entries'))} entries of about {f.get('rows')} ({f.get('n_step')}-step folding), "
        f"{f.get('frames_per_transition')} frames of {num(f.get('frame_bytes'))} bytes sent per transition; "
        f"the replay (zstd entries decoded and added) held {num(f.get('replay_held_of_capacity'), '.3f')} "
        f"of its capacity. Baselines: a transition's observation and next observation as whole stacks, "
        f"float32 {num(f32)} bytes, uint8 {num(u8)} bytes.",
    ]
    if plot and wire:
        fig, ax = plot.subplots(figsize=(7, 3.2))
        names = [f"wire {k}" for k in wire] + ["replay"]
        values = [*wire.values(), f.get("replay_bytes_per_transition") or 0.0]
        ax.barh(names, values, color="C0")
        for base, label, style in ((f32, "float32 stacks", "--"), (u8, "uint8 stacks", ":")):
            if base:
                ax.axvline(base, color="grey", ls=style, lw=0.8, label=label)
        ax.axvline(ATARI_REPLAY_GOAL_BYTES, color="C3", ls="-", lw=0.8, label="replay goal")
        ax.set_xscale("log")
        smallest = min([v for v in values if v > 0] or [1000.0])
        ax.set_xlim(left=10 ** math.floor(math.log10(smallest)))
        ax.set_xlabel("bytes per transition")
        ax.set_title("Atari bytes per transition")
        ax.legend(fontsize=8)
        lines += ["", plot.save(fig, "atari_bytes.png")]
    rb = f.get("replay_bytes_per_transition")
    headline = (
        f"replay {num(rb)} bytes per stored transition; wire zstd {num(wire.get('zstd'))}, lz4 "
        f"{num(wire.get('lz4'))}, none {num(wire.get('none'))}"
    )
    goal_met = f.get("goal_met", None if rb is None else rb <= ATARI_REPLAY_GOAL_BYTES)
    return lines, headline, f"replay <= {ATARI_REPLAY_GOAL_BYTES:,} bytes per stored transition", goal_met


def section_atari_tts(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    runs = f.get("runs", [])
    rows = [
        [
            r.get("seed"),
            "yes" if r.get("reached") else "**no**",
            num(r.get("time_to_score_s"), ".1f"),
            num(r.get("env_steps")),
            num(r.get("updates")),
            num(r.get("return_at_score"), ".1f"),
            num(r.get("best_return"), ".1f"),
            num(r.get("evaluations")),
            num(r.get("first_evaluation_s"), ".1f"),
            num(r.get("env_steps_total")),
            f"{r.get('exit_code')} ({r.get('exit_reason')})",
            num(r.get("load_at_start"), ".2f"),
        ]
        for r in runs
    ]
    lines = table(
        [
            "seed",
            "reached",
            "time to score s",
            "env steps",
            "updates",
            "return",
            "best return",
            "evaluations",
            "first evaluation s",
            "env steps in all",
            "exit",
            "load",
        ],
        rows,
    )
    budget, target = f.get("budget_s"), f.get("target")
    lines += [
        "",
        f"{f.get('preset')} on {f.get('env')}, target mean return {num(target, 'g')}, budget "
        f"{num(budget, 'g')} s per run on the run's own clock, {f.get('workers')} workers, "
        f"{f.get('threads')} trainer thread(s)"
        + (f", extra flags `{f['drl_args']}`" if f.get("drl_args") else "")
        + ". Time to score = the run's wall seconds (start-up included) at its first evaluation at or "
        "above the target; the best evaluated mean return is the figure where it is not reached (on a "
        "CPU-only machine it is not: see the learner speed above).",
    ]
    reached = [r["time_to_score_s"] for r in runs if r.get("reached") and r.get("time_to_score_s") is not None]
    bests = [r["best_return"] for r in runs if r.get("best_return") is not None]
    best = f"best mean return {num(max(bests), '.1f')}" if bests else "no evaluation"
    if reached:
        headline = (
            f"{num(target, 'g')} reached after {num(statistics.median(reached), '.1f')} s "
            f"({len(reached)} of {len(runs)} seeds; budget {num(budget, 'g')} s), {best}"
        )
    else:
        headline = f"{num(target, 'g')} not reached in the {num(budget, 'g')} s budget; {best}"
    goal_met = bool(runs) and all(r.get("best_return") is not None for r in runs)
    return (
        lines,
        headline,
        (f"recorded: the time to {num(target, 'g')} within {num(budget, 'g')} s, or the best mean return reached"),
        goal_met,
    )


# -- APPO (issue 25; only with --appo or --only) ------------------------------------------------------------------
def section_appo_lag(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    rows = f.get("rows", [])
    bounds = list(next((r["histogram"] for r in rows if not r.get("failed")), {}))
    head = [
        "workers",
        "env steps/s",
        "mean lag",
        "p95",
        "max",
        "dropped",
        *[f"<= {b}" if b != "inf" else "> 256" for b in bounds],
    ]
    body = [
        [
            r["workers"],
            *(
                ["**failed**"] + [""] * (len(head) - 2)
                if r.get("failed")
                else [
                    num(r["steps_per_s"]),
                    num(r["mean"], ".2f"),
                    r["p95"],
                    r["max"],
                    r["dropped"],
                    *[f"{100 * r['shares'].get(b, 0):.1f}%" for b in bounds],
                ]
            ),
        ]
        for r in rows
    ]
    lines = table(head, body)
    lines += [
        "",
        f"appo preset on {f.get('env')}, {num(f.get('steps'))} env steps per run, seed {f.get('seed')}, "
        f"--max-policy-lag {f.get('max_policy_lag')} (0: no limit). Lag in published versions (one per "
        "batch); shares of the trained transitions by lag bucket.",
    ]
    headline = "; ".join(
        f"{r['workers']} workers: mean {num(r.get('mean'), '.2f')}, max {r.get('max')}"
        for r in rows
        if not r.get("failed")
    )
    return lines, headline, "measured (no goal)", None


def section_startup(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    summary = f.get("summary", [])
    head = [
        "workers",
        "ready s (fork / new)",
        "wall s (fork / new)",
        "CPU s (fork / new)",
        "ready fork/new",
        "wall fork/new",
        "CPU fork/new",
    ]
    body = [
        [
            e["workers"],
            *[f"{num(e['fork'][k], '.1f')} / {num(e['new'][k], '.1f')}" for k in ("ready_s", "wall_s", "cpu_s")],
            *[num(e["ratio"][k], ".2f") for k in ("ready_s", "wall_s", "cpu_s")],
        ]
        for e in summary
    ]
    lines = table(head, body)
    lines += [
        "",
        f"`drl-orchestrate --preset ppo --env CartPole-v1 --workers N --steps 1024N`, medians of "
        f"{f.get('repeats')} repeats per side, the two sides interleaved (order swapped every repeat); "
        "new = `DRL_FORKSERVER=0`. ready: launch until every service logged its control endpoint; CPU: "
        "the run's whole process tree.",
    ]
    headline = "; ".join(
        f"{e['workers']} workers: ready x{num(e['ratio']['ready_s'], '.2f')}, CPU x{num(e['ratio']['cpu_s'], '.2f')}"
        for e in summary
    )
    return lines, headline, "measured (no goal)", None


APPO_SIDES = (("appo", "drl APPO"), ("ppo", "drl PPO"), ("rllib", "RLlib APPO"))


def section_appo_tts(f: dict, plot) -> tuple[list[str], str, str, bool | None]:
    runs = f.get("runs", [])
    rows = [
        [
            r.get("env"),
            r.get("seed"),
            r.get("side"),
            "**crashed**" if r.get("crashed") else "yes" if r.get("reached") else "**no**",
            num(r.get("time_to_score_s"), ".1f"),
            num(r.get("launch_to_score_s"), ".1f"),
            num(r.get("env_steps")),
            num(r.get("return_at_score"), ".1f"),
            num(r.get("best_return"), ".1f"),
            num(r.get("load_at_start"), ".2f"),
        ]
        for r in runs
    ]
    lines = table(
        [
            "env",
            "seed",
            "side",
            "reached",
            "time to score s",
            "launch->score s",
            "env steps",
            "return",
            "best return",
            "load",
        ],
        rows,
    )
    per_env = f.get("per_env") or {}

    def median(v: dict, side: str) -> str:
        if side not in f.get("sides", []):
            return "not run"
        if (v.get("crashed") or {}).get(side):
            return "crashed"
        m = (v.get("medians_s") or {}).get(side)
        return "not reached" if m is None else num(m, ".1f")

    def ratio(v: dict, key: str) -> str:
        r = v.get(key) or {}
        bound = "<= " if r.get("bound") else ""
        return f"{bound}{num(r.get('ratio'), '.3f')} ({r.get('verdict', '-')})"

    lines += [
        "",
        *table(
            ["env", *(f"{name} median s" for _, name in APPO_SIDES), "appo / ppo", "appo / rllib"],
            [
                [
                    env,
                    *(median(v, side) for side, _ in APPO_SIDES),
                    ratio(v, "appo_over_ppo"),
                    ratio(v, "appo_over_rllib"),
                ]
                for env, v in per_env.items()
            ],
        ),
    ]
    rllib = f.get("rllib") or {}
    lines += [
        "",
        f"{f.get('workers')} workers (RLlib: env runners of one env each"
        + (f", {rllib.get('num_learners')} learner, {rllib.get('cpus_per_actor')} CPU per actor" if rllib else "")
        + f"); targets {f.get('targets')}, budgets {f.get('budgets_s')} s and "
        f"{f.get('budgets_env_steps')} env steps per run. drl's time: {f.get('drl_time')}; RLlib's: "
        f"{f.get('rllib_time')}. Not reached counts as infinite; a crashed side gives no comparison."
        + (f" drl flags `{f['drl_args']}`." if f.get("drl_args") else "")
        + (f" RLlib flags `{f['rllib_args']}`." if f.get("rllib_args") else ""),
    ]
    if plot and per_env:
        import numpy as np

        envs = list(per_env)
        fig, ax = plot.subplots(figsize=(6, 3.2))
        x = np.arange(len(envs))
        for i, (side, name) in enumerate(APPO_SIDES):
            vals = [(per_env[e].get("medians_s") or {}).get(side) or 0.0 for e in envs]
            ax.bar(x + (i - 1) * 0.27, vals, 0.27, label=name)
        ax.set_xticks(x, envs)
        ax.set_ylabel("median time to score, s (0 = none)")
        ax.set_title(f"APPO time to score, {f.get('workers')} workers")
        ax.legend(fontsize=8)
        lines += ["", plot.save(fig, "appo_time_to_score.png")]
    headline = (
        "; ".join(
            f"{env}: appo/ppo {ratio(v, 'appo_over_ppo')}, appo/rllib {ratio(v, 'appo_over_rllib')}"
            for env, v in per_env.items()
        )
        or "-"
    )
    return lines, headline, str(f.get("goal", "appo/ppo < 1 (>= 4 workers), appo/rllib <= 0.5")), f.get("goal_met")


SECTIONS = {
    "memory_throughput": section_memory,
    "policy_sync": section_policy_sync,
    "learner_speed": section_learner,
    "ppo_learner": section_ppo_learner,
    "scaling": section_scaling,
    "learner_speed_gpu": section_learner,
    "learner_group": section_learner_group,
    "memory_shards": section_memory_shards,
    "network": section_network,
    "time_to_score": lambda f, p: section_tts(f, p, "time_to_score"),
    "time_to_score_lunar": lambda f, p: section_tts(f, p, "time_to_score_lunar"),
    "time_to_score_lunar_bf16": lambda f, p: section_tts(f, p, "time_to_score_lunar_bf16"),
    "time_to_score_lunar_fast": lambda f, p: section_tts(f, p, "time_to_score_lunar_fast"),
    "atari_throughput": section_atari_throughput,
    "atari_learner": section_atari_learner,
    "atari_bytes": section_atari_bytes,
    "atari_time_to_score": section_atari_tts,
    "appo_time_to_score": section_appo_tts,
    "appo_policy_lag": section_appo_lag,
    "startup": section_startup,
}


class Plotter:
    """matplotlib with the Agg canvas; ``save`` writes a PNG into the data folder and returns its markdown."""

    def __init__(self, folder: Path, doc: Path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt, self.folder, self.doc = plt, folder, doc

    def subplots(self, *args, **kwargs):
        return self.plt.subplots(*args, **kwargs)

    def save(self, fig, name: str) -> str:
        fig.tight_layout()
        path = self.folder / name
        fig.savefig(path, dpi=100)
        self.plt.close(fig)
        return f"![{name}]({os.path.relpath(path, self.doc.parent)})"


def write_report(
    results: list[dict],
    args: argparse.Namespace,
    doc: Path,
    folder: Path,
    total_s: float,
    command: str,
    skipped: list[Bench],
    generated_at: str,
) -> None:
    try:
        plot = Plotter(folder, doc)
    except ImportError:
        plot = None
    out = ["# Benchmarks", ""]
    if args.quick:
        out += [
            "> **Quick figures.** This report was generated with `--quick`: smoke-run sizes (one seed, fewer "
            "repeats, shorter windows, fewer workers). They show that every benchmark runs; they are not the "
            "measurement. Regenerate with `python -m bench.run_all` (and `--lunar`, `--atari`, `--appo`) on a "
            "quiet machine.",
            "",
        ]
    out += [
        f"Generated by `{command}` on {generated_at} in {total_s / 60:.1f} minutes, "
        f"{os.cpu_count()} logical CPUs, {platform.platform()}, Python {platform.python_version()}. "
        "Each benchmark ran alone, one after the other, as a subprocess; the sections give each one's exact "
        "command, machine, versions and seeds, and `docs/benchmarks/results.json` holds every figure. "
        "How each figure is measured: `bench/README.md` and each module's docstring.",
        "",
    ]
    summary_rows, sections = [], []
    for r in results:
        lines = [f"## {r['title']}", ""]
        headline, goal, goal_met = "-", "-", None
        if r["figures"] is not None:
            try:
                body, headline, goal, goal_met = SECTIONS[r["name"]](r["figures"], plot)
                lines += body
            except Exception as exc:  # a renderer bug must not hide the figures
                lines += [f"(could not render the table: {type(exc).__name__}: {exc}; raw figures in results.json)"]
        if not r["ok"]:
            lines += ["", f"**FAILED: {r['failure']}.** Last lines of its output:", "", "```", r.get("tail", ""), "```"]
        lines += [""] + provenance(r) + [""]
        sections += lines
        status = "ok" if r["ok"] else f"**failed** ({r['failure']})"
        summary_rows.append(
            [
                f"[{r['title']}](#{anchor(r['title'])})",
                headline,
                goal,
                met(goal_met),
                f"{r['duration_s']:.0f} s",
                status,
            ]
        )
    for b in skipped:
        summary_rows.append(
            [
                b.title,
                f"not run (opt-in: `--{b.opt_in}`)" if b.opt_in else "not run (`--only`)",
                "-",
                "-",
                "-",
                "skipped",
            ]
        )
    out += table(["benchmark", "headline (medians)", "goal", "goal met", "duration", "status"], summary_rows)
    out += [""] + sections
    kept = doc.read_text().partition(KEPT)[1:] if doc.exists() else ("", "")
    doc.write_text("\n".join(out).rstrip() + "\n" + ("\n" + "".join(kept) if kept[0] else ""))


def anchor(title: str) -> str:
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return keep.replace(" ", "-")


def select(only: set[str], opted: set[str]) -> list[Bench]:
    """The benchmarks to run: those named with ``--only``, else every one that is not opt-in plus the opt-in groups
    whose flags were given (``opted``: "lunar", "atari", "appo", "gpu", "network")."""
    return [b for b in BENCHES if (b.name in only if only else (not b.opt_in or b.opt_in in opted))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every benchmark with --quick (a few minutes)")
    parser.add_argument(
        "--lunar",
        action="store_true",
        help="also LunarLanderContinuous-v3 time to score (hours; with --quick one seed)",
    )
    parser.add_argument(
        "--atari",
        action="store_true",
        help="also the four Atari benchmarks (need bench/peers/setup_atari_peers.sh's environments)",
    )
    parser.add_argument(
        "--appo",
        action="store_true",
        help="also APPO time to score against PPO and RLlib (hours; needs bench/peers/setup_rllib.sh)",
    )
    parser.add_argument(
        "--network", action="store_true", help="also run the network benchmark (network namespaces; needs root)"
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="also SAC learner speed on the GPU against SB3 on the same GPU (needs a CUDA device)",
    )
    parser.add_argument("--only", default="", help="comma-separated benchmark names to run (default: all)")
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="more flags for one benchmark, e.g. --extra 'scaling=--workers 1,2' (repeatable)",
    )
    parser.add_argument(
        "--from-results", action="store_true", help="run nothing: rewrite the report and plots from <data>/results.json"
    )
    parser.add_argument("--doc", default=str(REPO / "docs" / "benchmarks.md"), help="report to write")
    parser.add_argument(
        "--data", default=str(REPO / "docs" / "benchmarks"), help="folder for plots, results.json and logs/"
    )
    args = parser.parse_args(argv)
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    unknown = only - {b.name for b in BENCHES}
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(b.name for b in BENCHES)}")
    chosen = select(only, {flag for flag in OPT_IN if getattr(args, flag)})
    skipped = [b for b in BENCHES if b not in chosen]
    doc, folder = Path(args.doc).resolve(), Path(args.data).resolve()
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "-m", "bench.run_all", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    if args.from_results:
        saved = json.loads((folder / "results.json").read_text())
        args.quick = saved["quick"]
        names = {r["name"] for r in saved["results"]}
        write_report(
            saved["results"],
            args,
            doc,
            folder,
            saved["total_s"],
            saved["command"],
            [b for b in BENCHES if b.name not in names],
            saved["generated_at"],
        )
        print(f"report: {doc} rewritten from {folder / 'results.json'}")
        return 0
    print(f"command: {command}; benchmarks: {', '.join(b.name for b in chosen)}", flush=True)
    begin = time.perf_counter()
    extra: dict[str, list[str]] = {}
    for item in args.extra:
        name, _, flags = item.partition("=")
        if name not in {b.name for b in BENCHES}:
            parser.error(f"--extra {item!r}: unknown benchmark {name!r}")
        extra.setdefault(name, []).extend(shlex.split(flags))
    results = [run_bench(b, args.quick, logs, extra.get(b.name, [])) for b in chosen]
    total = time.perf_counter() - begin
    if only and (folder / "results.json").exists():
        saved = json.loads((folder / "results.json").read_text())
        if saved.get("quick") == args.quick:
            kept = {r["name"]: r for r in saved["results"] if r["name"] not in only}
            mine = {r["name"]: r for r in results}
            results = [kept.get(b.name) or mine[b.name] for b in BENCHES if b.name in kept or b.name in mine]
            skipped = [b for b in BENCHES if b.name not in kept and b.name not in mine]
            total += saved.get("total_s", 0.0)
            command = f"{saved['command']}; then {command}"
    generated_at = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    (folder / "results.json").write_text(
        json.dumps(
            {
                "command": command,
                "quick": args.quick,
                "generated_at": generated_at,
                "total_s": round(total, 1),
                "results": results,
                "skipped": [b.name for b in skipped],
            },
            indent=1,
        )
        + "\n"
    )
    write_report(results, args, doc, folder, total, command, skipped, generated_at)
    failed = [r["name"] for r in results if not r["ok"]]
    print(
        f"report: {doc}; figures: {folder / 'results.json'}; {total / 60:.1f} minutes; "
        + (f"FAILED: {', '.join(failed)}" if failed else "every benchmark ran")
    )
    print(
        json.dumps(
            {
                "ok": not failed,
                "failed": failed,
                "total_s": round(total, 1),
                "quick": args.quick,
                "goals": {r["name"]: (r["figures"] or {}).get("goal_met") for r in results},
                "report": str(doc),
                "command": command,
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
