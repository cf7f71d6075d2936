"""When a rollout worker's entry is full (``services.rollout.worker.EntryFill``), driven by hand-set clocks: CPU
time decides, wall time only bounds an entry of an env that waits rather than computes."""

from __future__ import annotations

import time

from drl.acting.entries import FILL_CLOCK_EVERY, FILL_WALL_FACTOR, EntryFill


class Clock:
    def __init__(self):
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def _fill(least=64, most=256, fill_s=0.010):
    cpu, wall = Clock(), Clock()
    return EntryFill(least, most, fill_s, cpu_clock=cpu, wall_clock=wall), cpu, wall


def test_never_full_below_the_least_whatever_the_clocks():
    fill, cpu, wall = _fill()
    cpu.now, wall.now = 1.0, 1000.0
    assert not fill.full(63)
    assert fill.full(64)


def test_keeps_filling_while_cpu_time_is_short_then_fills_by_cpu_time():
    fill, cpu, wall = _fill()
    cpu.now, wall.now = 0.009, 0.5  # time-sliced: much wall time, little CPU time
    assert not fill.full(100)
    cpu.now = 0.010
    assert fill.full(100 + FILL_CLOCK_EVERY)


def test_full_at_the_most_even_with_cpu_time_left():
    fill, cpu, wall = _fill()
    assert not fill.full(255)
    assert fill.full(256)


def test_wall_time_bounds_an_env_that_waits():
    fill, cpu, wall = _fill()
    wall.now = FILL_WALL_FACTOR * 0.010 - 0.001
    assert not fill.full(100)
    wall.now = FILL_WALL_FACTOR * 0.010
    assert fill.full(100 + FILL_CLOCK_EVERY)


def test_restart_starts_both_clocks_again():
    fill, cpu, wall = _fill()
    cpu.now, wall.now = 0.5, 5.0
    assert fill.full(100)
    fill.restart()
    assert not fill.full(100)
    cpu.now += 0.010
    assert fill.full(100 + FILL_CLOCK_EVERY)


def test_past_the_least_the_clocks_are_read_once_every_few_transitions():
    fill, cpu, wall = _fill()
    start = cpu.reads
    for pending in range(64, 64 + 4 * FILL_CLOCK_EVERY):
        assert not fill.full(pending)
    assert cpu.reads - start == 4
    cpu.now = 0.010
    assert not fill.full(64 + 4 * FILL_CLOCK_EVERY - 1)
    assert fill.full(64 + 4 * FILL_CLOCK_EVERY)
    fill.restart()
    assert cpu.reads - start == 6
    assert not fill.full(64) and cpu.reads - start == 7  # after a restart, read again once past the least


def test_fill_zero_sends_every_entry_at_the_least():
    fill, cpu, wall = _fill(fill_s=0.0)
    assert not fill.full(63)
    assert fill.full(64)


def test_default_clock_is_this_threads_cpu_time_not_sleep():
    fill = EntryFill(1, 1000, 0.050)
    time.sleep(0.1)  # sleeping uses no CPU time, and 0.1 s is far below the wall bound
    assert not fill.full(10)
    deadline = time.thread_time() + 0.06
    while time.thread_time() < deadline:
        pass
    assert fill.full(10 + FILL_CLOCK_EVERY)


def test_check_at_is_where_full_can_next_say_yes():
    fill, cpu, wall = _fill(least=64, most=70)
    assert fill.check_at == 64
    assert not fill.full(64) and fill.check_at == min(64 + FILL_CLOCK_EVERY, 70)
    assert not fill.full(69)
    assert fill.full(70)
    fill.restart()
    assert fill.check_at == 64
