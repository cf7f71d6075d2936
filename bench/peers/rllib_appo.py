"""RLlib's APPO (new API stack) trained until its policy scores: the peer side of ``bench.appo_time_to_score``.

Runs inside the peer environment built by ``bench/peers/setup_rllib.sh`` (``/work/venvs/rllib``: ray[rllib],
torch 2.13.0, gymnasium[box2d]), never in the project's venv; it imports nothing from drl, so the evaluation rule
is restated here: 10 deterministic episodes per evaluated policy, episode i reset with seed
``seed + 1_000_000 + i`` (drl's evaluator, ``services/evaluator`` through ``drl.acting.evaluation.run_episodes``), the
episodes run side by side with one policy call per step, the action the mode of RLlib's own inference
distribution (``to_deterministic()``: argmax for discrete actions, the mean for continuous ones).

    /work/venvs/rllib/bin/python bench/peers/rllib_appo.py --env CartPole-v1 --workers 4 --seed 0 --target 475

Hyperparameters: RLlib's tuned APPO CartPole example, ``rllib/examples/algorithms/appo/cartpole_appo.py`` in
ray-project/ray (``rllib/tuned_examples/appo/cartpole_appo.py`` before the tuned examples moved):
``circular_buffer_iterations_per_batch=2``, ``vf_loss_coeff=0.05``, ``entropy_coeff=0.0``, ``lambda_=0.95`` and
``DefaultModelConfig(vf_share_layers=True)`` (256x256 tanh, one trunk for policy and value), everything else
APPOConfig's defaults (lr 5e-4, clip 0.4, V-trace, a 500-step train batch of 50-step fragments, a remote
learner). RLlib ships no APPO example for LunarLander; the closest is that same CartPole one (discrete actions,
vector observations, a small MLP; the others are Atari, continuous control and memory tasks), so LunarLander-v3
uses it unchanged (gamma 0.99 is APPOConfig's default). The example's 16 envs per runner become
``--envs-per-worker`` (default 1, drl's worker runs one env unless told), its 4 runners ``--workers``.

Resources: Ray is held to this machine: ``ray.init(num_cpus=<logical CPUs>, include_dashboard=False)``, a 100 MiB
object store, usage statistics off, actors' logs not forwarded. The N env runners and the learner each reserve
``cpus / (N + 1)`` logical CPUs, so that every actor is placed at once on a 2-core machine (drl's N workers and
its trainer share the same cores the same way). Ray's own processes (GCS server, raylet, the log monitor and the
agents it starts) run beside them: they are part of what RLlib costs, as drl's memory server is part of drl's.
APPO's driver polls its actors with a timeout of 0 by default (``timeout_s_sampler_manager``,
``timeout_s_aggregator_manager``): thousands of empty training steps a second, one core of two taken from the
actors; ``--poll-timeout-s`` (0.05 s by default, 0 for RLlib's default) makes it wait for results instead, which
multiplied RLlib's sampling rate on this machine (figures in bench/README.md).

Clock: ``time_to_score_s`` runs from just before ``ray.init`` (imports done) to the start of the first evaluation
whose mean return reaches ``--target``, minus the time spent in earlier evaluations: starting Ray, building the
algorithm (its actors) and training count, as starting the memory server and the services count in drl's time;
evaluating does not, as for SB3 in ``bench.time_to_score``. ``train_to_score_s`` is the same without the
start-up. Evaluations happen in the driver between training iterations (``--eval-every`` iterations of at least
``--iteration-s`` seconds; RLlib's APPO reports every 10 s by default, which would make its time coarse), and the
next one waits until training has run at least as long as the last evaluation took: evaluating then costs at most
half the wall time, and a score is seen about as late as drl's evaluator, which runs beside training and sees a
new version when its last evaluation ends. While
the driver evaluates, RLlib's actors finish the requests already sent (one 50-step fragment per runner, the
learner's update in flight) and then wait: that little work is free on RLlib's clock.

Budget: ``--time-budget`` seconds on that clock and ``--steps`` env steps (RLlib's sampled count); past either the
run stops as not reached. The last line printed is one JSON object: ``time_to_score_s`` (null if not reached),
``env_steps`` at the score, every evaluation, the start-up seconds, the configuration and the versions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time

EVAL_SEED_OFFSET = 1_000_000
OBJECT_STORE_BYTES = 100 * 1024 * 1024
ENVS = ("CartPole-v1", "LunarLander-v3")
# rllib/examples/algorithms/appo/cartpole_appo.py (ray-project/ray): the tuned APPO CartPole settings.
TUNED = {"circular_buffer_iterations_per_batch": 2, "vf_loss_coeff": 0.05, "entropy_coeff": 0.0, "lambda_": 0.95}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1", choices=ENVS)
    parser.add_argument("--workers", type=int, default=4, help="RLlib env runners (remote actors)")
    parser.add_argument("--envs-per-worker", type=int, default=1, help="envs stepped by each env runner")
    parser.add_argument(
        "--num-learners",
        type=int,
        default=1,
        choices=(0, 1),
        help="1: one remote learner actor (APPO's default); 0: the learner in the driver",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--target", type=float, default=None, help="mean evaluation return that scores (CartPole 475, LunarLander 200)"
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=600.0,
        help="seconds on the time-to-score clock before the run stops as not reached",
    )
    parser.add_argument("--steps", type=int, default=None, help="env-step budget (default: none)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per evaluation")
    parser.add_argument(
        "--iteration-s",
        type=float,
        default=1.0,
        help="RLlib's min_time_s_per_iteration: the shortest training iteration",
    )
    parser.add_argument("--eval-every", type=int, default=2, help="training iterations between evaluations")
    parser.add_argument(
        "--poll-timeout-s",
        type=float,
        default=0.05,
        help="seconds APPO's driver waits for its actors' results per training step (RLlib's "
        "default 0 polls in a busy loop)",
    )
    args = parser.parse_args(argv)
    if args.poll_timeout_s < 0 or args.iteration_s < 0:
        parser.error("--poll-timeout-s and --iteration-s must not be negative")
    if args.target is None:
        args.target = {"CartPole-v1": 475.0, "LunarLander-v3": 200.0}[args.env]
    for name in ("workers", "envs_per_worker", "episodes", "eval_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def build_config(args: argparse.Namespace, cpus: int):
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    share = cpus / (args.workers + 1)
    return (
        APPOConfig()
        .environment(args.env)
        .env_runners(
            num_env_runners=args.workers, num_envs_per_env_runner=args.envs_per_worker, num_cpus_per_env_runner=share
        )
        .learners(num_learners=args.num_learners, num_cpus_per_learner=share)
        .training(
            **TUNED, timeout_s_sampler_manager=args.poll_timeout_s, timeout_s_aggregator_manager=args.poll_timeout_s
        )
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .reporting(min_time_s_per_iteration=args.iteration_s)
        .debugging(seed=args.seed, log_level="ERROR")
    )


class Evaluator:
    """drl's evaluation on RLlib's module: the learner's current weights, ``episodes`` envs side by side."""

    def __init__(self, algo, args: argparse.Namespace):
        import gymnasium as gym

        self.algo, self.args = algo, args
        self.module = algo.get_module()
        self.envs = [gym.make(args.env) for _ in range(args.episodes)]
        self.dist_cls = self.module.get_inference_action_dist_cls()

    def __call__(self) -> float:
        import numpy as np
        import torch
        from ray.rllib.core import DEFAULT_MODULE_ID

        self.module.set_state(self.algo.learner_group.get_weights()[DEFAULT_MODULE_ID])
        obs = [np.asarray(env.reset(seed=self.args.seed + EVAL_SEED_OFFSET + i)[0]) for i, env in enumerate(self.envs)]
        totals = [0.0] * len(self.envs)
        running = list(range(len(self.envs)))
        while running:
            with torch.no_grad():
                batch = torch.as_tensor(np.stack([obs[i] for i in running]), dtype=torch.float32)
                logits = self.module.forward_inference({"obs": batch})["action_dist_inputs"]
                actions = self.dist_cls.from_logits(logits).to_deterministic().sample().numpy()
            still = []
            for i, action in zip(running, actions):
                o, reward, terminated, truncated, _ = self.envs[i].step(action)
                obs[i] = np.asarray(o)
                totals[i] += float(reward)
                if not (terminated or truncated):
                    still.append(i)
            running = still
        return float(np.mean(totals))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import torch
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    torch.set_num_threads(1)  # the driver's evaluation, as drl's evaluator: one thread
    cpus = os.cpu_count() or 1
    t0 = time.perf_counter()
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    config = build_config(args, cpus)
    algo = config.build_algo()
    evaluate = Evaluator(algo, args)
    startup_s = time.perf_counter() - t0
    eval_s = 0.0
    evaluations: list[dict] = []
    hit: dict | None = None
    env_steps, iteration, exit_reason = 0, 0, "budget"
    try:
        while True:
            result = algo.train()
            iteration += 1
            env_steps = int(result.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps))
            trained_since = time.perf_counter() - t0 - eval_s - (evaluations[-1]["seconds"] if evaluations else 0.0)
            due = not evaluations or trained_since >= evaluations[-1]["eval_s"]
            if iteration % args.eval_every == 0 and due:
                begin = time.perf_counter()
                mean = evaluate()
                end = time.perf_counter()
                clock = begin - t0 - eval_s
                evaluations.append(
                    {
                        "iteration": iteration,
                        "seconds": round(clock, 3),
                        "env_steps": env_steps,
                        "mean_return": round(mean, 2),
                        "eval_s": round(end - begin, 3),
                    }
                )
                eval_s += end - begin
                if mean >= args.target:
                    hit = {
                        "time_to_score_s": clock,
                        "train_to_score_s": clock - startup_s,
                        "score_epoch": time.time(),
                        "env_steps": env_steps,
                        "return_at_score": mean,
                        "iteration": iteration,
                    }
                    exit_reason = "target"
                    break
            clock = time.perf_counter() - t0 - eval_s
            if clock > args.time_budget or (args.steps is not None and env_steps >= args.steps):
                break
        total_s = time.perf_counter() - t0
        print(
            json.dumps(
                {
                    "side": "rllib",
                    "reached": hit is not None,
                    "exit_reason": exit_reason,
                    "time_to_score_s": round(hit["time_to_score_s"], 2) if hit else None,
                    "train_to_score_s": round(hit["train_to_score_s"], 2) if hit else None,
                    "score_epoch": hit["score_epoch"] if hit else None,
                    "env_steps": hit["env_steps"] if hit else None,
                    "return_at_score": round(hit["return_at_score"], 1) if hit else None,
                    "best_return": max((e["mean_return"] for e in evaluations), default=None),
                    "startup_s": round(startup_s, 2),
                    "eval_s": round(eval_s, 2),
                    "total_s": round(total_s, 2),
                    "iterations": iteration,
                    "env_steps_total": env_steps,
                    "evaluations": evaluations,
                    "env": args.env,
                    "seed": args.seed,
                    "target": args.target,
                    "workers": args.workers,
                    "envs_per_worker": args.envs_per_worker,
                    "num_learners": args.num_learners,
                    "cpus_per_actor": round(cpus / (args.workers + 1), 3),
                    "time_budget_s": args.time_budget,
                    "budget_env_steps": args.steps,
                    "iteration_s": args.iteration_s,
                    "eval_every": args.eval_every,
                    "poll_timeout_s": args.poll_timeout_s,
                    "hyperparameters": {
                        **TUNED,
                        "vf_share_layers": True,
                        "lr": config.lr,
                        "clip_param": config.clip_param,
                        "gamma": config.gamma,
                        "train_batch_size_per_learner": config.train_batch_size_per_learner,
                        "rollout_fragment_length": config.rollout_fragment_length,
                        "fcnet_hiddens": list(evaluate.module.model_config.get("fcnet_hiddens", []))
                        if isinstance(evaluate.module.model_config, dict)
                        else None,
                    },
                    "versions": {
                        "python": platform.python_version(),
                        "ray": ray.__version__,
                        "torch": torch.__version__,
                        "gymnasium": __import__("gymnasium").__version__,
                    },
                }
            ),
            flush=True,
        )
    finally:
        algo.stop()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
