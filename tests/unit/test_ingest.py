"""``drl.training.ingest``: every entry is accepted, dropped as a duplicate or as stale, or dead-lettered, and the ledger
counts each transition exactly once; the ledger's fields round-trip through the committed state."""

from __future__ import annotations

import numpy as np
import pytest

from drl._proto import experience_pb2
from drl.envs import space_spec
from drl.memory import codec
from drl.training.ingest import Ingest, Ledger

RUN = "r"
LAYOUT = codec.expected_layout(space_spec("Pendulum-v1"))
MEMBERS = {"rollout-0", "rollout-1"}


def _arrays(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "action": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        "reward": rng.standard_normal(n).astype(np.float32),
        "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
        "terminated": np.zeros(n, dtype=np.uint8),
    }


def _entry(worker: str, seq: int, n: int = 4, version: int = 0, **flags) -> tuple[bytes, dict]:
    header = experience_pb2.BatchHeader(
        run=RUN, worker_id=worker, seq=seq, policy_version=version, produced_total=seq * n, **flags
    )
    h, d = codec.encode(header, _arrays(n))
    return f"{worker}-{seq}".encode(), {b"h": h, b"d": d}


def _ingest() -> tuple[Ingest, Ledger, list[str]]:
    ledger, asked = Ledger(), []

    def admits(worker: str) -> bool:
        asked.append(worker)
        return worker in MEMBERS

    return Ingest(RUN, LAYOUT, ledger, admits), ledger, asked


def test_entries_are_accepted_once_and_duplicates_are_counted_not_taken():
    ingest, ledger, _ = _ingest()
    first = ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2), _entry("rollout-1", 1, n=6)])
    assert [b.header.seq for b in first.accepted] == [1, 2, 1]
    assert ledger.consumed == 14 and ledger.produced == {"rollout-0": 8, "rollout-1": 6}
    again = ingest.take([_entry("rollout-0", 2), _entry("rollout-0", 3)])
    assert [b.header.seq for b in again.accepted] == [3]
    assert ledger.duplicates == 4 and ledger.consumed == 18
    assert [eid for eid, _ in again.acks] == [b"rollout-0-2", b"rollout-0-3"], "a duplicate must still be acked"
    assert again.touched == {"rollout-0"}
    assert again.size == sum(codec.entry_size(f) for _, f in [_entry("rollout-0", 2), _entry("rollout-0", 3)])


def test_a_sync_iteration_drops_other_versions_as_stale_but_keeps_their_progress():
    ingest, ledger, _ = _ingest()
    intake = ingest.take(
        [_entry("rollout-0", 1, version=1), _entry("rollout-0", 2, version=0, final=True, iteration_end=True)],
        sync_version=1,
    )
    assert [b.header.seq for b in intake.accepted] == [1]
    assert (ledger.consumed, ledger.stale) == (4, 4)
    assert ledger.final_seq == {"rollout-0": 2} and ledger.produced == {"rollout-0": 8}
    assert ledger.iteration_end == {}, "a stale entry must not end the worker's iteration"
    assert ledger.seqs.watermark == {"rollout-0": 2}


def test_bad_and_foreign_entries_are_dead_lettered_with_their_kind_and_never_stop_the_rest():
    ingest, ledger, asked = _ingest()
    eid, good = _entry("rollout-0", 2)
    truncated = dict(good)
    truncated[b"d"] = good[b"d"][:-3]
    intake = ingest.take(
        [(b"x", {b"h": b"junk", b"d": b""}), (b"t", truncated), _entry("rollout-9", 1), _entry("rollout-0", 1)]
    )
    assert [kind for _, _, kind, _ in intake.dead] == ["bad_header", "truncated", "unknown_worker"]
    assert ledger.dead_letters == 3 and ledger.consumed == 4
    assert ledger.seqs.watermark["rollout-0"] == 2, "a truncated entry of a known worker must count as seen"
    assert "rollout-9" in asked and "rollout-9" not in intake.touched
    assert len(intake.acks) == 4


def test_the_ledger_round_trips_through_the_committed_state():
    ingest, ledger, _ = _ingest()
    ingest.take(
        [_entry("rollout-0", 1), _entry("rollout-0", 3, final=True), _entry("rollout-1", 1, iteration_end=True)]
    )
    fields = ledger.fields(ledger.known_workers(), updates=17)
    assert fields["seq:rollout-0"] == "1,3" and fields["final:rollout-0"] == 3 and fields["updates"] == 17
    assert fields["end:rollout-1"] == 0 and fields["produced:rollout-1"] == 4
    other = Ledger()
    updates = other.load({k: str(v) for k, v in fields.items()})
    assert updates == 17
    assert other.counters() == ledger.counters() and other.produced == ledger.produced
    assert other.final_seq == ledger.final_seq and other.iteration_end == ledger.iteration_end
    assert other.seqs.seen("rollout-0", 3) and not other.seqs.seen("rollout-0", 2)
    assert Ledger().load({}) is None


