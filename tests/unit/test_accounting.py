"""The summary's arithmetic (``drl.training.accounting``): produced = consumed + unconsumed + drops, duplicates and
dead letters apart, a resumed run's earlier steps included, a lost ledger replaced by the trainer's kept one."""

from __future__ import annotations

from drl.training.accounting import balanced, count, tally, with_kept_ledger
from drl.training.ingest import COUNTERS

DROPS = [n for n in COUNTERS if n not in ("consumed", "duplicates")]


def test_a_run_that_left_transitions_in_the_stream_balances_with_them():
    acc = tally(
        {"consumed": "90", "stale": "4", "duplicates": "7", "updates": "12"},
        {"rollout-0": 60, "rollout-1": 40},
        unconsumed=6,
        dead_letters={"undecodable": 2},
    )
    assert (acc["produced"], acc["consumed"], acc["unconsumed"], acc["duplicates"]) == (100, 90, 6, 7)
    assert acc["dropped"] == {n: (4 if n == "stale" else 0) for n in DROPS}
    assert acc["dead_lettered"] == {"undecodable": 2} and acc["updates"] == 12
    assert balanced(acc)
    assert not balanced({**acc, "unconsumed": 0}), "a summary that forgets what is left does not balance"
    assert not balanced({**acc, "consumed": acc["consumed"] + acc["duplicates"]}), "duplicates are not consumed"


def test_a_resumed_run_counts_the_steps_its_checkpoint_accounted_for():
    resumed = {"consumed": 500, "stale": 20, "duplicates": 9}
    acc = tally({"consumed": "900", "stale": "20"}, {"rollout-0": 400}, unconsumed=0, dead_letters={}, resumed=resumed)
    assert acc["produced"] == 400 + 520, "the checkpoint's counters without its duplicates"
    assert balanced(acc)
    assert tally({}, {"rollout-0": 400}, 0, {}, resumed=resumed)["consumed"] == 500, "the ledger starts there"
    assert tally({}, {"rollout-0": 5}, 0, {}, steps_done=300)["produced"] == 305, "else the steps done before"


def test_counters_missing_from_a_ledger_read_as_their_default():
    assert count(None, 3) == 3 and count("", 4) == 4 and count("7", 0) == 7
    acc = tally({}, {}, 0, {})
    assert acc["updates"] == -1 and acc["consumed"] == 0 and balanced(acc)
    assert not balanced({**acc, "consumed": -1}), "an unreadable counter is not a balance"


def test_the_kept_ledger_raises_the_produced_counts_it_holds():
    ledger, produced = with_kept_ledger(
        {"consumed": 30, "produced:rollout-0": "20", "produced:rollout-1": 5}, {"rollout-0": 12, "rollout-1": 9}
    )
    assert ledger == {"consumed": "30", "produced:rollout-0": "20", "produced:rollout-1": "5"}
    assert produced == {"rollout-0": 20, "rollout-1": 9}, "raised, never lowered"
    _, produced = with_kept_ledger({"produced:rollout-2": "0", "produced:rollout-3": ""}, {})
    assert produced == {"rollout-2": 0, "rollout-3": 0}, "a worker only the kept ledger knows, with nothing produced"
