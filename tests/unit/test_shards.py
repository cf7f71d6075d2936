"""Shard arithmetic every part of a run agrees on: which stream a worker appends to, and one committed state for
the run from its shards' states."""

from __future__ import annotations

from drl.memory import ShardMap
from drl.memory.base import SUMMED_STATE_FIELDS, merge_states
from drl.memory.redis import Keys
from drl.training.ingest import COUNTERS


def test_a_worker_appends_to_its_index_modulo_the_shards():
    assert [ShardMap(3).of(f"rollout-{i}") for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert {ShardMap(1).of(f"rollout-{i}") for i in range(5)} == {0}
    assert ShardMap(4).of("trainer-0") == 0 and ShardMap(4).of("bench") == 0
    assert [ShardMap(5).of_learner(r, 2) for r in range(2)] == [[0, 2, 4], [1, 3]]
    assert ShardMap(2).in_shard(1, {"rollout-0": 5, "rollout-1": 7, "rollout-3": 1}) == {"rollout-1": 7, "rollout-3": 1}


def test_shard_zero_keeps_the_run_keys_and_others_have_their_own_experience_keys():
    one, zero, two = Keys("r"), Keys("r", 0), Keys("r", 2)
    experience = ("stream", "backlog_bytes", "freed", "room", "floors", "consumer_state")
    assert all(getattr(one, k) == getattr(zero, k) for k in experience)
    assert one.stream == "drl:{r}:exp" and one.consumer_state == "drl:{r}:trainer:state"
    assert two.stream == "drl:{r}:s2:exp" and two.consumer_state == "drl:{r}:s2:trainer:state"
    assert all(getattr(two, k) != getattr(one, k) for k in experience)
    shared = ("epoch", "policy", "stop", "produced", "shares", "members", "dead_letter", "dead_letter_counts")
    assert all(getattr(two, k) == getattr(one, k) for k in shared)
    assert all(v.startswith("drl:{r}:") for v in vars(two).values() if isinstance(v, str) and v.startswith("drl"))


def test_merged_states_sum_the_counts_and_keep_each_workers_fields():
    merged = merge_states(
        [
            {"consumed": "10", "duplicates": "1", "updates": "4", "seq:rollout-0": "3"},
            {"consumed": "5", "lost": "2", "updates": "6", "seq:rollout-1": "1,3"},
            {},
        ]
    )
    assert merged == {
        "consumed": "15",
        "duplicates": "1",
        "lost": "2",
        "updates": "6",
        "seq:rollout-0": "3",
        "seq:rollout-1": "1,3",
    }
    assert merge_states([]) == {}


def test_the_summed_fields_are_the_ledgers_counters():
    assert set(SUMMED_STATE_FIELDS) == set(COUNTERS)
