"""The share arithmetic of live scaling, as pure functions of one consistent snapshot of the run's Redis state.

The orchestrator owns two hashes: ``Keys.members`` (rollout worker -> ``active`` | ``retired``) and
``Keys.shares`` (rollout worker -> transitions it is to produce in all). Scaling decides, from what every worker
produced and was assigned, which workers leave, which join, and what each remaining worker's share becomes,
so that the shares add up to the run's steps exactly. Nothing here talks to Redis or starts a process: the local
backend and the in-cluster scaler (``orchestrator.backends.kubernetes.scaler``) both do their I/O around these functions, and the
rules are tested on plain dictionaries.

Two ways of naming workers exist. A local run starts new processes under fresh names (``rollout-<next index>``)
and may stop any worker (``plan_removal``/``plan_shares``). A Kubernetes run's rollout workers are an Indexed
Job whose completion index is the worker index: scaling to N keeps exactly the indexes ``0..N-1``, so the
highest indexes leave and an index that left earlier comes back under its old name
(``plan_indexed_removal``/``plan_indexed_shares``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping

from drl.memory import ACTIVE
from drl.naming import even_share, worker_index, worker_name

SCALE_MARGIN_ENTRIES = 32


def margin_transitions(batch_transitions: int) -> int:
    """Transitions left below which a worker counts as finishing: it may hand in its last entry before it reads
    a new share, so only workers with a good stretch left are given more."""
    return SCALE_MARGIN_ENTRIES * batch_transitions


@dataclass(frozen=True)
class Snapshot:
    """``Keys.produced``, ``Keys.shares`` and ``Keys.members`` as read together in one transaction."""

    produced: Mapping[str, int] = field(default_factory=dict)
    assigned: Mapping[str, int] = field(default_factory=dict)
    members: Mapping[str, str] = field(default_factory=dict)

    def active(self, alive: Collection[str] | None = None) -> list[str]:
        """Active members, by index; with ``alive``, only those whose process still runs (a local run's
        finished workers have exited; on Kubernetes the Job recreates a missing pod, so every member counts)."""
        names = [n for n, state in self.members.items() if state == ACTIVE and (alive is None or n in alive)]
        return sorted(names, key=worker_index)


@dataclass(frozen=True)
class ScalePlan:
    """The outcome of a scaling decision: ``shares`` is what to write into ``Keys.shares``."""

    collecting: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    shares: dict[str, int] = field(default_factory=dict)
    remaining: int = 0
    retired: tuple[str, ...] = ()
    finishing: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The workers the steps left are spread over."""
        return self.collecting + self.added


def collecting(snapshot: Snapshot, active: Iterable[str], margin: int) -> list[str]:
    """Active workers with more than ``margin`` transitions of their share left, in the given order."""
    return [n for n in active if snapshot.assigned.get(n, 0) - snapshot.produced.get(n, 0) > margin]


def steps_left(
    snapshot: Snapshot, active: Collection[str], collecting_names: Collection[str], steps: int, steps_done: int
) -> int:
    """The run's steps not yet produced nor promised: a finishing worker counts with its whole share, every
    other worker (collecting, retired, gone) with what it produced."""
    finishing = set(active) - set(collecting_names)
    committed = sum(
        snapshot.assigned.get(n, 0) if n in finishing else snapshot.produced.get(n, 0)
        for n in set(snapshot.produced) | finishing
    )
    return max(0, steps - steps_done - committed)


def spread(names: Iterable[str], produced: Mapping[str, int], remaining: int) -> dict[str, int]:
    """Each worker's new total: what it produced plus its near-equal part of ``remaining`` (the first names get
    the remainder), so a returning worker keeps what it did before."""
    names = list(names)
    return {n: produced.get(n, 0) + even_share(remaining, len(names), i) for i, n in enumerate(names)}


def initial_shares(steps: int, steps_done: int, workers: int) -> dict[str, int]:
    """Shares of a run that was never scaled: exactly the even split each worker assumes on its own."""
    total = max(0, steps - steps_done)
    return {worker_name(i): even_share(total, workers, i) for i in range(workers)}


# -- local runs: fresh names, any worker may be stopped ---------------------------------------------------


def plan_removal(snapshot: Snapshot, workers: int, margin: int, alive: Collection[str] | None = None) -> list[str]:
    """Collecting workers beyond the first ``workers`` (by index): those a local run stops and retires."""
    return collecting(snapshot, snapshot.active(alive), margin)[workers:]


def plan_shares(
    snapshot: Snapshot,
    *,
    steps: int,
    steps_done: int,
    workers: int,
    margin: int,
    next_index: int,
    alive: Collection[str] | None = None,
) -> ScalePlan:
    """After the removed workers exited: the steps left spread over the collecting workers and as many new
    ones (``rollout-<next_index>`` on) as bring the collecting count to ``workers``; none are added when
    nothing is left to produce."""
    active = snapshot.active(alive)
    keep = collecting(snapshot, active, margin)
    remaining = steps_left(snapshot, active, keep, steps, steps_done)
    added = [worker_name(i) for i in range(next_index, next_index + max(0, workers - len(keep)))] if remaining else []
    names = keep + added
    finishing = tuple(n for n in active if n not in keep)
    if not names:
        return ScalePlan(finishing=finishing)
    return ScalePlan(
        tuple(keep), tuple(added), spread(names, snapshot.produced, remaining), remaining, finishing=finishing
    )


# -- Kubernetes runs: the Indexed Job keeps indexes 0..N-1 ------------------------------------------------


def plan_indexed_removal(snapshot: Snapshot, workers: int) -> list[str]:
    """Active members with an index of ``workers`` or more: scaling the Indexed Job to ``workers`` removes
    their pods, finishing or not."""
    return [n for n in snapshot.active() if worker_index(n) >= workers]


def plan_indexed_shares(snapshot: Snapshot, *, steps: int, steps_done: int, workers: int, margin: int) -> ScalePlan:
    """After the removed workers exited: the steps left spread over the collecting workers below ``workers``
    and the indexes below ``workers`` that are not active (new, or retired earlier and coming back under the
    same name, with what they produced before plus their new part).

    Retired workers get a share equal to what they produced: that is all they will have produced, and a
    retired worker that is still alive reads it and stops. If every worker in range is finishing, they are
    given the steps left (a worker whose pod already completed cannot take them up: scale down and up again).
    """
    active = [n for n in snapshot.active() if worker_index(n) < workers]
    keep = collecting(snapshot, active, margin)
    remaining = steps_left(snapshot, active, keep, steps, steps_done)
    added = (
        [worker_name(i) for i in range(workers) if snapshot.members.get(worker_name(i)) != ACTIVE] if remaining else []
    )
    finishing = [n for n in active if n not in keep]
    retired = sorted((n for n, s in snapshot.members.items() if s != ACTIVE and n not in added), key=worker_index)
    shares = {n: snapshot.produced.get(n, 0) for n in retired}
    names = keep + added
    if remaining and not names and active:
        keep, finishing = active, []
        remaining = steps_left(snapshot, active, keep, steps, steps_done)
        names = keep
    shares.update(spread(names, snapshot.produced, remaining) if names else {})
    return ScalePlan(tuple(keep), tuple(added), shares, remaining, tuple(retired), tuple(finishing))
