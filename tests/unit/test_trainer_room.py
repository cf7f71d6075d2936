"""The trainer widens the backlog's limits while it waits for data and restores them once it falls behind the
replay ratio (``drl.training.pacing.Widening``), driven through ``Trainer.run_async`` with a fake of drl's own experience
reader and a scripted ``Learning``; the append's side of the widening is tested against a real Valkey in
``tests/integration/test_memory_backend.py``."""

from __future__ import annotations

from types import SimpleNamespace

from drl.memory.backlog import BacklogLimits
from drl.training.collective import SOLO
from drl.training.ingest import Ledger, Ledgers
from drl.training.pacing import WIDENING, RateLimiter, ReadPace, Widening
from drl.training.shards import Channel, Channels
from services.trainer.trainer import Trainer
from tests.harness import fast_config

LIMIT, TRANSITION = 10_000, 100


class FakeReader:
    def __init__(self):
        self.factors: list[int] = []
        self.recovery = self

    def set_widening(self, factor: int) -> None:
        self.factors.append(factor)


class ScriptedLearning:
    """Owes the updates of ``owed``, one loop iteration each; every update counts."""

    def __init__(self, owed: list[int]):
        self.learner = SimpleNamespace(updates=0)
        self.script = iter(owed)

    def owed(self, consumed: int) -> int:
        return next(self.script)

    def update(self, consumed: int) -> None:
        self.learner.updates += 1


def _trainer_fake_reader(owed: list[int], **changes) -> Trainer:
    """A trainer whose loop sees the owed updates in ``owed``, one iteration each, and then stops."""
    cfg = fast_config(**changes)
    trainer = object.__new__(Trainer)
    trainer.cfg = cfg
    trainer.learning = ScriptedLearning(owed)
    ledger = Ledger()
    trainer.ledger = Ledgers.single(ledger)
    trainer.limiter = RateLimiter.of(cfg)
    pace = ReadPace(LIMIT)
    reader = FakeReader()
    limits = BacklogLimits(transition_bytes=TRANSITION, least=8, limit_bytes=LIMIT, entries=16, ceiling=10**6)
    widening = Widening(reader, limits, 10**9, cfg.learning_starts, pace)
    reader.factors.clear()
    trainer.pub = SimpleNamespace(published_updates=0)
    iterations = iter(range(len(owed) + 1))
    trainer.should_stop = lambda force=False: "" if next(iterations) < len(owed) else "stopped"
    feed = SimpleNamespace(
        read=lambda count, block_ms, sync_version=None: [], read_paced=lambda pace, count, block_ms=100: [1]
    )
    trainer.channels = Channels([Channel(0, reader, ledger, feed, pace, widening)])
    trainer.group, trainer.rank, trainer.size = SOLO, 0, 1
    trainer.widening, trainer.pace = widening, pace
    trainer.report = lambda *a, **k: None
    return trainer


def test_the_limits_widen_while_the_learner_waits_for_data_and_come_back_when_it_falls_behind_fake_reader():
    cfg = fast_config()
    assert cfg.updates_per_transition * cfg.ratio_tolerance < 10
    # owed 10: 10 behind, it trains (10 updates); owed 10 again: nothing owed, it waits for data and widens;
    # owed 12: 2 behind, within the tolerance, it keeps the limits wide; owed 40: 28 behind, it restores them
    trainer = _trainer_fake_reader([10, 10, 12, 40, 40], publish_every_updates=10**9)
    trainer.run_async()
    assert trainer.widening.reader.factors == [WIDENING, 1], trainer.widening.reader.factors
    assert trainer.widening.factor == 1 and trainer.pace.limit_bytes == LIMIT


def test_the_limits_stay_before_learning_starts_within_what_the_widened_backlog_holds_fake_reader():
    widened = WIDENING * LIMIT // TRANSITION
    near = _trainer_fake_reader([0, 0, 0], learning_starts=widened, publish_every_updates=10**9)
    near.run_async()
    assert near.widening.reader.factors == [], "the limits widened with learning about to start"

    far = _trainer_fake_reader([0, 0, 0], learning_starts=widened + 1, publish_every_updates=10**9)
    far.run_async()
    assert far.widening.reader.factors == [WIDENING] and far.pace.limit_bytes == WIDENING * LIMIT


def test_the_widening_stays_within_the_backlogs_byte_limit_fake_reader():
    limits = BacklogLimits(transition_bytes=TRANSITION, least=8, limit_bytes=LIMIT, entries=16, ceiling=10**6)
    reader = FakeReader()
    assert Widening(reader, limits, 2 * LIMIT, 0, ReadPace(LIMIT)).most == 2
    assert Widening(reader, limits, LIMIT // 2, 0, ReadPace(LIMIT)).most == 1
    assert reader.factors == [1, 1], "a new trainer did not restore the limits another one may have widened"
