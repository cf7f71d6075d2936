"""A replacement process waiting for its identity (``services.common.take_identity``) while its predecessor's claim
runs out: when it gives up and when it waits on. The evaluator's replacement keeps waiting after the trainer
finished until the final version is evaluated (CI: a SIGKILLed evaluator's replacement gave up as the trainer
finished, and the run's final version went unevaluated). Against the in-process memory backend."""

from __future__ import annotations

import types
import uuid

import pytest

from drl.memory import open_memory
from services.common import run_over, take_identity
from services.evaluator.evaluator import Evaluator
from tests import memory_inproc as inproc


@pytest.fixture
def memory():
    name = f"identity-{uuid.uuid4().hex[:8]}"
    backend = open_memory(f"memory://{name}", "r")
    yield backend
    inproc.discard(name)


def evaluator_left(control) -> str | None:
    return Evaluator.nothing_left(types.SimpleNamespace(control=control))  # type: ignore[arg-type]


def test_the_evaluators_replacement_waits_for_the_final_version_the_others_for_the_run(memory):
    control = memory.control()
    assert evaluator_left(control) is None and run_over(control) is None
    control.write_status("evaluator", {"policy_version": 3})
    control.mark_trainer_done(5)
    assert run_over(control) == "the trainer finished", "other roles have nothing left once the trainer finished"
    assert evaluator_left(control) is None, "the final version 5 is not evaluated yet"
    control.write_status("evaluator", {"policy_version": 5})
    assert evaluator_left(control) == "the trainer finished and its final version 5 is evaluated"


def test_a_stop_request_ends_the_evaluators_wait(memory):
    control = memory.control()
    control.mark_trainer_done(5)
    control.request_stop("user")
    assert evaluator_left(control) == "the run is stopping (user)"


def test_a_waiter_that_gives_up_exits_0_without_the_identity(memory):
    """``give_up`` is asked while another process (here one of another host, so not released at once) holds the
    claim: a reason ends the wait with exit code 0 and nothing taken."""
    control = memory.control()
    assert control.claim("evaluator", "elsewhere:1", 60) is None
    with pytest.raises(SystemExit) as ended:
        take_identity(memory, control, "evaluator", give_up=lambda: "nothing left")
    assert ended.value.code == 0
    assert control.claim("evaluator", "elsewhere:1", 60) is None, "the waiter took the claim"