@pytest.mark.parametrize("seqs", [[3, 1, 2], [2, 2, 1, 3], [1, 2, 3]])
def test_the_watermark_covers_exactly_the_contiguous_seqs_whatever_the_order(seqs):
    ingest, ledger, _ = _ingest()
    for seq in seqs:
        ingest.take([_entry("rollout-0", seq)])
    assert ledger.seqs.watermark["rollout-0"] == 3 and ledger.consumed == 12
    assert ledger.duplicates == 4 * (len(seqs) - 3)


def NOTHING_IN_STREAM(workers):
    return {}


def test_seqs_below_a_writers_floor_never_seen_are_declared_lost_with_their_transitions():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2)])
    ingest.take([_entry("rollout-0", 4), _entry("rollout-0", 7)])
    assert ledger.seqs.watermark["rollout-0"] == 2
    moved = ingest.settle({"rollout-0": (5, 5 * 4)}, {}, NOTHING_IN_STREAM)
    assert moved == {"rollout-0"}
    assert ledger.lost == 8, "seqs 3 and 5 (4 transitions each) were never seen"
    assert ledger.seqs.watermark["rollout-0"] == 5 and set(ledger.seqs.above["rollout-0"]) == {7}
    assert ingest.settle({"rollout-0": (5, 20)}, {}, NOTHING_IN_STREAM) == set() and ledger.lost == 8, (
        "a floor counted twice"
    )
    ingest.take([_entry("rollout-0", 6)])
    assert ledger.seqs.watermark["rollout-0"] == 7
    assert ingest.settle({"rollout-9": (3, 12)}, {}, NOTHING_IN_STREAM) == set(), (
        "a floor of a worker outside the run was taken"
    )


def test_the_totals_round_trip_so_a_restored_ledger_counts_a_later_gap_exactly():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 3)])
    fields = {k: str(v) for k, v in ledger.fields(ledger.known_workers(), updates=0).items()}
    assert fields["totals:rollout-0"] == "4,3:4:12" and fields["lost"] == "0"
    other = Ledger()
    other.load(fields)
    Ingest(RUN, LAYOUT, other, MEMBERS.__contains__).settle({"rollout-0": (4, 16)}, {}, NOTHING_IN_STREAM)
    assert other.lost == 8 and other.seqs.watermark["rollout-0"] == 4


def test_a_floor_stops_below_an_entry_still_in_the_stream_which_then_arrives_and_counts():
    """A new process of a worker reports the seq it continues from as its floor; entries of its predecessor still
    in the stream are not lost: the floor counts only the seqs below the first of them."""
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    in_stream = {"rollout-0": [(4, 4, 16), (5, 4, 20)]}
    moved = ingest.settle({"rollout-0": (5, 20)}, {}, lambda workers: in_stream)
    assert moved == {"rollout-0"} and ledger.lost == 8, "seqs 2 and 3 are gone, 4 and 5 are still to come"
    assert ledger.seqs.watermark["rollout-0"] == 3
    ingest.take([_entry("rollout-0", 4), _entry("rollout-0", 5)])
    assert ingest.settle({"rollout-0": (5, 20)}, {}, NOTHING_IN_STREAM) == set()
    assert ledger.lost == 8 and ledger.consumed == 12 and ledger.seqs.watermark["rollout-0"] == 5


def test_a_done_worker_whose_entries_never_arrive_is_finished_with_the_rest_counted_lost():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 3)])
    assert ingest.settle({}, {"rollout-0": 6 * 4}, lambda workers: {"rollout-0": [(4, 4, 16)]}) == set(), (
        "a done worker's entry still in the stream will arrive; nothing is settled before it did"
    )
    moved = ingest.settle({}, {"rollout-0": 6 * 4}, NOTHING_IN_STREAM)
    assert moved == {"rollout-0"}
    assert ledger.lost == 4 * 4, "seq 2 and everything after seq 3 (its total was 24) never arrived"
    assert ledger.final_seq["rollout-0"] == ledger.seqs.watermark["rollout-0"] == 3
    assert ledger.produced["rollout-0"] == 24
    assert ingest.settle({}, {"rollout-0": 24}, NOTHING_IN_STREAM) == set() and ledger.lost == 16


