"""While no update is owed the trainer lets entries gather between reads, for a gap ``ReadPace`` sets from the
arrival rate (``Feed.read_paced``, with ``Feed.read`` replaced by a recorder: the reading itself is covered with a
real Valkey)."""

from __future__ import annotations

import time

import pytest

from drl.training.ingest import Feed, Intake
from drl.training.loops import STARVED_READ_ENTRIES
from drl.training.pacing import ReadPace

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


class RecordingFeed(Feed):
    """A feed whose reads return ``entries`` entries of ``size`` bytes in all, and are recorded."""

    def __init__(self, pace: ReadPace, entries: int, size: int):
        self.read_at, self.pace, self.entries, self.size, self.calls = 0.0, pace, entries, size, []

    def read(self, count, block_ms, sync_version=None):
        self.calls.append((time.monotonic(), count, block_ms))
        self.read_at = time.monotonic()
        acks = [(b"%d" % i, self.size if i == 0 else 0) for i in range(self.entries)]
        self.last = Intake(acks=acks) if self.entries else None
        return []

    def read_starved(self):
        return self.read_paced(self.pace, STARVED_READ_ENTRIES)


def _recording_feed(gap_s: float, entries: int, size: int) -> tuple[RecordingFeed, list]:
    feed = RecordingFeed(ReadPace(LIMIT, first_s=gap_s, least_s=gap_s, most_s=gap_s), entries, size)
    return feed, feed.calls


def test_starved_reads_are_spaced_by_the_gap_and_take_many_entries():
    feed, calls = _recording_feed(0.01, entries=3, size=1000)
    for _ in range(5):
        feed.read_starved()
    gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:])]
    assert min(gaps) >= 0.01 * 0.99
    assert {(count, block) for _, count, block in calls} == {(STARVED_READ_ENTRIES, 100)}


def test_a_starved_read_tells_the_pace_what_it_got_and_over_what_time():
    feed, _ = _recording_feed(0.01, entries=STARVED_READ_ENTRIES, size=1000)
    seen = []
    feed.pace.after_read = lambda got_bytes, since_s, full: seen.append((got_bytes, since_s, full))
    feed.read_at = time.monotonic() - 0.2
    feed.read_starved()
    ((got, since, full),) = seen
    assert got == 1000 and full and 0.2 <= since < 0.3


def test_a_starved_read_after_a_long_gap_does_not_wait():
    feed, _ = _recording_feed(0.05, entries=0, size=0)
    feed.read_at = time.monotonic() - 1.0
    started = time.monotonic()
    feed.read_starved()
    assert time.monotonic() - started < 0.025
