"""APPO / IMPALA: V-trace against a hand-computed example and against its on-policy limits (n-step returns, GAE),
bootstrapping at truncations and segment ends but not at terminations, the clipped surrogate's gradient, the
behaviour log-probabilities the actor records, the queue's order, batches and policy-lag accounting, and the
builder's refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drl import frames
from drl.algorithms.appo import APPOActor, APPOConfig, APPOLearner
from drl.algorithms.appo.vtrace import vtrace
from drl.algorithms.ppo.advantages import gae
from drl.config import ExperimentConfig, replace
from drl.envs import VecEnv, space_spec
from drl.errors import ConfigError
from drl.training.learning import LAG_BUCKETS, LagHistogram, QueueLearning


@pytest.fixture(scope="module")
def cartpole():
    return space_spec("CartPole-v1")


@pytest.fixture(scope="module")
def pendulum():
    return space_spec("Pendulum-v1")


def col(*values) -> np.ndarray:
    return np.array(values, dtype=np.float64).reshape(-1, 1)


def test_vtrace_by_hand():
    """Three steps of one segment, gamma 0.5, rho-bar 1, c-bar 1, lambda 1; ratios 2, 0.5, 1 (log-ratios)."""
    ratio = col(2.0, 0.5, 1.0)
    reward, value, next_value = col(1.0, 2.0, 3.0), col(0.5, 1.0, 1.5), col(1.0, 1.5, 4.0)
    zeros, cut = col(0, 0, 0), col(0, 0, 1)
    out = vtrace(np.log(ratio), reward, value, next_value, zeros, cut, gamma=0.5)
    rho = [1.0, 0.5, 1.0]  # min(1, ratio)
    c = [1.0, 0.5, 1.0]
    delta = [rho[0] * (1 + 0.5 * 1.0 - 0.5), rho[1] * (2 + 0.5 * 1.5 - 1.0), rho[2] * (3 + 0.5 * 4.0 - 1.5)]
    v2 = 1.5 + delta[2]
    v1 = 1.0 + delta[1] + 0.5 * c[1] * (v2 - 1.5)
    v0 = 0.5 + delta[0] + 0.5 * c[0] * (v1 - 1.0)
    assert out.targets[:, 0].tolist() == pytest.approx([v0, v1, v2])
    adv = [rho[0] * (1 + 0.5 * v1 - 0.5), rho[1] * (2 + 0.5 * v2 - 1.0), rho[2] * (3 + 0.5 * 4.0 - 1.5)]
    assert out.advantages[:, 0].tolist() == pytest.approx(adv)
    assert out.rho[:, 0].tolist() == pytest.approx(rho)


def test_vtrace_truncates_rho_and_c_separately():
    ratio = col(3.0, 3.0)
    out = vtrace(
        np.log(ratio), col(1, 1), col(0, 0), col(0, 0), col(0, 0), col(0, 1), gamma=1.0, rho_bar=2.0, c_bar=0.5
    )
    # delta = rho * r = 2; v_1 = 2; v_0 = 2 + 1 * c(=0.5) * 2
    assert out.targets[:, 0].tolist() == pytest.approx([3.0, 2.0])
    assert out.rho[:, 0].tolist() == pytest.approx([2.0, 2.0])


def _episode_data(rng, T: int, B: int):
    reward = rng.standard_normal((T, B))
    value = rng.standard_normal((T, B))
    next_value = np.concatenate([value[1:], rng.standard_normal((1, B))])
    terminated = (rng.random((T, B)) < 0.1).astype(np.float64)
    truncated = (rng.random((T, B)) < 0.1) * (1 - terminated)
    cut = np.maximum(terminated, truncated)
    cut[-1] = 1.0
    boundary = cut[:-1] > 0  # after a cut the next step starts anew: its next_value is its own
    next_value[:-1][boundary] = rng.standard_normal(boundary.sum())
    return reward, value, next_value, terminated, cut


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.8])
def test_on_policy_vtrace_is_gae_returns(lam):
    """pi = mu: V-trace's targets are GAE(lambda) returns (lambda 1: bootstrapped n-step returns) and its
    advantages are r + gamma v_{s+1} - V, on the same cuts, terminations and truncations."""
    rng = np.random.default_rng(3)
    T, B, gamma = 12, 5, 0.9
    reward, value, next_value, terminated, cut = _episode_data(rng, T, B)
    out = vtrace(np.zeros((T, B)), reward, value, next_value, terminated, cut, gamma, lam=lam)
    for b in range(B):
        adv = gae(reward[:, b], value[:, b], next_value[:, b], terminated[:, b], cut[:, b], gamma, lam)
        assert out.targets[:, b] == pytest.approx(adv + value[:, b])
    if lam == 1.0:
        returns = np.zeros((T, B))
        following = np.zeros(B)
        for t in range(T - 1, -1, -1):
            bootstrap = np.where(cut[t] > 0, next_value[t], following)
            returns[t] = reward[t] + gamma * (1 - terminated[t]) * bootstrap
            following = returns[t]
        assert out.targets == pytest.approx(returns)


def test_truncation_bootstraps_and_termination_does_not():
    reward, value, next_value = col(1.0), col(0.0), col(10.0)
    truncated = vtrace(np.zeros((1, 1)), reward, value, next_value, col(0), col(1), gamma=0.5)
    terminated = vtrace(np.zeros((1, 1)), reward, value, next_value, col(1), col(1), gamma=0.5)
    assert truncated.targets[0, 0] == pytest.approx(1 + 0.5 * 10.0)
    assert terminated.targets[0, 0] == pytest.approx(1.0)
    assert truncated.advantages[0, 0] == pytest.approx(6.0) and terminated.advantages[0, 0] == pytest.approx(1.0)


def test_vtrace_computes_in_float64_whatever_the_dtype_of_its_inputs():
    """Targets sum corrections over a whole segment: given float32 arrays, V-trace still works in float64 and
    returns what it returns for the same values as float64."""
    rng = np.random.default_rng(5)
    T, B = 40, 3
    reward, value, next_value, terminated, cut = _episode_data(rng, T, B)
    log_ratio = rng.normal(0.0, 0.3, (T, B))
    single = [a.astype(np.float32) for a in (log_ratio, reward, value, next_value)]
    double = [a.astype(np.float64) for a in single]
    got = vtrace(*single, terminated, cut, gamma=0.99, lam=0.95)
    want = vtrace(*double, terminated, cut, gamma=0.99, lam=0.95)
    for name in ("targets", "advantages", "rho"):
        assert getattr(got, name).dtype == np.float64, name
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_a_cut_stops_corrections_from_crossing_episodes():
    """Two steps of two episodes: the first step's target must not see the second's reward."""
    out = vtrace(np.zeros((2, 1)), col(1.0, 100.0), col(0, 0), col(0, 0), col(1, 0), col(1, 1), gamma=0.9)
    assert out.targets[:, 0].tolist() == pytest.approx([1.0, 100.0])


def segment(n: int, obs: float, action: int = 0, logp: float = np.log(0.5), terminated_at=None, truncated_at=None):
    seg = {
        "obs": np.full((n, 4), obs, np.float32),
        "action": np.full(n, action, np.int64),
        "reward": np.ones(n, np.float32),
        "next_obs": np.full((n, 4), obs, np.float32),
        "terminated": np.zeros(n, np.uint8),
        "truncated": np.zeros(n, np.uint8),
        "behaviour_logp": np.full(n, logp, np.float32),
    }
    if terminated_at is not None:
        seg["terminated"][terminated_at] = 1
    if truncated_at is not None:
        seg["truncated"][truncated_at] = 1
    return seg


def test_learner_targets_follow_vtrace_with_the_learners_own_values_and_ratios(cartpole):
    cfg = APPOConfig(hidden=(8,), gamma=0.9)
    learner = APPOLearner(cartpole, cfg, seed=0)
    segs = [segment(3, 0.5, truncated_at=1), segment(2, -0.5, terminated_at=1)]
    data = learner.prepare(segs)
    obs = torch.tensor([[0.5] * 4, [-0.5] * 4])
    with torch.no_grad():
        dist, v = learner.evaluate(obs)
        logp = dist.log_prob(torch.zeros(2, dtype=torch.int64)).numpy().astype(np.float64)
    v = v.numpy().astype(np.float64)
    log_ratio = logp - np.log(0.5)
    grid = lambda a, b: np.array([[a, b], [a, b], [a, 0.0]])  # noqa: E731 (two columns, the second 2 long)
    expected = vtrace(
        grid(log_ratio[0], log_ratio[1]),
        np.array([[1, 1], [1, 1], [1, 0.0]]),
        grid(v[0], v[1]),
        grid(v[0], v[1]),
        np.array([[0, 0], [0, 1], [0, 0.0]]),
        np.array([[0, 0], [1, 1], [1, 1.0]]),
        0.9,
    )
    assert data["return"].tolist() == pytest.approx([*expected.targets[:, 0], *expected.targets[:2, 1]], rel=1e-5)
    assert data["advantage"].tolist() == pytest.approx(
        [*expected.advantages[:, 0], *expected.advantages[:2, 1]], rel=1e-5
    )


@pytest.mark.parametrize("whole", [False, True])
def test_minibatches_are_shuffled_rows_or_whole_segments(cartpole, whole):
    cfg = APPOConfig(hidden=(8,), minibatches=4, whole_segments=whole)
    learner = APPOLearner(cartpole, cfg, seed=0)
    data = learner.prepare([segment(16, float(i)) for i in range(8)])
    parts = list(learner.minibatch_rows(data))
    column = data["column"].numpy()
    assert len(parts) == 4 and sorted(np.concatenate(parts).tolist()) == list(range(128))
    spans = [len(set(column[p.numpy()])) for p in parts]
    if whole:
        assert spans == [2, 2, 2, 2], "a minibatch is not two whole segments"
    else:
        assert all(len(p) == 32 for p in parts) and min(spans) >= 5, f"rows not shuffled across segments: {spans}"
    assert learner.batch_size == cfg.batch_size, "the queue's batch size changed"


def _policy_grad(
    cartpole, log_ratio: float, advantage: float, clip: float, proximal: bool = False, other_log_ratio: float = 0.0
) -> float:
    """The policy loss's gradient norm on one row whose ratio is exp(``log_ratio``) to the policy the
    configuration takes it to (behaviour or proximal), the other log-probability off by ``other_log_ratio``."""
    cfg = APPOConfig(hidden=(8,), clip=clip, proximal=proximal, vf_coef=0.0, ent_coef=0.0, normalize_advantages=False)
    learner = APPOLearner(cartpole, cfg, seed=0)
    obs = torch.full((1, 4), 0.3)
    with torch.no_grad():
        logp = learner.policy.log_prob(learner.policy.dist(obs), torch.zeros(1, dtype=torch.int64))
    taken, other = logp - log_ratio, logp - other_log_ratio
    mb = {
        "obs": obs,
        "action": torch.zeros(1, dtype=torch.int64),
        "behaviour_logp": other if proximal else taken,
        "proximal_logp": taken if proximal else other,
        "advantage": torch.tensor([advantage]),
        "return": torch.zeros(1),
        "rho": torch.ones(1),
    }
    total, _ = learner.loss(mb)
    learner.opt.zero_grad()
    total.backward()
    return float(sum(p.grad.abs().sum() for p in learner.policy.parameters() if p.grad is not None))


@pytest.mark.parametrize("proximal", [False, True])
def test_clipped_surrogate_has_no_gradient_outside_the_clip_range(cartpole, proximal):
    clip, far = 0.2, np.log(3.0)
    assert _policy_grad(cartpole, np.log(1.5), +1.0, clip, proximal) == 0.0  # ratio above 1 + clip, advantage > 0
    assert _policy_grad(cartpole, np.log(0.5), -1.0, clip, proximal) == 0.0  # ratio below 1 - clip, advantage < 0
    assert _policy_grad(cartpole, np.log(1.1), +1.0, clip, proximal) > 0.0  # inside the range
    assert _policy_grad(cartpole, np.log(1.5), -1.0, clip, proximal) > 0.0  # the pessimistic side is never clipped
    assert _policy_grad(cartpole, np.log(1.5), +1.0, 0.0, proximal) > 0.0  # IMPALA: no clipping at all
    # Only the ratio the configuration names is clipped: the other log-probability, however far, changes nothing.
    assert _policy_grad(cartpole, np.log(1.5), +1.0, clip, proximal, other_log_ratio=-far) == 0.0
    assert _policy_grad(cartpole, 0.0, +1.0, clip, proximal, other_log_ratio=far) > 0.0


def test_proximal_log_probabilities_are_the_learners_before_the_batch(cartpole):
    """The proximal ratio's denominator is the policy V-trace's weights were computed with: each row's
    log-probability under the learner's policy as the batch began, not the behaviour policy's."""
    learner = APPOLearner(cartpole, APPOConfig(hidden=(8,), proximal=True), seed=0)
    rng = np.random.default_rng(3)
    seg = {
        "obs": rng.standard_normal((5, 4)).astype(np.float32),
        "action": rng.integers(0, 2, 5),
        "reward": np.ones(5, np.float32),
        "next_obs": rng.standard_normal((5, 4)).astype(np.float32),
        "terminated": np.zeros(5, np.uint8),
        "truncated": np.zeros(5, np.uint8),
        "behaviour_logp": np.full(5, -0.1, np.float32),
    }
    data = learner.prepare([seg])
    with torch.no_grad():
        expected = learner.policy.log_prob(
            learner.policy.dist(torch.as_tensor(seg["obs"])), torch.as_tensor(seg["action"])
        )
    assert data["proximal_logp"].tolist() == pytest.approx(expected.tolist(), rel=1e-5)
    assert data["behaviour_logp"].tolist() == pytest.approx([-0.1] * 5)
    assert data["rho"].tolist() == pytest.approx(np.minimum(1.0, np.exp(expected.numpy() + 0.1)).tolist(), rel=1e-5)
    assert "proximal_logp" not in APPOLearner(cartpole, APPOConfig(hidden=(8,)), seed=0).prepare([seg])


@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_actor_records_the_behaviour_log_probability_of_its_own_actions(request, env):
    spec = request.getfixturevalue(env)
    cfg = APPOConfig(hidden=(8,), init_log_std=-0.5)
    learner = APPOLearner(spec, cfg, seed=1)
    actor = APPOActor(spec, cfg, seed=2)
    actor.load(learner.policy_weights())
    obs = np.random.default_rng(0).standard_normal((6, *spec.obs_shape)).astype(np.float32)
    action = actor.act(obs)
    recorded = actor.recorded["behaviour_logp"]
    with torch.no_grad():
        x = learner.policy.norm(torch.as_tensor(obs))
        expected = learner.policy.log_prob(learner.policy.dist(x), torch.as_tensor(action)).numpy()
    assert recorded.shape == (6,) and recorded.dtype == np.float32
    assert recorded == pytest.approx(expected, abs=1e-5)


def test_learning_moves_toward_rewarded_actions(cartpole):
    """A bandit in CartPole's observation space: action 1 pays 1, action 0 pays 0; APPO must learn to prefer 1."""
    cfg = APPOConfig(hidden=(16,), lr=3e-3, gamma=0.5)
    learner = APPOLearner(cartpole, cfg, seed=0)
    actor = APPOActor(cartpole, cfg, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(120):
        actor.load(learner.policy_weights())
        obs = rng.standard_normal((64, 4)).astype(np.float32)
        action = actor.act(obs)
        seg = {
            "obs": obs,
            "action": action,
            "reward": action.astype(np.float32),
            "next_obs": obs,
            "terminated": np.ones(64, np.uint8),
            "truncated": np.zeros(64, np.uint8),
            "behaviour_logp": actor.recorded["behaviour_logp"],
        }
        learner.train([{k: v[i : i + 16] for k, v in seg.items()} for i in range(0, 64, 16)])
    actor.load(learner.policy_weights())
    assert actor.act(rng.standard_normal((200, 4)).astype(np.float32), deterministic=True).mean() > 0.95


def _entry(version_rows: list[tuple[int, int]], start: int = 0) -> dict[str, np.ndarray]:
    """An entry whose rows alternate over ``envs`` environments: env e's rows are consecutive steps."""
    envs = [e for e, _ in version_rows]
    n = len(envs)
    zeros = np.zeros(n, np.float32)
    obs = np.arange(start, start + n, dtype=np.float32)[:, None]
    return {
        "obs": obs,
        "next_obs": obs + 1,
        "reward": np.arange(start, start + n, dtype=np.float32),
        "terminated": zeros,
        "truncated": zeros,
        "env_index": np.array(envs, np.uint16),
    }


class RecordingLearner:
    batch_size = 4

    def __init__(self):
        self.updates = 0
        self.calls = []

    def train(self, segments, progress=0.0):
        self.calls.append(([s["reward"].tolist() for s in segments], progress))
        self.updates += 2
        return {"loss": 0.5}

    def state(self):
        return {}, {"updates": self.updates}

    def load_state(self, tensors, meta):
        self.updates = meta["updates"]


def _queue(max_lag: int = 0) -> QueueLearning:
    cfg = replace(ExperimentConfig(), algorithm="appo", mode="async", steps=100, random_steps=0, max_policy_lag=max_lag)
    return QueueLearning(RecordingLearner(), cfg)


def test_queue_trains_whole_segments_once_in_order_of_arrival():
    learning = _queue()
    learning.policy_version = 3
    learning.add("rollout-1", 1, _entry([(0, 0), (1, 0), (0, 0), (1, 0)], start=0), version=3)  # 2 segments of 2
    assert learning.size() == 4 and learning.owed(4) == learning.learner.updates + 1
    learning.add("rollout-0", 1, _entry([(0, 0), (0, 0), (0, 0)], start=10), version=2)
    learning.update(consumed=7)
    learning.update(consumed=7)  # 3 transitions left, fewer than a batch: owed no more
    (first, progress), (second, _) = learning.learner.calls
    assert first == [[0, 2], [1, 3]] and progress == pytest.approx(0.07)
    assert second == [[10, 11, 12]]
    assert learning.size() == 0 and learning.owed(7) == learning.learner.updates
    assert learning.lag.count == 7 and learning.lag.most == 1 and learning.lag.mean() == pytest.approx(3 / 7)
    assert learning.metrics == {"loss": 0.5}


def test_queue_drops_and_counts_segments_past_the_policy_lag_limit():
    learning = _queue(max_lag=2)
    learning.add("rollout-0", 1, _entry([(0, 0)] * 3), version=1)
    learning.add("rollout-1", 1, _entry([(0, 0)] * 2, start=5), version=4)
    learning.policy_version = 4  # the first segment is 3 versions old
    learning.update(consumed=5)
    assert learning.lag_dropped == 3 and learning.lag.count == 2
    assert learning.learner.calls == [([[5, 6]], 0.05)]
    report = learning.report()
    assert report["lag_dropped"] == 3 and report["policy_lag_max"] == 0 and report["queued"] == 0
    assert LagHistogram.parse(report["policy_lag"])[0] == (0.0, 2)


def test_queue_counters_survive_a_checkpoint():
    learning = _queue(max_lag=1)
    learning.add("rollout-0", 1, _entry([(0, 0)] * 4), version=0)
    learning.policy_version = 5
    learning.update(consumed=4)
    tensors, meta = learning.state(with_replay=True)
    again = _queue(max_lag=1)
    again.load_state(tensors, meta)
    assert again.lag_dropped == 4 and again.learner.updates == learning.learner.updates


def test_lag_histogram_buckets_and_quantiles():
    h = LagHistogram()
    h.add(0, 90)
    h.add(3, 5)
    h.add(1000, 5)
    assert h.count == 100 and h.most == 1000
    assert h.quantile(0.5) == 0 and h.quantile(0.93) == 4 and h.quantile(0.99) == 1000
    pairs = LagHistogram.parse(h.text())
    assert len(pairs) == len(LAG_BUCKETS) + 1 and pairs[-1] == (float("inf"), 5) and sum(c for _, c in pairs) == 100


def test_worker_entries_are_fixed_length_segments_with_behaviour_log_probabilities(cartpole):
    """The worker's stepping parts as ``RolloutWorker`` builds them for appo: entries of segment x envs rows,
    each environment's rows consecutive, each carrying the log-probability its action was sampled with."""
    from drl.acting.entries import EntryBuffer, EntryFill, StepRecording
    from drl.algorithms import get
    from drl.memory import codec

    cfg = replace(
        ExperimentConfig(),
        algorithm="appo",
        env="CartPole-v1",
        mode="async",
        random_steps=0,
        envs_per_worker=3,
        **{"appo.segment": 5, "appo.hidden": (8,)},
    )
    algorithm = get("appo")
    rows = algorithm.entry_transitions(cfg)
    envs = VecEnv(cfg.env, 3, seed=0)
    actor = algorithm.make_actor(envs.spec, cfg, seed=0)
    learner = algorithm.make_learner(envs.spec, cfg, seed=4)
    actor.load(learner.policy_weights())
    entry = EntryBuffer(codec.expected_layout(envs.spec, algorithm.wire_fields(cfg)), rows + 3)
    write, fill = StepRecording(envs, entry, actor), EntryFill(rows, rows, 0.0)
    sent = []
    for _ in range(12):
        write(actor.act, 3)
        if fill.full(entry.n):
            sent.append({k: v.copy() for k, v in entry.filled().items()})
            entry.n = 0
    assert rows == 15 and len(sent) == 2 and all(len(e["reward"]) == 15 for e in sent)
    for arrays in sent:
        assert arrays["env_index"].tolist() == [0, 1, 2] * 5
        with torch.no_grad():
            expected = learner.policy.log_prob(
                learner.policy.dist(torch.as_tensor(arrays["obs"])), torch.as_tensor(arrays["action"])
            ).numpy()
        assert arrays["behaviour_logp"] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"mode": "sync"}, "runs in --mode async"),
        ({"random_steps": 100}, "--random-steps must be 0 for appo"),
        ({"prioritized": True}, "--prioritized applies to replay-based algorithms"),
    ],
)
def test_appo_refuses_what_it_cannot_do(change, message):
    from drl.presets import get_preset

    with pytest.raises(ConfigError, match=message):
        replace(get_preset("appo", "CartPole-v1"), **change).validate()