def test_a_done_worker_the_ledger_saw_through_its_final_entry_settles_nothing():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2)])
    calls = []
    assert ingest.settle({}, {"rollout-0": 8}, lambda workers: calls.append(workers) or {}) == set()
    assert ledger.lost == 0 and not calls, "the stream is looked at only when something may be lost"


# -- SeqTracker's floors and closes, by hand (each transition counted once, each loss counted once) -------------


def tracker_with(worker: str, entries: list[tuple[int, int, int]]):
    """A tracker that saw ``(seq, count, total)`` entries of ``worker``."""
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    for seq, count, total in entries:
        assert t.seen(worker, seq, count, total) is False
    return t


def test_a_floor_declares_the_unseen_seqs_below_it_lost_with_their_transitions():
    t = tracker_with("w", [(1, 10, 10), (2, 10, 20), (4, 10, 40), (6, 10, 60)])
    assert (t.watermark["w"], t.mark_total["w"]) == (2, 20)
    assert t.dump("w") == "2,4,6" and t.dump_totals("w") == "20,4:10:40,6:10:60"
    assert t.skip_to("w", 5, 50) == (2, 20), "seqs 3 and 5 lost: 50 - 20 - 10 (seq 4, taken) transitions"
    assert (t.watermark["w"], t.mark_total["w"]) == (6, 60), "the watermark runs on through seq 6"
    assert t.dump("w") == "6" and t.gaps() == set()
    assert t.skip_to("w", 6, 60) == (0, 0) and t.skip_to("w", 3, 30) == (0, 0), "a floor at or below is nothing"
    assert t.seen("w", 5) is True, "a seq declared lost counts as taken"


def test_a_floor_for_a_worker_never_seen_counts_from_zero():
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    assert t.skip_to("w", 3, 24) == (3, 24)
    assert (t.watermark["w"], t.mark_total["w"]) == (3, 24)


def test_a_floor_after_a_loaded_state_without_totals_counts_entries_only():
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    t.load("w", "4,6")
    assert t.dump_totals("w") is None
    assert t.skip_to("w", 7, 70) == (2, None), "seqs 5 and 7 lost; transitions unknown without the total at 4"
    assert t.watermark["w"] == 7 and t.mark_total["w"] == 70


def test_close_declares_the_holes_and_the_tail_lost_and_keeps_the_top():
    t = tracker_with("w", [(1, 10, 10), (3, 10, 30), (4, 5, 35)])
    assert t.close("w", 50) == (1, 25), "seq 2 a hole; 50 - 10 - 15 transitions never seen"
    assert (t.watermark["w"], t.mark_total["w"]) == (4, 50) and t.dump("w") == "4"
    fresh = tracker_with("v", [])
    assert fresh.close("v", 0) == (0, 0) and fresh.watermark["v"] == 0
    done = tracker_with("u", [(1, 8, 8), (2, 8, 16)])
    assert done.close("u", 16) == (0, 0), "nothing lost when everything arrived"


def test_totals_survive_a_dump_and_load():
    from drl.training.ingest import SeqTracker

    t = tracker_with("w", [(1, 10, 10), (3, 10, 30)])
    copy = SeqTracker()
    copy.load("w", t.dump("w"))
    copy.load_totals("w", t.dump_totals("w"))
    assert (copy.watermark["w"], copy.mark_total["w"], copy.above["w"]) == (1, 10, {3: (10, 30)})
    assert copy.skip_to("w", 2, 20) == (1, 10)


# -- Ingest.settle: what floors and done markers say can never arrive ------------------------------------------


def nothing_in_stream(workers):
    return {}


def test_a_floor_above_the_watermark_declares_the_unseen_entries_lost_once():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 3)])
    moved = ingest.settle({"rollout-0": (4, 16)}, {}, nothing_in_stream)
    assert moved == {"rollout-0"}
    assert ledger.lost == 8, "seqs 2 and 4: 16 - 4 - 4 transitions"
    assert ledger.produced["rollout-0"] == 16 and ledger.seqs.watermark["rollout-0"] == 4
    assert ingest.settle({"rollout-0": (4, 16)}, {}, nothing_in_stream) == set(), "a floor counts once"
    assert ledger.lost == 8


