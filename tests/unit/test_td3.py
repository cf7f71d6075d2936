"""TD3 learner and actor on Pendulum's spaces with tiny networks and synthetic batches."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from drl.algorithms import check_spaces, make_actor, make_learner
from drl.algorithms.td3 import TD3Actor, TD3Config, TD3Learner
from drl.config import ExperimentConfig, replace
from drl.envs import space_spec
from drl.errors import ConfigError, UserError
from drl.presets import PRESETS, get_preset
from drl.store.policy import contiguous

CFG = TD3Config(hidden=(32, 32), batch_size=32, actor_lr=1e-3, critic_lr=1e-3)


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


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_update_returns_finite_metrics_and_changes_the_weights(spec):
    learner = TD3Learner(spec, CFG, seed=0)
    before = learner.policy_weights()
    critic_before = snapshot(learner.critic)
    metrics = [learner.update(synthetic_batch(seed=i)) for i in range(CFG.policy_delay)]
    after = learner.policy_weights()

    for m in metrics:
        assert set(m) >= {"critic_loss", "actor_loss", "q"}
        for name, value in m.items():
            assert isinstance(value, float), name
            assert math.isfinite(value), f"{name} = {value}"
    assert learner.updates == CFG.policy_delay
    assert learner.actor_updates == 1
    assert changed(critic_before, learner.critic), "critic weights did not change"
    assert set(before) == set(after)
    assert any(not np.array_equal(before[k], after[k]) for k in before), "actor weights did not change"
    assert metrics[-1]["actor_loss"] != 0.0


@pytest.mark.parametrize("delay", [1, 2, 3])
def test_actor_and_targets_move_only_every_policy_delay_updates(spec, delay):
    learner = TD3Learner(spec, dataclasses.replace(CFG, policy_delay=delay), seed=0)
    moved = []
    for i in range(1, 3 * delay + 1):
        nets = (learner.actor, learner.actor_target, learner.critic_target, learner.critic)
        before = [snapshot(n) for n in nets]
        learner.update(synthetic_batch(seed=i))
        actor, actor_target, critic_target, critic = (changed(b, n) for b, n in zip(before, nets))
        assert critic, f"update {i}: the critics must move on every update"
        assert actor == actor_target == critic_target, f"update {i}: actor and targets move together"
        if actor:
            moved.append(i)
    assert moved == [delay, 2 * delay, 3 * delay]
    assert learner.actor_updates == 3
    assert learner.updates == 3 * delay


def test_policy_weights_are_copies(spec):
    learner = TD3Learner(spec, CFG, seed=0)
    weights = learner.policy_weights()
    kept = {k: v.copy() for k, v in weights.items()}
    for i in range(CFG.policy_delay):
        learner.update(synthetic_batch(seed=i))
    for k in weights:
        np.testing.assert_array_equal(weights[k], kept[k])
        assert weights[k].dtype == np.float32


def test_same_seed_same_updates(spec):
    """Target smoothing noise comes from torch's global RNG, seeded by the learner."""
    runs = []
    for _ in range(2):
        learner = TD3Learner(spec, CFG, seed=3)
        metrics = [learner.update(synthetic_batch(seed=i)) for i in range(4)]
        runs.append((metrics, learner.policy_weights()))
    (ma, wa), (mb, wb) = runs
    assert ma == mb
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])


def test_target_policy_smoothing_draws_clipped_noise(spec):
    """With noise clipped to zero the target ignores the RNG; with noise it depends on it."""

    def critic_loss(cfg: TD3Config, torch_seed: int) -> float:
        learner = TD3Learner(spec, cfg, seed=0)
        torch.manual_seed(torch_seed)
        return learner.update(synthetic_batch(seed=0, terminated=0.0))["critic_loss"]

    unclipped = dataclasses.replace(CFG, target_noise=0.5, noise_clip=0.5)
    assert critic_loss(unclipped, 1) != critic_loss(unclipped, 2)
    clipped_away = dataclasses.replace(CFG, target_noise=0.5, noise_clip=0.0)
    assert critic_loss(clipped_away, 1) == critic_loss(clipped_away, 2)


