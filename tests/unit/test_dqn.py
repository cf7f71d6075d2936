"""DQN: n-step double-DQN targets, Huber loss, importance weights and TD errors, checked against numbers worked
out by hand on a linear Q-function; target copies; the acting policy's epsilon and Ape-X priorities."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from drl.algorithms.dqn import DQNActor, DQNConfig, DQNLearner
from drl.envs import SpaceSpec, space_spec


@pytest.fixture(scope="module")
def spec():
    return space_spec("CartPole-v1")


def linear_q(weight: list[list[float]]) -> nn.Linear:
    """Q(s) = W s for 4-float observations and 2 actions (no bias)."""
    layer = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
    return layer


def linear_weights(weight: list[list[float]]) -> dict[str, np.ndarray]:
    """The same linear Q-function as published weights of a Q-network with no hidden layer."""
    return {"net.0.weight": np.array(weight, np.float32), "net.0.bias": np.zeros(2, np.float32)}


# Online Q(s') = [1, 2] picks action 1, the target values it at 5: double DQN bootstraps 5 where max would take 7.
ONLINE = [[1.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]
TARGET = [[7.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]]


def batch(**over) -> dict[str, torch.Tensor]:
    b = {
        "obs": torch.tensor([[1.0, 0, 0, 0], [0.5, 0, 0, 0]]),
        "action": torch.tensor([1, 0]),
        "reward": torch.tensor([1.0, 2.0]),
        "next_obs": torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]),
        "terminated": torch.tensor([0.0, 1.0]),
        "nsteps": torch.tensor([3.0, 2.0]),
    }
    b.update(over)
    return b


def learner(spec, **cfg) -> DQNLearner:
    lrn = DQNLearner(spec, DQNConfig(hidden=(8,), gamma=0.9, lr=0.1, **cfg), seed=0)
    lrn.q, lrn.q_target = linear_q(ONLINE), linear_q(TARGET)
    lrn.opt = torch.optim.Adam(lrn.q.parameters(), lr=0.1)
    return lrn


def test_double_dqn_nstep_targets(spec):
    y = learner(spec).targets(batch())
    # first: 1 + 0.9^3 * Q_target(s', argmax_a Q(s', a) = 1) = 1 + 0.729 * 5; second: terminated, y = r
    assert y.tolist() == pytest.approx([1 + 0.729 * 5, 2.0])


def test_plain_max_target_when_double_is_off(spec):
    y = learner(spec, double=False).targets(batch())
    assert y[0].item() == pytest.approx(1 + 0.729 * 7)


def test_one_step_target_without_nsteps_field(spec):
    b = batch()
    del b["nsteps"]
    assert learner(spec).targets(b)[0].item() == pytest.approx(1 + 0.9 * 5)


def test_update_loss_td_errors_and_first_adam_step(spec):
    lrn = learner(spec)
    metrics = lrn.update(batch())
    # Q(s, a): first row action 1 -> 2 * 1 = 2; second row action 0 -> 1 * 0.5 = 0.5
    # errors: 2 - 4.645 = -2.645 (Huber: 2.645 - 0.5 = 2.145), 0.5 - 2 = -1.5 (Huber 1.0)
    assert lrn.td_errors.tolist() == pytest.approx([2.645, 1.5], rel=1e-5)
    assert metrics["loss"] == pytest.approx((2.145 + 1.0) / 2, rel=1e-5)
    # Huber gradients are -1 for both rows (|error| > 1): dL/dW[1,0] = -1 * 1 / 2, dL/dW[0,0] = -1 * 0.5 / 2.
    # Adam's first step moves each touched weight by lr against its gradient's sign; the rest stay.
    w = lrn.q.weight.detach()
    assert w[1, 0].item() == pytest.approx(2.0 + 0.1, abs=1e-6)
    assert w[0, 0].item() == pytest.approx(1.0 + 0.1, abs=1e-6)
    assert w[:, 1:].abs().max().item() == 0.0


def test_importance_weights_scale_the_loss(spec):
    lrn = learner(spec)
    metrics = lrn.update(batch(weight=torch.tensor([1.0, 0.25])))
    assert metrics["loss"] == pytest.approx((2.145 * 1.0 + 1.0 * 0.25) / 2, rel=1e-5)


def test_target_network_is_copied_every_k_updates(spec):
    lrn = DQNLearner(spec, DQNConfig(hidden=(8,), target_update_every=2), seed=0)
    b = {
        "obs": torch.randn(8, 4),
        "action": torch.randint(0, 2, (8,)),
        "reward": torch.randn(8),
        "next_obs": torch.randn(8, 4),
        "terminated": torch.zeros(8),
        "nsteps": torch.ones(8),
    }
    lrn.update(b)
    assert not all(torch.equal(p, t) for p, t in zip(lrn.q.parameters(), lrn.q_target.parameters()))
    lrn.update(b)
    assert all(torch.equal(p, t) for p, t in zip(lrn.q.parameters(), lrn.q_target.parameters()))


def test_checkpoint_round_trip(spec):
    a = DQNLearner(spec, DQNConfig(hidden=(8,)), seed=0)
    b_ = {
        "obs": torch.randn(8, 4),
        "action": torch.randint(0, 2, (8,)),
        "reward": torch.randn(8),
        "next_obs": torch.randn(8, 4),
        "terminated": torch.zeros(8),
        "nsteps": torch.ones(8),
    }
    a.update(b_)
    tensors, meta = a.state()
    b = DQNLearner(spec, DQNConfig(hidden=(8,)), seed=1)
    b.load_state(tensors, meta)
    assert b.updates == 1
    for name, value in a.policy_weights().items():
        np.testing.assert_array_equal(value, b.policy_weights()[name])
    with pytest.raises(ValueError, match="does not fit"):
        DQNLearner(spec, DQNConfig(hidden=(16,)), seed=0).load_state(tensors, meta)


def test_actor_epsilon_schedule_and_greedy_evaluation(spec):
    actor = DQNActor(spec, DQNConfig(hidden=(), eps_start=1.0, eps_end=0.1, eps_decay_fraction=0.5), seed=0)
    actor.set_progress(0.0)
    assert actor.epsilon == pytest.approx(1.0)
    actor.set_progress(0.25)
    assert actor.epsilon == pytest.approx(0.55)
    actor.set_progress(0.9)
    assert actor.epsilon == pytest.approx(0.1)
    actor.load(linear_weights(ONLINE))
    obs = np.tile(np.array([[1.0, 0, 0, 0]], np.float32), (200, 1))
    assert (actor.act(obs, deterministic=True) == 1).all()
    explored = actor.act(obs)
    assert 0 < (explored == 0).sum() < 30  # epsilon 0.1: about half of 10% picks action 0
    assert explored.dtype == np.int64


def test_actor_priorities_are_td_errors_of_its_network(spec):
    actor = DQNActor(spec, DQNConfig(hidden=(), gamma=0.9), seed=0)
    actor.load(linear_weights(ONLINE))
    arrays = {k: v.numpy() for k, v in batch().items()}
    # own network: max_a Q(s') = 2; first: |2 - (1 + 0.729 * 2)| = 0.458; second terminated: |0.5 - 2| = 1.5
    assert actor.priorities(arrays).tolist() == pytest.approx([0.458, 1.5], rel=1e-5)
    assert math.isclose(0.9**3, 0.729)


def test_actor_greedy_actions_match_the_learners_network(spec):
    learner = DQNLearner(spec, DQNConfig(hidden=(16, 16)), seed=3)
    actor = DQNActor(spec, DQNConfig(hidden=(16, 16)), seed=0)
    actor.load(learner.policy_weights())
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with torch.no_grad():
        q = learner.q(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(actor.q_values(obs), q, rtol=1e-5, atol=1e-6)
    assert (actor.act(obs, deterministic=True) == q.argmax(1)).all()


ATARI = SpaceSpec((4, 84, 84), "|u1", (), "<i8", 6, frame_stack=4)
MINATAR = SpaceSpec((10, 10, 4), "|u1", (), "<i8", 3, frame_stack=1)


def image_batch(spec: SpaceSpec, n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    frames = lambda: torch.from_numpy(rng.integers(0, 256, (n, *spec.obs_shape), dtype=np.uint8))  # noqa: E731
    return {
        "obs": frames(),
        "action": torch.from_numpy(rng.integers(0, spec.discrete_actions, n)),
        "reward": torch.from_numpy(rng.normal(size=n).astype(np.float32)),
        "next_obs": frames(),
        "terminated": torch.from_numpy((rng.random(n) < 0.2).astype(np.float32)),
        "nsteps": torch.full((n,), 3.0),
    }


@pytest.mark.parametrize("spec", [MINATAR, ATARI], ids=["minatar", "atari"])
def test_image_learner_fits_a_uint8_batch(spec):
    lrn = DQNLearner(spec, DQNConfig(lr=1e-3, target_update_every=10_000), seed=0)
    batch = image_batch(spec, 16)
    losses = [lrn.update(batch)["loss"] for _ in range(8)]
    assert batch["obs"].dtype == torch.uint8 and batch["next_obs"].dtype == torch.uint8  # read, never converted
    assert losses[-1] < 0.8 * losses[0], losses
    assert lrn.td_errors.shape == (16,) and np.isfinite(lrn.td_errors).all()
    assert {name.split(".")[0] for name in lrn.policy_weights()} == {"encoder", "head"}


SMALL_RGB = SpaceSpec((48, 48, 3), "|u1", (), "<i8", 4, frame_stack=1)


@pytest.mark.parametrize("spec, encoder", [(MINATAR, "auto"), (ATARI, "nature"), (SMALL_RGB, "impala")])
def test_image_actor_acts_greedily_on_the_learners_q_network(spec, encoder):
    cfg = DQNConfig(encoder=encoder, gamma=0.9)
    learner = DQNLearner(spec, cfg, seed=3)
    learner.update(image_batch(spec, 16))
    actor = DQNActor(spec, cfg, seed=0)
    assert (actor.q_values(image_batch(spec, 2)["obs"].numpy()) == 0).all()  # nothing loaded yet
    actor.load(learner.policy_weights())
    batch = image_batch(spec, 24, seed=1)
    obs = batch["obs"].numpy()
    with torch.no_grad():
        q = learner.q(batch["obs"]).numpy()
    np.testing.assert_allclose(actor.q_values(obs), q, rtol=1e-5, atol=1e-6)
    assert (actor.act(obs, deterministic=True) == q.argmax(1)).all()
    # Ape-X priorities from the worker's copy: |Q(s, a) - (r + gamma^k (1 - done) max_a' Q(s', a'))|
    arrays = {k: v.numpy() for k, v in batch.items()}
    with torch.no_grad():
        next_q = learner.q(batch["next_obs"]).max(1).values.numpy()
    target = arrays["reward"] + 0.9**3 * (1 - arrays["terminated"]) * next_q
    np.testing.assert_allclose(
        actor.priorities(arrays), np.abs(q[np.arange(24), arrays["action"]] - target), rtol=1e-4, atol=1e-5
    )
    with pytest.raises(ValueError, match="do not fit"):
        actor.load({k: v for k, v in learner.policy_weights().items() if k != "head.bias"})


@pytest.mark.parametrize("spec, encoder", [(MINATAR, "auto"), (ATARI, "auto"), (ATARI, "impala")])
def test_builder_counts_the_image_networks_parameters(spec, encoder):
    from drl.algorithms import get
    from drl.config import ExperimentConfig, replace

    cfg = replace(ExperimentConfig(), algorithm="dqn", **{"dqn.encoder": encoder})
    counts = get("dqn").parameters(spec, cfg)
    built = sum(p.numel() for p in DQNLearner(spec, cfg.dqn, seed=0).q.parameters())
    assert counts.trained == counts.frozen == counts.acting == built
    vector = get("dqn").parameters(space_spec("CartPole-v1"), cfg)
    assert vector.trained == sum(p.numel() for p in DQNLearner(space_spec("CartPole-v1"), cfg.dqn, 0).q.parameters())


def test_image_checkpoint_round_trip():
    a = DQNLearner(MINATAR, DQNConfig(), seed=0)
    a.update(image_batch(MINATAR, 8))
    tensors, meta = a.state()
    b = DQNLearner(MINATAR, DQNConfig(), seed=1)
    b.load_state(tensors, meta)
    batch = image_batch(MINATAR, 8, seed=2)
    assert a.update(batch) == b.update(batch)
    for name, value in a.policy_weights().items():
        np.testing.assert_array_equal(value, b.policy_weights()[name])
    with pytest.raises(ValueError, match="does not fit"):
        DQNLearner(MINATAR, DQNConfig(encoder="impala"), seed=0).load_state(tensors, meta)