def test_a_floor_stops_below_the_first_entry_still_in_the_stream():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    asked = []

    def in_stream(workers):
        asked.append(set(workers))
        return {"rollout-0": [(3, 4, 12), (5, 4, 20)]}

    assert ingest.settle({"rollout-0": (5, 20)}, {}, in_stream) == {"rollout-0"}
    assert asked == [{"rollout-0"}]
    assert ledger.seqs.watermark["rollout-0"] == 2 and ledger.lost == 4, "only seq 2 is lost; 3 still arrives"
    assert ledger.produced["rollout-0"] == 8


def test_floors_and_done_markers_of_strangers_and_floors_below_the_watermark_are_ignored():
    ingest, ledger, asked = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2)])
    calls = []
    assert (
        ingest.settle({"rollout-9": (3, 12), "rollout-0": (2, 8)}, {"rollout-9": 40}, lambda w: calls.append(w) or {})
        == set()
    )
    assert calls == [] and ledger.lost == 0 and "rollout-9" in asked


def test_a_done_writer_whose_entries_never_all_arrived_is_closed_with_its_loss():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-1", 1), _entry("rollout-1", 3)])
    assert ingest.settle({}, {"rollout-1": 20}, lambda w: {"rollout-1": [(4, 4, 16)]}) == set(), (
        "an entry of it is still in the stream: wait for it"
    )
    assert ingest.settle({}, {"rollout-1": 20}, nothing_in_stream) == {"rollout-1"}
    assert ledger.lost == 12, "20 produced, 8 seen"
    assert ledger.final_seq["rollout-1"] == 3 and ledger.produced["rollout-1"] == 20
    assert ingest.settle({}, {"rollout-1": 20}, nothing_in_stream) == set(), "closed once"


def test_a_done_writer_that_delivered_everything_needs_no_settling():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2)])
    assert ingest.settle({}, {"rollout-0": 8}, nothing_in_stream) == set()
    assert ledger.lost == 0


# -- Feed: read, ingest, hand over, commit, on the in-process memory backend (a real ExperienceReader) ---------


class FakeLearning:
    """Records what the feed hands over; stands in for ``drl.training.learning`` (our own interface)."""

    def __init__(self):
        self.added: list[tuple[str, int, int]] = []
        self.versions: list[int] = []
        self.learner = type("L", (), {"updates": 7})()

    def add(self, worker, seq, arrays, version):
        self.added.append((worker, seq, len(arrays["reward"])))
        self.versions.append(version)


def test_the_feed_hands_accepted_entries_over_and_commits_them_with_the_ledger_fake_learning():
    import uuid

    from drl.training.ingest import Feed
    from tests import memory_inproc as inproc

    name = f"feed-{uuid.uuid4().hex[:8]}"
    backend = inproc.open_inproc(name, RUN)
    try:
        writer = backend.writer("rollout-0", max_entries=100, max_bytes=1 << 24)
        for seq in (1, 2):
            _, fields = _entry("rollout-0", seq, n=4)
            assert writer.send(seq, fields[b"h"], fields[b"d"], seq * 4).appended
        _, stranger = _entry("rollout-7", 1, n=4)
        backend.writer("rollout-7", max_entries=100, max_bytes=1 << 24).send(1, stranger[b"h"], stranger[b"d"], 4)
        ingest, ledger, _ = _ingest()
        learning = FakeLearning()
        feed = Feed(backend.reader("trainer-0"), ingest, learning, reclaim_idle_s=30.0)
        headers = feed.read(10, None)
        assert [(h.worker_id, h.seq) for h in headers] == [("rollout-0", 1), ("rollout-0", 2)]
        assert learning.added == [("rollout-0", 1, 4), ("rollout-0", 2, 4)]
        state = backend.reader("trainer-0").load_state()
        assert state["consumed"] == "8" and state["updates"] == "7" and state["seq:rollout-0"] == "2"
        assert feed.read(10, None) == [] and feed.last is None
        learning.learner.updates = 9
        feed.record()
        assert backend.reader("trainer-0").load_state()["updates"] == "9", "record commits the updates alone"
        assert backend.control().unconsumed() == 0
        assert backend.control().dead_letters() == {"unknown_worker": 1}, "the stranger's entry is dead-lettered"
    finally:
        backend.close()
        inproc.discard(name)


