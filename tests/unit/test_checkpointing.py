"""``drl.training.checkpointing``: a checkpoint holds the learning state, the torch RNG and the ledger's counters; a new
trainer takes the checkpoint, then the committed state of the memory server, which wins where it exists."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drl.algorithms import get as get_algorithm
from drl.envs import space_spec
from drl.errors import UserError
from drl.store import run_store
from drl.store.checkpoint import CheckpointStore
from drl.training.checkpointing import TrainerCheckpoints
from drl.training.ingest import Ledger
from tests.harness import fast_config

SPEC = space_spec("Pendulum-v1")


def _learning(cfg):
    return get_algorithm(cfg.algorithm).make_learning(SPEC, cfg, seed=cfg.seed)


def _checkpoints(tmp_path, cfg, keep: int = 2, with_replay: bool = False) -> TrainerCheckpoints:
    store = CheckpointStore(run_store(str(tmp_path), "run"), "run")
    return TrainerCheckpoints(store, cfg.algorithm, every_s=60.0, keep=keep, with_replay=with_replay)


def _trained(cfg, updates: int = 3):
    learning = _learning(cfg)
    rng = np.random.default_rng(0)
    n = 64
    learning.add(
        "rollout-0",
        1,
        {
            "obs": rng.standard_normal((n, 3)).astype(np.float32),
            "action": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
            "reward": rng.standard_normal(n).astype(np.float32),
            "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
            "terminated": np.zeros(n, dtype=np.uint8),
        },
    )
    for _ in range(updates):
        learning.update(consumed=n)
    return learning


def test_a_checkpoint_restores_weights_counters_and_rng_and_keeps_the_newest(tmp_path):
    cfg = fast_config(learning_starts=0)
    checkpoints = _checkpoints(tmp_path, cfg, keep=2, with_replay=True)
    learning, ledger = _trained(cfg), Ledger(consumed=64, duplicates=3, stale=2, dead_letters=1)
    for version in (1, 2, 3):
        checkpoints.save(learning, ledger, version)
    assert len(checkpoints.store.sequences()) == 2
    torch.manual_seed(1234)
    expected_draw = torch.rand(3)
    torch.manual_seed(1234)
    checkpoints.save(learning, ledger, 4)

    fresh, restored = _learning(cfg), Ledger()
    torch.manual_seed(99)
    manifest = checkpoints.restore(fresh, restored, committed={})
    assert manifest.policy_version == 4 and manifest.updates == 3
    assert restored.counters() == ledger.counters()
    assert fresh.learner.updates == 3 and fresh.size() == 64
    for name, value in learning.learner.policy_weights().items():
        np.testing.assert_array_equal(fresh.learner.policy_weights()[name], value)
    torch.testing.assert_close(torch.rand(3), expected_draw)


def test_the_committed_state_wins_over_the_checkpoint(tmp_path):
    cfg = fast_config(learning_starts=0)
    checkpoints = _checkpoints(tmp_path, cfg)
    checkpoints.save(_trained(cfg), Ledger(consumed=64), 1)
    fresh, ledger = _learning(cfg), Ledger()
    checkpoints.restore(
        fresh,
        ledger,
        committed={
            "consumed": "200",
            "duplicates": "5",
            "updates": "40",
            "seq:rollout-0": "7,9",
            "produced:rollout-0": "300",
        },
    )
    assert ledger.consumed == 200 and ledger.duplicates == 5 and fresh.learner.updates == 40
    assert ledger.seqs.watermark == {"rollout-0": 7} and ledger.produced == {"rollout-0": 300}


def test_without_a_checkpoint_only_the_committed_state_is_taken(tmp_path):
    cfg = fast_config()
    fresh, ledger = _learning(cfg), Ledger()
    assert _checkpoints(tmp_path, cfg).restore(fresh, ledger, committed={"consumed": "8"}) is None
    assert ledger.consumed == 8 and fresh.learner.updates == 0


def test_a_checkpoint_of_other_networks_is_one_clear_error(tmp_path):
    cfg = fast_config(learning_starts=0)
    _checkpoints(tmp_path, cfg).save(_trained(cfg), Ledger(), 1)
    wider = fast_config(learning_starts=0, sac=type(cfg.sac)(hidden=(32, 32), batch_size=32))
    with pytest.raises(UserError, match="cannot be restored"):
        _checkpoints(tmp_path, wider).restore(_learning(wider), Ledger(), committed={})


def test_a_checkpoint_is_due_after_its_interval(tmp_path):
    cfg = fast_config()
    checkpoints = _checkpoints(tmp_path, cfg)
    assert not checkpoints.due()
    checkpoints.every_s = 0.0
    assert checkpoints.due()


def test_a_checkpoint_keeps_the_workers_watermarks_for_a_memory_server_lost_with_the_trainer(tmp_path):
    cfg = fast_config(learning_starts=0)
    checkpoints = _checkpoints(tmp_path, cfg)
    ledger = Ledger(consumed=64, lost=3)
    ledger.load(
        {
            "seq:rollout-0": "7,9",
            "totals:rollout-0": "56,9:8:72",
            "produced:rollout-0": "72",
            "final:rollout-0": "9",
            "end:rollout-0": "2",
        }
    )
    checkpoints.save(_trained(cfg), ledger, 1)
    restored = Ledger()
    checkpoints.restore(_learning(cfg), restored, committed={})
    assert restored.counters() == ledger.counters()
    assert restored.seqs.watermark == {"rollout-0": 7} and set(restored.seqs.above["rollout-0"]) == {9}
    assert restored.seqs.mark_total == {"rollout-0": 56}
    assert (restored.produced, restored.final_seq, restored.iteration_end) == (
        {"rollout-0": 72},
        {"rollout-0": 9},
        {"rollout-0": 2},
    )


def test_a_resumed_session_takes_the_counters_but_not_the_old_sessions_watermarks(tmp_path):
    """``--resume`` starts new workers numbered from 1 on a cleared memory server: the old session's
    watermarks would make all their entries duplicates."""
    cfg = fast_config(learning_starts=0)
    store = CheckpointStore(run_store(str(tmp_path), "run"), "run")
    ledger = Ledger(consumed=64)
    ledger.load({"seq:rollout-0": "7", "totals:rollout-0": "56", "produced:rollout-0": "56"})
    TrainerCheckpoints(store, cfg.algorithm, 60.0, 2, False, session=0).save(_trained(cfg), ledger, 1)
    same, resumed = Ledger(), Ledger()
    TrainerCheckpoints(store, cfg.algorithm, 60.0, 2, False, session=0).restore(_learning(cfg), same, {})
    TrainerCheckpoints(store, cfg.algorithm, 60.0, 2, False, session=64).restore(_learning(cfg), resumed, {})
    assert same.seqs.watermark == {"rollout-0": 7}
    assert resumed.consumed == 64 and resumed.seqs.watermark == {} and resumed.produced == {}
