"""The trainer widens the backlog's limits while it waits for data and restores them once it falls behind the
replay ratio (``Trainer.widen``), driven through ``run_async`` with a fake of drl's own ``Consumer`` wrapper and a
scripted learner; the append script's side of the room is tested against a real Valkey in
``tests/integration/test_memory_backend.py``."""

from __future__ import annotations

from types import SimpleNamespace

from drl.memory.backlog import ReadPace
from services.trainer.trainer import ROOM_FACTOR, Trainer
from tests.harness import fast_config

LIMIT, TRANSITION = 10_000, 100


class FakeConsumer:
    def __init__(self):
        self.rooms: list[int] = []

    def set_widening(self, factor: int) -> None:
        self.rooms.append(factor)


def _trainer(owed: list[int], **changes) -> Trainer:
    """A trainer whose loop sees the owed updates in ``owed``, one iteration each, and then stops."""
    trainer = object.__new__(Trainer)
    trainer.cfg = fast_config(**changes)
    trainer.consumer = FakeConsumer()
    trainer.learner = SimpleNamespace(updates=0)
    trainer.limit_bytes, trainer.transition_bytes = LIMIT, TRANSITION
    trainer.room_factor, trainer.room = ROOM_FACTOR, 1
    trainer.read_pace = ReadPace(LIMIT)
    trainer.consumed = trainer.published_updates = 0
    trainer.stop_reason = "stopped"
    script = iter(owed)
    iterations = iter(range(len(owed) + 1))
    trainer.should_stop = lambda force=False: "" if next(iterations) < len(owed) else "stopped"
    trainer.owed_updates = lambda: next(script)
    trainer.read_starved = lambda: [1]
    trainer.read = lambda count, block_ms: []
    trainer.update = lambda: setattr(trainer.learner, "updates", trainer.learner.updates + 1)
    trainer.report = lambda *a, **k: None
    return trainer


def test_the_limits_widen_while_the_learner_waits_for_data_and_come_back_when_it_falls_behind():
    cfg = fast_config()
    assert cfg.updates_per_transition * cfg.ratio_tolerance < 10
    # owed 10: 10 behind, it trains (10 updates); owed 10 again: nothing owed, it waits for data and widens;
    # owed 12: 2 behind, within the tolerance, it keeps the limits wide; owed 40: 28 behind, it restores them
    trainer = _trainer([10, 10, 12, 40, 40], publish_every_updates=10**9)
    trainer.run_async()
    assert trainer.consumer.rooms == [ROOM_FACTOR, 1], trainer.consumer.rooms
    assert trainer.room == 1 and trainer.read_pace.limit_bytes == LIMIT


def test_the_limits_stay_before_learning_starts_within_what_the_widened_backlog_holds():
    widened = ROOM_FACTOR * LIMIT // TRANSITION
    near = _trainer([0, 0, 0], learning_starts=widened, publish_every_updates=10**9)
    near.run_async()
    assert near.consumer.rooms == [], "the limits widened with learning about to start"

    far = _trainer([0, 0, 0], learning_starts=widened + 1, publish_every_updates=10**9)
    far.run_async()
    assert far.consumer.rooms == [ROOM_FACTOR] and far.read_pace.limit_bytes == ROOM_FACTOR * LIMIT
