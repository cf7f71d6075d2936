"""Benchmark verdicts: a goal is met only when the comparison it names was made.

A baseline (a peer, the raw loop) that crashed, was killed past its timeout or printed no result means "no
comparison": ``None``, shown as such, never "met". drl's own failure is "not met". A peer that ran and did not
reach its target within its budget is a comparison drl wins when drl reached it.
"""

from __future__ import annotations

import math
import statistics


def failed(r: dict) -> bool:
    """A run that did not finish as a run (crashed, killed past its timeout, printed no result): it says nothing
    about time to score. One stopped at the time budget (``"budget"``) did finish: it did not reach the target."""
    return r.get("exit_code") not in (0, "budget")


def seconds(r: dict, key: str = "time_to_score_s") -> float:
    """A run's time to score, infinite when it did not reach the target."""
    value = r.get(key)
    return math.inf if value is None or not r["reached"] else float(value)


def time_verdict(
    by_side: dict[str, list[dict]], goal_kind: str, goal_value: float
) -> tuple[float | None, bool | None, str]:
    """(ratio drl/sb3 of the median times to score, goal met, why). A failed baseline run means no comparison;
    a failed drl run is not met; a peer that ran and did not reach the target in its budget counts as infinitely
    slow; a goal in seconds (``goal_kind`` "seconds") needs drl's runs alone, a ratio goal drl <= value x sb3."""
    ours = [f"drl seed {r['seed']} (exit {r.get('exit_code')})" for r in by_side.get("drl", []) if failed(r)]
    if ours or not by_side.get("drl"):
        return None, False, "drl failed: " + (", ".join(ours) or "no runs")
    if goal_kind != "seconds":
        theirs = [f"sb3 seed {r['seed']} (exit {r.get('exit_code')})" for r in by_side.get("sb3", []) if failed(r)]
        if theirs or not by_side.get("sb3"):
            return None, None, "no comparison: the baseline failed: " + (", ".join(theirs) or "no sb3 runs")
    medians = {side: statistics.median(seconds(r) for r in rs) for side, rs in by_side.items() if rs}
    if goal_kind == "seconds":
        return None, medians["drl"] <= goal_value, f"drl median {medians['drl']:.1f} s"
    if math.isinf(medians["drl"]):
        return None, False, "drl did not reach the target"
    if math.isinf(medians["sb3"]):
        return None, True, "sb3 did not reach the target within its budget; drl did"
    ratio = medians["drl"] / medians["sb3"]
    return ratio, ratio <= goal_value, f"ratio {ratio:.3f}"


def combined(verdicts) -> bool | None:
    """False if any part's goal is not met; None (no comparison) if a part has none and none is false; True only
    when every part was compared and met."""
    verdicts = list(verdicts)
    if False in verdicts:
        return False
    return None if None in verdicts or not verdicts else True
