"""A run across five hosts against added latency and capped bandwidth: env steps/s and policy-sync p99.

The hosts are Linux network namespaces joined by a bridge (``tests.hosts.netns``; root and iproute2 needed), the
run's parts placed as ``tests.hosts.harness`` places them: the Valkey server on ``memory``, the S3 server
(moto's) on ``store``, trainer and evaluator on ``learner``, two rollout workers on each of ``node-a`` and
``node-b``, every service started with the plan's command and environment. Conditions, in rotation over
``--repeats`` so that the baseline is measured between the others:

- ``baseline``: the bridge as it is;
- ``rtt N ms``: the nodes reach the memory server through ``tests.hosts.proxy.DelayProxy``, which holds every
  chunk for N / 2 ms each way (``netem`` is not in this kernel);
- ``N Mbit/s``: both nodes' links capped by a token-bucket filter (``tc tbf``, both directions).

Each run is SYNC SAC on Pendulum-v1 with a 256x256 actor (a 280 KB version, so that a capped link has a
version to carry): workers wait for every version, so the time from publication to acting is on the path of
every iteration. Env steps/s is the slope of the workers' produced total between 20% and 90% of the run's steps
(the start, which imports torch on every host, left out); policy-sync p99 is the highest of the workers' own p99
(``policy_sync_ms_p99`` in their status: from a version's manifest ``created_at`` to acting with it, over every
version it loaded). Each figure is also given as the ratio to the baseline's median in the same run.

    python -m bench.network                  # every condition, 2 repeats (about 10 minutes on 2 cores)
    python -m bench.network --quick          # baseline, rtt 20 ms and 10 Mbit/s, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from drl.algorithms.sac.config import SACConfig
from drl.config import ExperimentConfig

CONDITIONS = {
    "baseline": (0, None),
    "rtt 1 ms": (1, None),
    "rtt 5 ms": (5, None),
    "rtt 20 ms": (20, None),
    "100 Mbit/s": (0, 100),
    "10 Mbit/s": (0, 10),
}
QUICK = ["baseline", "rtt 20 ms", "10 Mbit/s"]
PROXY_PORT = 16379


def config(steps: int) -> ExperimentConfig:
    return ExperimentConfig(
        env="Pendulum-v1",
        workers=4,
        mode="sync",
        steps=steps,
        random_steps=800,
        learning_starts=400,
        updates_per_transition=0.05,
        eval_episodes=1,
        sync_steps_per_iteration=400,
        sync_deadline_s=60,
        batch_transitions=50,
        sac=SACConfig(hidden=(256, 256), batch_size=64),
    )


def measure(name: str, steps: int, work: Path) -> dict:
    from tests.hosts.harness import HOSTS, MEMORY_PORT, HostRun
    from tests.hosts.netns import Hosts
    from tests.hosts.proxy import DelayProxy

    rtt, mbit = CONDITIONS[name]
    with Hosts(HOSTS) as hosts:
        proxy = None
        node_url = None
        if rtt:
            proxy = DelayProxy((hosts.gateway, PROXY_PORT), (hosts.address["memory"], MEMORY_PORT), rtt).start()
            node_url = f"redis://{hosts.gateway}:{PROXY_PORT}/0"
        if mbit:
            for node in ("node-a", "node-b"):
                hosts.cap(node, mbit)
        run = HostRun(hosts, config(steps), work, run="net", node_memory_url=node_url)
        samples: list[tuple[float, int]] = []
        try:
            run.start_all()
            client = run.client()
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                produced = sum(int(v) for v in client.hvals(run.keys.produced))
                samples.append((time.monotonic(), produced))
                if produced >= steps or all(
                    p.poll() is not None for n, p in run.procs.items() if n.startswith("rollout")
                ):
                    break
                time.sleep(0.2)
            run.wait_all(timeout=300)
            statuses = [run.status(f"rollout-{i}") for i in range(4)]
        finally:
            run.stop_all()
            if proxy is not None:
                proxy.stop()
    lo = next((t, p) for t, p in samples if p >= 0.2 * steps)
    hi = next(((t, p) for t, p in samples if p >= 0.9 * steps), samples[-1])
    rate = (hi[1] - lo[1]) / (hi[0] - lo[0]) if hi[0] > lo[0] else None
    p99 = max(float(s.get("policy_sync_ms_p99") or 0) for s in statuses)
    p50 = statistics.median(float(s.get("policy_sync_ms_p50") or 0) for s in statuses)
    return {"env_steps_per_s": rate, "policy_sync_p99_ms": p99, "policy_sync_p50_ms": p50}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=16_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    from tests.hosts.netns import REASON

    if REASON:
        print(f"bench.network: {REASON}", file=sys.stderr)
        return 2
    names = QUICK if args.quick else [c.strip() for c in args.conditions.split(",") if c.strip()]
    unknown = [n for n in names if n not in CONDITIONS]
    if unknown:
        print(f"bench.network: unknown condition(s) {unknown}; known: {list(CONDITIONS)}", file=sys.stderr)
        return 2
    if "baseline" not in names:
        names.insert(0, "baseline")
    repeats = 1 if args.quick else args.repeats
    runs: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="drl-bench-network-") as tmp:
        for r in range(repeats):
            for i, name in enumerate(names):
                work = Path(tmp, f"{r}-{i}")
                work.mkdir()
                result = measure(name, args.steps, work)
                runs[name].append(result)
                print(
                    f"repeat {r + 1}/{repeats} {name}: {result['env_steps_per_s']:.0f} env steps/s, policy sync "
                    f"p50 {result['policy_sync_p50_ms']:.1f} ms, p99 {result['policy_sync_p99_ms']:.1f} ms",
                    flush=True,
                )
    report = {}
    for name, results in runs.items():
        rate = statistics.median(x["env_steps_per_s"] for x in results)
        p99 = statistics.median(x["policy_sync_p99_ms"] for x in results)
        report[name] = {
            "env_steps_per_s": rate,
            "policy_sync_p99_ms": p99,
            "policy_sync_p50_ms": statistics.median(x["policy_sync_p50_ms"] for x in results),
            "runs": results,
        }
    base = report["baseline"]
    for r in report.values():
        r["steps_ratio_to_baseline"] = r["env_steps_per_s"] / base["env_steps_per_s"]
        r["p99_ratio_to_baseline"] = (
            r["policy_sync_p99_ms"] / base["policy_sync_p99_ms"] if base["policy_sync_p99_ms"] else None
        )
    print(
        json.dumps(
            {
                "conditions": report,
                "repeats": repeats,
                "steps": args.steps,
                "workers": 4,
                "mode": "sync",
                "hidden": [256, 256],
                "machine": {"platform": platform.platform()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