def test_max_policy_lag_is_refused_for_algorithms_without_a_queue():
    from drl.presets import get_preset

    with pytest.raises(ConfigError, match="--max-policy-lag applies to .*appo.*; sac does not"):
        replace(get_preset("sac"), max_policy_lag=3).validate()
    replace(get_preset("appo"), max_policy_lag=3).validate()


def test_image_segments_train_through_the_shared_encoder():
    """MinAtar frames (uint8, 10x10xC) through APPO's encoder: a batch trains, the weights change, and the actor
    built from them records log-probabilities of its image observations."""
    spec = space_spec("MinAtar/Breakout-v1")
    cfg = APPOConfig(encoder="minatar", epochs=1, minibatches=2)
    learner = APPOLearner(spec, cfg, seed=0)
    actor = APPOActor(spec, cfg, seed=0)
    actor.load(learner.policy_weights())
    rng = np.random.default_rng(1)
    obs = (rng.random((40, *spec.obs_shape)) < 0.1).astype(np.uint8) * 255
    action = actor.act(obs[:20])
    segs = []
    for i in range(2):
        rows = slice(10 * i, 10 * i + 10)
        segs.append(
            {
                "obs": obs[rows],
                "action": action[rows],
                "reward": rng.random(10).astype(np.float32),
                "next_obs": obs[20 + 10 * i : 30 + 10 * i],
                "terminated": np.zeros(10, np.uint8),
                "truncated": np.zeros(10, np.uint8),
                "behaviour_logp": actor.recorded["behaviour_logp"][rows],
            }
        )
    before = {k: v.copy() for k, v in learner.policy_weights().items()}
    metrics = learner.train(segs)
    assert learner.updates == 2 and np.isfinite(metrics["policy_loss"])
    assert any(not np.array_equal(before[k], v) for k, v in learner.policy_weights().items())


