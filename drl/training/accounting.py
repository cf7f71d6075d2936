"""Where every transition of a run went, from the authoritative counters: the arithmetic of a run's summary, apart
from the processes and servers it is read from, so that it is tested (and mutation-tested) on its own.

The rule it keeps: produced = consumed + unconsumed + the drops, where the drops are every counter of
``drl.training.ingest.COUNTERS`` but ``consumed`` and ``duplicates`` (a duplicate is a re-sent copy of a transition
produced once, not a transition produced twice); dead letters are entries, counted apart by kind. A resumed run
counts what its checkpoint accounted for as produced before it, and its ledger starts from that checkpoint's
counters.
"""

from __future__ import annotations

from drl.training.ingest import COUNTERS


def count(value, default: int) -> int:
    """A counter of the ledger; ``default`` where it has none (a ledger not written since the run started)."""
    return default if value in (None, "") else int(value)


def with_kept_ledger(kept: dict, produced_by: dict[str, int]) -> tuple[dict[str, str], dict[str, int]]:
    """The ledger a trainer kept in its final checkpoint, and the produced counts raised to the ``produced:<w>``
    fields it holds: what the accounts go by when the memory server lost the trainer's state after it ended."""
    ledger = {str(k): str(v) for k, v in kept.items()}
    produced = dict(produced_by)
    for field, value in ledger.items():
        if field.startswith("produced:"):
            worker = field.split(":", 1)[1]
            produced[worker] = max(produced.get(worker, 0), count(value, 0))
    return ledger, produced


def tally(
    ledger: dict,
    produced_by: dict[str, int],
    unconsumed: int,
    dead_letters: dict[str, int],
    resumed: dict[str, int] | None = None,
    steps_done: int = 0,
) -> dict:
    """The run's accounts: ``produced`` (every worker's total, plus what came before a resume: the resumed
    checkpoint's counters ``resumed`` without its duplicates, else ``steps_done``), ``consumed``,
    ``unconsumed``, ``duplicates``, ``dead_lettered``, ``updates`` (-1 when the ledger has none) and
    ``dropped`` (each drop counter)."""
    base = resumed or {}
    counters = {name: count(ledger.get(name), base.get(name, 0)) for name in COUNTERS}
    before = sum(v for k, v in base.items() if k != "duplicates") if base else steps_done
    return {
        "produced": sum(produced_by.values()) + before,
        "consumed": counters["consumed"],
        "unconsumed": unconsumed,
        "duplicates": counters["duplicates"],
        "dead_lettered": dict(dead_letters),
        "updates": count(ledger.get("updates"), -1),
        "dropped": {n: v for n, v in counters.items() if n not in ("consumed", "duplicates")},
    }


def count_fields(accounts: dict) -> dict:
    """The summary's transition fields from ``tally``'s accounts: the same keys whoever writes the summary (a
    local run's orchestrator, a Kubernetes run's trainer)."""
    return {
        "env_steps": accounts["produced"],
        "transitions_produced": accounts["produced"],
        "transitions_consumed": accounts["consumed"],
        "transitions_unconsumed": accounts["unconsumed"],
        "duplicates_dropped": accounts["duplicates"],
        "stale_dropped": accounts["dropped"].get("stale", 0),
        "dead_lettered": accounts["dead_lettered"],
        "dropped": accounts["dropped"],
    }


def eval_fields(evals: list[dict]) -> dict:
    """The summary's evaluation fields from the evaluator's results (``evaluations.jsonl``)."""
    return {
        "evaluations": len(evals),
        "best_eval_return": max((e["mean_return"] for e in evals), default=None),
        "last_eval_return": evals[-1]["mean_return"] if evals else None,
    }


def imbalance(accounts: dict) -> str | None:
    """What is wrong with the accounts, or None when they keep the rule: every figure read (none negative), no
    more consumed than produced (a transition counted twice: two processes wrote as one worker), and produced
    = consumed + unconsumed + the drops."""
    produced, consumed, unconsumed = accounts["produced"], accounts["consumed"], accounts["unconsumed"]
    drops = sum(accounts["dropped"].values())
    if min(produced, consumed, unconsumed, *accounts["dropped"].values()) < 0:
        return "a counter could not be read"
    if consumed > produced:
        return f"{consumed} transitions consumed of {produced} produced: some were counted twice"
    if produced != consumed + unconsumed + drops:
        return (
            f"{produced} produced but {consumed} consumed + {unconsumed} unconsumed + {drops} dropped "
            f"= {consumed + unconsumed + drops}"
        )
    return None


def balanced(accounts: dict) -> bool:
    """Whether the accounts keep the rule (``imbalance``)."""
    return imbalance(accounts) is None
