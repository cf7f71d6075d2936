"""``drl.training.membership`` against the in-process memory backend: workers that join, finish, say they are done, and
return with a larger share."""

from __future__ import annotations

import uuid

import pytest

from drl.memory import open_memory
from drl.training.ingest import Ledger
from drl.training.membership import Membership
from tests import memory_inproc as inproc


@pytest.fixture
def control():
    name = f"membership-{uuid.uuid4().hex[:8]}"
    yield open_memory(f"memory://{name}", "r").control()
    inproc.discard(name)


def test_a_run_starts_with_its_workers_and_admits_the_ones_registered_later(control):
    membership = Membership(control, Ledger(), workers=2)
    assert membership.workers == {"rollout-0", "rollout-1"}
    assert not membership.admits("rollout-2")
    control.register({"rollout-2": "active"}, {"rollout-2": 100})
    assert membership.admits("rollout-2") and "rollout-2" in membership.workers


def test_a_worker_is_finished_once_its_final_entry_and_all_before_it_are_in(control):
    ledger = Ledger()
    membership = Membership(control, ledger, workers=2)
    for seq in (1, 3):
        ledger.seqs.seen("rollout-0", seq)
    ledger.final_seq["rollout-0"] = 3
    assert not membership.all_finished() and membership.finished == set(), "a gap below the final entry"
    ledger.seqs.seen("rollout-0", 2)
    assert not membership.all_finished() and membership.finished == {"rollout-0"}
    control.mark_worker_done("rollout-1", 50)
    assert membership.all_finished()
    assert membership.waiting_for(version=0) == set()


def test_a_finished_worker_that_returns_with_a_larger_share_is_awaited_again(control):
    ledger = Ledger(produced={"rollout-0": 64, "rollout-1": 64})
    control.register({"rollout-0": "active", "rollout-1": "active"}, {"rollout-0": 64, "rollout-1": 64})
    membership = Membership(control, ledger, workers=2)
    control.mark_worker_done("rollout-0", 64)
    control.mark_worker_done("rollout-1", 64)
    ledger.final_seq["rollout-1"] = 4
    assert membership.all_finished()
    control.register({}, {"rollout-1": 128})
    control.forget_workers_done(["rollout-1"])  # as the scaler does for a returning worker
    assert not membership.all_finished()
    assert membership.finished == {"rollout-0"} and "rollout-1" not in ledger.final_seq
    control.register({"rollout-0": "retired"}, {"rollout-0": 500})
    membership.refresh()
    assert "rollout-0" in membership.finished, "a retired worker came back"


def test_an_iteration_waits_for_the_workers_whose_share_of_it_is_not_in(control):
    ledger = Ledger(iteration_end={"rollout-0": 3, "rollout-1": 2})
    membership = Membership(control, ledger, workers=3)
    assert membership.waiting_for(3) == {"rollout-1", "rollout-2"}
    membership.finished.add("rollout-2")
    assert membership.waiting_for(3) == {"rollout-1"}


def test_a_member_that_never_sends_is_given_up_after_the_silence_bound(control, caplog):
    """A name written into the membership by another program (or a worker that never started) is waited for at most
    ``silence_s``; then the run goes on without it, said in one line naming it."""
    now = [0.0]
    ledger = Ledger()
    membership = Membership(control, ledger, workers=1, silence_s=30, clock=lambda: now[0])
    control.register({"rollout-0": "active", "rollout-7": "active"}, {"rollout-0": 10, "rollout-7": 10})
    membership.refresh()
    ledger.seqs.seen("rollout-0", 1)
    ledger.final_seq["rollout-0"] = 1
    ledger.produced["rollout-0"] = 10
    assert not membership.all_finished()
    now[0] = 29.0
    assert not membership.all_finished()
    now[0] = 31.0
    assert membership.all_finished() and membership.given_up == {"rollout-7"}
    assert any("rollout-7" in r.message for r in caplog.records)
    membership.refresh()
    assert "rollout-7" in membership.finished, "a given-up member is not taken back by its unfinished share"


def test_a_worker_that_keeps_sending_is_never_given_up(control):
    now = [0.0]
    ledger = Ledger()
    membership = Membership(control, ledger, workers=1, silence_s=30, clock=lambda: now[0])
    for seq in range(1, 10):
        now[0] += 20
        ledger.seqs.seen("rollout-0", seq)
        assert not membership.all_finished()
    assert membership.given_up == set()


def test_a_run_is_not_done_while_a_retired_workers_steps_wait_to_be_shared_out(control):
    """The scaling window: rollout-0 retired after producing 300 of its 500, rollout-1 finished its 500; the run's
    1,000 steps are covered only once the orchestrator gives the other 200 to a new worker, which is then awaited."""
    now = [0.0]
    ledger = Ledger()
    membership = Membership(control, ledger, workers=2, silence_s=30, clock=lambda: now[0], steps=1000)
    control.register({"rollout-0": "active", "rollout-1": "active"}, {"rollout-0": 500, "rollout-1": 500})
    control.register({"rollout-0": "retired"}, {})
    control.mark_worker_done("rollout-0", 300)
    control.mark_worker_done("rollout-1", 500)
    assert not membership.all_finished(), "done while 200 of the run's steps belonged to no one"
    control.register({"rollout-2": "active"}, {"rollout-1": 500, "rollout-2": 200})
    assert not membership.all_finished() and "rollout-2" in membership.workers
    control.mark_worker_done("rollout-2", 200)
    assert membership.all_finished()


class _RegistersBefore:
    """A membership whose ``at``-th read finds ``then()`` done just before it: the orchestrator's registration
    landing between two reads of the trainer."""

    def __init__(self, control, at: int, then):
        self.control, self.at, self.then, self.reads = control, at, then, 0

    def __getattr__(self, name):
        return getattr(self.control, name)

    def snapshot(self):
        self.reads += 1
        if self.reads == self.at:
            self.then()
        return self.control.snapshot()


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_a_worker_registered_while_the_trainer_looks_is_awaited_not_only_counted(control, at):
    """The scaling window's race (seen in test_scale): every member finished, then the orchestrator registered a
    new worker with the rest of the steps between the trainer's read of the members and its read of the shares,
    and the run ended with that worker's steps never produced."""
    ledger = Ledger()
    control.register({"rollout-0": "active", "rollout-1": "active"}, {"rollout-0": 500, "rollout-1": 500})
    control.register({"rollout-0": "retired"}, {})
    control.mark_worker_done("rollout-0", 300)
    control.mark_worker_done("rollout-1", 500)
    racing = _RegistersBefore(control, at, lambda: control.register({"rollout-2": "active"}, {"rollout-2": 200}))
    membership = Membership(racing, ledger, workers=2, silence_s=30, clock=lambda: 0.0, steps=1000)
    for _ in range(4):
        assert not membership.all_finished(), "done while rollout-2's 200 steps were not produced"
    assert "rollout-2" in membership.workers
    control.mark_worker_done("rollout-2", 200)
    assert membership.all_finished()


def test_the_original_workers_cover_the_run_without_written_shares_and_a_shortfall_is_waited_out(control):
    assert Membership(control, Ledger(), workers=3, steps=1000).covered()
    now = [0.0]
    membership = Membership(control, Ledger(), workers=2, silence_s=30, clock=lambda: now[0], steps=1000)
    control.register({}, {"rollout-0": 500, "rollout-1": 400})
    assert not membership.covered()
    now[0] = 29.0
    assert not membership.covered()
    now[0] = 31.0
    assert membership.covered(), "a shortfall nobody fills is waited for at most the silence bound"
