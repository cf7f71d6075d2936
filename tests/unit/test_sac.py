"""SAC learner and actor on Pendulum's spaces with tiny networks and synthetic batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from drl.algorithms import check_spaces, make_actor, make_learner
from drl.algorithms.sac import SACActor, SACConfig, SACLearner
from drl.config import ExperimentConfig
from drl.envs import space_spec
from drl.errors import UserError

CFG = SACConfig(hidden=(32, 32), batch_size=32, lr=1e-3)


@pytest.fixture(scope="module")
def spec():
    return space_spec("Pendulum-v1")


def synthetic_batch(
    n: int = 32, seed: int = 0, reward: float | None = None, terminated: float | None = None
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 3, generator=g) * 2 - 1
    return {
        "obs": obs,
        "action": torch.rand(n, 1, generator=g) * 4 - 2,
        "reward": torch.full((n,), reward) if reward is not None else torch.randn(n, generator=g),
        "next_obs": torch.rand(n, 3, generator=g) * 2 - 1,
        "terminated": (
            torch.full((n,), terminated) if terminated is not None else (torch.rand(n, generator=g) < 0.1).float()
        ),
    }


def test_pendulum_spec(spec):
    assert spec.obs_shape == (3,)
    assert spec.act_shape == (1,)
    assert spec.act_low == (-2.0,) and spec.act_high == (2.0,)
    assert spec.discrete_actions == 0


def test_update_returns_finite_metrics_and_changes_the_actor(spec):
    learner = SACLearner(spec, CFG, seed=0)
    before = learner.policy_weights()
    metrics = learner.update(synthetic_batch())
    after = learner.policy_weights()

    assert set(metrics) >= {"critic_loss", "actor_loss", "alpha", "entropy"}
    for name, value in metrics.items():
        assert isinstance(value, float), name
        assert math.isfinite(value), f"{name} = {value}"
    assert learner.updates == 1
    assert set(before) == set(after)
    assert any(not np.array_equal(before[k], after[k]) for k in before), "actor weights did not change"


def test_policy_weights_are_copies(spec):
    learner = SACLearner(spec, CFG, seed=0)
    weights = learner.policy_weights()
    snapshot = {k: v.copy() for k, v in weights.items()}
    learner.update(synthetic_batch())
    for k in weights:
        np.testing.assert_array_equal(weights[k], snapshot[k])
        assert weights[k].dtype == np.float32


def test_same_seed_same_updates(spec):
    """Run one learner after the other: sampling noise comes from torch's global RNG, seeded by the learner."""
    runs = []
    for _ in range(2):
        learner = SACLearner(spec, CFG, seed=3)
        metrics = [learner.update(synthetic_batch(seed=i)) for i in range(3)]
        runs.append((metrics, learner.policy_weights()))
    (ma, wa), (mb, wb) = runs
    assert ma == mb
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])


def test_critic_learns_a_constant_terminal_target(spec):
    """reward 1 and terminated 1 make the Q target exactly 1, whatever the actor and temperature do."""
    learner = SACLearner(spec, CFG, seed=1)
    first = learner.update(synthetic_batch(seed=0, reward=1.0, terminated=1.0))["critic_loss"]
    losses = [
        learner.update(synthetic_batch(seed=i % 8, reward=1.0, terminated=1.0))["critic_loss"] for i in range(300)
    ]
    final = float(np.mean(losses[-10:]))
    assert first > 0.1, f"initial critic loss {first} is already small; the test would prove nothing"
    assert final < 0.05, f"critic loss {first:.3f} -> {final:.4f} after 300 updates"
    with torch.no_grad():
        batch = synthetic_batch(seed=99, reward=1.0, terminated=1.0)
        action = (batch["action"] / 2).clamp(-1, 1)
        q1, q2 = learner.critic(batch["obs"], action)
    assert torch.allclose(q1, torch.ones_like(q1), atol=0.2)
    assert torch.allclose(q2, torch.ones_like(q2), atol=0.2)


def test_actor_acts_within_bounds(spec):
    learner = SACLearner(spec, CFG, seed=0)
    for i in range(5):
        learner.update(synthetic_batch(seed=i))
    actor = SACActor(spec, CFG, seed=0)
    actor.load(learner.policy_weights())
    obs = np.random.default_rng(0).uniform(-1, 1, size=(64, 3)).astype(np.float32)

    stochastic = actor.act(obs)
    deterministic = actor.act(obs, deterministic=True)

    for actions in (stochastic, deterministic):
        assert actions.dtype == np.float32
        assert actions.shape == (64, 1)
        assert np.all(np.isfinite(actions))
        assert np.all(actions >= -2.0) and np.all(actions <= 2.0)
    np.testing.assert_array_equal(deterministic, actor.act(obs, deterministic=True))
    assert not np.array_equal(stochastic, actor.act(obs)), "stochastic actions should vary between calls"
    assert np.unique(stochastic).size > 1


def test_actor_matches_learner_deterministic_policy(spec):
    learner = SACLearner(spec, CFG, seed=0)
    actor = SACActor(spec, CFG, seed=0)
    actor.load(learner.policy_weights())
    obs = np.random.default_rng(1).uniform(-1, 1, size=(8, 3)).astype(np.float32)
    with torch.no_grad():
        expected = (learner.actor.deterministic(torch.from_numpy(obs)) * 2.0).numpy()
    np.testing.assert_allclose(actor.act(obs, deterministic=True), expected, rtol=1e-6, atol=1e-6)


def test_actor_with_same_seed_is_reproducible(spec):
    weights = SACLearner(spec, CFG, seed=0).policy_weights()
    obs = np.zeros((4, 3), dtype=np.float32)
    a, b = SACActor(spec, CFG, seed=5), SACActor(spec, CFG, seed=5)
    a.load(weights)
    b.load(weights)
    np.testing.assert_array_equal(a.act(obs), b.act(obs))


def test_loading_wrong_shaped_weights_raises_value_error(spec):
    actor = SACActor(spec, CFG, seed=0)
    weights = SACLearner(spec, CFG, seed=0).policy_weights()
    name = next(iter(weights))
    bad = dict(weights, **{name: np.zeros((*weights[name].shape[:-1], weights[name].shape[-1] + 1), dtype=np.float32)})
    with pytest.raises(ValueError):
        actor.load(bad)


def test_loading_weights_of_another_network_size_raises_value_error(spec):
    actor = SACActor(spec, CFG, seed=0)
    other = SACLearner(spec, SACConfig(hidden=(16,), batch_size=32), seed=0).policy_weights()
    with pytest.raises(ValueError):
        actor.load(other)


def test_loading_incomplete_weights_raises_value_error(spec):
    actor = SACActor(spec, CFG, seed=0)
    weights = SACLearner(spec, CFG, seed=0).policy_weights()
    weights.pop(next(iter(weights)))
    with pytest.raises(ValueError):
        actor.load(weights)


def test_check_spaces_refuses_discrete_actions_for_sac():
    with pytest.raises(UserError, match="continuous"):
        check_spaces("sac", space_spec("CartPole-v1"), "CartPole-v1")


def test_check_spaces_accepts_pendulum(spec):
    check_spaces("sac", spec, "Pendulum-v1")


def test_registry_builds_sac(spec):
    cfg = ExperimentConfig(sac=CFG)
    assert isinstance(make_learner("sac", spec, cfg, seed=0), SACLearner)
    assert isinstance(make_actor("sac", spec, cfg, seed=0), SACActor)
    with pytest.raises(UserError):
        make_learner("a2c", spec, cfg, seed=0)
    with pytest.raises(UserError):
        make_actor("a2c", spec, cfg, seed=0)
