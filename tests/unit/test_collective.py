"""Data-parallel learners (``drl.training.collective``): two learners in a real torch.distributed group (gloo, two
processes, TCP rendezvous on loopback), each stepping on half of every batch, end with the weights of one
learner that stepped on the whole batches, for sac, td3, dqn, ppo and appo; and with each other's, bit for bit.

The halves are equal in size (each learner's gradient counts equally, as in DistributedDataParallel), SAC's policy
noise is the one learner's draws split the same way (supplied by the test), TD3 has no target noise (its draws
would differ), and PPO's minibatch is the whole rollout, standardised over the group (with observation statistics
merged over it).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from drl.algorithms import make_learner
from drl.algorithms.appo import APPOConfig
from drl.algorithms.common import group_moments
from drl.algorithms.dqn import DQNConfig
from drl.algorithms.ppo import PPOConfig
from drl.algorithms.sac import SACConfig
from drl.algorithms.td3 import TD3Config
from drl.envs import space_spec
from drl.presets import get_preset
from drl.training.collective import SOLO, broadcast_learner, join

SIZE = 2
ROWS = 32  # per learner and step (replay learners)
STEPS = 4
CASES = {
    "sac": ("Pendulum-v1", dict(sac=SACConfig(hidden=(32, 32), batch_size=ROWS))),
    "td3": ("Pendulum-v1", dict(td3=TD3Config(hidden=(32, 32), batch_size=ROWS, target_noise=0.0, policy_delay=2))),
    "dqn": ("CartPole-v1", dict(dqn=DQNConfig(hidden=(32, 32), batch_size=ROWS, target_update_every=2))),
    "ppo": ("CartPole-v1", dict(ppo=PPOConfig(hidden=(32,), epochs=3, minibatches=1, normalize_obs=True))),
    "appo": ("CartPole-v1", dict(appo=APPOConfig(hidden=(32,), epochs=3, minibatches=1, batch_size=64))),
}


def learner_for(algorithm: str):
    env, blocks = CASES[algorithm]
    cfg = dataclasses.replace(get_preset(algorithm, env), device="cpu", **blocks)
    spec = space_spec(env)
    return make_learner(algorithm, spec, cfg, seed=11), spec


def replay_batch(spec, step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    n, obs_dim = SIZE * ROWS, int(np.prod(spec.obs_shape))
    if spec.discrete_actions:
        action = torch.randint(0, spec.discrete_actions, (n,), generator=g)
    else:
        action = torch.rand(n, *spec.act_shape, generator=g) * 4 - 2
    return {
        "obs": torch.randn(n, obs_dim, generator=g),
        "action": action,
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, obs_dim, generator=g),
        "terminated": (torch.rand(n, generator=g) < 0.1).float(),
    }


def rollout(spec, step: int) -> list[dict[str, np.ndarray]]:
    """Four segments of 16 steps: learner r of two gets segments 2r and 2r + 1."""
    rng = np.random.default_rng(200 + step)
    out = []
    for _ in range(2 * SIZE):
        out.append(
            {
                "obs": rng.normal(1.0, 2.0, size=(16, 4)).astype(np.float32),
                "action": rng.integers(0, 2, 16),
                "reward": rng.normal(size=16).astype(np.float32),
                "next_obs": rng.normal(1.0, 2.0, size=(16, 4)).astype(np.float32),
                "terminated": rng.random(16) < 0.1,
                "truncated": np.zeros(16, bool),
                "behaviour_logp": np.log(rng.uniform(0.3, 0.7, 16)).astype(np.float32),
            }
        )
    return out


def sac_noise(step: int, act_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(300 + step)
    return torch.randn(SIZE * ROWS, act_dim, generator=g), torch.randn(SIZE * ROWS, act_dim, generator=g)


def feed(learner, algorithm: str, spec, part: int | None) -> None:
    """STEPS steps on the whole data (``part`` None) or on learner ``part``'s half of it."""
    rows = slice(None) if part is None else slice(part * ROWS, (part + 1) * ROWS)
    for step in range(STEPS):
        if algorithm in ("ppo", "appo"):
            segments = rollout(spec, step)
            learner.train(segments if part is None else segments[2 * part : 2 * part + 2])
            continue
        if algorithm == "sac":
            after, now = sac_noise(step, int(np.prod(spec.act_shape)))
            learner._noise = lambda mean, n, a=after[rows], b=now[rows]: torch.cat([a, b])
        learner.update({k: v[rows] for k, v in replay_batch(spec, step).items()})


