"""While no update is owed the trainer lets entries gather between reads, for a gap ``ReadPace`` sets from the
arrival rate (``Trainer.read`` replaced by a recorder: the reading itself is covered with a real Valkey)."""

from __future__ import annotations

import time

import pytest

from drl.ingest import Intake
from drl.pacing import ReadPace
from services.trainer.trainer import STARVED_READ_ENTRIES, Trainer

LIMIT = 100_000


def test_the_gap_aims_at_half_the_backlog_at_the_arrival_rate():
    pace = ReadPace(LIMIT, first_s=0.01, least_s=0.002, most_s=0.05)
    assert pace.after_read(got_bytes=40_000, since_s=0.01, full=False) == pytest.approx(0.0125)
    assert pace.after_read(got_bytes=100_000, since_s=0.0125, full=False) == pytest.approx(0.00625)


def test_the_gap_grows_at_most_twofold_per_read_and_stays_within_its_bounds():
    pace = ReadPace(LIMIT, first_s=0.01, least_s=0.002, most_s=0.05)
    gaps = [pace.after_read(got_bytes=10, since_s=pace.gap_s, full=False) for _ in range(4)]
    assert gaps == pytest.approx([0.02, 0.04, 0.05, 0.05]), "a quiet stream opened the gap faster than twofold"
    assert pace.after_read(got_bytes=0, since_s=0.05, full=False) == 0.05
    assert pace.after_read(got_bytes=100 * LIMIT, since_s=0.05, full=False) == 0.002


def test_a_read_that_came_back_full_reads_again_soon():
    pace = ReadPace(LIMIT, first_s=0.04)
    assert pace.after_read(got_bytes=1, since_s=0.04, full=True) == pace.least_s


def _recording_trainer(gap_s: float, entries: int, size: int) -> tuple[Trainer, list]:
    trainer = object.__new__(Trainer)
    trainer._read_at = 0.0
    trainer.pace = ReadPace(LIMIT, first_s=gap_s, least_s=gap_s, most_s=gap_s)
    calls = []

    def read(count, block_ms):
        calls.append((time.monotonic(), count, block_ms))
        trainer._read_at = time.monotonic()
        acks = [(b"%d" % i, size if i == 0 else 0) for i in range(entries)]
        trainer.last_intake = Intake(acks=acks) if entries else None
        return []

    trainer.read = read
    return trainer, calls


def test_starved_reads_are_spaced_by_the_gap_and_take_many_entries():
    trainer, calls = _recording_trainer(0.01, entries=3, size=1000)
    for _ in range(5):
        trainer.read_starved()
    gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:])]
    assert min(gaps) >= 0.01 * 0.99
    assert {(count, block) for _, count, block in calls} == {(STARVED_READ_ENTRIES, 100)}


def test_a_starved_read_tells_the_pace_what_it_got_and_over_what_time():
    trainer, _ = _recording_trainer(0.01, entries=STARVED_READ_ENTRIES, size=1000)
    seen = []
    trainer.pace.after_read = lambda got_bytes, since_s, full: seen.append((got_bytes, since_s, full))
    trainer._read_at = time.monotonic() - 0.2
    trainer.read_starved()
    (got, since, full), = seen
    assert got == 1000 and full and 0.2 <= since < 0.3


def test_a_starved_read_after_a_long_gap_does_not_wait():
    trainer, _ = _recording_trainer(0.05, entries=0, size=0)
    trainer._read_at = time.monotonic() - 1.0
    started = time.monotonic()
    trainer.read_starved()
    assert time.monotonic() - started < 0.025
