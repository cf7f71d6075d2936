"""PPO: GAE over segments, the clipped surrogate on a hand-computed minibatch, observation statistics merged
across batches and shipped with the policy, the acting policy, and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drl.algorithms.common import ObsNorm
from drl.algorithms.ppo import PPOActor, PPOConfig, PPOLearner
from drl.algorithms.ppo.advantages import gae
from drl.envs import SpaceSpec, space_spec

CFG = PPOConfig(hidden=(16,), epochs=2, minibatches=2)


@pytest.fixture(scope="module")
def cartpole():
    return space_spec("CartPole-v1")


@pytest.fixture(scope="module")
def pendulum():
    return space_spec("Pendulum-v1")


def test_gae_by_hand():
    reward = np.array([1.0, 1.0, 1.0, 1.0])
    value = np.array([0.5, 0.4, 0.3, 0.2])
    next_value = np.array([0.4, 0.3, 9.0, 0.1])
    terminated = np.array([0.0, 0.0, 1.0, 0.0])
    cut = np.array([0.0, 0.0, 1.0, 1.0])
    adv = gae(reward, value, next_value, terminated, cut, gamma=0.5, lam=0.5)
    d = [1 + 0.5 * 0.4 - 0.5, 1 + 0.5 * 0.3 - 0.4, 1 - 0.3, 1 + 0.5 * 0.1 - 0.2]  # terminated: no V(s')
    expected = [d[0] + 0.25 * (d[1] + 0.25 * d[2]), d[1] + 0.25 * d[2], d[2], d[3]]
    assert adv.tolist() == pytest.approx(expected)


def segment(n: int, obs_value: float, truncated_at: int | None = None) -> dict[str, np.ndarray]:
    seg = {
        "obs": np.full((n, 4), obs_value, np.float32),
        "action": np.zeros(n, np.int64),
        "reward": np.ones(n, np.float32),
        "next_obs": np.full((n, 4), obs_value, np.float32),
        "terminated": np.zeros(n, np.uint8),
        "truncated": np.zeros(n, np.uint8),
    }
    if truncated_at is not None:
        seg["truncated"][truncated_at] = 1
    return seg


def test_segments_are_cut_at_their_ends_and_truncations(cartpole):
    learner = PPOLearner(cartpole, CFG, seed=0)
    data = learner.prepare([segment(3, 0.0, truncated_at=0), segment(2, 1.0)])
    with torch.no_grad():
        v0 = learner.value(torch.zeros(1, 4)).item()
        v1 = learner.value(torch.ones(1, 4)).item()
    g, lam = CFG.gamma, CFG.gae_lambda
    d0 = 1 + g * v0 - v0
    d1 = 1 + g * v1 - v1
    # segment 1: step 0 is truncated (cut, bootstrapped), steps 1-2 run to the segment's end
    expected = [d0, d0 + g * lam * d0, d0, d1 + g * lam * d1, d1]
    assert data["advantage"].tolist() == pytest.approx(expected, rel=1e-5)
    assert data["return"].tolist() == pytest.approx([a + v for a, v in zip(expected, [v0] * 3 + [v1] * 2)], rel=1e-5)


def test_clipped_surrogate_by_hand(cartpole):
    learner = PPOLearner(cartpole, PPOConfig(hidden=(16,), clip=0.2, vf_coef=0.0, ent_coef=0.0), seed=0)
    obs = torch.zeros(2, 4)
    action = torch.tensor([0, 1])
    with torch.no_grad():
        logp = learner.policy.log_prob(learner.policy.dist(obs), action)
    mb = {
        "obs": obs,
        "action": action,
        "old_logp": logp - np.log(1.5),
        "advantage": torch.tensor([1.0, -1.0]),
        "return": torch.zeros(2),
        "old_value": torch.zeros(2),
    }
    total, stats = learner.loss(mb)
    # ratio 1.5; standardised advantages +-1/sqrt(2) (std of [1, -1] is sqrt(2)):
    # A > 0: max(-A 1.5, -A 1.2) = -1.2 A; A < 0: max(-A 1.5, -A 1.2) = -1.5 A -> mean 0.15 / sqrt(2)
    a = 1 / np.sqrt(2)
    assert stats["policy_loss"].item() == pytest.approx((-1.2 * a + 1.5 * a) / 2, rel=1e-5)
    assert stats["clip_fraction"].item() == 1.0
    assert total.item() == pytest.approx(stats["policy_loss"].item(), rel=1e-6)


def test_value_loss_and_entropy_terms(cartpole):
    learner = PPOLearner(cartpole, PPOConfig(hidden=(16,), vf_coef=0.5, ent_coef=0.1), seed=0)
    obs = torch.randn(4, 4)
    action = torch.tensor([0, 1, 0, 1])
    with torch.no_grad():
        dist = learner.policy.dist(obs)
        logp = learner.policy.log_prob(dist, action)
        value = learner.value(obs)
    mb = {
        "obs": obs,
        "action": action,
        "old_logp": logp,
        "advantage": torch.tensor([1.0, 2.0, 3.0, 4.0]),
        "return": value + 2.0,
        "old_value": value,
    }
    total, stats = learner.loss(mb)
    assert stats["value_loss"].item() == pytest.approx(0.5 * 4.0, rel=1e-5)
    assert stats["policy_loss"].item() == pytest.approx(0.0, abs=1e-6)  # ratio 1, standardised advantages
    assert total.item() == pytest.approx(0.5 * 2.0 - 0.1 * dist.entropy().mean().item(), rel=1e-5)


def test_train_improves_the_surrogate_and_counts_steps(cartpole):
    learner = PPOLearner(cartpole, CFG, seed=0)
    rng = np.random.default_rng(0)
    seg = {
        "obs": rng.normal(size=(64, 4)).astype(np.float32),
        "action": rng.integers(0, 2, 64),
        "reward": rng.normal(size=64).astype(np.float32),
        "next_obs": rng.normal(size=(64, 4)).astype(np.float32),
        "terminated": np.zeros(64, np.uint8),
        "truncated": np.zeros(64, np.uint8),
    }
    before = learner.policy_weights()
    metrics = learner.train([seg], progress=0.5)
    assert learner.updates == CFG.epochs * CFG.minibatches
    assert metrics["lr"] == pytest.approx(CFG.lr * 0.5)
    assert all(np.isfinite(v) for v in metrics.values())
    assert any(not np.array_equal(before[k], v) for k, v in learner.policy_weights().items())


def test_obs_norm_merges_batches_like_one(pendulum):
    rng = np.random.default_rng(0)
    a, b = rng.normal(3, 2, size=(100, 3)), rng.normal(-1, 0.5, size=(37, 3))
    norm = ObsNorm(3)
    norm.update(torch.from_numpy(a))
    norm.update(torch.from_numpy(b))
    both = np.concatenate([a, b])
    np.testing.assert_allclose(norm.mean.numpy(), both.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), both.var(0), rtol=1e-10)
    assert norm.count.item() == 137
    x = torch.tensor([[3.0, 3.0, 3.0]])
    expected = (3.0 - both.mean(0)) / np.sqrt(both.var(0) + 1e-8)
    np.testing.assert_allclose(norm(x).numpy()[0], expected, rtol=1e-5)
    assert ObsNorm(3, enabled=False)(x).tolist() == x.tolist()


def test_statistics_travel_with_the_policy(pendulum):
    cfg = PPOConfig(hidden=(16,), normalize_obs=True, epochs=1, minibatches=1)
    learner = PPOLearner(pendulum, cfg, seed=0)
    rng = np.random.default_rng(1)
    obs = rng.normal(5, 3, size=(50, 3)).astype(np.float32)
    seg = {
        "obs": obs,
        "action": rng.normal(size=(50, 1)).astype(np.float32),
        "reward": np.ones(50, np.float32),
        "next_obs": obs,
        "terminated": np.zeros(50, np.uint8),
        "truncated": np.zeros(50, np.uint8),
    }
    learner.train([seg])
    weights = learner.policy_weights()
    np.testing.assert_allclose(weights["norm.mean"], obs.astype(np.float64).mean(0), rtol=1e-6)
    assert weights["norm.count"] == 50
    actor = PPOActor(pendulum, cfg, seed=0)
    actor.load(weights)
    x = torch.from_numpy(obs[:4])
    with torch.no_grad():
        expected = np.clip(learner.policy.body(learner.policy.norm(x)).numpy(), -2, 2)
    np.testing.assert_allclose(actor.act(obs[:4], deterministic=True), expected, rtol=1e-6)


def test_actor_samples_unclipped_and_evaluates_within_bounds(pendulum, cartpole):
    cfg = PPOConfig(hidden=(16,), init_log_std=1.5)
    actor = PPOActor(pendulum, cfg, seed=0)
    sampled = actor.act(np.zeros((500, 3), np.float32))
    assert sampled.shape == (500, 1) and np.abs(sampled).max() > 2.0
    assert np.abs(actor.act(np.full((5, 3), 100.0, np.float32), deterministic=True)).max() <= 2.0
    discrete = PPOActor(cartpole, cfg, seed=0).act(np.zeros((100, 4), np.float32))
    assert discrete.dtype == np.int64 and set(discrete.tolist()) == {0, 1}


def test_checkpoint_round_trip(cartpole):
    a = PPOLearner(cartpole, CFG, seed=0)
    seg = segment(16, 0.3)
    a.train([seg])
    tensors, meta = a.state()
    b = PPOLearner(cartpole, CFG, seed=5)
    b.load_state(tensors, meta)
    assert (b.updates, b.iterations) == (a.updates, a.iterations)
    a.train([seg])
    b.train([seg])
    for name, value in a.policy_weights().items():
        np.testing.assert_allclose(value, b.policy_weights()[name], rtol=1e-6)
    with pytest.raises(ValueError, match="does not fit"):
        PPOLearner(cartpole, PPOConfig(hidden=(32,)), seed=0).load_state(tensors, meta)


def _per_parameter_reference(learner: PPOLearner) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Adam]:
    """Copies of the learner's networks with their own parameters and the per-parameter Adam PPO had before
    its parameters shared one flat tensor."""
    import copy

    policy, value = copy.deepcopy(learner.policy), copy.deepcopy(learner.value)
    for module in (policy, value):
        for p in module.parameters():
            p.data = p.data.clone()
    return policy, value, torch.optim.Adam([*policy.parameters(), *value.parameters()], lr=learner.cfg.lr, eps=1e-5)


def test_flat_parameters_train_as_separate_ones(cartpole):
    """One flat parameter with its gradient tied to the networks' (one Adam, one clipping operation) makes the
    same steps as per-parameter Adam on the same minibatches."""
    a = PPOLearner(cartpole, CFG, seed=0)
    policy, value, opt = _per_parameter_reference(a)
    seg = segment(16, 0.3)
    data = a.prepare([seg])
    mb = {k: v for k, v in data.items() if k not in a.WHOLE}
    for _ in range(3):
        total, _ = a.loss(mb)
        a.flat.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_([a.flat.param], a.cfg.max_grad_norm)
        a.opt.step()
        ref = PPOLearner.__new__(PPOLearner)
        ref.cfg, ref.policy, ref.value, ref.image = a.cfg, policy, value, a.image
        total, _ = PPOLearner.loss(ref, mb)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_([*policy.parameters(), *value.parameters()], a.cfg.max_grad_norm)
        opt.step()
    assert float(a.flat.param.grad.abs().sum()) > 0
    for mine, theirs in zip(
        [*a.policy.parameters(), *a.value.parameters()], [*policy.parameters(), *value.parameters()]
    ):
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_with_per_parameter_optimizer_state_resumes(cartpole):
    """A checkpoint written when each parameter had its own Adam state resumes with those moments, flattened."""
    a = PPOLearner(cartpole, CFG, seed=0)
    policy, value, opt = _per_parameter_reference(a)
    loss = sum(p.square().sum() for p in [*policy.parameters(), *value.parameters()])
    loss.backward()
    opt.step()
    from drl.algorithms.common import training_state

    tensors, optimizers = training_state({"policy": policy, "value": value}, {"opt": opt})
    assert len(optimizers["opt"]["indices"]) > 1
    meta = {"updates": 1, "iterations": 1, "optimizers": optimizers, "rng": a.rng.bit_generator.state}
    b = PPOLearner(cartpole, CFG, seed=5)
    b.load_state(tensors, meta)
    moments = torch.cat([opt.state[p]["exp_avg"].reshape(-1) for p in [*policy.parameters(), *value.parameters()]])
    np.testing.assert_allclose(b.opt.state[b.flat.param]["exp_avg"].numpy(), moments.numpy())
    np.testing.assert_allclose(
        b.flat.param.detach().numpy(),
        torch.cat([p.detach().reshape(-1) for p in [*policy.parameters(), *value.parameters()]]).numpy(),
    )
    b.train([segment(16, 0.3)])
    assert b.updates > 1


def test_actor_matches_the_learners_policy_and_samples_its_distribution(cartpole, pendulum):
    for spec in (cartpole, pendulum):
        cfg = PPOConfig(hidden=(16,), normalize_obs=True, init_log_std=-0.5)
        learner = PPOLearner(spec, cfg, seed=2)
        obs_dim = spec.obs_shape[0]
        learner.policy.norm.update(torch.randn(100, obs_dim, dtype=torch.float64) * 3 + 1)
        actor = PPOActor(spec, cfg, seed=0)
        actor.load(learner.policy_weights())
        obs = np.random.default_rng(0).normal(size=(4000, obs_dim)).astype(np.float32) * 3 + 1
        with torch.no_grad():
            out = learner.policy.body(learner.policy.norm(torch.from_numpy(obs))).numpy()
        if spec.discrete_actions:
            assert (actor.act(obs, deterministic=True) == out.argmax(1)).all()
            probs = torch.softmax(torch.from_numpy(out), 1).numpy()
            sampled = actor.act(np.repeat(obs[:1], 20_000, 0))
            assert (sampled == 1).mean() == pytest.approx(probs[0, 1], abs=0.015)
        else:
            np.testing.assert_allclose(actor.act(obs, deterministic=True), np.clip(out, -2, 2), rtol=1e-5, atol=1e-5)
            noise = actor.act(np.repeat(obs[:1], 20_000, 0))[:, 0] - out[0, 0]
            assert noise.std() == pytest.approx(np.exp(-0.5), rel=0.03)


def test_acting_processes_do_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, services.rollout.worker, services.evaluator.evaluator\n"
        "from drl.algorithms import make_actor\nfrom drl.config import ExperimentConfig\n"
        "from drl.envs import space_spec\n"
        "for a, e in (('sac', 'Pendulum-v1'), ('td3', 'Pendulum-v1'), ('ppo', 'CartPole-v1'), "
        "('dqn', 'CartPole-v1')):\n    make_actor(a, space_spec(e), ExperimentConfig(), 0)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


MINATAR = SpaceSpec((10, 10, 4), "|u1", (), "<i8", 3, frame_stack=1)
ATARI = SpaceSpec((4, 84, 84), "|u1", (), "<i8", 4, frame_stack=4)
IMAGE_CFG = PPOConfig(epochs=2, minibatches=4, lr=1e-3)


def image_segment(spec: SpaceSpec, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 2, (n + 1, *spec.obs_shape), dtype=np.uint8) * 255
    action = (
        rng.integers(0, spec.discrete_actions, n)
        if spec.discrete_actions
        else rng.normal(size=(n, *spec.act_shape)).astype(np.float32)
    )
    return {
        "obs": obs[:-1],
        "action": action,
        "next_obs": obs[1:],
        "reward": rng.normal(size=n).astype(np.float32),
        "terminated": (rng.random(n) < 0.05).astype(np.uint8),
        "truncated": np.zeros(n, np.uint8),
    }


@pytest.mark.parametrize("spec", [MINATAR, ATARI], ids=["minatar", "atari"])
def test_image_train_on_uint8_segments_and_the_actor_acts_with_its_policy(spec):
    learner = PPOLearner(spec, IMAGE_CFG, seed=0)
    segments = [image_segment(spec, 16, seed) for seed in range(2)]
    kept = [s["obs"].copy() for s in segments]
    before = learner.policy_weights()
    metrics = learner.train(segments, progress=0.25)
    assert all(np.array_equal(s["obs"], k) and s["obs"].dtype == np.uint8 for s, k in zip(segments, kept))
    assert learner.updates == IMAGE_CFG.epochs * IMAGE_CFG.minibatches
    assert all(np.isfinite(v) for v in metrics.values()) and metrics["lr"] == pytest.approx(IMAGE_CFG.lr * 0.75)
    weights = learner.policy_weights()
    assert {name.split(".")[0] for name in weights} == {"encoder", "head"}  # no observation statistics
    assert not np.array_equal(before["encoder.convs.0.weight"], weights["encoder.convs.0.weight"])

    actor = PPOActor(spec, IMAGE_CFG, seed=0)
    actor.load(weights)
    seg = image_segment(spec, 32, seed=7)
    action = torch.from_numpy(seg["action"])
    with torch.no_grad():
        dist = learner.policy.dist(torch.from_numpy(seg["obs"]))
        expected = learner.policy.log_prob(dist, action).numpy()
    logits = actor.outputs(seg["obs"])
    logp = torch.log_softmax(torch.from_numpy(logits), 1).numpy()[np.arange(32), seg["action"]]
    np.testing.assert_allclose(logp, expected, rtol=1e-5, atol=1e-5)
    assert (actor.act(seg["obs"], deterministic=True) == logits.argmax(1)).all()
    sampled = actor.act(seg["obs"])
    assert sampled.dtype == np.int64 and sampled.shape == (32,)


def test_image_rollout_is_evaluated_in_chunks_like_whole():
    from drl.algorithms.ppo.learner import CPU_EVAL_CHUNK, EVAL_CHUNK

    learner = PPOLearner(MINATAR, IMAGE_CFG, seed=0)
    assert learner.eval_chunk == CPU_EVAL_CHUNK < EVAL_CHUNK  # a GPU takes the larger passes
    segments = [image_segment(MINATAR, 20, seed) for seed in range(3)]
    whole = learner.prepare(segments)
    learner.eval_chunk = 7
    chunked = learner.prepare(segments)
    for key in ("old_logp", "advantage", "return"):
        torch.testing.assert_close(chunked[key], whole[key], rtol=1e-5, atol=1e-6)


def test_continuous_image_policy_acts_within_bounds():
    spec = SpaceSpec((10, 10, 3), "|u1", (2,), "<f4", 0, (-1.0, -1.0), (1.0, 1.0), frame_stack=1)
    cfg = PPOConfig(init_log_std=0.5, epochs=1, minibatches=1)
    learner = PPOLearner(spec, cfg, seed=0)
    actor = PPOActor(spec, cfg, seed=0)
    actor.load(learner.policy_weights())
    obs = image_segment(spec, 2000)["obs"]
    with torch.no_grad():
        mean = learner.policy(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(actor.act(obs, deterministic=True), np.clip(mean, -1, 1), rtol=1e-5, atol=1e-6)
    noise = actor.act(np.repeat(obs[:1], 20_000, 0)) - mean[:1]
    assert noise.std() == pytest.approx(np.exp(0.5), rel=0.03)


@pytest.mark.parametrize("spec, encoder", [(MINATAR, "auto"), (ATARI, "nature"), (ATARI, "impala")])
def test_builder_counts_the_image_networks_parameters(spec, encoder):
    from drl.algorithms import get
    from drl.config import ExperimentConfig, replace

    cfg = replace(ExperimentConfig(), algorithm="ppo", **{"ppo.encoder": encoder})
    counts = get("ppo").parameters(spec, cfg)
    learner = PPOLearner(spec, cfg.ppo, seed=0)
    policy = sum(p.numel() for p in learner.policy.parameters())
    assert (counts.acting, counts.frozen) == (policy, 0)
    assert counts.trained == policy + sum(p.numel() for p in learner.value.parameters())


def test_image_checkpoint_round_trip():
    a = PPOLearner(MINATAR, IMAGE_CFG, seed=0)
    a.train([image_segment(MINATAR, 16)])
    tensors, meta = a.state()
    b = PPOLearner(MINATAR, IMAGE_CFG, seed=4)
    b.load_state(tensors, meta)
    seg = image_segment(MINATAR, 16, seed=3)
    a.train([seg])
    b.train([seg])
    for name, value in a.policy_weights().items():
        np.testing.assert_array_equal(value, b.policy_weights()[name])


def test_bfloat16_updates_run_under_autocast_and_stay_close_to_float32(monkeypatch):
    """``--ppo.precision bfloat16`` (and APPO's) runs the update's passes under autocast: the weights stay float32,
    the first update moves them as float32's does to bfloat16's rounding, and the convolutions see bfloat16."""
    import dataclasses

    seen: list[torch.dtype] = []
    conv = torch.nn.Conv2d.forward

    def watch(self, x):
        out = conv(self, x)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.Conv2d, "forward", watch)
    cfg = dataclasses.replace(IMAGE_CFG, epochs=1, minibatches=1)
    learners = {p: PPOLearner(MINATAR, dataclasses.replace(cfg, precision=p), seed=0) for p in ("float32", "bfloat16")}
    segments = [image_segment(MINATAR, 32, seed) for seed in range(2)]
    moved = {}
    for precision, learner in learners.items():
        before = learner.policy_weights()
        seen.clear()
        metrics = learner.train(segments)
        assert all(np.isfinite(v) for v in metrics.values())
        assert (torch.bfloat16 in seen) == (precision == "bfloat16")
        after = learner.policy_weights()
        assert after["head.weight"].dtype == np.float32
        moved[precision] = after["encoder.convs.0.weight"] - before["encoder.convs.0.weight"]
    cosine = float((moved["float32"] * moved["bfloat16"]).sum()) / (
        float(np.linalg.norm(moved["float32"])) * float(np.linalg.norm(moved["bfloat16"]))
    )
    assert cosine > 0.9, cosine


def _next_values_everywhere(learner: PPOLearner, segments) -> np.ndarray:
    """GAE with the network run on every row's next observation: how advantages were computed before the next
    row's value stood in where the next observation is that row's."""
    cat = {k: np.concatenate([s[k] for s in segments]) for k in segments[0]}
    with torch.no_grad():
        value = learner.value(learner.policy.trunk(learner.obs_norm(torch.as_tensor(cat["obs"])))).numpy()
        nxt = learner.value(learner.policy.trunk(learner.obs_norm(torch.as_tensor(cat["next_obs"])))).numpy()
    ends = np.concatenate([np.arange(len(s["reward"])) == len(s["reward"]) - 1 for s in segments])
    cut = ends | (cat["terminated"] == 1) | (cat["truncated"] == 1)
    return gae(
        cat["reward"].astype(np.float64),
        value.astype(np.float64),
        nxt.astype(np.float64),
        cat["terminated"].astype(np.float64),
        cut.astype(np.float64),
        CFG.gamma,
        CFG.gae_lambda,
    )


def test_next_values_come_from_the_next_row_only_where_it_holds_the_next_observation(cartpole, monkeypatch):
    """Consecutive steps share an observation (s'_t = s_{t+1}); an episode's end, a truncation and a rollout
    joined across a missing entry do not, and there the network runs on s'_t: the advantages are those of a
    pass over every next observation, and the pass covers only the rows that need it."""
    import drl.algorithms.ppo.learner as module

    rng = np.random.default_rng(5)
    states = rng.standard_normal((40, 4)).astype(np.float32)
    steps = np.r_[0:12, 13:20]  # step 12 missing: the rollout was joined across a lost entry
    seg = {
        "obs": states[steps],
        "next_obs": states[steps + 1].copy(),
        "action": rng.integers(0, 2, len(steps)).astype(np.int64),
        "reward": rng.standard_normal(len(steps)).astype(np.float32),
        "terminated": np.zeros(len(steps), np.uint8),
        "truncated": np.zeros(len(steps), np.uint8),
    }
    seg["next_obs"][4] = states[30]  # a truncation: the final observation, not the next episode's first
    seg["truncated"][4] = 1
    seg["terminated"][8] = 1
    seg["next_obs"][8] = states[31]
    other = {k: v[:5].copy() for k, v in seg.items()}
    other["obs"], other["next_obs"] = states[25:30], states[26:31]
    learner = PPOLearner(cartpole, CFG, seed=0)
    learner.obs_norm.update(torch.as_tensor(states))
    same = module.next_is_next_row(
        np.concatenate([seg["obs"], other["obs"]]), np.concatenate([seg["next_obs"], other["next_obs"]])
    )
    assert np.flatnonzero(~same).tolist() == [4, 8, 11, 18, 23]  # truncated, terminated, the gap, two ends
    passes = []
    trunk = learner.policy.trunk
    monkeypatch.setattr(learner.policy, "trunk", lambda x: passes.append(len(x)) or trunk(x))
    data = learner.prepare([seg, other])
    assert passes == [24, 4]  # every row once, then the four next observations no row holds (not the terminated)
    monkeypatch.undo()
    expected = _next_values_everywhere(learner, [seg, other])
    assert data["advantage"].numpy() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_next_is_next_row_compares_whole_images_byte_for_byte():
    from drl.algorithms.ppo.learner import next_is_next_row

    frames = np.random.default_rng(0).integers(0, 255, (6, 4, 84, 84), dtype=np.uint8)
    obs, nxt = frames[:5], frames[1:].copy()
    nxt[2, 3, 83, 83] ^= 1  # one pixel of one frame differs
    assert next_is_next_row(obs, nxt).tolist() == [True, True, False, True, False]