def test_critic_learns_a_constant_terminal_target(spec):
    """reward 1 and terminated 1 make the Q target exactly 1, whatever the actor does."""
    learner = TD3Learner(spec, CFG, seed=1)
    first = learner.update(synthetic_batch(seed=0, reward=1.0, terminated=1.0))["critic_loss"]
    losses = [
        learner.update(synthetic_batch(seed=i % 8, reward=1.0, terminated=1.0))["critic_loss"] for i in range(300)
    ]
    final = float(np.mean(losses[-10:]))
    assert first > 0.1, f"initial critic loss {first} is already small; the test would prove nothing"
    assert final < 0.05, f"critic loss {first:.3f} -> {final:.4f} after 300 updates"
    with torch.no_grad():
        batch = synthetic_batch(seed=99, reward=1.0, terminated=1.0)
        q1, q2 = learner.critic(batch["obs"], (batch["action"] / 2).clamp(-1, 1))
    assert torch.allclose(q1, torch.ones_like(q1), atol=0.2)
    assert torch.allclose(q2, torch.ones_like(q2), atol=0.2)


def _through_the_store(learner: TD3Learner) -> tuple[dict[str, np.ndarray], dict]:
    """state() as a checkpoint carries it: tensors as safetensors bytes, meta as JSON text."""
    tensors, meta = learner.state()
    return st_load(st_save(contiguous(tensors))), json.loads(json.dumps(meta))


def test_state_round_trip_gives_the_identical_next_updates(spec):
    original = TD3Learner(spec, CFG, seed=0)
    for i in range(5):  # odd: the restored learner's first update is an actor update only if the counter survived
        original.update(synthetic_batch(seed=i))
    tensors, meta = _through_the_store(original)
    restored = TD3Learner(spec, CFG, seed=42)
    restored.load_state(tensors, meta)
    assert (restored.updates, restored.actor_updates) == (original.updates, original.actor_updates)

    outcomes = []
    for learner in (original, restored):
        torch.manual_seed(1234)
        metrics = [learner.update(synthetic_batch(seed=100 + i)) for i in range(3)]
        outcomes.append((metrics, learner.state()[0]))
    (ma, ta), (mb, tb) = outcomes
    assert ma == mb
    assert set(ta) == set(tb)
    for k in ta:
        np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
    assert any(k.startswith("actor_opt.") for k in ta) and any(k.startswith("critic_opt.") for k in ta)
    assert any(k.startswith("actor_target.") for k in ta) and any(k.startswith("critic_target.") for k in ta)


def test_load_state_of_other_networks_raises_value_error(spec):
    small = TD3Learner(spec, dataclasses.replace(CFG, hidden=(16,)), seed=0)
    small.update(synthetic_batch())
    tensors, meta = _through_the_store(small)
    with pytest.raises(ValueError):
        TD3Learner(spec, CFG, seed=0).load_state(tensors, meta)
    learner = TD3Learner(spec, CFG, seed=0)
    learner.update(synthetic_batch())
    tensors, meta = _through_the_store(learner)
    del meta["actor_updates"]
    with pytest.raises(ValueError):
        TD3Learner(spec, CFG, seed=0).load_state(tensors, meta)


def test_actor_acts_within_bounds(spec):
    learner = TD3Learner(spec, CFG, seed=0)
    for i in range(6):
        learner.update(synthetic_batch(seed=i))
    obs = np.random.default_rng(0).uniform(-1, 1, size=(64, 3)).astype(np.float32)
    for noise in (0.1, 5.0):
        actor = TD3Actor(spec, dataclasses.replace(CFG, exploration_noise=noise), seed=0)
        actor.load(learner.policy_weights())
        stochastic = actor.act(obs)
        deterministic = actor.act(obs, deterministic=True)
        for actions in (stochastic, deterministic):
            assert actions.dtype == np.float32
            assert actions.shape == (64, 1)
            assert np.all(np.isfinite(actions))
            assert np.all(actions >= -2.0) and np.all(actions <= 2.0)
        np.testing.assert_array_equal(deterministic, actor.act(obs, deterministic=True))
        assert not np.array_equal(stochastic, actor.act(obs)), "stochastic actions should vary between calls"
    assert np.any(np.abs(stochastic) == 2.0), "large noise is clipped to the bounds"