def test_losses_add_up_over_workers_and_settles_and_unknown_totals_count_nothing():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 2), _entry("rollout-1", 1)])
    assert ingest.settle({"rollout-0": (1, 4)}, {}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 4, "seq 1 of rollout-0, never seen"
    assert ledger.seqs.watermark["rollout-0"] == 2, "and the watermark runs on through seq 2"
    assert ingest.settle({"rollout-1": (3, 12)}, {}, nothing_in_stream) == {"rollout-1"}
    assert ledger.lost == 12, "losses of a later settle add to the earlier ones"
    ledger.seqs.load("rollout-0", "5")
    assert ledger.seqs.mark_total["rollout-0"] is None, "a state written before totals were kept"
    assert ingest.settle({"rollout-0": (6, 24)}, {}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 12, "a loss of unknown size counts nothing"
    assert ledger.produced["rollout-0"] == 24


def test_a_done_writer_never_seen_is_closed_with_everything_it_produced_lost():
    ingest, ledger, _ = _ingest()
    assert ingest.settle({}, {"rollout-1": 12}, nothing_in_stream) == {"rollout-1"}
    assert ledger.lost == 12 and ledger.produced["rollout-1"] == 12 and ledger.final_seq["rollout-1"] == 0


# -- SeqTracker: the edges of floors, closes, dumps and loads ---------------------------------------------------


def test_a_worker_the_tracker_never_saw_dumps_as_watermark_zero_with_total_zero():
    """Writers read the dump as their watermark: a worker with nothing taken yet is at 0, with 0 produced."""
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    assert t.dump("w") == "0" and t.dump_totals("w") == "0"


def test_a_floor_at_the_watermark_changes_nothing_whatever_total_it_reports():
    t = tracker_with("w", [(1, 10, 10), (2, 10, 20)])
    assert t.skip_to("w", 2, 25) == (0, 0)
    assert (t.watermark["w"], t.mark_total["w"]) == (2, 20)


def test_a_floor_on_a_seq_seen_above_the_watermark_counts_that_seq_as_taken():
    t = tracker_with("w", [(1, 10, 10), (3, 10, 30)])
    assert t.skip_to("w", 3, 30) == (1, 10), "only seq 2 is lost"
    assert t.dump("w") == "3" and t.above["w"] == {} and t.mark_total["w"] == 30


def test_a_floor_reporting_less_than_the_tracker_saw_counts_no_negative_loss():
    t = tracker_with("w", [(1, 10, 10), (2, 10, 20)])
    assert t.skip_to("w", 3, 15) == (1, 0)


def test_close_after_a_loaded_state_without_totals_counts_entries_only():
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    t.load("w", "4,6")
    assert t.close("w", 70) == (1, None), "seq 5 a hole; transitions unknown without the total at 4"
    assert (t.watermark["w"], t.mark_total["w"]) == (6, 70)


def test_a_loaded_watermark_of_zero_has_a_known_total_of_zero():
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    t.load("w", "0")
    assert t.dump_totals("w") == "0"
    assert t.skip_to("w", 2, 8) == (2, 8)


def test_a_loaded_state_without_totals_does_not_count_its_seqs_above_a_zero_watermark_as_lost():
    """A state written before totals were kept says which seqs above the watermark were taken, not how many
    transitions they held: a later floor's loss is unknown, not the whole of the writer's total."""
    from drl.training.ingest import SeqTracker

    t = SeqTracker()
    t.load("w", "0,2")
    assert t.dump_totals("w") is None
    assert t.skip_to("w", 3, 30) == (2, None)


# -- Ledger and Ledgers -----------------------------------------------------------------------------------------


def test_known_workers_include_those_seen_only_in_dead_letters_or_only_produced():
    ingest, ledger, _ = _ingest()
    _, good = _entry("rollout-1", 1)
    ingest.take([(b"t", {b"h": good[b"h"], b"d": good[b"d"][:-3]})])
    assert ledger.produced == {} and ledger.known_workers() == {"rollout-1"}
    other = Ledger()
    other.load({"produced:rollout-0": "8"})
    assert other.known_workers() == {"rollout-0"}


def test_ledgers_of_two_shards_route_each_worker_to_its_shard_and_sum_the_counters():
    from drl.training.ingest import Ledgers

    even, odd = Ledger(consumed=4, lost=1), Ledger(consumed=6, duplicates=2, stale=3, dead_letters=1)
    both = Ledgers({0: even, 1: odd}, 2)
    assert both.of("rollout-3") is odd and both.of("rollout-2") is even
    assert both.counters() == {"consumed": 10, "duplicates": 2, "stale": 3, "dead_letters": 1, "lost": 1}
    only_odd = Ledgers({1: odd}, 2)
    assert only_odd.owns("rollout-1") and not only_odd.owns("rollout-0")


# -- Ingest.take: what each entry does to the ledger ------------------------------------------------------------


def _truncated(worker: str, seq: int) -> tuple[bytes, dict]:
    eid, good = _entry(worker, seq)
    return eid, {b"h": good[b"h"], b"d": good[b"d"][:-3]}


def test_a_dead_letter_keeps_the_decoders_reason_and_its_seq_and_total_count_as_taken():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    eid, bad = _truncated("rollout-0", 2)
    with pytest.raises(codec.DecodeError) as refused:
        codec.decode(bad, RUN, LAYOUT)
    intake = ingest.take([(eid, bad)])
    assert intake.dead == [(eid, bad, "truncated", str(refused.value))]
    assert intake.touched == {"rollout-0"}, "its progress must be committed with its acknowledgement"
    assert (ledger.seqs.watermark["rollout-0"], ledger.seqs.mark_total["rollout-0"]) == (2, 8)
    assert ingest.settle({"rollout-0": (3, 12)}, {}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 4, "only seq 3 is lost: the dead letter's transitions are counted as a dead letter"


def test_a_dead_letter_above_the_watermark_counts_its_transitions_as_taken_when_a_floor_comes():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _truncated("rollout-0", 3)])
    assert ingest.settle({"rollout-0": (4, 16)}, {}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 8, "seqs 2 and 4"
    assert ledger.fields(["rollout-0"], 0)["totals:rollout-0"] == "16"


def test_duplicates_and_stale_entries_add_up_over_reads_and_a_stale_entry_does_not_stop_the_read():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    ingest.take([_entry("rollout-0", 1)])
    ingest.take([_entry("rollout-0", 1)])
    assert ledger.duplicates == 8
    intake = ingest.take([_entry("rollout-0", 2, version=0), _entry("rollout-0", 3, version=1)], sync_version=1)
    assert [b.header.seq for b in intake.accepted] == [3]
    ingest.take([_entry("rollout-0", 4, version=0)], sync_version=1)
    assert ledger.stale == 8 and ledger.consumed == 8


def test_the_produced_count_keeps_the_highest_total_whatever_the_order_of_arrival():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 3), _entry("rollout-0", 2)])
    assert ledger.produced == {"rollout-0": 12}


