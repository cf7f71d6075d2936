"""The SAC learner's hand-written update against a plain autograd SAC update written here.

Both start from the same weights and draw the same sampling noise (torch's global RNG seeded alike before each
update), so after any number of updates their parameters, optimiser moments, metrics and TD errors must agree up to
rounding: float32 to ~1e-5 relative, float64 much closer, which shows the two compute the same function rather than
merely similar ones.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from drl.algorithms.common import mlp
from drl.algorithms.sac import SACActor, SACConfig, SACLearner
from drl.envs import space_spec

SPEC = space_spec("Pendulum-v1")


class Reference:
    """SAC as the autograd formulation: separate critic MLPs, per-parameter Adam for actor, critics and temperature."""

    def __init__(self, learner: SACLearner):
        cfg = self.cfg = learner.cfg
        self.actor = copy.deepcopy(learner.actor)
        self.q = [self._critic(learner.critic, k) for k in range(2)]
        self.q_target = [self._critic(learner.critic_target, k).requires_grad_(False) for k in range(2)]
        self.log_alpha = learner.log_alpha.detach().clone().requires_grad_(True)
        self.target_entropy = learner.target_entropy
        self.center, self.half = learner.center, learner.half
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.critic_opt = torch.optim.Adam([p for q in self.q for p in q.parameters()], lr=cfg.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr)

    @staticmethod
    def _critic(critic, k: int) -> nn.Sequential:
        sizes = [critic.weights[0].shape[1], *(w.shape[2] for w in critic.weights)]
        net = mlp(sizes).to(critic.weights[0].device)
        with torch.no_grad():
            for layer, w, b in zip((m for m in net if isinstance(m, nn.Linear)), critic.weights, critic.biases):
                layer.weight.copy_(w[k].t())
                layer.bias.copy_(b[k, 0])
        return net

    def critics(self, nets, obs, action):
        x = torch.cat([obs, action], -1)
        return nets[0](x).squeeze(-1), nets[1](x).squeeze(-1)

    def update(self, batch):
        obs, next_obs = batch["obs"].flatten(1), batch["next_obs"].flatten(1)
        action = ((batch["action"] - self.center) / self.half).flatten(1).clamp(-1.0, 1.0)
        reward, done = batch["reward"], batch["terminated"]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_logp = self.actor.sample(next_obs)
            q1_t, q2_t = self.critics(self.q_target, next_obs, next_action)
            y = reward + self.cfg.gamma * (1.0 - done) * (torch.min(q1_t, q2_t) - alpha * next_logp)
        q1, q2 = self.critics(self.q, obs, action)
        if "weight" in batch:
            w = batch["weight"]
            critic_loss = (w * (q1 - y) ** 2).mean() + (w * (q2 - y) ** 2).mean()
        else:
            critic_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y)
        td_errors = (0.5 * ((q1 - y).abs() + (q2 - y).abs())).detach().cpu().numpy()
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()

        for q in self.q:
            q.requires_grad_(False)
        new_action, logp = self.actor.sample(obs)
        q1_pi, q2_pi = self.critics(self.q, obs, new_action)
        actor_loss = (alpha * logp - torch.min(q1_pi, q2_pi)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        for q in self.q:
            q.requires_grad_(True)

        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()

        with torch.no_grad():
            for net, target in zip(self.q, self.q_target):
                for p, tp in zip(net.parameters(), target.parameters()):
                    tp.lerp_(p, self.cfg.tau)
        metrics = {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "alpha": float(alpha),
            "entropy": -logp.mean().item(),
        }
        return metrics, td_errors

    def tensors(self) -> dict[str, torch.Tensor]:
        """Parameters and Adam moments, named and shaped as the learner's (see ``learner_tensors``)."""
        out = {f"actor.{k}": v for k, v in self.actor.state_dict().items()}
        for name, nets in (("critic", self.q), ("critic_target", self.q_target)):
            layers = [[m for m in net if isinstance(m, nn.Linear)] for net in nets]
            for i, pair in enumerate(zip(*layers)):
                out[f"{name}.weights.{i}"] = torch.stack([m.weight.detach().t() for m in pair])
                out[f"{name}.biases.{i}"] = torch.stack([m.bias.detach() for m in pair]).unsqueeze(1)
        out["log_alpha"] = self.log_alpha.detach()
        for slot in ("exp_avg", "exp_avg_sq"):
            for key, p in self.actor.named_parameters():
                out[f"actor_opt.{key}.{slot}"] = self.actor_opt.state[p][slot]
            out[f"alpha_opt.{slot}"] = self.alpha_opt.state[self.log_alpha][slot].reshape(())
            layers = [[m for m in net if isinstance(m, nn.Linear)] for net in self.q]
            for i, pair in enumerate(zip(*layers)):
                st = self.critic_opt.state
                out[f"critic_opt.weights.{i}.{slot}"] = torch.stack([st[m.weight][slot].t() for m in pair])
                out[f"critic_opt.biases.{i}.{slot}"] = torch.stack([st[m.bias][slot] for m in pair]).unsqueeze(1)
        return out