def test_actions_scale_to_asymmetric_bounds(spec):
    shifted = dataclasses.replace(spec, act_low=(0.5,), act_high=(3.5,))
    actor = TD3Actor(shifted, dataclasses.replace(CFG, exploration_noise=3.0), seed=0)
    actor.load(TD3Learner(shifted, CFG, seed=0).policy_weights())
    obs = np.random.default_rng(2).uniform(-1, 1, size=(256, 3)).astype(np.float32)
    for actions in (actor.act(obs), actor.act(obs, deterministic=True)):
        assert np.all(actions >= 0.5) and np.all(actions <= 3.5)


def test_exploration_noise_has_the_configured_scale(spec):
    """Half-range 2 and exploration_noise 0.1: Gaussian noise of std 0.2 around the deterministic action."""
    actor = TD3Actor(spec, dataclasses.replace(CFG, exploration_noise=0.1), seed=0)
    actor.load({k: np.zeros_like(v) for k, v in TD3Learner(spec, CFG, seed=0).policy_weights().items()})
    obs = np.zeros((20_000, 3), dtype=np.float32)
    np.testing.assert_array_equal(actor.act(obs, deterministic=True), 0.0)
    actions = actor.act(obs)
    assert abs(actions.mean()) < 0.01
    assert actions.std() == pytest.approx(0.2, rel=0.05)
    silent = TD3Actor(spec, dataclasses.replace(CFG, exploration_noise=0.0), seed=0)
    silent.load(dict(actor.weights))
    np.testing.assert_array_equal(silent.act(obs[:8]), silent.act(obs[:8], deterministic=True))


def test_actor_matches_learner_deterministic_policy(spec):
    learner = TD3Learner(spec, CFG, seed=0)
    actor = TD3Actor(spec, CFG, seed=0)
    actor.load(learner.policy_weights())
    obs = np.random.default_rng(1).uniform(-1, 1, size=(8, 3)).astype(np.float32)
    with torch.no_grad():
        expected = (learner.actor(torch.from_numpy(obs)) * 2.0).numpy()
    np.testing.assert_allclose(actor.act(obs, deterministic=True), expected, rtol=1e-6, atol=1e-6)


def test_actor_with_same_seed_is_reproducible(spec):
    weights = TD3Learner(spec, CFG, seed=0).policy_weights()
    obs = np.zeros((4, 3), dtype=np.float32)
    a, b = TD3Actor(spec, CFG, seed=5), TD3Actor(spec, CFG, seed=5)
    a.load(weights)
    b.load(weights)
    np.testing.assert_array_equal(a.act(obs), b.act(obs))


def test_loading_wrong_shaped_weights_raises_value_error(spec):
    actor = TD3Actor(spec, CFG, seed=0)
    weights = TD3Learner(spec, CFG, seed=0).policy_weights()
    name = next(iter(weights))
    bad = dict(weights, **{name: np.zeros((*weights[name].shape[:-1], weights[name].shape[-1] + 1), dtype=np.float32)})
    with pytest.raises(ValueError):
        actor.load(bad)


def test_loading_weights_of_another_network_or_algorithm_raises_value_error(spec):
    actor = TD3Actor(spec, CFG, seed=0)
    with pytest.raises(ValueError):
        actor.load(TD3Learner(spec, dataclasses.replace(CFG, hidden=(16,)), seed=0).policy_weights())
    weights = TD3Learner(spec, CFG, seed=0).policy_weights()
    weights.pop(next(iter(weights)))
    with pytest.raises(ValueError):
        actor.load(weights)
    sac = make_learner("sac", spec, ExperimentConfig(), seed=0).policy_weights()
    with pytest.raises(ValueError):
        actor.load(sac)


def test_check_spaces_refuses_discrete_actions_for_td3(spec):
    with pytest.raises(UserError, match="continuous"):
        check_spaces("td3", space_spec("CartPole-v1"), "CartPole-v1")
    check_spaces("td3", spec, "Pendulum-v1")


