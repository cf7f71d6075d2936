"""SAC learner speed: gradient updates per second of drl's ``SACLearner`` next to Stable-Baselines3's SAC.

Both learners get the same problem: Pendulum-v1's spaces (3-float observations, 1-float action in [-2, 2]),
actor and twin critics with two hidden layers of 256, batch 256, Adam at 3e-4, learned temperature, CPU only,
the same torch thread count (``torch.get_num_threads()``, by default the machine's cores; ``--threads`` sets it).

- **drl**: ``SACLearner(space_spec("Pendulum-v1"), SACConfig(hidden=(256, 256), batch_size=256, lr=3e-4))``
  and a ``drl.training.replay.ReplayBuffer`` pre-filled with ``--fill`` random transitions. One timed update is
  ``learner.update(replay.sample(256))``: sampling from replay is inside the timed loop, as it is in SB3's
  ``train()``. The update computes SAC's gradients by hand rather than through autograd (both critics as one
  batched product per layer, the actor once over s' and s, Adam's fused kernel on one flat tensor per network,
  no autograd graph); ``tests/unit/test_sac_fast_update.py`` holds it to a plain autograd SAC update, step for
  step, to float32 rounding. Both sides thus compute the same SAC update; drl's does less around the matrix
  products, and skips the critics' parameter gradients of the actor loss, which SB3's autograd computes and drops.
- **sb3**: ``SAC("MlpPolicy", env, policy_kwargs=dict(net_arch=[256, 256]), batch_size=256, learning_starts=0,
  buffer_size=--fill, learning_rate=3e-4, device="cpu")``; its replay buffer is pre-filled with the same
  random transitions through ``model.replay_buffer.add`` (one call per transition, SB3's own API), a silent
  logger is attached, and one timed block is ``model.train(gradient_steps=K, batch_size=256)``: SB3's own
  loop of replay sampling, entropy-coefficient, critic and actor steps and the Polyak update of the targets,
  through autograd and a per-parameter Adam.

- **drl-bfloat16**: the same as drl with ``SACConfig(matmul="bfloat16")``: the wide products (the 256-wide layers)
  in bfloat16 with float32 sums (inputs and results rounded to bfloat16), everything else float32
  (``tests/unit/test_sac_bf16.py``: gradients within 3% of float32's). Shown for what the option buys; the goal
  is judged on drl's float32 update, the same arithmetic as SB3's.

Each learner is warmed up first (``--warmup`` updates, which also settles the allocator and the thread pool),
then the three are timed in rotation, ``--repeats`` times each, ``--updates`` updates per timed block, so load
drift on a shared machine hits both alike. The table shows the median updates/s with the spread; ``ratio`` is
drl's median over SB3's median (the median of the per-repeat ratios is shown too). The last line is one JSON
object with both figures, the ratio, the goal (drl at least 3x SB3's updates per second) and whether it was met,
the command, the machine and the versions.

For scale, the benchmark also times one 256x256x256 float32 matrix product at the same thread count: an exact SAC
update with these sizes needs 16 of them (see ``GEMMS_PER_UPDATE``), so 1 / (16 x that time) bounds the updates
per second of any float32 implementation, however little else it does (the floor measured on each machine, and
how close the goal is to it, are in bench/README.md and docs/benchmarks.md).
The machine load average at start and end is printed: on a shared machine, compare runs taken at similar load.

Stable-Baselines3 is an optional dependency: ``pip install -e '.[bench]'``.

    python -m bench.learner_speed              # 5 repeats x 300 updates each (about a minute on 2 idle cores)
    python -m bench.learner_speed --quick      # 3 repeats x 100 updates
    python -m bench.learner_speed --threads 1  # both learners on one thread
    python -m bench.learner_speed --device cuda   # both learners on the GPU (a machine with one)

With ``--device cuda`` both learners run on the GPU: replay stays in host memory on both sides and each sampled
batch is copied to the device, as each library does in training; every timed block ends with
``torch.cuda.synchronize()``, so the time counts the GPU's work, not only its queueing. The matrix-product floor
is then the GPU's: back-to-back 256x256x256 float32 products, timed with a synchronize after the last.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import sys
import time

import numpy as np
import torch

from drl.algorithms.sac import SACConfig, SACLearner
from drl.envs import space_spec
from drl.training.replay import ReplayBuffer

ENV = "Pendulum-v1"
HIDDEN = (256, 256)
BATCH = 256
LR = 3e-4
GOAL_RATIO = 3.0
# 256x256x256 products in one exact SAC update with these sizes (the 3-, 4- and 1-wide layers are negligible):
# actor forward on s' and s (2), target critics on s' (2), critics forward (2), critics' weight and input gradients
# of the hidden layer (4), critics forward on the new action (2) and back to it (2), actor's hidden layer weight and
# input gradients (2). Stable-Baselines3 also computes the critics' weight gradients in the actor loss (18).
GEMMS_PER_UPDATE = 16


def random_transitions(n: int, seed: int) -> dict[str, np.ndarray]:
    """Pendulum-shaped transitions: observations in the observation box, actions in [-2, 2], rare terminals."""
    rng = np.random.default_rng(seed)
    high = np.array([1.0, 1.0, 8.0], dtype=np.float32)
    return {
        "obs": rng.uniform(-high, high, size=(n, 3)).astype(np.float32),
        "action": rng.uniform(-2.0, 2.0, size=(n, 1)).astype(np.float32),
        "reward": rng.uniform(-16.3, 0.0, size=n).astype(np.float32),
        "next_obs": rng.uniform(-high, high, size=(n, 3)).astype(np.float32),
        "terminated": (rng.random(n) < 0.01).astype(np.float32),
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DrlRunner:
    def __init__(
        self,
        data: dict[str, np.ndarray],
        seed: int,
        matmul: str = "float32",
        device: torch.device = torch.device("cpu"),
    ):
        self.name = "drl" if matmul == "float32" else f"drl-{matmul}"
        self.device = device
        spec = space_spec(ENV)
        self.learner = SACLearner(
            spec, SACConfig(hidden=HIDDEN, batch_size=BATCH, lr=LR, matmul=matmul), seed=seed, device=device
        )
        self.replay = ReplayBuffer(spec, capacity=len(data["reward"]), seed=seed)
        self.replay.add(data)
        self.last: dict = {}

    def run(self, updates: int) -> float:
        learner, replay = self.learner, self.replay
        start = time.perf_counter()
        for _ in range(updates):
            self.last = learner.update(replay.sample(BATCH))
        synchronize(self.device)
        return time.perf_counter() - start


class Sb3Runner:
    name = "sb3"

    def __init__(self, data: dict[str, np.ndarray], seed: int, device: torch.device = torch.device("cpu")):
        import gymnasium as gym

        try:
            from stable_baselines3 import SAC
            from stable_baselines3.common.logger import Logger
        except ImportError:
            raise SystemExit("stable-baselines3 is not installed: pip install -e '.[bench]'") from None

        n = len(data["reward"])
        self.model = SAC(
            "MlpPolicy",
            gym.make(ENV),
            policy_kwargs=dict(net_arch=list(HIDDEN)),
            batch_size=BATCH,
            learning_starts=0,
            buffer_size=n,
            learning_rate=LR,
            device=str(device),
            seed=seed,
            verbose=0,
        )
        self.device = device
        self.model.set_logger(Logger(folder=None, output_formats=[]))
        buffer = self.model.replay_buffer
        for i in range(n):
            buffer.add(
                data["obs"][i : i + 1],
                data["next_obs"][i : i + 1],
                data["action"][i : i + 1],
                data["reward"][i : i + 1],
                data["terminated"][i : i + 1],
                [{}],
            )
        assert buffer.size() == n

    def run(self, updates: int) -> float:
        start = time.perf_counter()
        self.model.train(gradient_steps=updates, batch_size=BATCH)
        synchronize(self.device)
        return time.perf_counter() - start


def gemm_seconds(repeats: int = 200, device: torch.device = torch.device("cpu")) -> float:
    """Best-of-5 time of one 256x256 @ 256x256 float32 product at the current thread count (on a GPU: of
    back-to-back products, the last one waited for)."""
    a, b = torch.randn(HIDDEN[0], HIDDEN[1], device=device), torch.randn(HIDDEN[1], BATCH, device=device)
    for _ in range(20):
        a @ b
    synchronize(device)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        synchronize(device)
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per learner (medians are reported)")
    parser.add_argument("--updates", type=int, default=300, help="gradient updates per timed block")
    parser.add_argument("--warmup", type=int, default=50, help="untimed updates per learner before timing")
    parser.add_argument("--fill", type=int, default=50_000, help="random transitions pre-filled into each replay")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's own)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 repeats x 100 updates, 20 warm-up updates")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]: where both learners run")
    args = parser.parse_args(argv)
    from drl import device as devices
    from drl.errors import UserError

    try:
        device = devices.resolve(args.device)
    except UserError as exc:
        raise SystemExit(f"learner_speed: {exc}") from None
    if args.quick:
        args.repeats, args.updates, args.warmup = 3, 100, 20
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    command = " ".join([os.path.basename(sys.executable), "-m", "bench.learner_speed", *map(shlex.quote, sys.argv[1:])])
    machine = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "stable-baselines3": version("stable-baselines3"),
        "gymnasium": version("gymnasium"),
        "drl": version("drl"),
    }
    print(f"command:  {command}")
    print(
        f"machine:  {machine['cpu']}, {machine['logical_cpus']} logical CPUs, {machine['platform']}, "
        f"torch CPU capability {machine['torch_cpu_capability']}"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if device.type == "cuda":
        print(f"device:   {machine['gpu']} ({device}), both learners")
    print(
        f"setup:    {ENV} spaces, hidden {HIDDEN}, batch {BATCH}, lr {LR}, torch threads {threads} (both), "
        f"replay {args.fill:,} random transitions, warm-up {args.warmup}, {args.repeats} x {args.updates} "
        f"timed updates each, in rotation"
    )
    load_start = os.getloadavg()

    data = random_transitions(args.fill, args.seed)
    runners = [
        DrlRunner(data, args.seed, device=device),
        Sb3Runner(data, args.seed, device),
        DrlRunner(data, args.seed, "bfloat16", device),
    ]
    for runner in runners:
        runner.run(args.warmup)
    rates: dict[str, list[float]] = {r.name: [] for r in runners}
    for rep in range(args.repeats):
        for runner in runners[rep % 3 :] + runners[: rep % 3]:
            rates[runner.name].append(args.updates / runner.run(args.updates))
    assert torch.get_num_threads() == threads, "a learner changed torch's thread count"
    load_end = os.getloadavg()

    gemm = gemm_seconds(1000 if device.type == "cuda" else 200, device)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    ratio = medians["drl"] / medians["sb3"]
    ratio_bf16 = medians["drl-bfloat16"] / medians["sb3"]
    pair_ratio = statistics.median(d / s for d, s in zip(rates["drl"], rates["sb3"]))
    floor_rate = 1.0 / (GEMMS_PER_UPDATE * gemm)
    print()
    print(f"{'learner':<13} {'updates/s (median)':>19} {'min':>9} {'max':>9} {'ms/update':>10}")
    for name, values in rates.items():
        print(
            f"{name:<13} {medians[name]:>19.1f} {min(values):>9.1f} {max(values):>9.1f} {1000 / medians[name]:>10.2f}"
        )
    print(
        f"ratio drl/sb3: {ratio:.2f}x (goal {GOAL_RATIO:.1f}x: {'met' if ratio >= GOAL_RATIO else 'not met'}); "
        f"median of the per-repeat ratios {pair_ratio:.2f}x"
    )
    print(
        f"with --sac.matmul bfloat16 (wide products in bfloat16, float32 sums; SB3 stays float32): "
        f"{ratio_bf16:.2f}x sb3"
    )
    print(
        f"GEMM floor: one 256x256x256 float32 product takes {gemm * 1e3:.3f} ms here; an exact SAC update needs "
        f"{GEMMS_PER_UPDATE} of them, so no float32 implementation exceeds {floor_rate:.0f} updates/s "
        f"({floor_rate / medians['sb3']:.2f}x sb3's median)"
    )
    print(f"load average: {load_start[0]:.2f} at start, {load_end[0]:.2f} at end")
    print(
        json.dumps(
            {
                "drl_updates_per_s": round(medians["drl"], 2),
                "sb3_updates_per_s": round(medians["sb3"], 2),
                "ratio": round(ratio, 3),
                "goal": GOAL_RATIO,
                "goal_met": ratio >= GOAL_RATIO,
                "ratio_median_per_repeat": round(pair_ratio, 3),
                "drl_bfloat16_updates_per_s": round(medians["drl-bfloat16"], 2),
                "ratio_bfloat16": round(ratio_bf16, 3),
                "drl_bfloat16_runs": [round(v, 2) for v in rates["drl-bfloat16"]],
                "gemm_256_ms": round(gemm * 1e3, 4),
                "gemm_floor_updates_per_s": round(floor_rate, 1),
                "drl_runs": [round(v, 2) for v in rates["drl"]],
                "sb3_runs": [round(v, 2) for v in rates["sb3"]],
                "threads": threads,
                "device": str(device),
                "env": ENV,
                "hidden": list(HIDDEN),
                "batch_size": BATCH,
                "repeats": args.repeats,
                "updates_per_repeat": args.updates,
                "warmup": args.warmup,
                "load_average": [round(load_start[0], 2), round(load_end[0], 2)],
                "drl_last_metrics": {k: round(float(v), 5) for k, v in runners[0].last.items()},
                "drl_update": "hand-written SAC gradients, checked against autograd in tests/unit/test_sac_fast_update.py",
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