def learner_tensors(learner: SACLearner) -> dict[str, torch.Tensor]:
    """The learner's parameters and Adam moments under the reference's names (its flat moments split the way its
    flat parameters are)."""
    out = {f"actor.{k}": v for k, v in learner.actor.state_dict().items()}
    out.update({f"critic.{k}": v for k, v in learner.critic.state_dict().items()})
    out.update({f"critic_target.{k}": v for k, v in learner.critic_target.state_dict().items()})
    out["log_alpha"] = learner.log_alpha.detach()
    for prefix, opt, flat, module in (
        ("actor_opt", learner.actor_opt, learner._actor_flat, learner.actor),
        ("critic_opt", learner.critic_opt, learner._critic_flat, learner.critic),
    ):
        for slot in ("exp_avg", "exp_avg_sq"):
            moment = opt.state[flat.param][slot]
            for key, p in module.named_parameters():
                offset = flat.offsets[id(p)]
                out[f"{prefix}.{key}.{slot}"] = moment[offset : offset + p.numel()].view_as(p)
            if prefix == "actor_opt":
                out[f"alpha_opt.{slot}"] = moment[flat.offsets[id(learner.log_alpha)]]
    return out


def batch(
    n: int, seed: int, weighted: bool = False, dtype=torch.float32, device: str = "cpu"
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {
        "obs": torch.rand(n, 3, generator=g) * 2 - 1,
        "action": torch.rand(n, 1, generator=g) * 4.4 - 2.2,  # some outside [-2, 2]: the clamp is exercised
        "reward": torch.randn(n, generator=g) * 3,
        "next_obs": torch.rand(n, 3, generator=g) * 2 - 1,
        "terminated": (torch.rand(n, generator=g) < 0.2).float(),
    }
    if weighted:
        out["weight"] = torch.rand(n, generator=g) * 0.9 + 0.1
    return {k: v.to(dtype=dtype, device=device) for k, v in out.items()}


def run_both(cfg: SACConfig, updates: int, n: int, weighted: bool, dtype=torch.float32, device: str = "cpu"):
    """``updates`` updates of a fresh learner and of the reference copied from it, with the same noise (drawn on
    ``device``, where both run)."""
    learner = SACLearner(SPEC, cfg, seed=7, device=device)
    reference = Reference(learner)
    history = []
    for i in range(updates):
        b = batch(n, seed=i, weighted=weighted, dtype=dtype, device=device)
        torch.manual_seed(1000 + i)
        metrics = learner.update(b)
        td = learner.td_errors
        torch.manual_seed(1000 + i)
        ref_metrics, ref_td = reference.update(b)
        history.append((metrics, ref_metrics, td, ref_td))
    return learner, reference, history


def assert_same(learner, reference, history, rtol: float, atol: float):
    ours, theirs = learner_tensors(learner), reference.tensors()
    assert set(ours) == set(theirs)
    for key in sorted(theirs):
        torch.testing.assert_close(ours[key], theirs[key], rtol=rtol, atol=atol, msg=lambda m, key=key: f"{key}: {m}")
    for metrics, ref_metrics, td, ref_td in history:
        assert set(metrics) == {"critic_loss", "actor_loss", "alpha", "entropy"}
        for k in ref_metrics:
            assert metrics[k] == pytest.approx(ref_metrics[k], rel=rtol, abs=atol), k
        assert td.dtype == np.float32 and td.shape == ref_td.shape
        np.testing.assert_allclose(td, ref_td.astype(np.float32), rtol=rtol, atol=atol)


@pytest.fixture
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "weighted"])
@pytest.mark.parametrize("updates", [1, 8])
def test_update_matches_autograd_reference_float32(weighted, updates):
    cfg = SACConfig(hidden=(64, 64), batch_size=64, lr=1e-3)
    learner, reference, history = run_both(cfg, updates, 64, weighted)
    assert_same(learner, reference, history, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "weighted"])