# -- Ingest.settle: which floors and done markers are looked at, and what they count -----------------------------


def test_a_floor_of_a_member_the_ledger_never_saw_declares_everything_up_to_it_lost():
    ingest, ledger, _ = _ingest()
    assert ingest.settle({"rollout-1": (1, 4)}, {}, nothing_in_stream) == {"rollout-1"}
    assert ledger.lost == 4 and ledger.produced == {"rollout-1": 4} and ledger.seqs.watermark["rollout-1"] == 1


def test_a_floor_below_what_the_ledger_saw_keeps_the_higher_produced_count():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 3)])
    assert ingest.settle({"rollout-0": (2, 8)}, {}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 4 and ledger.produced["rollout-0"] == 12


def test_an_entry_in_the_stream_above_a_floor_does_not_hold_the_floor_back():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    assert ingest.settle({"rollout-0": (5, 20)}, {}, lambda w: {"rollout-0": [(8, 4, 32)]}) == {"rollout-0"}
    assert ledger.seqs.watermark["rollout-0"] == 5 and ledger.lost == 16


def test_an_entry_in_the_stream_at_the_floor_is_waited_for():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    assert ingest.settle({"rollout-0": (3, 12)}, {}, lambda w: {"rollout-0": [(3, 4, 12)]}) == {"rollout-0"}
    assert ledger.seqs.watermark["rollout-0"] == 2 and ledger.lost == 4


def test_a_floor_whose_next_entry_is_still_in_the_stream_moves_nothing_and_the_next_floor_still_counts():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    pending = {"rollout-0": [(2, 4, 8), (3, 4, 12)]}
    assert ingest.settle({"rollout-0": (3, 12), "rollout-1": (2, 8)}, {}, lambda w: pending) == {"rollout-1"}
    assert ledger.lost == 8 and ledger.produced == {"rollout-0": 4, "rollout-1": 8}
    assert ledger.seqs.watermark["rollout-0"] == 1


def test_losses_of_several_floors_and_closes_in_one_settle_add_up():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    ingest.settle({"rollout-0": (2, 8), "rollout-1": (1, 4)}, {}, nothing_in_stream)
    assert ledger.lost == 8
    ingest.settle({"rollout-0": (3, 12)}, {"rollout-1": 12}, nothing_in_stream)
    assert ledger.lost == 8 + 4 + 8


@pytest.mark.parametrize("total", [1, 12])
def test_a_done_member_never_seen_is_closed_even_after_a_strangers_done_marker(total):
    ingest, ledger, _ = _ingest()
    assert ingest.settle({}, {"rollout-9": 40, "rollout-1": total}, nothing_in_stream) == {"rollout-1"}
    assert ledger.lost == total and ledger.produced == {"rollout-1": total}


def test_a_done_marker_of_a_worker_that_left_the_run_still_closes_what_the_ledger_holds_of_it():
    """Membership may forget a worker the ledger has progress for; its done marker still settles it."""
    ingest, ledger, asked = _ingest()
    ledger.load({"seq:rollout-5": "1", "totals:rollout-5": "4", "produced:rollout-5": "4"})
    assert ingest.settle({}, {"rollout-5": 12}, nothing_in_stream) == {"rollout-5"}
    assert ledger.lost == 8 and ledger.final_seq["rollout-5"] == 1
    assert "rollout-5" not in asked, "a worker the ledger knows needs no membership check"


def test_a_writer_whose_final_entry_was_taken_is_finished_whatever_its_done_marker_says():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2, final=True)])
    asked = []
    moved = ingest.settle({}, {"rollout-0": 12, "rollout-1": 8}, lambda w: asked.append(set(w)) or {})
    assert moved == {"rollout-1"} and asked == [{"rollout-1"}]
    assert ledger.lost == 8 and ledger.produced["rollout-0"] == 8


