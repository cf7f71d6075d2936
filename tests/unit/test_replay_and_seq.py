"""Uniform replay ring buffer and the trainer's (worker, seq) duplicate tracker."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from drl.envs import SpaceSpec
from drl.training.ingest import SeqTracker
from drl.training.replay import ReplayBuffer

PENDULUM = SpaceSpec((3,), "<f4", (1,), "<f4", 0, (-2.0,), (2.0,))
IMAGES = SpaceSpec((84, 84, 4), "|u1", (6,), "<f4", 0, (-1.0,) * 6, (1.0,) * 6)
DISCRETE = SpaceSpec((4,), "<f4", (), "<i8", 3)


def transitions(spec: SpaceSpec, start: int, n: int) -> dict[str, np.ndarray]:
    """Rows numbered start..start+n-1; every field of row i holds i so rows can be traced."""
    ids = np.arange(start, start + n)

    def filled(shape, dtype):
        return np.broadcast_to(ids.reshape(-1, *([1] * len(shape))), (n, *shape)).astype(dtype)

    return {
        "obs": filled(spec.obs_shape, spec.obs_dtype),
        "action": filled(spec.act_shape, spec.act_dtype),
        "reward": ids.astype(np.float32),
        "next_obs": filled(spec.obs_shape, spec.obs_dtype),
        "terminated": (ids % 2).astype(np.uint8),
    }


# -- ReplayBuffer ---------------------------------------------------------------------------------------


def test_add_fills_then_wraps_around():
    buf = ReplayBuffer(PENDULUM, capacity=10, seed=0)
    assert len(buf) == 0
    assert buf.add(transitions(PENDULUM, 0, 4)) == 4
    assert len(buf) == 4 and buf.pos == 4
    buf.add(transitions(PENDULUM, 4, 4))
    assert len(buf) == 8 and buf.pos == 8

    buf.add(transitions(PENDULUM, 8, 5))
    assert len(buf) == 10, "size is capped at capacity"
    assert buf.pos == 3
    np.testing.assert_array_equal(buf.data["reward"], [10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(buf.data["obs"][:, 0], [10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(buf.data["terminated"], np.array([10, 11, 12, 3, 4, 5, 6, 7, 8, 9]) % 2)


def test_add_larger_than_capacity_keeps_the_newest():
    buf = ReplayBuffer(PENDULUM, capacity=5, seed=0)
    buf.add(transitions(PENDULUM, 0, 12))
    assert len(buf) == 5
    assert sorted(buf.data["reward"].tolist()) == [7, 8, 9, 10, 11]


def test_size_never_exceeds_capacity_over_many_adds():
    buf = ReplayBuffer(PENDULUM, capacity=7, seed=0)
    total = 0
    for n in (3, 1, 6, 2, 7, 5):
        buf.add(transitions(PENDULUM, total, n))
        total += n
        assert len(buf) == min(7, total)
        assert buf.pos == total % 7


@pytest.mark.parametrize("spec", [PENDULUM, IMAGES], ids=["pendulum", "images"])
def test_sample_shapes_and_float_dtypes(spec):
    buf = ReplayBuffer(spec, capacity=20, seed=0)
    buf.add(transitions(spec, 0, 12))
    batch = buf.sample(32)
    assert set(batch) == {"obs", "action", "reward", "next_obs", "terminated"}
    assert batch["obs"].shape == (32, *spec.obs_shape)
    assert batch["next_obs"].shape == (32, *spec.obs_shape)
    assert batch["action"].shape == (32, *spec.act_shape)
    assert batch["reward"].shape == (32,)
    assert batch["terminated"].shape == (32,)
    for name, tensor in batch.items():
        assert isinstance(tensor, torch.Tensor), name
        assert tensor.dtype == torch.float32, name


def test_sample_returns_only_stored_rows_and_rows_stay_consistent():
    buf = ReplayBuffer(PENDULUM, capacity=10, seed=0)
    buf.add(transitions(PENDULUM, 0, 6))
    batch = buf.sample(200)
    rows = batch["reward"]
    assert set(rows.tolist()) <= set(range(6))
    assert len(set(rows.tolist())) > 1
    torch.testing.assert_close(batch["obs"][:, 0], rows)
    torch.testing.assert_close(batch["next_obs"][:, 2], rows)
    torch.testing.assert_close(batch["action"][:, 0], rows)
    torch.testing.assert_close(batch["terminated"], rows % 2)


def test_discrete_actions_stay_int64():
    buf = ReplayBuffer(DISCRETE, capacity=8, seed=0)
    buf.add(transitions(DISCRETE, 0, 8))
    batch = buf.sample(4)
    assert batch["action"].dtype == torch.int64
    assert batch["action"].shape == (4,)
    assert batch["obs"].dtype == torch.float32


def test_sampling_is_reproducible_by_seed():
    a, b = ReplayBuffer(PENDULUM, 50, seed=4), ReplayBuffer(PENDULUM, 50, seed=4)
    for buf in (a, b):
        buf.add(transitions(PENDULUM, 0, 50))
    torch.testing.assert_close(a.sample(16)["reward"], b.sample(16)["reward"])


# -- SeqTracker -----------------------------------------------------------------------------------------


def test_new_sequences_are_not_seen_and_repeats_are():
    t = SeqTracker()
    assert t.seen("w0", 1) is False
    assert t.seen("w0", 2) is False
    assert t.seen("w0", 1) is True
    assert t.seen("w0", 2) is True
    assert t.seen("w0", 3) is False
    assert t.seen("w0", 3) is True


def test_workers_are_independent():
    t = SeqTracker()
    assert t.seen("w0", 1) is False
    assert t.seen("w1", 1) is False
    assert t.seen("w1", 1) is True
    assert t.seen("w2", 5) is False
    assert t.seen("w0", 5) is False


def test_out_of_order_sequences():
    t = SeqTracker()
    assert t.seen("w", 3) is False
    assert t.seen("w", 5) is False
    assert t.watermark.get("w", 0) == 0
    assert set(t.above["w"]) == {3, 5}
    assert t.seen("w", 1) is False
    assert t.watermark["w"] == 1
    assert t.seen("w", 2) is False
    assert t.watermark["w"] == 3, "the watermark climbs over the gap once it is filled"
    assert set(t.above["w"]) == {5}
    assert t.seen("w", 3) is True
    assert t.seen("w", 5) is True
    assert t.seen("w", 4) is False
    assert t.watermark["w"] == 5
    assert not t.above["w"]


def test_contiguous_input_keeps_nothing_above_the_watermark():
    t = SeqTracker()
    for seq in range(1, 10_001):
        assert t.seen("w", seq) is False
        assert len(t.above["w"]) == 0
    assert t.watermark["w"] == 10_000
    assert t.seen("w", 1) is True
    assert t.seen("w", 10_000) is True


def test_bounded_reordering_keeps_above_small():
    rng = random.Random(0)
    seqs = list(range(1, 5001))
    for start in range(0, len(seqs), 8):
        chunk = seqs[start : start + 8]
        rng.shuffle(chunk)
        seqs[start : start + 8] = chunk
    t = SeqTracker()
    for seq in seqs:
        assert t.seen("w", seq) is False
        assert len(t.above["w"]) < 8
    assert t.watermark["w"] == 5000
    assert not t.above["w"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 40)), max_size=200))
def test_seen_matches_a_plain_set(events):
    t = SeqTracker()
    reference: set[tuple[str, int]] = set()
    for worker, seq in events:
        assert t.seen(worker, seq) is ((worker, seq) in reference)
        reference.add((worker, seq))
    for worker in t.watermark:
        mark = t.watermark[worker]
        assert all((worker, s) in reference for s in range(1, mark + 1))
        assert (worker, mark + 1) not in reference
        assert all(s > mark + 1 for s in t.above[worker])