def run_rank(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    group = join(rank, SIZE, "127.0.0.1", port, backend="gloo", timeout_s=120)
    try:
        for algorithm in CASES:
            learner, spec = learner_for(algorithm)
            learner.collective = group
            feed(learner, algorithm, spec, rank)
            np.savez(Path(out) / f"{algorithm}-{rank}.npz", **learner.policy_weights())
        env, blocks = CASES["sac"]
        cfg = dataclasses.replace(get_preset("sac", env), device="cpu", **blocks)
        other = make_learner("sac", space_spec(env), cfg, seed=20 + rank)
        broadcast_learner(group, other)
        assert group.broadcast_int(100 + rank) == 100
        np.savez(
            Path(out) / f"broadcast-{rank}.npz", log_alpha=other.log_alpha.detach().numpy(), **other.policy_weights()
        )
        n, mean, var = group_moments(group, torch.full((3, 2), float(rank + 1)))
        np.savez(Path(out) / f"moments-{rank}.npz", n=n, mean=mean.numpy(), var=var.numpy())
    finally:
        group.leave()
    os._exit(0)  # the results are on disk; skip interpreter teardown, where gloo's threads can abort the process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def group_results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("collective")
    mp.spawn(run_rank, args=(free_port(), str(out)), nprocs=SIZE, join=True)
    return out


@pytest.mark.parametrize("algorithm", list(CASES))
def test_two_learners_on_halves_make_the_steps_of_one_on_the_whole(group_results, algorithm):
    whole, spec = learner_for(algorithm)
    feed(whole, algorithm, spec, None)
    expected = whole.policy_weights()
    ranks = [dict(np.load(group_results / f"{algorithm}-{r}.npz")) for r in range(SIZE)]
    for name, value in expected.items():
        np.testing.assert_array_equal(ranks[1][name], ranks[0][name], err_msg=f"the learners differ at {name}")
        np.testing.assert_allclose(ranks[0][name], value, rtol=2e-5, atol=2e-6, err_msg=name)
    half, _ = learner_for(algorithm)
    feed(half, algorithm, spec, 0)
    moved = [n for n, v in half.policy_weights().items() if not np.allclose(v, expected[n], rtol=2e-5, atol=2e-6)]
    assert moved, "one learner on half the data should not make the whole data's steps: the test shows nothing"


def test_group_moments_are_over_every_learners_rows(group_results):
    """Rank r contributed three rows of (r + 1): six rows, mean 1.5, population variance 0.25."""
    for r in range(SIZE):
        got = np.load(group_results / f"moments-{r}.npz")
        assert float(got["n"]) == 6.0
        np.testing.assert_allclose(got["mean"], [1.5, 1.5])
        np.testing.assert_allclose(got["var"], [0.25, 0.25])


def test_learners_that_start_apart_take_learner_zeros_networks(group_results):
    """Two SAC learners built from different seeds hold learner 0's weights (and temperature) after
    ``broadcast_learner``."""
    env, blocks = CASES["sac"]
    cfg = dataclasses.replace(get_preset("sac", env), device="cpu", **blocks)
    first = make_learner("sac", space_spec(env), cfg, seed=20)
    expected = {**first.policy_weights(), "log_alpha": first.log_alpha.detach().numpy()}
    for r in range(SIZE):
        got = dict(np.load(group_results / f"broadcast-{r}.npz"))
        assert set(got) == set(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"rank {r}: {name}")
    other = make_learner("sac", space_spec(env), cfg, seed=21).policy_weights()
    assert any(not np.array_equal(other[n], expected[n]) for n in other), "the seeds gave the same networks"


def test_a_learner_alone_is_unchanged_by_its_collective():
    """SOLO's operations return their tensor untouched, and a learner's default collective is SOLO."""
    t = torch.arange(4.0)
    assert SOLO.mean_(t) is t and SOLO.sum_(t) is t and SOLO.min_int(7) == 7 and SOLO.broadcast_int(3) == 3
    learner, _ = learner_for("ppo")
    assert learner.collective is SOLO
