"""drl.training.learning: the replay and rollout adapters an algorithm's builder gives the trainer.

They took over the trainer's own learning code (``owed_updates``, ``update``, ``segments``, ``train_rollout`` and
the replay parts of ``checkpoint``/``restore``); the reference functions below are that code as it was, and the
adapters must give the same updates, weights and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drl.acting.nstep import NSTEP_FIELDS
from drl.algorithms import make_learner
from drl.config import ExperimentConfig, replace
from drl.envs import TRAJECTORY_FIELDS, space_spec
from drl.training.learning import ReplayLearning, RolloutLearning
from drl.training.replay import PrioritizedReplay, ReplayBuffer


@pytest.fixture(scope="module")
def pendulum():
    return space_spec("Pendulum-v1")


@pytest.fixture(scope="module")
def cartpole():
    return space_spec("CartPole-v1")


def transitions(spec, n: int, rng: np.random.Generator, extras: dict | None = None) -> dict[str, np.ndarray]:
    obs = rng.standard_normal((n, *spec.obs_shape)).astype(np.float32)
    if spec.discrete_actions:
        action = rng.integers(0, spec.discrete_actions, n).astype(np.int64)
    else:
        action = rng.uniform(-2, 2, (n, *spec.act_shape)).astype(np.float32)
    out = {
        "obs": obs,
        "action": action,
        "reward": rng.standard_normal(n).astype(np.float32),
        "next_obs": rng.standard_normal((n, *spec.obs_shape)).astype(np.float32),
        "terminated": (rng.random(n) < 0.05).astype(np.uint8),
    }
    for name, (dtype, shape) in (extras or {}).items():
        out[name] = rng.integers(1, 4, (n, *shape)).astype(dtype)
    return out


# -- the trainer's code before drl.training.learning, as it was ---------------------------------------------------------


class OldTrainerReplay:
    def __init__(self, learner, spec, cfg, extras):
        self.learner, self.cfg = learner, cfg
        if cfg.prioritized:
            self.replay = PrioritizedReplay(
                spec,
                cfg.replay_size,
                seed=cfg.seed + 1,
                extras=extras,
                alpha=cfg.priority_alpha,
                beta=cfg.priority_beta,
            )
        else:
            self.replay = ReplayBuffer(spec, cfg.replay_size, seed=cfg.seed + 1, extras=extras)
        self.consumed = 0
        self.metrics = {}

    def owed_updates(self):
        if len(self.replay) < max(self.cfg.learning_starts, self.learner.batch_size):
            return 0
        return int(self.cfg.updates_per_transition * max(0, self.consumed - self.cfg.learning_starts))

    def update(self):
        replay = self.replay
        if isinstance(replay, PrioritizedReplay):
            cfg = self.cfg
            replay.beta = cfg.priority_beta + (1.0 - cfg.priority_beta) * min(1.0, self.consumed / cfg.steps)
            self.metrics = self.learner.update(replay.sample(self.learner.batch_size))
            replay.update_priorities(replay.last_indices, self.learner.td_errors)
        else:
            self.metrics = self.learner.update(replay.sample(self.learner.batch_size))

    def checkpoint(self):
        tensors, learner_meta = self.learner.state()
        tensors = {f"learner.{k}": v for k, v in tensors.items()}
        tensors["rng.torch"] = torch.get_rng_state().numpy()
        meta = {
            "learner": learner_meta,
            "replay_rng": self.replay.rng.bit_generator.state,
            "counters": {"consumed": self.consumed},
        }
        if self.cfg.checkpoint_replay:
            arrays, meta["replay"] = self.replay.dump()
            tensors.update({f"replay.{k}": v for k, v in arrays.items()})
        return tensors, meta


def old_segments(rollout):
    by_worker: dict[str, list] = {}
    for worker, seq, arrays in rollout:
        by_worker.setdefault(worker, []).append((seq, arrays))
    out = []
    for worker in sorted(by_worker):
        entries = [arrays for _, arrays in sorted(by_worker[worker], key=lambda e: e[0])]
        joined = {k: np.concatenate([e[k] for e in entries]) for k in entries[0]}
        for env in np.unique(joined["env_index"]):
            mask = joined["env_index"] == env
            out.append({k: v[mask] for k, v in joined.items()})
    return out


# -- replay -----------------------------------------------------------------------------------------------------


def _same_weights(a, b):
    wa, wb = a.policy_weights(), b.policy_weights()
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)


def _replay_runs(spec, cfg, extras, entries):
    """The old trainer's SYNC pattern (updates owed after each entry) with the old code and with ReplayLearning."""
    old = OldTrainerReplay(make_learner(cfg.algorithm, spec, cfg, seed=cfg.seed), spec, cfg, extras)
    for arrays in entries:
        old.replay.add(arrays)
        old.consumed += len(arrays["reward"])
        while old.learner.updates < old.owed_updates():
            old.update()
    new = ReplayLearning(make_learner(cfg.algorithm, spec, cfg, seed=cfg.seed), spec, cfg, keep=extras)
    consumed = 0
    for seq, arrays in enumerate(entries, 1):
        new.add("rollout-0", seq, arrays)
        consumed += len(arrays["reward"])
        new.end_iteration(consumed)
        while new.learner.updates < new.owed(consumed):
            new.update(consumed)
    return old, new, consumed