def test_a_done_writer_seen_without_gaps_but_short_of_its_total_loses_the_rest():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 2)])
    assert ingest.settle({}, {"rollout-0": 12}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 4 and ledger.final_seq["rollout-0"] == 2 and ledger.produced["rollout-0"] == 12


def test_a_done_writer_from_a_state_without_totals_is_closed_with_a_loss_of_unknown_size():
    ingest, ledger, _ = _ingest()
    ledger.load({"seq:rollout-0": "4,6"})
    assert ingest.settle({}, {"rollout-0": 40}, nothing_in_stream) == {"rollout-0"}
    assert ledger.lost == 0, "an unknown loss counts nothing"
    assert ledger.final_seq["rollout-0"] == 6 and ledger.produced["rollout-0"] == 40


def test_a_done_writer_still_in_the_stream_does_not_hold_back_the_others():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1)])
    moved = ingest.settle({}, {"rollout-0": 12, "rollout-1": 8}, lambda w: {"rollout-0": [(3, 4, 12)]})
    assert moved == {"rollout-1"} and ledger.lost == 8


# -- Feed on the in-process memory backend: reclaiming, waiting, sync reads, settling, and its clock -------------


@pytest.fixture
def memory():
    import uuid

    from tests import memory_inproc as inproc

    name = f"feed-{uuid.uuid4().hex[:8]}"
    backend = inproc.open_inproc(name, RUN)
    try:
        yield backend
    finally:
        backend.close()
        inproc.discard(name)


def _send(backend, worker: str, seqs, version: int = 0) -> None:
    writer = backend.writer(worker, max_entries=100, max_bytes=1 << 24)
    for seq in seqs:
        _, fields = _entry(worker, seq, version=version)
        assert writer.send(seq, fields[b"h"], fields[b"d"], seq * 4).appended


def _feed(backend, reclaim_idle_s: float = 30.0, done=dict):
    from drl.training.ingest import Feed

    ingest, ledger, _ = _ingest()
    learning = FakeLearning()
    return Feed(backend.reader("trainer-0"), ingest, learning, reclaim_idle_s, done), ledger, learning


class Clock:
    """Stands in for the ``time`` module in ``drl.training.ingest``: ``monotonic`` returns what the test sets, ``sleep``
    records its argument and moves the clock on by it."""

    def __init__(self, now: float):
        self.now, self.slept = now, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_feed_takes_over_at_most_count_entries_left_pending_at_a_dead_reader(memory, monkeypatch):
    import drl.training.ingest

    clock = Clock(1000.0)
    monkeypatch.setattr(drl.training.ingest, "time", clock)
    feed, ledger, _ = _feed(memory, reclaim_idle_s=0.0)
    assert feed.read(2, None) == []
    _send(memory, "rollout-0", [1, 2, 3])
    assert len(memory.reader("trainer-dead").read(10, None)) == 3
    clock.now += 2 * feed.RECLAIM_EVERY_S
    assert [h.seq for h in feed.read(2, None)] == [1, 2]
    assert ledger.consumed == 8 and memory.reader("trainer-0").load_state()["seq:rollout-0"] == "2"


def test_the_feed_leaves_entries_another_reader_holds_for_less_than_the_idle_time(memory):
    _send(memory, "rollout-0", [1])
    assert len(memory.reader("trainer-other").read(10, None)) == 1
    feed, ledger, _ = _feed(memory, reclaim_idle_s=30.0)
    assert feed.read(10, None) == [] and ledger.consumed == 0


