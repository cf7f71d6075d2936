"""PPO learner speed: rollouts trained per second by drl's ``PPOLearner`` next to Stable-Baselines3's PPO.

Both learners get the problem of the ``ppo`` preset on CartPole-v1: a rollout of 512 transitions (4 segments of
128 steps), trained with 20 epochs of 2 minibatches of 256 rows, tanh 64x64 policy and value networks, Adam at
1e-3, gamma 0.98, GAE lambda 0.8, clip 0.2, the same torch thread count. One timed block trains ``--rollouts``
rollouts; the random rollout is the same for every side.

- **drl**: ``PPOLearner.train(segments)``: GAE and the old log-probabilities computed once, then the epochs; the
  policy's and value's parameters are views of one flat tensor, so Adam (the fused kernel), gradient clipping and
  zeroing are one operation each per minibatch step (``drl.algorithms.common.FlatParams``).
- **drl-per-param**: the same learner with a plain ``torch.optim.Adam`` over the networks' separate parameters,
  gradients set to None and clipped per parameter: how drl's PPO stepped before the flat parameters, shown for
  what they buy (the two make the same steps to float32 rounding: ``tests/unit/test_ppo.py``).
- **sb3**: ``PPO("MlpPolicy", env, n_steps=512, batch_size=256, n_epochs=20, ...)`` with its rollout buffer
  filled through ``rollout_buffer.add`` and ``compute_returns_and_advantage``; one rollout is one ``train()``.

The sides are warmed up, then timed in rotation ``--repeats`` times. The last line is one JSON object with the
medians, the ratios drl/sb3 and drl/drl-per-param, the command, the machine and the versions.

    python -m bench.ppo_learner            # 5 repeats x 10 rollouts each
    python -m bench.ppo_learner --quick    # 3 repeats x 4 rollouts
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time

import numpy as np
import torch

from bench.learner_speed import cpu_model, version
from drl.algorithms.ppo import PPOConfig, PPOLearner
from drl.envs import space_spec

ENV = "CartPole-v1"
ROWS, SEGMENTS = 512, 4
CFG = PPOConfig(hidden=(64, 64), lr=1e-3, gamma=0.98, gae_lambda=0.8, epochs=20, minibatches=2, ent_coef=0.0)


def random_rollout(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(ROWS, 4)).astype(np.float32),
        "action": rng.integers(0, 2, ROWS),
        "reward": np.ones(ROWS, np.float32),
        "next_obs": rng.normal(size=(ROWS, 4)).astype(np.float32),
        "terminated": rng.random(ROWS) < 0.02,
        "truncated": np.zeros(ROWS, bool),
    }


class DrlRunner:
    def __init__(self, rollout: dict[str, np.ndarray], seed: int, flat: bool = True):
        self.name = "drl" if flat else "drl-per-param"
        self.learner = PPOLearner(space_spec(ENV), CFG, seed=seed)
        step = ROWS // SEGMENTS
        self.segments = [{k: v[i : i + step] for k, v in rollout.items()} for i in range(0, ROWS, step)]
        if not flat:
            learner = self.learner
            params = [*learner.policy.parameters(), *learner.value.parameters()]
            for p in params:
                p.data, p.grad = p.data.clone(), None
            learner.opt = torch.optim.Adam(params, lr=CFG.lr, eps=1e-5)
            self._params = params

    def run(self, rollouts: int) -> float:
        start = time.perf_counter()
        for _ in range(rollouts):
            if self.name == "drl":
                self.learner.train(self.segments)
            else:
                self._train_per_param()
        return time.perf_counter() - start

    def _train_per_param(self) -> None:
        learner = self.learner
        data = learner.prepare(self.segments)
        for _ in range(CFG.epochs):
            for idx in learner.minibatch_rows(data):
                total, stats = learner.loss({k: v[idx] for k, v in data.items() if k not in learner.WHOLE})
                learner.opt.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(self._params, CFG.max_grad_norm)
                learner.opt.step()
                for v in stats.values():
                    float(v)


class Sb3Runner:
    name = "sb3"

    def __init__(self, rollout: dict[str, np.ndarray], seed: int):
        import gymnasium as gym

        try:
            from stable_baselines3 import PPO
            from stable_baselines3.common.logger import Logger
        except ImportError:
            raise SystemExit("stable-baselines3 is not installed: pip install -e '.[bench]'") from None
        self.model = PPO(
            "MlpPolicy",
            gym.make(ENV),
            n_steps=ROWS,
            batch_size=ROWS // CFG.minibatches,
            n_epochs=CFG.epochs,
            learning_rate=CFG.lr,
            gamma=CFG.gamma,
            gae_lambda=CFG.gae_lambda,
            ent_coef=0.0,
            clip_range=CFG.clip,
            max_grad_norm=CFG.max_grad_norm,
            device="cpu",
            seed=seed,
            verbose=0,
        )
        self.model.set_logger(Logger(folder=None, output_formats=[]))
        buffer, policy = self.model.rollout_buffer, self.model.policy
        with torch.no_grad():
            for i in range(ROWS):
                obs = torch.as_tensor(rollout["obs"][i : i + 1])
                action = torch.as_tensor(rollout["action"][i : i + 1])
                value, logp, _ = policy.evaluate_actions(obs, action)
                buffer.add(
                    rollout["obs"][i : i + 1],
                    rollout["action"][i : i + 1].reshape(1, 1),
                    rollout["reward"][i : i + 1],
                    np.array([i % 128 == 0]),
                    value.flatten(),
                    logp,
                )
            buffer.compute_returns_and_advantage(last_values=torch.zeros(1), dones=np.zeros(1))

    def run(self, rollouts: int) -> float:
        start = time.perf_counter()
        for _ in range(rollouts):
            self.model.train()
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per learner (medians are reported)")
    parser.add_argument("--rollouts", type=int, default=10, help="rollouts trained per timed block")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 repeats x 4 rollouts")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.rollouts = 3, 4
    torch.set_num_threads(args.threads)
    command = " ".join([os.path.basename(sys.executable), "-m", "bench.ppo_learner", *map(shlex.quote, sys.argv[1:])])
    machine = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform()}
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "stable-baselines3": version("stable-baselines3"),
        "drl": version("drl"),
    }
    print(f"command:  {command}")
    print(f"machine:  {machine['cpu']}, {machine['logical_cpus']} logical CPUs, {machine['platform']}")
    print(
        f"setup:    {ENV} spaces, rollouts of {ROWS}, {CFG.epochs} epochs x {CFG.minibatches} minibatches, "
        f"hidden {CFG.hidden}, torch threads {args.threads}, {args.repeats} x {args.rollouts} rollouts each"
    )
    load_start = os.getloadavg()
    rollout = random_rollout(args.seed)
    runners = [DrlRunner(rollout, args.seed), DrlRunner(rollout, args.seed, flat=False), Sb3Runner(rollout, args.seed)]
    for runner in runners:
        runner.run(2)
    rates: dict[str, list[float]] = {r.name: [] for r in runners}
    for rep in range(args.repeats):
        for runner in runners[rep % 3 :] + runners[: rep % 3]:
            rates[runner.name].append(args.rollouts / runner.run(args.rollouts))
    load_end = os.getloadavg()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    steps = CFG.epochs * CFG.minibatches
    print(f"\n{'learner':<14} {'rollouts/s':>11} {'min':>8} {'max':>8} {'ms/minibatch step':>18}")
    for name, values in rates.items():
        print(
            f"{name:<14} {medians[name]:>11.2f} {min(values):>8.2f} {max(values):>8.2f} "
            f"{1000 / medians[name] / steps:>18.3f}"
        )
    over_sb3 = medians["drl"] / medians["sb3"]
    over_per_param = medians["drl"] / medians["drl-per-param"]
    print(
        f"ratio drl/sb3 {over_sb3:.2f}x, drl/drl-per-param {over_per_param:.2f}x; load average "
        f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end"
    )
    print(
        json.dumps(
            {
                "rollouts_per_s": {k: round(v, 3) for k, v in medians.items()},
                "runs": {k: [round(x, 3) for x in v] for k, v in rates.items()},
                "ratio_drl_over_sb3": round(over_sb3, 3),
                "ratio_drl_over_per_param": round(over_per_param, 3),
                "minibatch_steps_per_rollout": steps,
                "threads": args.threads,
                "load_average": [round(load_start[0], 2), round(load_end[0], 2)],
                "command": command,
                "machine": machine,
                "versions": versions,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
