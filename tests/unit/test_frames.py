"""Frames sent and stored once (``drl.frames``): a worker's serials, the entry's frame table on the wire, the
frame replay, rebuilt bit-exactly against the whole observations the env gave, and never a stack that mixes two
episodes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from drl import frames
from drl._proto import experience_pb2
from drl.acting.entries import EntryBuffer, Folding, StepInto
from drl.acting.nstep import NSTEP_FIELDS, NStepFolder
from drl.envs import VecEnv
from drl.memory import codec
from drl.memory.codec import DecodeError
from drl.training.replay import PrioritizedReplay, ReplayBuffer

STACKED = "DrlTest/Frames-v0"
SINGLE = "DrlTest/FramesHWC-v0"


class Painted(gym.Env):
    """Each frame is painted with (episode, step) and a random byte pattern; episodes end after 3 to 11 steps,
    terminated or truncated, so stacks cross episode boundaries often."""

    def __init__(self, shape=(6, 5)):
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.episode, self.t = -1, 0

    def _frame(self) -> np.ndarray:
        frame = self.np_random.integers(0, 256, self.observation_space.shape, dtype=np.uint8)
        frame.reshape(-1)[:2] = (self.episode % 256, self.t)
        return frame

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        self.length = int(self.np_random.integers(3, 12))
        return self._frame(), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        terminated = end and self.episode % 2 == 0
        return self._frame(), float(action) + self.t, terminated, end and not terminated, {}


if STACKED not in gym.envs.registry:
    gym.register(STACKED, entry_point=lambda render_mode=None: gym.wrappers.FrameStackObservation(Painted(), 4))
    gym.register(SINGLE, entry_point=lambda render_mode=None: Painted((4, 4, 3)))


def episode_of(frame: np.ndarray) -> int:
    return int(frame.reshape(-1)[0])


def stepped(env_id: str, n_envs: int, steps: int, log: int | None, seed: int = 3):
    """Steps a VecEnv with fixed actions; returns it and the per-step transitions."""
    envs = VecEnv(env_id, n_envs, seed=seed)
    if log:
        envs.log_frames(log)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        out.append(envs.step(rng.integers(0, 3, n_envs)))
    return envs, out


@pytest.mark.parametrize("env_id,k", [(STACKED, 4), (SINGLE, 1)])
def test_frame_stack_is_found(env_id, k):
    spec = VecEnv(env_id, 1, seed=0).spec
    assert spec.frame_stack == k
    assert spec.frame_shape == ((6, 5) if k == 4 else (4, 4, 3))


@pytest.mark.parametrize("env_id", [STACKED, SINGLE])
def test_entries_round_trip_the_wire_bit_exactly(env_id):
    whole_envs, whole = stepped(env_id, 3, 40, log=None)
    envs, serial = stepped(env_id, 3, 40, log=10_000)
    layout = codec.expected_layout(envs.spec, {"truncated": ("|u1", ()), "env_index": ("<u2", ())})
    assert list(layout)[-1] == frames.TABLE and layout["obs"] == ("<u4", (envs.spec.frame_stack,))
    for part in range(4):
        rows = {k: np.concatenate([s[k] for s in serial[part * 10 : (part + 1) * 10]]) for k in serial[0]}
        packed = frames.pack(rows, envs.frames)
        header = experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=part + 1)
        h, d = codec.encode(header, packed)
        batch = codec.decode({b"h": h, b"d": d}, "r", layout)
        assert batch.count == 30
        assert len(batch.arrays[frames.TABLE]) < 30 + 3 * (envs.spec.frame_stack + 4)
        rebuilt = frames.expand(batch.arrays)
        for name in ("obs", "next_obs"):
            expect = np.concatenate([s[name] for s in whole[part * 10 : (part + 1) * 10]])
            np.testing.assert_array_equal(rebuilt[name], expect)
        np.testing.assert_array_equal(
            rebuilt["reward"], np.concatenate([s["reward"] for s in whole[part * 10 : (part + 1) * 10]])
        )


def test_a_stack_never_mixes_two_episodes():
    envs, serial = stepped(STACKED, 2, 60, log=10_000)
    rows = {k: np.concatenate([s[k] for s in serial]) for k in serial[0]}
    rebuilt = frames.expand(frames.pack(rows, envs.frames))
    episodes_seen = set()
    for name in ("obs", "next_obs"):
        for stack in rebuilt[name]:
            kinds = {episode_of(f) for f in stack}
            assert len(kinds) == 1, f"{name} stack mixes episodes {kinds}"
            episodes_seen |= kinds
    assert len(episodes_seen) > 6
    ends = (rows["terminated"] == 1) | (rows["truncated"] == 1)
    assert ends.sum() > 6


@pytest.mark.parametrize("env_id", [STACKED, SINGLE])
def test_a_segment_rebuilds_its_environments_rows_and_next_observations_where_they_are_needed(env_id):
    """``frames.segment`` of a packed entry against the whole observations the env gave: each environment's
    observations bit-exactly, and its next observations at its last row and at truncated rows (not at
    terminated ones), as ``bootstrap_rows`` says."""
    whole_envs, whole = stepped(env_id, 3, 40, log=None)
    envs, serial = stepped(env_id, 3, 40, log=10_000)
    rows = {k: np.concatenate([s[k] for s in serial]) for k in serial[0]}
    expect = {k: np.concatenate([s[k] for s in whole]) for k in whole[0]}
    packed = frames.pack(rows, envs.frames)
    index = np.tile(np.arange(3), 40)
    bootstrapped = 0
    for env in range(3):
        own = np.flatnonzero(index == env)
        seg = frames.segment(packed, own)
        assert "next_obs" not in seg and frames.TABLE not in seg
        np.testing.assert_array_equal(seg["obs"], expect["obs"][own])
        np.testing.assert_array_equal(seg["reward"], expect["reward"][own])
        terminated, truncated = expect["terminated"][own] == 1, expect["truncated"][own] == 1
        needed = (truncated | (np.arange(40) == 39)) & ~terminated
        np.testing.assert_array_equal(frames.bootstrap_rows(terminated, truncated), needed)
        np.testing.assert_array_equal(seg[frames.END_OBS], expect["next_obs"][own][needed])
        bootstrapped += int(truncated.sum())
    assert bootstrapped > 2  # Painted truncates about half of its episodes


def test_folded_n_step_transitions_keep_their_frames():
    spec_envs = VecEnv(STACKED, 2, seed=5)
    spec_envs.log_frames(5_000)
    whole_envs = VecEnv(STACKED, 2, seed=5)
    fold_serial, fold_whole = NStepFolder(3, 0.9, 2), NStepFolder(3, 0.9, 2)
    rng = np.random.default_rng(1)
    serial_rows, whole_rows = [], []
    for _ in range(50):
        actions = rng.integers(0, 3, 2)
        for envs, folder, keep in ((spec_envs, fold_serial, serial_rows), (whole_envs, fold_whole, whole_rows)):
            out = folder.push(envs.step(actions), 2)
            if out is not None:
                keep.append(out)
    serial_rows.append(fold_serial.flush())
    whole_rows.append(fold_whole.flush())
    cat = lambda parts: {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    rebuilt = frames.expand(frames.pack(cat(serial_rows), spec_envs.frames))
    expect = cat(whole_rows)
    for name in ("obs", "next_obs", "reward", "nsteps", "terminated"):
        np.testing.assert_array_equal(rebuilt[name], expect[name])


def test_the_worker_entry_path_steps_into_serials():
    envs = VecEnv(STACKED, 2, seed=0)
    envs.log_frames(1000)
    layout = frames.serial_layout(codec.expected_layout(envs.spec, dict(NSTEP_FIELDS)))
    assert frames.TABLE not in layout and layout["obs"] == ("<i8", (4,))
    entry = EntryBuffer(layout, 64)
    write = Folding(envs, entry, NStepFolder(2, 0.99, 2))
    for _ in range(10):
        write(lambda obs: np.zeros(len(obs), dtype=np.int64), 2)
    write.flush()
    packed = frames.pack(entry.filled(), envs.frames)
    assert entry.n == 20 and packed["obs"].max() < len(packed[frames.TABLE])
    plain = EntryBuffer({k: v for k, v in layout.items() if k != "nsteps"}, 64)
    step = StepInto(envs, plain)
    step(lambda obs: np.zeros(len(obs), dtype=np.int64), 2)
    assert plain.n == 2


def test_the_log_refuses_frames_it_no_longer_holds():
    log = frames.FrameRing((2, 2), 4)
    for i in range(6):
        log.put(np.full((2, 2), i, np.uint8))
    assert log.get(np.array([2, 5]))[:, 0, 0].tolist() == [2, 5]
    with pytest.raises(RuntimeError, match="frames 1..5"):
        log.get(np.array([1, 5]))
    log.resize(8)
    assert log.get(np.array([2, 3, 4, 5]))[:, 0, 0].tolist() == [2, 3, 4, 5]


def _entry(envs, serial, lo, hi, seq):
    rows = {
        k: np.concatenate([s[k] for s in serial[lo:hi]]) for k in ("obs", "action", "reward", "next_obs", "terminated")
    }
    layout = codec.expected_layout(envs.spec)
    h, d = codec.encode(
        experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=seq), frames.pack(rows, envs.frames)
    )
    return codec.decode({b"h": h, b"d": d}, "r", layout).arrays


def test_decode_refuses_an_index_past_the_table():
    envs, serial = stepped(STACKED, 1, 5, log=100)
    arrays = dict(_entry(envs, serial, 0, 5, 1))
    arrays["next_obs"] = arrays["next_obs"].copy()
    arrays["next_obs"][2, 1] = len(arrays[frames.TABLE])
    h, d = codec.encode(experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=1), arrays)
    with pytest.raises(DecodeError, match="bad_index"):
        codec.decode({b"h": h, b"d": d}, "r", codec.expected_layout(envs.spec))
    arrays = dict(_entry(envs, serial, 0, 5, 1))
    arrays[frames.TABLE] = np.zeros((len(arrays[frames.TABLE]), 6, 6), np.uint8)
    h, d = codec.encode(experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=1), arrays)
    with pytest.raises(DecodeError, match="wrong_shape"):
        codec.decode({b"h": h, b"d": d}, "r", codec.expected_layout(envs.spec))


@pytest.mark.parametrize("kind", [ReplayBuffer, PrioritizedReplay])
def test_frame_replay_rebuilds_stacks_and_drops_what_it_overwrote(kind):
    whole_envs, whole = stepped(STACKED, 2, 200, log=None, seed=9)
    envs, serial = stepped(STACKED, 2, 200, log=10_000, seed=9)
    replay = kind(envs.spec, 60, seed=0)
    assert replay.ring.capacity == 66
    stored = replay.data["obs"].nbytes + replay.data["next_obs"].nbytes + replay.ring.frames.nbytes
    assert stored / replay.capacity < 0.5 * 2 * 4 * 6 * 5
    sizes = []
    for seq, lo in enumerate(range(0, 200, 10)):
        replay.add(_entry(envs, serial, lo, lo + 10, seq + 1))
        sizes.append(len(replay))
        assert 0 < len(replay) <= 60
        batch = replay.sample(64)
        assert batch["obs"].dtype == torch.uint8 and batch["obs"].shape == (64, 4, 6, 5)
        expect_obs = np.concatenate([s["obs"] for s in whole[max(0, lo - 40) : lo + 10]])
        expect_next = np.concatenate([s["next_obs"] for s in whole[max(0, lo - 40) : lo + 10]])
        reward = np.concatenate([s["reward"] for s in whole[max(0, lo - 40) : lo + 10]])
        for obs, nxt, r in zip(batch["obs"].numpy(), batch["next_obs"].numpy(), batch["reward"].numpy()):
            match = np.flatnonzero((expect_obs == obs).all(axis=(1, 2, 3)) & (expect_next == nxt).all(axis=(1, 2, 3)))
            assert len(match), "a sampled transition is not one the env gave"
            assert r in reward[match]
    assert min(sizes[3:]) < 60, "a table larger than its room must push the oldest transitions out early"


def test_frame_replay_checkpoint_round_trip():
    envs, serial = stepped(STACKED, 2, 60, log=10_000, seed=4)
    replay = PrioritizedReplay(envs.spec, 50, seed=0)
    for seq, lo in enumerate(range(0, 60, 10)):
        replay.add(_entry(envs, serial, lo, lo + 10, seq + 1))
    arrays, meta = replay.dump()
    again = PrioritizedReplay(envs.spec, 50, seed=0)
    again.load(arrays, meta)
    assert len(again) == len(replay)
    order = lambda r: np.arange(r.pos - r.size, r.pos) % r.capacity
    for name in ("obs", "next_obs"):
        a = replay.ring.stacks(replay.data[name][order(replay)], envs.spec.obs_shape)
        b = again.ring.stacks(again.data[name][order(again)], envs.spec.obs_shape)
        np.testing.assert_array_equal(a, b)
    smaller = ReplayBuffer(envs.spec, 20, seed=0)
    smaller.load(arrays, meta)
    assert 0 < len(smaller) <= 20
    batch = smaller.sample(8)
    assert batch["obs"].shape == (8, 4, 6, 5)


@pytest.mark.parametrize("kind", ["zstd", "lz4"])
def test_compressed_entries_round_trip_and_bad_ones_are_refused(kind):
    envs, serial = stepped(STACKED, 2, 20, log=1000)
    rows = {k: np.concatenate([s[k] for s in serial]) for k in ("obs", "action", "reward", "next_obs", "terminated")}
    packed = frames.pack(rows, envs.frames)
    layout = codec.expected_layout(envs.spec)
    header = experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=1)
    plain_h, plain_d = codec.encode(header, packed)
    h, d = codec.encode(experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=1), packed, kind)
    parsed = experience_pb2.BatchHeader.FromString(h)
    assert parsed.compression == kind and parsed.raw_nbytes == len(plain_d)
    batch = codec.decode({b"h": h, b"d": d}, "r", layout)
    for name, arr in packed.items():
        np.testing.assert_array_equal(batch.arrays[name], arr)
    with pytest.raises(DecodeError, match="truncated"):
        codec.decode({b"h": h, b"d": d[: len(d) // 2]}, "r", layout)
    parsed.raw_nbytes = len(plain_d) - 1
    with pytest.raises(DecodeError, match="truncated"):
        codec.decode({b"h": parsed.SerializeToString(), b"d": d}, "r", layout)
    parsed.raw_nbytes, parsed.compression = len(plain_d), "brotli"
    with pytest.raises(DecodeError, match="bad_header"):
        codec.decode({b"h": parsed.SerializeToString(), b"d": d}, "r", layout)
    parsed.compression, parsed.raw_nbytes = kind, codec.MAX_ENTRY_BYTES + 1
    with pytest.raises(DecodeError, match="too_large"):
        codec.decode({b"h": parsed.SerializeToString(), b"d": d}, "r", layout)


def test_auto_compression_is_zstd_for_frames_only():
    assert codec.compression_for("auto", VecEnv(STACKED, 1, seed=0).spec) == "zstd"
    assert codec.compression_for("auto", VecEnv("CartPole-v1", 1, seed=0).spec) == ""
    assert codec.compression_for("none", VecEnv(STACKED, 1, seed=0).spec) == ""
    assert codec.compression_for("lz4", VecEnv("CartPole-v1", 1, seed=0).spec) == "lz4"


def test_status_returns_are_whole_game_scores_for_atari():
    """Training ends an Atari episode at a lost life and clips rewards; the returns a worker reports are the
    games' real scores (``RecordEpisodeStatistics``), one per game."""
    envs = VecEnv("ALE/Breakout-v5", 1, seed=0)
    envs.log_frames(100)
    rng = np.random.default_rng(0)
    ends = 0
    while len(envs.finished_returns) < 1:
        step = envs.step(rng.integers(0, 4, 1))
        ends += int(step["terminated"][0] or step["truncated"][0])
    assert ends >= 5, "every lost life ends a training episode"
    assert len(envs.finished_returns) == 1