def test_a_sync_read_takes_count_entries_and_drops_other_versions_as_stale(memory):
    _send(memory, "rollout-0", [1], version=0)
    _send(memory, "rollout-0", [2], version=1)
    feed, ledger, learning = _feed(memory)
    assert feed.read(1, None, sync_version=1) == [] and len(feed.last.acks) == 1
    assert (ledger.stale, ledger.consumed) == (4, 0)
    assert [h.seq for h in feed.read(1, None, sync_version=1)] == [2]
    assert learning.versions == [1] and ledger.consumed == 4


def test_a_read_with_nothing_reclaimed_waits_for_new_entries(memory):
    import threading
    import time

    feed, _, _ = _feed(memory)
    sender = threading.Thread(target=lambda: (time.sleep(0.05), _send(memory, "rollout-0", [1])))
    sender.start()
    try:
        headers = feed.read(10, block_ms=30_000)
    finally:
        sender.join()
    assert [h.seq for h in headers] == [1]


def test_the_feed_settles_floors_and_done_markers_and_records_them_with_the_produced_counts(memory):
    memory.writer("rollout-0", max_entries=100, max_bytes=1 << 24).continue_from(3, 12)
    feed, ledger, _ = _feed(memory, done=lambda: {"rollout-1": 8})
    assert feed.read(10, None) == []
    assert ledger.lost == 20
    state = memory.reader("trainer-0").load_state()
    assert (state["seq:rollout-0"], state["totals:rollout-0"], state["final:rollout-1"]) == ("3", "12", "0")
    assert (state["lost"], state["updates"]) == ("20", "7")
    assert memory.control().produced() == {"rollout-0": 12, "rollout-1": 8}


def test_floors_are_looked_at_only_once_their_period_has_passed(memory, monkeypatch):
    import drl.training.ingest

    clock = Clock(1000.0)
    monkeypatch.setattr(drl.training.ingest, "time", clock)
    feed, ledger, _ = _feed(memory)
    feed.read(10, None)
    memory.writer("rollout-0", max_entries=100, max_bytes=1 << 24).continue_from(2, 8)
    for now in (1001.0, 1000.0 + feed.FLOORS_EVERY_S):
        clock.now = now
        feed.read(10, None)
        assert ledger.lost == 0, f"floors looked at again {now - 1000.0} s after the last look"
    clock.now = 1000.5 + feed.FLOORS_EVERY_S
    feed.read(10, None)
    assert ledger.lost == 8


def test_entries_pending_elsewhere_are_reclaimed_only_once_the_reclaim_period_has_passed(memory, monkeypatch):
    import drl.training.ingest

    clock = Clock(1000.0)
    monkeypatch.setattr(drl.training.ingest, "time", clock)
    feed, _, _ = _feed(memory, reclaim_idle_s=0.0)
    feed.read(10, None)
    _send(memory, "rollout-0", [1])
    assert len(memory.reader("trainer-dead").read(10, None)) == 1
    for now in (1004.0, 1000.0 + feed.RECLAIM_EVERY_S):
        clock.now = now
        assert feed.read(10, None) == [], f"reclaimed again {now - 1000.0} s after the last time"
    clock.now = 1000.5 + feed.RECLAIM_EVERY_S
    assert [h.seq for h in feed.read(10, None)] == [1]


def test_a_paced_read_sleeps_out_the_gap_and_tells_the_pace_what_it_got(memory, monkeypatch):
    import drl.training.ingest
    from drl.training.pacing import ReadPace

    clock = Clock(1000.0)
    monkeypatch.setattr(drl.training.ingest, "time", clock)
    feed, _, _ = _feed(memory)
    pace = ReadPace(limit_bytes=1, first_s=0.25, least_s=0.125, most_s=4.0)
    assert feed.read_paced(pace, 1, block_ms=1) == []
    assert clock.slept == [] and pace.gap_s == 0.5, "an empty read doubles the gap"
    assert feed.read_paced(pace, 1, block_ms=1) == []
    assert clock.slept == [0.5] and pace.gap_s == 1.0, "nothing arrived in 0.5 s: the gap doubles again"
    clock.now = 1000.5 + 1.0
    _send(memory, "rollout-0", [1, 2])
    assert [h.seq for h in feed.read_paced(pace, 2, block_ms=1)] == [1, 2]
    assert clock.slept == [0.5], "a read due now does not sleep"
    assert pace.gap_s == 0.125, "a full read drops the gap to the least"
