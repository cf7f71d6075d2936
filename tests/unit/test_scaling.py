"""The pure share arithmetic of live scaling (orchestrator/scaling.py): every plan keeps the shares summing to
the run's steps, for local runs (fresh names) and Kubernetes runs (indexes 0..N-1 of an Indexed Job)."""

from __future__ import annotations

from orchestrator.scaling import (
    Snapshot,
    initial_shares,
    plan_indexed_removal,
    plan_indexed_shares,
    plan_removal,
    plan_shares,
    steps_left,
)

MARGIN = 100
STEPS = 12_000


def snap(produced: dict, assigned: dict, members: dict | None = None) -> Snapshot:
    members = members if members is not None else {n: "active" for n in assigned}
    return Snapshot(produced, assigned, members)


def promised(s: Snapshot, shares: dict, finishing=()) -> int:
    """What the run will have produced once every worker completes its (new) share."""
    merged = {**s.assigned, **shares}
    names = set(s.produced) | set(shares) | set(finishing)
    return sum(merged.get(n, 0) if n in shares or n in finishing else s.produced.get(n, 0) for n in names)


def three_workers(done: tuple[int, int, int] = (1000, 1000, 1000)) -> Snapshot:
    names = ["rollout-0", "rollout-1", "rollout-2"]
    return snap(dict(zip(names, done)), initial_shares(STEPS, 0, 3))


def test_initial_shares_are_the_split_each_worker_assumes():
    assert initial_shares(10, 0, 3) == {"rollout-0": 4, "rollout-1": 3, "rollout-2": 3}
    assert initial_shares(10, 4, 2) == {"rollout-0": 3, "rollout-1": 3}
    assert initial_shares(5, 9, 2) == {"rollout-0": 0, "rollout-1": 0}


def test_local_scale_down_removes_the_highest_collecting_workers_and_shares_the_rest():
    s = three_workers()
    assert plan_removal(s, 1, MARGIN) == ["rollout-1", "rollout-2"]
    after = Snapshot(s.produced, s.assigned, {**s.members, "rollout-1": "retired", "rollout-2": "retired"})
    plan = plan_shares(after, steps=STEPS, steps_done=0, workers=1, margin=MARGIN, next_index=3)
    assert plan.collecting == ("rollout-0",) and plan.added == ()
    assert plan.remaining == STEPS - 3000
    assert plan.shares == {"rollout-0": 1000 + 9000}
    assert promised(after, plan.shares) == STEPS


def test_local_scale_up_adds_fresh_names_after_the_highest_index():
    s = three_workers((1000, 2000, 3000))
    assert plan_removal(s, 5, MARGIN) == []
    plan = plan_shares(s, steps=STEPS, steps_done=0, workers=5, margin=MARGIN, next_index=3)
    assert plan.added == ("rollout-3", "rollout-4")
    assert plan.remaining == STEPS - 6000
    assert plan.shares == {
        "rollout-0": 1000 + 1200,
        "rollout-1": 2000 + 1200,
        "rollout-2": 3000 + 1200,
        "rollout-3": 1200,
        "rollout-4": 1200,
    }
    assert promised(s, plan.shares) == STEPS


def test_local_scale_to_the_same_count_rebalances_without_adding():
    s = three_workers((3800, 1000, 100))
    plan = plan_shares(s, steps=STEPS, steps_done=0, workers=3, margin=MARGIN, next_index=3)
    assert plan.added == ()
    assert sum(plan.shares.values()) == STEPS
    assert plan.shares == {"rollout-0": 3800 + 2367, "rollout-1": 1000 + 2367, "rollout-2": 100 + 2366}


def test_a_finishing_worker_keeps_its_share_and_a_new_one_takes_over():
    s = three_workers((3990, 1000, 1000))
    assert plan_removal(s, 3, MARGIN) == []
    plan = plan_shares(s, steps=STEPS, steps_done=0, workers=3, margin=MARGIN, next_index=3)
    assert plan.finishing == ("rollout-0",)
    assert plan.collecting == ("rollout-1", "rollout-2") and plan.added == ("rollout-3",)
    assert "rollout-0" not in plan.shares
    assert promised(s, plan.shares, finishing=plan.finishing) == STEPS


def test_exited_local_workers_count_with_what_they_produced():
    s = three_workers((4000, 1000, 1000))
    plan = plan_shares(
        s, steps=STEPS, steps_done=0, workers=2, margin=MARGIN, next_index=3, alive={"rollout-1", "rollout-2"}
    )
    assert plan.remaining == STEPS - 6000 and set(plan.shares) == {"rollout-1", "rollout-2"}