def test_queue_segments_carry_next_observations_only_where_the_learner_bootstraps(cartpole):
    """The queue's segments hold ``end_obs`` (next observations of the last row and of truncated rows, not
    of terminated ones) in place of ``next_obs``, and the learner trains on them exactly as on whole segments."""
    rng = np.random.default_rng(4)
    n, envs = 24, 3
    entry = {
        "obs": rng.standard_normal((n, 4)).astype(np.float32),
        "next_obs": rng.standard_normal((n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n).astype(np.int64),
        "reward": rng.standard_normal(n).astype(np.float32),
        "terminated": (rng.random(n) < 0.15).astype(np.uint8),
        "truncated": np.zeros(n, np.uint8),
        "behaviour_logp": np.full(n, np.log(0.5), np.float32),
        "env_index": np.tile(np.arange(envs, dtype=np.uint16), n // envs),
    }
    entry["truncated"][[4, 10]] = 1  # env 1 has two episodes cut short
    entry["terminated"][[4, 10, n - 3, n - 2, n - 1]] = [0, 0, 1, 0, 0]  # env 0 terminates on its last row
    cfg = replace(ExperimentConfig(), algorithm="appo", mode="async", steps=100, random_steps=0)
    cfg = replace(cfg, appo=APPOConfig(hidden=(8,), batch_size=n, epochs=2, minibatches=2))
    queued = QueueLearning(APPOLearner(cartpole, cfg.appo, seed=0), cfg)
    queued.add("rollout-0", 1, entry)
    segments = [s for _, s in queued.queue]
    whole = [{k: v[entry["env_index"] == e] for k, v in entry.items()} for e in range(envs)]
    for seg, full in zip(segments, whole):
        assert "next_obs" not in seg
        ends = ((full["truncated"] == 1) | (np.arange(len(full["reward"])) == len(full["reward"]) - 1)) & (
            full["terminated"] == 0
        )
        np.testing.assert_array_equal(seg[frames.END_OBS], full["next_obs"][ends])
        np.testing.assert_array_equal(seg["obs"], full["obs"])
    assert [len(s[frames.END_OBS]) for s in segments] == [0, 3, 1]
    eager = APPOLearner(cartpole, cfg.appo, seed=0)
    expected = eager.train(whole)
    queued.update(consumed=n)
    assert queued.metrics == pytest.approx(expected, rel=1e-6)
    for name, value in eager.policy_weights().items():
        np.testing.assert_array_equal(queued.learner.policy_weights()[name], value)


def test_the_policy_lag_estimate_counts_the_backlog_and_an_entry_held_by_each_worker():
    """(backlog entries + workers) x entry transitions in batches, plus half the batch being assembled, in
    versions: the figures of bench/README.md's lag measurements (appo-atari with 2 workers of 4 envs measured a
    mean of 3.4; 12 workers of 4 envs behind 16 entries, the issue's run on a GPU machine, 17)."""
    from drl.algorithms import get
    from drl.presets import get_preset

    appo = get("appo")
    atari = get_preset("appo-atari", "ALE/Pong-v5")
    assert appo.policy_lag(replace(atari, workers=2, envs_per_worker=4)) == pytest.approx((4 + 2) * 512 / 1024 + 0.5)
    big = replace(atari, workers=12, envs_per_worker=4, max_backlog_entries=16)
    assert appo.policy_lag(big) == pytest.approx((16 + 12) * 512 / 1024 + 0.5)
    assert appo.policy_lag(replace(atari, workers=12, envs_per_worker=2)) == pytest.approx(4.5)
    slower = replace(atari, publish_every_updates=2 * 4 * 4)
    assert appo.policy_lag(slower) == pytest.approx(appo.policy_lag(atari) / 2)
    sharded = replace(atari, workers=2, envs_per_worker=4, memory_shards=2)
    assert appo.policy_lag(sharded) == pytest.approx((2 * 4 + 2) * 512 / 1024 + 0.5)
    group = replace(sharded, learners=2)
    assert appo.policy_lag(group) == pytest.approx((2 * 4 + 2) * 512 / 1024 / 2 + 0.5)
    assert get("ppo").policy_lag(get_preset("ppo", "CartPole-v1")) is None


def test_a_run_whose_data_would_be_many_versions_old_says_so_as_it_starts():
    from drl.presets import get_preset
    from orchestrator.backends.base import LARGE_POLICY_LAG, policy_lag_note

    atari = get_preset("appo-atari", "ALE/Pong-v5")
    assert policy_lag_note(atari) is None
    line = policy_lag_note(replace(atari, workers=12, envs_per_worker=8))
    assert line is not None
    assert "about 16 policy versions old" in line
    assert "12 workers each hold an entry of 1,024 transitions (--envs-per-worker 8 x --appo.segment 128)" in line
    assert "--max-policy-lag" in line
    assert policy_lag_note(replace(atari, workers=12, envs_per_worker=2)) is None
    just_over = replace(atari, workers=int(LARGE_POLICY_LAG * 4), envs_per_worker=2)
    assert policy_lag_note(just_over) is not None
    assert policy_lag_note(get_preset("sac", "Pendulum-v1")) is None
