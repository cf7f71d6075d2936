"""``drl.ingest``: every entry is accepted, dropped as a duplicate or as stale, or dead-lettered, and the ledger
counts each transition exactly once; the ledger's fields round-trip through the committed state."""

from __future__ import annotations

import numpy as np
import pytest

from drl._proto import experience_pb2
from drl.envs import space_spec
from drl.ingest import Ingest, Ledger
from drl.memory import codec

RUN = "r"
LAYOUT = codec.expected_layout(space_spec("Pendulum-v1"))
MEMBERS = {"rollout-0", "rollout-1"}


def _arrays(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {"obs": rng.standard_normal((n, 3)).astype(np.float32),
            "action": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
            "reward": rng.standard_normal(n).astype(np.float32),
            "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
            "terminated": np.zeros(n, dtype=np.uint8)}


def _entry(worker: str, seq: int, n: int = 4, version: int = 0, **flags) -> tuple[bytes, dict]:
    header = experience_pb2.BatchHeader(run=RUN, worker_id=worker, seq=seq, policy_version=version,
                                        produced_total=seq * n, **flags)
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
    intake = ingest.take([_entry("rollout-0", 1, version=1), _entry("rollout-0", 2, version=0, final=True,
                                                                    iteration_end=True)], sync_version=1)
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
    intake = ingest.take([(b"x", {b"h": b"junk", b"d": b""}), (b"t", truncated), _entry("rollout-9", 1),
                          _entry("rollout-0", 1)])
    assert [kind for _, _, kind, _ in intake.dead] == ["bad_header", "truncated", "unknown_worker"]
    assert ledger.dead_letters == 3 and ledger.consumed == 4
    assert ledger.seqs.watermark["rollout-0"] == 2, "a truncated entry of a known worker must count as seen"
    assert "rollout-9" in asked and "rollout-9" not in intake.touched
    assert len(intake.acks) == 4


def test_the_ledger_round_trips_through_the_committed_state():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-0", 1), _entry("rollout-0", 3, final=True),
                 _entry("rollout-1", 1, iteration_end=True)])
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
    assert ingest.settle({"rollout-0": (5, 20)}, {}, NOTHING_IN_STREAM) == set() and ledger.lost == 8, \
        "a floor counted twice"
    ingest.take([_entry("rollout-0", 6)])
    assert ledger.seqs.watermark["rollout-0"] == 7
    assert ingest.settle({"rollout-9": (3, 12)}, {}, NOTHING_IN_STREAM) == set(), \
        "a floor of a worker outside the run was taken"


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
    assert ingest.settle({}, {"rollout-0": 6 * 4}, lambda workers: {"rollout-0": [(4, 4, 16)]}) == set(), \
        "a done worker's entry still in the stream will arrive; nothing is settled before it did"
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
    from drl.ingest import SeqTracker

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
    from drl.ingest import SeqTracker

    t = SeqTracker()
    assert t.skip_to("w", 3, 24) == (3, 24)
    assert (t.watermark["w"], t.mark_total["w"]) == (3, 24)


def test_a_floor_after_a_loaded_state_without_totals_counts_entries_only():
    from drl.ingest import SeqTracker

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
    from drl.ingest import SeqTracker

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
    assert ingest.settle({"rollout-9": (3, 12), "rollout-0": (2, 8)}, {"rollout-9": 40},
                         lambda w: calls.append(w) or {}) == set()
    assert calls == [] and ledger.lost == 0 and "rollout-9" in asked


def test_a_done_writer_whose_entries_never_all_arrived_is_closed_with_its_loss():
    ingest, ledger, _ = _ingest()
    ingest.take([_entry("rollout-1", 1), _entry("rollout-1", 3)])
    assert ingest.settle({}, {"rollout-1": 20}, lambda w: {"rollout-1": [(4, 4, 16)]}) == set(), \
        "an entry of it is still in the stream: wait for it"
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
    """Records what the feed hands over; stands in for ``drl.learning`` (our own interface)."""

    def __init__(self):
        self.added: list[tuple[str, int, int]] = []
        self.learner = type("L", (), {"updates": 7})()

    def add(self, worker, seq, arrays, version):
        self.added.append((worker, seq, len(arrays["reward"])))


def test_the_feed_hands_accepted_entries_over_and_commits_them_with_the_ledger_fake_learning():
    import uuid

    from drl.ingest import Feed
    from drl.memory import inproc

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