def test_uniform_replay_gives_the_trainers_updates_and_weights(pendulum):
    cfg = replace(
        ExperimentConfig(),
        steps=600,
        learning_starts=100,
        updates_per_transition=0.5,
        replay_size=300,
        **{"sac.hidden": (16, 16), "sac.batch_size": 32},
    )
    rng = np.random.default_rng(1)
    entries = [transitions(pendulum, 64, rng) for _ in range(8)]
    old, new, consumed = _replay_runs(pendulum, cfg, {}, entries)
    assert new.learner.updates == old.learner.updates == int(0.5 * (consumed - 100))
    assert new.metrics == old.metrics and new.metrics
    assert new.size() == len(old.replay) == 300
    _same_weights(old.learner, new.learner)


def test_prioritized_replay_gives_the_trainers_updates_weights_and_priorities(cartpole):
    cfg = replace(
        ExperimentConfig(),
        algorithm="dqn",
        env="CartPole-v1",
        steps=1000,
        learning_starts=64,
        prioritized=True,
        worker_priorities=True,
        priority_alpha=0.7,
        priority_beta=0.3,
        **{"dqn.hidden": (16,), "dqn.batch_size": 16},
    )
    extras = {**NSTEP_FIELDS, "priority": ("<f4", ())}
    rng = np.random.default_rng(2)
    entries = [transitions(cartpole, 40, rng, extras) for _ in range(6)]
    old, new, consumed = _replay_runs(cartpole, cfg, extras, entries)
    assert new.learner.updates == old.learner.updates == consumed - 64
    _same_weights(old.learner, new.learner)
    np.testing.assert_array_equal(new.replay.tree.tree, old.replay.tree.tree)
    assert new.replay.beta == old.replay.beta == pytest.approx(0.3 + 0.7 * consumed / 1000)
    assert "nsteps" in new.replay.data and "priority" not in new.replay.data


def test_owed_waits_for_learning_starts_and_a_batch(pendulum):
    cfg = replace(
        ExperimentConfig(), learning_starts=50, updates_per_transition=2.0, **{"sac.hidden": (8,), "sac.batch_size": 80}
    )
    learning = ReplayLearning(make_learner("sac", pendulum, cfg, seed=0), pendulum, cfg)
    rng = np.random.default_rng(3)
    learning.add("rollout-0", 1, transitions(pendulum, 60, rng))
    assert learning.owed(60) == 0  # 60 held < max(50, 80)
    learning.add("rollout-0", 2, transitions(pendulum, 30, rng))
    assert learning.owed(90) == 2 * (90 - 50)
    assert learning.owed(40) == 0


