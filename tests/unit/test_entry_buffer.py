"""A rollout worker writes steps straight into the entry it fills (``VecEnv.step_into``, ``drl.acting.entries``): the
rows must be exactly the transitions ``VecEnv.step`` returns, episode ends and resets included."""

from __future__ import annotations

import numpy as np

from drl.acting.entries import EntryBuffer, EntryFill, Folding, StepInto
from drl.envs import RECENT_RETURNS, TRAJECTORY_FIELDS, VecEnv
from drl.memory import codec

FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "env_index")


def _layout(envs: VecEnv) -> dict:
    return codec.expected_layout(envs.spec, TRAJECTORY_FIELDS)


def _actions(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.uniform(-3.0, 3.0, size=(n, 1)).astype(np.float32)  # beyond Pendulum's bounds: clipped for the env


def test_step_into_writes_the_rows_step_returns_across_episode_ends():
    a, b = VecEnv("Pendulum-v1", 3, seed=5), VecEnv("Pendulum-v1", 3, seed=5)
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    buffer = EntryBuffer(_layout(b), capacity=3 * 210 + 1)
    buffer.arrays["reward"][:] = np.nan
    for _ in range(210):  # Pendulum truncates at 200 steps: every env resets once
        expected = a.step(_actions(rng_a, 3))
        b.step_into(_actions(rng_b, 3), buffer.arrays, buffer.n)
        got = {k: v[buffer.n : buffer.n + 3] for k, v in buffer.arrays.items()}
        buffer.n += 3
        for name in FIELDS:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert np.isnan(buffer.arrays["reward"][buffer.n])  # nothing written past the rows of the steps
    filled = buffer.filled()
    assert filled["truncated"].sum() == 3 and filled["terminated"].sum() == 0
    assert np.abs(filled["action"]).max() > 2.0  # the action recorded as given, not as clipped for the env
    np.testing.assert_array_equal(a.obs, b.obs)
    assert list(a.finished_returns) == list(b.finished_returns) and len(b.finished_returns) == 3


def test_step_into_skips_fields_the_entry_does_not_carry():
    envs = VecEnv("Pendulum-v1", 2, seed=0)
    buffer = EntryBuffer(codec.expected_layout(envs.spec), capacity=4)
    envs.step_into(np.zeros((2, 1), np.float32), buffer.arrays, 2)
    assert set(buffer.arrays) == {"obs", "action", "reward", "next_obs", "terminated"}


def test_only_the_latest_returns_are_kept():
    envs = VecEnv("CartPole-v1", 1, seed=0)
    for _ in range(20 * 500):
        envs.step(np.zeros(1, dtype=np.int64))
        if len(envs.finished_returns) == RECENT_RETURNS and envs.episode_returns[0] == 0:
            break
    for _ in range(5 * 500):
        envs.step(np.zeros(1, dtype=np.int64))
    assert len(envs.finished_returns) == RECENT_RETURNS


def test_put_appends_rows_and_grows_keeping_what_was_filled():
    buffer = EntryBuffer({"reward": ("<f4", ()), "obs": ("<f4", (2,))}, capacity=3)
    buffer.put({"reward": np.array([1, 2], np.float32), "obs": np.ones((2, 2), np.float32)})
    buffer.put({"reward": np.array([3, 4, 5], np.float32), "obs": np.zeros((3, 2), np.float32)})
    filled = buffer.filled()
    np.testing.assert_array_equal(filled["reward"], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(filled["obs"].sum(axis=1), [2, 2, 0, 0, 0])
    buffer.n = 0
    buffer.put({"reward": np.array([9], np.float32), "obs": np.full((1, 2), 7, np.float32)})
    np.testing.assert_array_equal(buffer.filled()["reward"], [9])


def test_an_entry_encodes_from_the_filled_rows_only():
    envs = VecEnv("Pendulum-v1", 2, seed=3)
    layout = codec.expected_layout(envs.spec)
    buffer = EntryBuffer(layout, capacity=10)
    for _ in range(3):
        envs.step_into(np.zeros((2, 1), np.float32), buffer.arrays, buffer.n)
        buffer.n += 2
    from drl._proto import experience_pb2

    h, d = codec.encode(experience_pb2.BatchHeader(run="r", worker_id="w", seq=1), buffer.filled())
    batch = codec.decode({b"h": h, b"d": d}, "r", layout)
    assert len(batch.arrays["reward"]) == 6
    np.testing.assert_array_equal(batch.arrays["next_obs"], buffer.arrays["next_obs"][:6])


def _worker(seed: int, least: int = 8, most: int = 12, folder=None):
    """A rollout worker's stepping parts without its memory server: ``flush`` records the entry instead of
    sending it (the sending is covered by the integration tests with a real Valkey). With ``folder``, steps go
    through it (``Folding``) instead of straight into the entry (``StepInto``)."""
    from drl.algorithms import make_actor
    from drl.config import replace
    from drl.presets import get_preset
    from services.rollout.worker import RolloutWorker

    cfg = replace(get_preset("sac", "Pendulum-v1"), envs_per_worker=3)
    worker = object.__new__(RolloutWorker)
    envs = VecEnv(cfg.env, 3, seed=seed)
    actor = make_actor("sac", envs.spec, cfg, seed=seed)
    rng = np.random.default_rng(seed)
    actor.load({k: (0.1 * rng.standard_normal(s)).astype(np.float32) for k, s in actor.shapes.items()})
    entry = EntryBuffer(codec.expected_layout(envs.spec), most + 3)
    write = StepInto(envs, entry) if folder is None else Folding(envs, entry, folder)
    worker.__dict__.update(
        envs=envs,
        actor=actor,
        version=0,
        random_steps=0,
        stepped=0,
        total=10**9,
        stop=False,
        entry=entry,
        write=write,
        fill=EntryFill(least, most, fill_s=1e9),
        compression="",
    )
    worker.sent = []

    def flush(iteration_end=False, last=False):
        worker.sent.append({k: v.copy() for k, v in worker.entry.filled().items()})
        worker.entry.n = 0
        worker.fill.restart()

    worker.flush = flush
    return worker


class PassThrough:
    """A folder that folds nothing: each step's first ``count`` transitions come out as they went in."""

    def push(self, step, count):
        return {k: v[:count] for k, v in step.items() if k in ("obs", "action", "reward", "next_obs", "terminated")}

    def flush(self):
        return None


def test_steps_written_in_place_are_the_transitions_a_folder_is_handed_and_the_loop_stops_at_the_target():
    into, folded = _worker(4), _worker(4, folder=PassThrough())
    into.collect(100)
    folded.collect(100)
    assert into.stepped == folded.stepped == 100
    assert [len(e["reward"]) for e in into.sent] == [len(e["reward"]) for e in folded.sent]
    assert sum(len(e["reward"]) for e in into.sent) == 100  # the last step's extra env is not counted
    assert max(len(e["reward"]) for e in into.sent) <= 12 + 2  # full at the most, plus part of a step
    for a, b in zip(into.sent, folded.sent):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_random_steps_and_a_missing_policy_act_at_random_and_stop_at_their_end():
    worker = _worker(0)
    worker.random_steps = 10
    act, limit = worker.policy(100)
    assert limit == 10 and act != worker.actor.act
    worker.collect(30, hand_in=False)
    assert worker.stepped == 30, "the loop stopped at the end of the random steps instead of going on"
    assert worker.policy(100) == (worker.actor.act, 100)
    worker.version = -1
    act, limit = worker.policy(100)
    assert limit == 100 and act != worker.actor.act


def test_the_actors_schedule_follows_the_worker_through_its_share():
    worker = _worker(1)
    worker.total = 40
    seen = []
    worker.actor.set_progress = seen.append
    worker.collect(30, hand_in=False)
    assert seen[0] == 0 and seen == sorted(seen) and 0.6 < seen[-1] < 0.75


class FakeProducer:
    """drl's own experience writer, faked: appends always succeed and report the trainer's widening factor and
    the worker's share (None: no assignment)."""

    def __init__(self, widening: int, share: int | None = None):
        self.widening, self.share, self.entries = widening, share, []

    def send(self, seq, h, d, produced_total):
        from drl.memory import AppendReply

        self.entries.append((seq, h, d))
        return AppendReply(
            appended=True,
            policy_version=0,
            stop=False,
            watermark=0,
            epoch=b"e",
            widening=self.widening,
            share=self.share,
        )


def test_a_worker_lets_its_entries_grow_with_the_room_its_appends_report_fake_producer():
    from types import SimpleNamespace

    from drl.config import replace
    from drl.memory.backlog import backlog_limits
    from drl.presets import get_preset

    worker = _worker(1, least=64, most=256)
    cfg = replace(get_preset("sac", "Pendulum-v1"), envs_per_worker=3)
    limits = backlog_limits(cfg, codec.expected_layout(worker.envs.spec))
    assert (limits.most, limits.most_in(4)) == (256, 1024)
    del worker.flush
    worker.__dict__.update(
        cfg=cfg,
        limits=limits,
        widening=1,
        segment_rows=0,
        producer=FakeProducer(widening=4),
        seq=0,
        produced=0,
        ctx=SimpleNamespace(run="r", name="rollout-0"),
        report=lambda: None,
    )
    worker.collect(300, hand_in=False)
    assert worker.fill.most == 1024 and worker.widening == 4
    worker.collect(2000)
    sizes = [
        codec.decode({b"h": h, b"d": d}, "r", codec.expected_layout(worker.envs.spec)).header.count
        for _, h, d in worker.producer.entries
    ]
    assert sizes[0] <= 256 + 2 and max(sizes) > 256, sizes
    assert all(size <= 1024 + 2 for size in sizes) and sum(sizes) == 2300

    worker.producer.widening = 1
    worker.collect(3000)
    assert worker.fill.most == 256
    assert len(worker.entry.arrays["reward"]) >= 1024 + 3, "the entry buffer shrank below what it held"


def _async_worker(least: int, most: int, total: int, assigned: dict):
    """A worker whose flush goes through the real ``flush`` into ``FakeProducer`` and whose HGET of its share is
    faked (``assigned["value"]``, counted in ``assigned["reads"]``)."""
    from types import SimpleNamespace

    from drl.config import replace
    from drl.memory.backlog import backlog_limits
    from drl.presets import get_preset

    worker = _worker(2, least=least, most=most)
    cfg = replace(get_preset("sac", "Pendulum-v1"), envs_per_worker=3, batch_transitions=least)
    del worker.flush
    worker.__dict__.update(
        cfg=cfg,
        limits=backlog_limits(cfg, codec.expected_layout(worker.envs.spec)),
        widening=1,
        producer=FakeProducer(widening=1),
        seq=0,
        produced=0,
        total=total,
        segment_rows=0,
        batch_transitions=least,
        _share_read_at=0,
        ctx=SimpleNamespace(run="r", name="rollout-0"),
        report=lambda: None,
    )

    def refresh_share():
        assigned["reads"] += 1
        worker.take_share(assigned["value"])

    worker.refresh_share = refresh_share
    return worker


def test_an_async_worker_takes_its_share_from_its_appends_and_reads_it_itself_only_between_them_fake_producer():
    from services.rollout.worker import ASYNC_CHUNK_ENTRIES

    assigned = {"value": None, "reads": 0}
    worker = _async_worker(least=8, most=12, total=3000, assigned=assigned)
    worker.producer.share = 2400  # live scaling lowered it; the first append says so
    worker.collect_async()
    assert worker.total == 2400 and worker.stepped <= 2400 + 12 + 3
    assert assigned["reads"] == 1, "entries of 12 steps, sent well within a chunk: one HGET, before counting done"

    chunk = 8 * ASYNC_CHUNK_ENTRIES  # 128 steps
    assigned = {"value": 1000, "reads": 0}
    worker = _async_worker(least=8, most=10**6, total=1000, assigned=assigned)
    worker.fill.fill_s = worker.fill.least = 10**6  # entries never fill: no append reads the share
    steps_at_reads = []
    read = worker.refresh_share

    def counted():
        steps_at_reads.append(worker.stepped)
        read()

    worker.refresh_share = counted
    worker.collect_async()
    assert worker.stepped >= 1000 and not worker.producer.entries
    gaps = np.diff([0, *steps_at_reads])
    assert len(steps_at_reads) >= 1000 // chunk and gaps.max() <= chunk + 3, steps_at_reads
