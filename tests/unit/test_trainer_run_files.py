"""The run files a trainer writes in a Kubernetes pod (``services.trainer.summary``): config.json and summary.json
in the store, with the accounts of the memory server's counters. The whole path, a trainer in a pod writing both
to the chart's S3 server, is run by the containers tier (tests/containers)."""

from __future__ import annotations

import json

import pytest

from drl.config import ExperimentConfig
from drl.memory import MemoryUnavailable
from drl.store.base import LocalStore, PrefixedStore
from services.trainer import summary as run_files
from tests.harness import assert_balanced


class FakeControl:
    """The counters ``RunControl`` gives a summary, as a memory server would hold them at a run's end."""

    def __init__(self, ledger=None, produced=None, unconsumed=0, dead=None, members=(), done=None, fail=False):
        self._ledger = ledger or {}
        self._produced = produced or {}
        self._unconsumed, self._dead, self.fail = unconsumed, dead or {}, fail
        self.members, self.done = {m: "1" for m in members}, dict(done or {})

    def _check(self):
        if self.fail:
            raise MemoryUnavailable("connection refused")

    def ledger(self):
        self._check()
        return dict(self._ledger)

    def produced(self):
        self._check()
        return dict(self._produced)

    def unconsumed(self):
        return self._unconsumed

    def dead_letters(self):
        return dict(self._dead)

    def snapshot(self):
        return {}, {}, dict(self.members)

    def workers_done(self):
        return dict(self.done)


def store(tmp_path) -> PrefixedStore:
    return PrefixedStore(LocalStore(tmp_path), "run-1")


CFG = ExperimentConfig(env="Pendulum-v1", workers=2, steps=1000)
LEDGER = {"consumed": "900", "duplicates": "7", "stale": "40", "dead_letters": "0", "lost": "32", "updates": "55"}


def test_only_a_pod_writes_them():
    assert run_files.trainer_writes({"DRL_RUN_FILES": "trainer"})
    assert not run_files.trainer_writes({})
    assert not run_files.trainer_writes({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}), "a pod is not a backend's word"


def test_the_accounts_balance_with_every_drop_and_duplicates_apart():
    control = FakeControl(LEDGER, {"rollout-0": 500, "rollout-1": 500}, unconsumed=28, dead={"corrupt": 1})
    acc = run_files.accounts(control)
    assert acc == {
        "produced": 1000,
        "consumed": 900,
        "unconsumed": 28,
        "duplicates": 7,
        "dead_lettered": {"corrupt": 1},
        "updates": 55,
        "dropped": {"stale": 40, "dead_letters": 0, "lost": 32},
    }
    assert acc["produced"] == acc["consumed"] + acc["unconsumed"] + sum(acc["dropped"].values())


def test_a_fresh_ledger_counts_zero_and_no_updates():
    acc = run_files.accounts(FakeControl({}, {}))
    assert acc["consumed"] == 0 and acc["updates"] == -1 and set(acc["dropped"]) == {"stale", "dead_letters", "lost"}


def test_summary_json_holds_the_local_summarys_keys_and_balances(tmp_path):
    s = store(tmp_path)
    s.put("evaluations.jsonl", b'{"mean_return": -900.5}\nnot json\n{"mean_return": -400.0}\n')
    control = FakeControl(LEDGER, {"rollout-0": 500, "rollout-1": 500}, unconsumed=28)
    written = run_files.write_summary(
        s, control, CFG, "run-1", {"updates": 60, "policy_version": 4}, 12.345, 0, "steps_done"
    )
    assert json.loads(s.get("summary.json")) == written
    assert_balanced(written)
    assert written["transitions_produced"] == written["env_steps"] == 1000
    assert (written["updates"], written["policy_version"], written["stale_dropped"]) == (55, 4, 40)
    assert (written["evaluations"], written["best_eval_return"], written["last_eval_return"]) == (2, -400.0, -400.0)
    assert (written["exit_reason"], written["wall_seconds"], written["written_by"]) == ("steps_done", 12.35, "trainer")
    assert (written["preset"], written["algorithm"], written["workers"]) == ("sac", "sac", 2)


def test_config_json_is_the_resolved_configuration(tmp_path):
    s = store(tmp_path)
    run_files.write_config(s, CFG)
    assert ExperimentConfig.from_json(s.get("config.json").decode()) == CFG


def test_a_stopped_run_waits_for_its_workers_to_be_done_before_counting(tmp_path):
    ticks = iter(range(100))
    control = FakeControl(LEDGER, {"rollout-0": 500}, members=("rollout-0", "rollout-1"), done={"rollout-0": 500})
    slept = []

    def sleep(s):
        slept.append(s)
        if len(slept) == 3:
            control.done["rollout-1"] = 500

    assert run_files.wait_for_workers(control, 10.0, clock=lambda: next(ticks), sleep=sleep)
    assert len(slept) == 3
    assert not run_files.wait_for_workers(
        FakeControl(members=("rollout-0",)), 2.0, clock=lambda: next(ticks), sleep=lambda s: None
    )


def test_without_the_memory_servers_counters_no_summary_is_written(tmp_path, caplog):
    s = store(tmp_path)
    with caplog.at_level("WARNING", logger="drl.trainer"):
        assert run_files.write_summary(s, FakeControl(fail=True), CFG, "run-1", {}, 1.0, 0, "steps_done") is None
    assert s.get_optional("summary.json") is None
    assert "cannot be read from the memory server" in caplog.text


@pytest.mark.parametrize("reason", ["stopped", "target_reached"])
def test_a_run_that_ended_early_is_summarised_for_its_reason(tmp_path, reason):
    control = FakeControl(
        LEDGER, {"rollout-0": 500, "rollout-1": 500}, unconsumed=28, members=("rollout-0",), done={"rollout-0": 500}
    )
    written = run_files.write_summary(store(tmp_path), control, CFG, "run-1", {}, 1.0, 0, reason)
    assert written["exit_reason"] == reason
    assert_balanced(written)
