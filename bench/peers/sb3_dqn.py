"""Stable-Baselines3's DQN update on Atari batches: the peer side of ``bench.atari_learner``. Runs inside the
Stable-Baselines3 environment (``bench/peers/setup_atari_peers.sh``), never in drl's, and imports nothing of drl.

``DQN("CnnPolicy", ...)``: the Nature CNN (``NatureCNN``, 512 features) and one linear layer to the 6 Q-values,
Adam, Huber loss to 1-step targets of the target network (SB3's DQN is not double), gradient norm clipped to 10,
batch 32, observations divided by 255 inside the network. Its replay buffer (``optimize_memory_usage=False``,
the rl-zoo Atari setting) is filled through its own ``add`` with ``bench.peers.atari_data.transitions(fill,
seed)``, the batches drl's side samples from. One timed block is ``model.train(gradient_steps=K,
batch_size=32)``: SB3's own loop of replay sampling and gradient steps.

Protocol (the parent drives the rotation): the job is one JSON argument; the child prints ``ready DIGEST
PARAMETERS VERSION`` once the buffer is full, then for each line ``K`` on its standard input runs K gradient
steps and prints one JSON line with the seconds they took; an empty line or end of input ends it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers.atari_data import ACTIONS, SIZE, STACK, digest, transitions  # noqa: E402


def main(job: dict) -> int:
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(job["threads"])

    class Shapes(gym.Env):
        """Only the spaces: the buffer is filled by hand and no env step is ever taken."""

        observation_space = gym.spaces.Box(0, 255, (STACK, SIZE, SIZE), np.uint8)
        action_space = gym.spaces.Discrete(ACTIONS)

        def reset(self, *, seed=None, options=None):
            return np.zeros(self.observation_space.shape, np.uint8), {}

        def step(self, action):
            return np.zeros(self.observation_space.shape, np.uint8), 0.0, False, False, {}

    data = transitions(job["fill"], job["seed"])
    n = job["fill"]
    model = DQN(
        "CnnPolicy",
        Shapes(),
        learning_rate=job["lr"],
        buffer_size=n,
        learning_starts=0,
        batch_size=job["batch"],
        gamma=job["gamma"],
        max_grad_norm=job["max_grad_norm"],
        optimize_memory_usage=False,
        device="cpu",
        seed=job["seed"],
        verbose=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    buffer = model.replay_buffer
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
    params = sum(p.numel() for p in model.q_net.parameters())
    print(f"ready {digest(data)} {params} {stable_baselines3.__version__}", flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        steps = int(line)
        start = time.perf_counter()
        model.train(gradient_steps=steps, batch_size=job["batch"])
        print(json.dumps({"seconds": time.perf_counter() - start, "threads": torch.get_num_threads()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