def test_prioritized_beta_rises_and_td_errors_become_priorities(cartpole):
    cfg = replace(
        ExperimentConfig(),
        algorithm="dqn",
        env="CartPole-v1",
        steps=400,
        learning_starts=0,
        prioritized=True,
        priority_alpha=0.5,
        priority_beta=0.4,
        **{"dqn.hidden": (8,), "dqn.batch_size": 8},
    )
    learning = ReplayLearning(make_learner("dqn", cartpole, cfg, seed=0), cartpole, cfg, keep=NSTEP_FIELDS)
    learning.add("rollout-0", 1, transitions(cartpole, 32, np.random.default_rng(4), NSTEP_FIELDS))
    for consumed, beta in ((100, 0.4 + 0.6 * 0.25), (400, 1.0), (800, 1.0)):
        learning.update(consumed)
        replay = learning.replay
        assert replay.beta == pytest.approx(beta)
        expected = (np.abs(learning.learner.td_errors.astype(np.float64)) + replay.eps) ** 0.5
        last = {int(i): e for i, e in zip(replay.last_indices, expected)}  # the last write to a slot wins
        np.testing.assert_allclose(replay.tree.leaves(np.array(list(last))), list(last.values()))


def test_replay_checkpoint_keys_are_the_trainers_and_round_trip(cartpole):
    cfg = replace(
        ExperimentConfig(),
        algorithm="dqn",
        env="CartPole-v1",
        steps=1000,
        learning_starts=32,
        prioritized=True,
        checkpoint_replay=True,
        **{"dqn.hidden": (8,), "dqn.batch_size": 8},
    )
    extras = dict(NSTEP_FIELDS)
    rng = np.random.default_rng(5)
    entries = [transitions(cartpole, 24, rng, extras) for _ in range(3)]
    old, new, _ = _replay_runs(cartpole, cfg, extras, entries)
    old_tensors, old_meta = old.checkpoint()
    tensors, meta = new.state(with_replay=True)
    assert set(tensors) == set(old_tensors) - {"rng.torch"}
    assert {k for k in tensors if k.startswith("replay.")} >= {"replay.reward", "replay.nsteps", "replay.priority"}
    assert set(meta) == set(old_meta) - {"counters"} == {"learner", "replay_rng", "replay"}
    assert set(new.state(with_replay=False)[0]) == {k for k in tensors if k.startswith("learner.")}
    assert "replay" not in new.state(with_replay=False)[1]

    again = ReplayLearning(make_learner("dqn", cartpole, cfg, seed=9), cartpole, cfg, keep=extras)
    again.load_state(old_tensors, old_meta)  # a checkpoint as the trainer wrote it, counters and RNG included
    _same_weights(again.learner, new.learner)
    assert again.learner.updates == new.learner.updates
    assert again.size() == new.size()
    for name, column in new.replay.data.items():
        np.testing.assert_array_equal(again.replay.data[name][: again.size()], column[: new.size()], err_msg=name)
    np.testing.assert_allclose(
        again.replay.tree.leaves(np.arange(again.size())), new.replay.tree.leaves(np.arange(new.size())), rtol=1e-4
    )  # float32, eps again
    assert again.replay.rng.bit_generator.state == new.replay.rng.bit_generator.state


def test_a_checkpoint_that_does_not_fit_is_a_value_error(pendulum):
    cfg = replace(ExperimentConfig(), checkpoint_replay=True, **{"sac.hidden": (8,)})
    learning = ReplayLearning(make_learner("sac", pendulum, cfg, seed=0), pendulum, cfg)
    learning.add("rollout-0", 1, transitions(pendulum, 10, np.random.default_rng(6)))
    tensors, meta = learning.state(with_replay=True)
    wider = replace(cfg, **{"sac.hidden": (16,)})
    with pytest.raises(ValueError):
        ReplayLearning(make_learner("sac", pendulum, wider, seed=0), pendulum, wider).load_state(tensors, meta)
    tensors["replay.obs"] = tensors["replay.obs"][:, :2]
    with pytest.raises(ValueError, match="replay"):
        ReplayLearning(make_learner("sac", pendulum, cfg, seed=0), pendulum, cfg).load_state(tensors, meta)


# -- rollout ----------------------------------------------------------------------------------------------------


class RecordingLearner:
    def __init__(self):
        self.updates, self.batch_size, self.calls = 0, 0, []

    def train(self, segments, progress=0.0):
        self.calls.append((segments, progress))
        self.updates += 3
        return {"loss": 1.5}

    def state(self):
        return {"w": np.zeros(2, np.float32)}, {"updates": self.updates}

    def load_state(self, tensors, meta):
        self.updates = meta["updates"]


