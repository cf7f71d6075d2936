"""The trainer reads at most every ``STARVED_GATHER_S`` while no update is owed, and then takes whatever arrived
meanwhile (``Trainer.read`` replaced by a recorder: the reading itself is covered with a real Valkey)."""

from __future__ import annotations

import time

from services.trainer.trainer import STARVED_GATHER_S, STARVED_READ_ENTRIES, Trainer


def test_starved_reads_are_spaced_and_take_many_entries():
    trainer = object.__new__(Trainer)
    trainer._starved_read_at = 0.0
    calls = []
    trainer.read = lambda count, block_ms: calls.append((time.monotonic(), count, block_ms)) or []
    for _ in range(5):
        trainer.read_starved()
    gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:])]
    assert min(gaps) >= STARVED_GATHER_S * 0.99
    assert {(count, block) for _, count, block in calls} == {(STARVED_READ_ENTRIES, 100)}


def test_a_starved_read_after_a_long_gap_does_not_wait():
    trainer = object.__new__(Trainer)
    trainer._starved_read_at = time.monotonic() - 1.0
    trainer.read = lambda count, block_ms: []
    started = time.monotonic()
    trainer.read_starved()
    assert time.monotonic() - started < STARVED_GATHER_S / 2