@pytest.mark.parametrize("hidden", [(32, 32), (16,), (24, 16, 8)], ids=str)
def test_update_matches_autograd_reference_float64(float64, weighted, hidden):
    """In float64 rounding is negligible: any difference in the math itself would show far above 1e-10."""
    cfg = SACConfig(hidden=hidden, batch_size=40, lr=1e-3, init_alpha=0.3, target_entropy=-0.5)
    learner, reference, history = run_both(cfg, 6, 40, weighted, dtype=torch.float64)
    assert_same(learner, reference, history, rtol=1e-10, atol=1e-12)


def test_weights_change_the_critic_loss_and_td_errors_are_per_transition():
    cfg = SACConfig(hidden=(32, 32), batch_size=32)
    b = batch(32, seed=0)
    losses = []
    for weight in (None, torch.full((32,), 0.5)):
        learner = SACLearner(SPEC, cfg, seed=0)
        torch.manual_seed(0)
        losses.append(learner.update(b if weight is None else dict(b, weight=weight))["critic_loss"])
        assert learner.td_errors.dtype == np.float32 and learner.td_errors.shape == (32,)
        assert np.all(learner.td_errors >= 0) and np.all(np.isfinite(learner.td_errors))
    assert losses[1] == pytest.approx(0.5 * losses[0], rel=1e-6)


def test_critic_module_forward_matches_the_update_critics():
    """``TwinCritic.forward`` (autograd form, used outside the update) is the reference's two separate MLPs."""
    learner = SACLearner(SPEC, SACConfig(hidden=(32, 32), batch_size=32), seed=0)
    reference = Reference(learner)
    b = batch(32, seed=1)
    action = (b["action"] / 2).clamp(-1, 1)
    with torch.no_grad():
        for ours, theirs in zip(learner.critic(b["obs"], action), reference.critics(reference.q, b["obs"], action)):
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_state_round_trip_continues_identically():
    """A learner restored from ``state`` (into fresh flat buffers) makes the same next updates as the original."""
    cfg = SACConfig(hidden=(32, 32), batch_size=32, lr=1e-3)
    original = SACLearner(SPEC, cfg, seed=0)
    for i in range(3):
        original.update(batch(32, seed=i, weighted=True))
    tensors, meta = original.state()
    restored = SACLearner(SPEC, cfg, seed=1)
    restored.load_state(tensors, meta)
    assert restored.updates == 3
    for i in range(3, 6):
        b = batch(32, seed=i, weighted=True)
        torch.manual_seed(i)
        m1 = original.update(b)
        torch.manual_seed(i)
        m2 = restored.update(b)
        assert m1 == m2
        np.testing.assert_array_equal(original.td_errors, restored.td_errors)
    ta, _ = original.state()
    tb, _ = restored.state()
    assert set(ta) == set(tb)
    for k in ta:
        np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)


def test_load_state_of_other_networks_raises_value_error():
    tensors, meta = SACLearner(SPEC, SACConfig(hidden=(16,), batch_size=32), seed=0).state()
    with pytest.raises(ValueError):
        SACLearner(SPEC, SACConfig(hidden=(32, 32), batch_size=32), seed=0).load_state(tensors, meta)


def test_published_weights_load_into_the_actor_after_updates():
    cfg = SACConfig(hidden=(32, 32), batch_size=32)
    learner = SACLearner(SPEC, cfg, seed=0)
    names = set(SACLearner(SPEC, cfg, seed=0).policy_weights())
    for i in range(3):
        learner.update(batch(32, seed=i))
    weights = learner.policy_weights()
    assert set(weights) == names
    actor = SACActor(SPEC, cfg, seed=0)
    actor.load(weights)
    obs = np.zeros((2, 3), dtype=np.float32)
    with torch.no_grad():
        expected = (learner.actor.deterministic(torch.from_numpy(obs)) * 2.0).numpy()
    np.testing.assert_allclose(actor.act(obs, deterministic=True), expected, rtol=1e-6, atol=1e-6)
