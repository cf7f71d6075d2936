"""N-step folding in rollout workers and prioritized replay, checked against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from drl.acting.nstep import NStepFolder
from drl.envs import space_spec
from drl.training.replay import PrioritizedReplay, ReplayBuffer, SumTree


def step(i: int, reward: float, terminated=False, truncated=False, envs=1) -> dict[str, np.ndarray]:
    return {
        "obs": np.full((envs, 1), i, np.float32),
        "action": np.full((envs, 1), i, np.float32),
        "reward": np.full(envs, reward, np.float32),
        "next_obs": np.full((envs, 1), i + 1, np.float32),
        "terminated": np.full(envs, terminated, np.uint8),
        "truncated": np.full(envs, truncated, np.uint8),
    }


def test_nstep_folds_full_windows_and_drains_at_episode_end():
    folder = NStepFolder(3, 0.5, num_envs=1)
    assert folder.push(step(0, 1.0), 1) is None
    assert folder.push(step(1, 2.0), 1) is None
    out = folder.push(step(2, 4.0), 1)
    # 1 + 0.5 * 2 + 0.25 * 4 = 3, next_obs after three steps
    assert out["reward"].tolist() == [3.0] and out["next_obs"].tolist() == [[3.0]] and out["nsteps"].tolist() == [3]
    out = folder.push(step(3, 8.0, terminated=True), 1)
    # window [1, 2, 3] drains: 2 + 0.5*4 + 0.25*8 = 6 (3 steps), 4 + 0.5*8 = 8 (2 steps), 8 (1 step)
    assert out["reward"].tolist() == [6.0, 8.0, 8.0]
    assert out["nsteps"].tolist() == [3, 2, 1]
    assert out["obs"][:, 0].tolist() == [1.0, 2.0, 3.0]
    assert out["action"][:, 0].tolist() == [1.0, 2.0, 3.0], "a folded transition keeps its first action"
    assert out["terminated"].tolist() == [1, 1, 1] and out["next_obs"][:, 0].tolist() == [4.0, 4.0, 4.0]
    assert folder.pending() == 0


def test_a_one_step_folder_passes_transitions_through_and_shorter_ones_are_refused():
    folder = NStepFolder(1, 0.5, num_envs=1)
    out = folder.push(step(0, 2.0), 1)
    assert out["reward"].tolist() == [2.0] and out["nsteps"].tolist() == [1] and folder.pending() == 0
    with pytest.raises(ValueError, match="n-step length must be at least 1, got 0"):
        NStepFolder(0, 0.5, num_envs=1)


def test_nstep_truncation_and_flush_keep_bootstrap_with_fewer_steps():
    folder = NStepFolder(3, 0.5, num_envs=2)
    folder.push(step(0, 1.0, envs=2), 2)
    out = folder.push(step(1, 2.0, truncated=True, envs=2), 1)  # only env 0's step is taken
    assert out["nsteps"].tolist() == [2, 1] and out["terminated"].tolist() == [0, 0]
    assert out["reward"].tolist() == [2.0, 2.0]
    assert folder.pending() == 1
    out = folder.flush()
    assert out["reward"].tolist() == [1.0] and out["nsteps"].tolist() == [1] and out["next_obs"].tolist() == [[1.0]]
    assert folder.flush() is None


def test_every_pushed_transition_comes_out_once():
    rng = np.random.default_rng(0)
    folder = NStepFolder(5, 0.99, num_envs=3)
    pushed = emitted = 0
    for i in range(400):
        s = step(i, 1.0, terminated=bool(rng.random() < 0.05), truncated=bool(rng.random() < 0.02), envs=3)
        count = 3 if i % 50 else 2
        pushed += count
        out = folder.push(s, count)
        emitted += 0 if out is None else len(out["reward"])
        if i % 100 == 99:
            out = folder.flush()
            emitted += 0 if out is None else len(out["reward"])
    out = folder.flush()
    emitted += 0 if out is None else len(out["reward"])
    assert pushed == emitted


def test_sum_tree_sums_and_finds():
    tree = SumTree(5)
    tree.set(np.array([0, 1, 2, 3, 4]), np.array([1.0, 2.0, 3.0, 4.0, 0.0]))
    assert tree.total() == 10.0
    assert tree.find(np.array([0.0, 0.99, 1.0, 2.9, 3.0, 5.99, 6.0, 9.99])).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    tree.set(np.array([1, 1]), np.array([5.0, 0.5]))  # the last write to a slot wins
    assert tree.total() == pytest.approx(8.5)


@pytest.fixture(scope="module")
def spec():
    return space_spec("Pendulum-v1")


def rows(n: int, start: int = 0) -> dict[str, np.ndarray]:
    return {
        "obs": np.arange(start, start + n, dtype=np.float32)[:, None].repeat(3, 1),
        "action": np.zeros((n, 1), np.float32),
        "reward": np.arange(start, start + n, dtype=np.float32),
        "next_obs": np.zeros((n, 3), np.float32),
        "terminated": np.zeros(n, np.uint8),
    }


def test_importance_weights_by_hand(spec):
    replay = PrioritizedReplay(spec, 8, seed=0, alpha=1.0, beta=1.0, eps=0.0)
    replay.add(rows(2) | {"priority": np.array([1.0, 3.0], np.float32)})
    batch = replay.sample(400)
    drawn = replay.last_indices
    # P = 1/4 and 3/4; w = (N P)^-1 = 2 and 2/3, divided by the largest: 1 and 1/3
    weights = dict(zip(drawn.tolist(), batch["weight"].tolist()))
    assert weights[0] == pytest.approx(1.0) and weights[1] == pytest.approx(1 / 3)
    assert 0.68 < (drawn == 1).mean() < 0.82
    assert np.array_equal(batch["reward"].numpy(), drawn.astype(np.float32))


def test_new_transitions_get_the_largest_priority_and_updates_move_sampling(spec):
    replay = PrioritizedReplay(spec, 16, seed=0, alpha=1.0, beta=0.5, eps=0.0)
    replay.add(rows(4))
    assert replay.tree.leaves(np.arange(4)).tolist() == [1.0] * 4
    replay.sample(4)
    replay.update_priorities(np.array([0, 1, 2, 3]), np.array([0.0, 0.0, 0.0, 9.0]))
    replay.add(rows(1, start=4))
    assert replay.tree.leaves(np.array([4]))[0] == 9.0  # the largest seen so far
    replay.sample(1000)
    assert set(replay.last_indices.tolist()) == {3, 4}


def test_alpha_flattens_priorities(spec):
    replay = PrioritizedReplay(spec, 4, seed=0, alpha=0.5, eps=0.0)
    replay.add(rows(2) | {"priority": np.array([1.0, 4.0], np.float32)})
    assert replay.tree.leaves(np.arange(2)).tolist() == [1.0, 2.0]


def test_prioritized_dump_and_load_keep_priorities(spec):
    replay = PrioritizedReplay(spec, 4, seed=0, alpha=0.6)
    replay.add(rows(6) | {"priority": np.arange(1, 7, dtype=np.float32)})
    arrays, meta = replay.dump()
    again = PrioritizedReplay(spec, 4, seed=1, alpha=0.6)
    again.load(arrays, meta)
    assert len(again) == 4
    np.testing.assert_allclose(again.tree.leaves(np.arange(4)), replay.tree.leaves((np.arange(4) + 2) % 4), rtol=1e-5)
    assert again.data["reward"].tolist() == [2.0, 3.0, 4.0, 5.0]


def test_uniform_replay_keeps_nsteps(spec):
    replay = ReplayBuffer(spec, 4, seed=0, extras=("nsteps", "priority"))
    replay.add(rows(2) | {"nsteps": np.array([3, 1], np.uint8)})
    assert sorted(replay.sample(16)["nsteps"].unique().tolist()) == [1.0, 3.0]
    assert "priority" not in replay.data


def test_replay_keeps_the_extras_it_is_told_with_their_shapes(spec):
    """Field specs as the builders declare them: each kept as float32 with its shape; the priority is the
    prioritized replay's input, never a column."""
    extras = {"nsteps": ("|u1", ()), "hint": ("<f4", (2,)), "priority": ("<f4", ())}
    for replay in (ReplayBuffer(spec, 4, seed=0, extras=extras), PrioritizedReplay(spec, 4, seed=0, extras=extras)):
        assert replay.data["nsteps"].shape == (4,) and replay.data["hint"].shape == (4, 2)
        assert replay.data["nsteps"].dtype == replay.data["hint"].dtype == np.float32
        assert "priority" not in replay.data
        replay.add(
            rows(2)
            | {
                "nsteps": np.array([3, 1], np.uint8),
                "hint": np.ones((2, 2), np.float32),
                "priority": np.array([1.0, 2.0], np.float32),
            }
        )
        batch = replay.sample(8)
        assert set(batch) >= {"nsteps", "hint"} and "priority" not in batch
        assert batch["hint"].shape == (8, 2)
