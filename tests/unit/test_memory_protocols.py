"""The memory protocols' shape: ``RunControl`` is exactly the union of its narrow parts (a caller typed with one
part sees every method of that concern and no other), the reading protocol leaves the recovery to
``ExperienceReader.recovery``, and both implementations' readers hand out a ``ReaderRecovery``."""

from __future__ import annotations

import itertools

from drl.memory import (
    ExperienceReader,
    ReaderRecovery,
    RunAccounts,
    RunClaims,
    RunControl,
    RunMembers,
    RunStatus,
    RunStop,
)
from drl.memory.redis.stream import Consumer
from tests import memory_inproc as inproc

PARTS = (RunStop, RunMembers, RunStatus, RunAccounts, RunClaims)


def _methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def _all_methods(protocol: type) -> set[str]:
    return set().union(*(_methods(cls) for cls in protocol.__mro__ if cls.__module__ == "drl.memory.base"))


def test_run_control_is_the_union_of_disjoint_concerns():
    parts = [_methods(part) for part in PARTS]
    assert all(parts), "a concern without methods"
    for a, b in itertools.combinations(parts, 2):
        assert not a & b, f"a method in two concerns: {a & b}"
    assert _methods(RunControl) == set(), "RunControl declares its methods in its parts, not itself"
    assert _all_methods(RunControl) == set().union(*parts)
    assert all(part in RunControl.__mro__ for part in PARTS)


def test_the_reading_protocol_leaves_recovery_to_its_own_object():
    recovery = _methods(ReaderRecovery)
    assert recovery == {"floors", "in_stream", "settle", "rewrite", "set_widening"}
    assert not recovery & _all_methods(ExperienceReader)
    assert isinstance(vars(ExperienceReader).get("recovery"), property)


def test_both_readers_hand_out_a_recovery():
    backend = inproc.open_inproc("protocols", "r")
    try:
        recovery = backend.reader("trainer-0").recovery
        assert all(callable(getattr(recovery, name, None)) for name in _methods(ReaderRecovery))
    finally:
        inproc.discard("protocols")
    assert all(callable(getattr(Consumer, name, None)) for name in _methods(ReaderRecovery))
    assert isinstance(Consumer.__dict__.get("recovery"), property)