def _entry(start: int, envs: list[int]) -> dict[str, np.ndarray]:
    n = len(envs)
    return {
        "reward": np.arange(start, start + n, dtype=np.float32),
        "env_index": np.array(envs, np.uint16),
        "truncated": np.zeros(n, np.uint8),
    }


def test_rollout_trains_once_per_iteration_on_segments_by_worker_seq_and_env():
    cfg = replace(ExperimentConfig(), algorithm="ppo", steps=100, random_steps=0)
    learning = RolloutLearning(RecordingLearner(), cfg)
    learning.add("rollout-1", 1, _entry(100, [0, 0]))
    learning.add("rollout-0", 2, _entry(10, [0, 1, 0, 1]))
    learning.add("rollout-0", 1, _entry(0, [0, 1]))
    assert learning.size() == 0 and learning.owed(8) == 0
    with pytest.raises(RuntimeError):
        learning.update(8)
    learning.end_iteration(consumed=28)
    ((segments, progress),) = learning.learner.calls
    assert progress == (28 - 8) / 100
    assert [s["reward"].tolist() for s in segments] == [[0, 10, 12], [1, 11, 13], [100, 101]]
    assert all(set(s) == {"reward", "env_index", "truncated"} for s in segments)
    assert learning.metrics == {"loss": 1.5} and learning.owed(28) == learning.learner.updates == 3
    learning.end_iteration(consumed=28)  # the rollout was dropped: nothing to train on
    assert len(learning.learner.calls) == 1


def test_rollout_progress_never_goes_below_zero():
    learning = RolloutLearning(RecordingLearner(), replace(ExperimentConfig(), algorithm="ppo", steps=50))
    learning.add("rollout-0", 1, _entry(0, [0, 0, 0]))
    learning.end_iteration(consumed=2)  # fewer consumed than held: a restarted trainer's count
    assert learning.learner.calls[0][1] == 0.0


def test_rollout_gives_the_trainers_ppo_weights(cartpole):
    cfg = replace(
        ExperimentConfig(),
        algorithm="ppo",
        env="CartPole-v1",
        steps=512,
        random_steps=0,
        **{"ppo.hidden": (8,), "ppo.epochs": 2, "ppo.minibatches": 4},
    )
    rng = np.random.default_rng(7)
    fields = {**TRAJECTORY_FIELDS}
    entries = []
    for worker in ("rollout-1", "rollout-0"):
        for seq in (2, 1):
            arrays = transitions(cartpole, 32, rng)
            arrays["truncated"] = (rng.random(32) < 0.05).astype(fields["truncated"][0])
            arrays["env_index"] = rng.integers(0, 2, 32).astype(fields["env_index"][0])
            entries.append((worker, seq, arrays))
    old = make_learner("ppo", cartpole, cfg, seed=0)
    old_metrics = old.train(old_segments(entries), progress=max(0, 256 - 128) / cfg.steps)
    learning = RolloutLearning(make_learner("ppo", cartpole, cfg, seed=0), cfg)
    for worker, seq, arrays in entries:
        learning.add(worker, seq, arrays)
    learning.end_iteration(consumed=256)
    assert learning.metrics == old_metrics
    assert learning.learner.updates == old.updates == 2 * 4
    _same_weights(old, learning.learner)


def test_rollout_checkpoint_has_the_learner_only(cartpole):
    cfg = replace(
        ExperimentConfig(),
        algorithm="ppo",
        env="CartPole-v1",
        random_steps=0,
        checkpoint_replay=True,
        **{"ppo.hidden": (8,)},
    )
    learning = RolloutLearning(make_learner("ppo", cartpole, cfg, seed=0), cfg)
    tensors, meta = learning.state(with_replay=True)
    assert tensors and all(k.startswith("learner.") for k in tensors)
    assert meta.keys() == {"learner", "replay_rng"} and meta["replay_rng"] is None
    again = RolloutLearning(make_learner("ppo", cartpole, cfg, seed=3), cfg)
    again.load_state({**tensors, "rng.torch": np.zeros(3, np.uint8)}, {**meta, "counters": {}})
    _same_weights(again.learner, learning.learner)