def test_registry_builds_td3(spec):
    cfg = ExperimentConfig(algorithm="td3", td3=CFG)
    assert isinstance(make_learner("td3", spec, cfg, seed=0), TD3Learner)
    assert isinstance(make_actor("td3", spec, cfg, seed=0), TD3Actor)


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"td3.hidden": ()}, "--td3.hidden"),
        ({"td3.batch_size": 0}, "--td3.batch-size"),
        ({"td3.policy_delay": 0}, "--td3.policy-delay"),
        ({"td3.actor_lr": 0.0}, "--td3.actor-lr"),
        ({"td3.critic_lr": float("nan")}, "--td3.critic-lr"),
        ({"td3.exploration_noise": -0.1}, "--td3.exploration-noise"),
        ({"td3.target_noise": -1.0}, "--td3.target-noise"),
        ({"td3.noise_clip": float("inf")}, "--td3.noise-clip"),
        ({"td3.tau": 0.0}, "--td3.tau"),
        ({"td3.gamma": 1.5}, "--td3.gamma"),
    ],
)
def test_validate_rejects_bad_td3_values(changes, fragment):
    with pytest.raises(ConfigError) as info:
        replace(ExperimentConfig(algorithm="td3"), **changes).validate()
    assert fragment in str(info.value)


def test_td3_config_travels_as_json():
    cfg = replace(get_preset("td3"), **{"td3.policy_delay": 3, "td3.exploration_noise": 0.3})
    assert ExperimentConfig.from_json(cfg.to_json()) == cfg


def test_td3_preset():
    assert "td3" in PRESETS
    small = get_preset("td3", "Pendulum-v1").validate()
    assert (small.algorithm, small.preset, small.env) == ("td3", "td3", "Pendulum-v1")
    assert small.td3.hidden == (64, 64)
    assert get_preset("td3") == small
    large = get_preset("td3", "HalfCheetah-v4").validate()
    assert large.td3.hidden == (256, 256) and large.steps > small.steps


class _Fixed(torch.nn.Module):
    """Stands in for a network with outputs chosen by hand (the learner only calls it)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_clipped_double_q_target_loss_and_priorities_by_hand(spec):
    learner = TD3Learner(spec, TD3Config(hidden=(8,), gamma=0.5, target_noise=0.0), seed=0)
    # target actor outputs 0.5 in [-1, 1] (1.0 in Pendulum units); target critics 3 and 2 + that action
    learner.actor_target = _Fixed(lambda obs: torch.full((len(obs), 1), 0.5))
    learner.critic_target = _Fixed(lambda obs, a: (torch.full((len(obs),), 3.0), 2.0 + a[:, 0]))
    seen = {}

    def critics(obs, action):
        seen["action"] = action.clone()
        return obs[:, 0] * 0 + torch.tensor([1.0, 0.0], requires_grad=True), torch.tensor(
            [2.0, 4.0], requires_grad=True
        )

    learner.critic.forward = critics
    learner.critic_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)
    batch = {
        "obs": torch.zeros(2, 3),
        "action": torch.tensor([[2.0], [-1.0]]),
        "reward": torch.tensor([1.0, 1.0]),
        "next_obs": torch.zeros(2, 3),
        "terminated": torch.tensor([0.0, 1.0]),
    }
    metrics = learner.update(dict(batch))
    # y = r + 0.5 (1 - d) min(3, 2.5) = [2.25, 1]; actions rescaled from [-2, 2] to [-1, 1]
    assert seen["action"][:, 0].tolist() == [1.0, -0.5]
    # critic loss: mean((1 - 2.25)^2, (0 - 1)^2) + mean((2 - 2.25)^2, (4 - 1)^2)
    assert metrics["critic_loss"] == pytest.approx((1.5625 + 1.0) / 2 + (0.0625 + 9.0) / 2)
    assert learner.td_errors.tolist() == pytest.approx([(1.25 + 0.25) / 2, (1.0 + 3.0) / 2])
    weighted = learner.update(dict(batch, weight=torch.tensor([1.0, 0.5])))
    assert weighted["critic_loss"] == pytest.approx((1.5625 + 0.0625 + 0.5 * (1.0 + 9.0)) / 2)
