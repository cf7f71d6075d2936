"""The writer's outbox (``drl.memory.outbox``), without a server: appends in order, waits after refusals with a
count of refusals in a row, keeps appended entries until the watermark covers them (raising the floor to the
highest covered), re-sends what was not consumed after a data loss, ahead of new entries, and reads floors."""

from __future__ import annotations

import dataclasses

import pytest

from drl.memory.base import AppendReply
from drl.memory.outbox import Outbox, Outgoing, format_floor, parse_floors


def reply(appended=True, stop=False, watermark=0, epoch=b"e1") -> AppendReply:
    fields = {f.name: None for f in dataclasses.fields(AppendReply)}
    fields.update(appended=appended, policy_version=-1, stop=stop, watermark=watermark, epoch=epoch, widening=1)
    return AppendReply(**{k: (0 if v is None else v) for k, v in fields.items()})


def item(seq: int) -> Outgoing:
    return Outgoing(seq, b"h%d" % seq, b"d%d" % seq, seq * 10)


def test_refusals_wait_with_their_count_in_a_row_and_are_counted():
    box = Outbox()
    box.queued.extend([item(1), item(2)])
    answers = iter([reply(False), reply(False), reply(), reply(False), reply()])
    waits: list[int] = []
    last = box.drain(lambda _: next(answers), waits.append)
    assert last.appended and waits == [0, 1, 0], "the count restarts after an admitted entry"
    assert box.refused == 3 and [r.seq for r in box.kept] == [1, 2] and not box.queued
    with pytest.raises(ValueError, match="^nothing to send$"):
        box.drain(lambda _: reply(), waits.append)


def test_a_stopping_run_drops_what_is_queued():
    box = Outbox()
    box.queued.extend([item(1), item(2)])
    assert box.drain(lambda _: reply(False, stop=True), lambda n: None).stop
    assert not box.queued and not box.kept and box.refused == 0


def test_the_watermark_drops_covered_entries_and_raises_the_floor():
    box = Outbox()
    box.kept.extend([item(1), item(2), item(3)])
    box.observe(2, b"e1")
    assert [r.seq for r in box.kept] == [3] and box.floor == (2, 20)
    box.observe(1, b"e1")
    assert box.floor == (2, 20), "the floor never goes down"
    box.observe(3, b"e1")
    assert not box.kept and box.floor == (3, 30)


def test_out_of_order_kept_entries_are_still_dropped_by_the_watermark():
    box = Outbox()
    box.queued.extend([item(3), item(1)])
    box.drain(lambda _: reply(), lambda n: None)
    box.observe(1, b"e1")
    assert [r.seq for r in box.kept] == [3] and box.floor == (1, 10)


def test_a_data_loss_queues_the_unconsumed_again_ahead_of_new_entries_and_reports_the_floor():
    box = Outbox()
    floors: list[tuple[int, int]] = []
    box.on_new_epoch = floors.append
    box.kept.extend([item(1), item(2), item(3)])
    box.queued.append(item(4))
    box.observe(0, b"e1")
    assert floors == [] and box.resent == 0, "the first epoch seen is no change"
    box.observe(1, b"e2")
    assert [r.seq for r in box.queued] == [2, 3, 4] and not box.kept
    assert box.resent == 2 and box.floor == (1, 10) and floors == [(1, 10)]


def test_floors_are_read_from_their_text_and_malformed_ones_left_out():
    assert parse_floors({"rollout-0": "12,340", "rollout-1": "x,1", "rollout-2": "3", "rollout-3": "4,5,6"}) == {
        "rollout-0": (12, 340)
    }
    assert format_floor((12, 340)) == "12,340"


def test_refusals_in_a_row_keep_counting_up():
    box = Outbox()
    box.queued.append(item(1))
    answers = iter([reply(False), reply(False), reply(False), reply()])
    waits: list[int] = []
    box.drain(lambda _: next(answers), waits.append)
    assert waits == [0, 1, 2] and box.refused == 3


def test_a_data_loss_before_anything_was_covered_reports_a_floor_of_nothing():
    box = Outbox()
    floors: list[tuple[int, int]] = []
    box.on_new_epoch = floors.append
    box.kept.append(item(1))
    box.observe(0, b"e1")
    box.observe(0, b"e2")
    assert floors == [(0, 0)] and [r.seq for r in box.queued] == [1]


def test_a_data_loss_without_a_floor_listener_still_queues_the_unconsumed_again():
    box = Outbox()
    box.kept.extend([item(1), item(2)])
    box.observe(0, b"e1")
    box.observe(1, b"e2")
    assert [r.seq for r in box.queued] == [2] and box.floor == (1, 10)


def test_entries_resent_after_several_data_losses_add_up():
    box = Outbox()
    box.kept.extend([item(1), item(2)])
    box.observe(0, b"e1")
    box.observe(0, b"e2")
    assert box.resent == 2
    box.drain(lambda _: reply(epoch=b"e2"), lambda n: None)
    box.observe(1, b"e3")
    assert box.resent == 3 and [r.seq for r in box.queued] == [2]