def test_nothing_left_to_produce_adds_nobody():
    s = three_workers((4000, 4000, 4000))
    assert steps_left(s, s.active(), [], STEPS, 0) == 0
    plan = plan_shares(s, steps=STEPS, steps_done=0, workers=6, margin=MARGIN, next_index=3)
    assert plan.added == () and plan.shares == {} and plan.remaining == 0
    indexed = plan_indexed_shares(s, steps=STEPS, steps_done=0, workers=6, margin=MARGIN)
    assert indexed.added == () and indexed.shares == {} and indexed.remaining == 0


def test_steps_done_of_a_resumed_run_are_not_shared_again():
    s = snap({"rollout-0": 500}, {"rollout-0": 2000})
    plan = plan_shares(s, steps=3000, steps_done=1000, workers=2, margin=MARGIN, next_index=1)
    assert plan.remaining == 1500
    assert plan.shares == {"rollout-0": 500 + 750, "rollout-1": 750}


def test_indexed_scale_down_removes_every_index_beyond_the_count():
    s = three_workers((4000, 1000, 3990))
    assert plan_indexed_removal(s, 1) == ["rollout-1", "rollout-2"]
    assert plan_indexed_removal(s, 3) == []
    after = Snapshot(s.produced, s.assigned, {**s.members, "rollout-1": "retired", "rollout-2": "retired"})
    plan = plan_indexed_shares(after, steps=STEPS, steps_done=0, workers=1, margin=MARGIN)
    assert plan.retired == ("rollout-1", "rollout-2")
    assert plan.finishing == () and plan.collecting == ("rollout-0",)
    assert plan.shares == {"rollout-0": STEPS - 1000 - 3990, "rollout-1": 1000, "rollout-2": 3990}
    assert sum(plan.shares.values()) == STEPS


def test_indexed_scale_down_to_one_then_up_brings_retired_names_back_with_what_they_produced():
    after_down = Snapshot(
        {"rollout-0": 2000, "rollout-1": 1500, "rollout-2": 1500},
        {"rollout-0": 9000, "rollout-1": 1500, "rollout-2": 1500},
        {"rollout-0": "active", "rollout-1": "retired", "rollout-2": "retired"},
    )
    plan = plan_indexed_shares(after_down, steps=STEPS, steps_done=0, workers=4, margin=MARGIN)
    assert plan.collecting == ("rollout-0",)
    assert plan.added == ("rollout-1", "rollout-2", "rollout-3")
    assert plan.retired == ()
    assert plan.remaining == STEPS - 5000
    assert plan.shares == {
        "rollout-0": 2000 + 1750,
        "rollout-1": 1500 + 1750,
        "rollout-2": 1500 + 1750,
        "rollout-3": 1750,
    }
    assert sum(plan.shares.values()) == STEPS


def test_indexed_scale_up_keeps_finishing_workers_and_retired_names_beyond_the_count():
    s = Snapshot(
        {"rollout-0": 3995, "rollout-1": 1000, "rollout-5": 700},
        {"rollout-0": 4000, "rollout-1": 4000, "rollout-5": 700},
        {"rollout-0": "active", "rollout-1": "active", "rollout-5": "retired"},
    )
    plan = plan_indexed_shares(s, steps=STEPS, steps_done=0, workers=3, margin=MARGIN)
    assert plan.finishing == ("rollout-0",) and plan.collecting == ("rollout-1",)
    assert plan.added == ("rollout-2",) and plan.retired == ("rollout-5",)
    assert plan.shares["rollout-5"] == 700
    assert promised(s, plan.shares, finishing=plan.finishing) == STEPS


def test_indexed_same_count_is_idempotent():
    s = three_workers((1000, 1000, 1000))
    first = plan_indexed_shares(s, steps=STEPS, steps_done=0, workers=3, margin=MARGIN)
    again = Snapshot(s.produced, {**s.assigned, **first.shares}, s.members)
    assert plan_indexed_shares(again, steps=STEPS, steps_done=0, workers=3, margin=MARGIN).shares == first.shares
    assert first.shares == s.assigned


def test_indexed_with_only_finishing_workers_left_gives_them_the_steps_left():
    s = Snapshot(
        {"rollout-0": 3990, "rollout-1": 1000},
        {"rollout-0": 4000, "rollout-1": 8000},
        {"rollout-0": "active", "rollout-1": "retired"},
    )
    plan = plan_indexed_shares(s, steps=STEPS, steps_done=0, workers=1, margin=MARGIN)
    assert plan.collecting == ("rollout-0",) and plan.finishing == ()
    assert plan.shares == {"rollout-0": STEPS - 1000, "rollout-1": 1000}
