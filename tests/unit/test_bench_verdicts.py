"""A benchmark's verdict: a goal is met only when the comparison was made. A baseline that crashed, timed out or
printed nothing means "no comparison" (None), never "met"; a peer that ran and missed the target within its
budget is a comparison drl wins; drl's own failure is "not met"."""

from __future__ import annotations

from bench.atari_throughput import summarise
from bench.verdicts import combined, time_verdict


def run(side: str, seed: int, seconds: float | None, exit_code=0) -> dict:
    return {
        "side": side,
        "seed": seed,
        "reached": seconds is not None and exit_code in (0, "budget"),
        "exit_code": exit_code,
        "time_to_score_s": seconds,
    }


def sides(drl: list[dict], sb3: list[dict]) -> dict:
    return {"drl": drl, "sb3": sb3}


def test_a_crashed_baseline_is_no_comparison_never_met():
    ratio, met, why = time_verdict(sides([run("drl", 0, 10.0)], [run("sb3", 0, None, exit_code=1)]), "ratio", 0.5)
    assert (ratio, met) == (None, None) and why.startswith("no comparison") and "sb3 seed 0 (exit 1)" in why


def test_a_baseline_killed_past_its_timeout_is_no_comparison():
    _, met, _ = time_verdict(
        sides(
            [run("drl", 0, 10.0), run("drl", 1, 12.0)], [run("sb3", 0, 30.0), run("sb3", 1, None, exit_code="timeout")]
        ),
        "ratio",
        0.5,
    )
    assert met is None


def test_a_baseline_that_ran_out_of_budget_lost_the_race():
    ratio, met, _ = time_verdict(sides([run("drl", 0, 10.0)], [run("sb3", 0, None, exit_code="budget")]), "ratio", 0.5)
    assert (ratio, met) == (None, True)


def test_ratios_decide_when_both_sides_reached_the_target():
    fast = time_verdict(sides([run("drl", 0, 4.0)], [run("sb3", 0, 10.0)]), "ratio", 0.5)
    slow = time_verdict(sides([run("drl", 0, 6.0)], [run("sb3", 0, 10.0)]), "ratio", 0.5)
    assert fast[:2] == (0.4, True) and slow[:2] == (0.6, False)


def test_drl_missing_the_target_or_crashing_is_not_met():
    assert time_verdict(sides([run("drl", 0, None)], [run("sb3", 0, 10.0)]), "ratio", 0.5)[1] is False
    assert time_verdict(sides([run("drl", 0, None, exit_code=1)], [run("sb3", 0, 10.0)]), "ratio", 0.5)[1] is False


def test_a_goal_in_seconds_needs_only_drl():
    assert time_verdict(sides([run("drl", 0, 300.0)], []), "seconds", 360)[1] is True
    assert time_verdict(sides([run("drl", 0, 400.0)], []), "seconds", 360)[1] is False


def atari_results(peer_rate: float | None, raw_rate: float | None = 1000.0, drl_rate: float | None = 900.0):
    rows = [
        {"workers": 1, "repeat": 0, "side": "raw", "rate": raw_rate},
        {"workers": 1, "repeat": 0, "side": "sf", "rate": peer_rate},
        {"workers": 1, "repeat": 0, "side": "sf-sampler", "rate": peer_rate},
        {"workers": 1, "repeat": 0, "side": "drl", "rate": drl_rate},
    ]
    return summarise([1], rows, n_cores=2, peer="sf")


def test_atari_throughput_with_a_failed_peer_is_no_comparison():
    rows, met = atari_results(peer_rate=None)
    assert rows[0]["goal_met"] is None and met is None


def test_atari_throughput_verdicts_when_compared():
    assert atari_results(peer_rate=800.0)[1] is True
    assert atari_results(peer_rate=1200.0)[1] is False
    assert atari_results(peer_rate=800.0, drl_rate=None)[1] is False, "drl's own failure is not met"


def test_atari_throughput_compares_drl_with_the_faster_one_process_loop_of_each_repeat():
    """Issue 45's baseline is one process stepping every env: drl over the faster of its two forms, repeat by
    repeat, then the median."""
    runs = [
        {"workers": 2, "repeat": rep, "side": side, "rate": rate}
        for rep, rates in enumerate([(1000.0, 1250.0, 900.0), (1200.0, 800.0, 960.0), (1000.0, None, 1000.0)])
        for side, rate in zip(("raw-one", "raw-one-overlap", "drl"), rates)
    ]
    row = summarise([2], runs, n_cores=2, peer="sf")[0][0]
    assert row["drl_over_raw_one"] == 0.8  # median of 900/1250, 960/1200 and 1000/1000
    assert row["raw_one_fps"] == 1000.0 and row["raw_one_overlap_fps"] == 1025.0


def test_combined_verdicts():
    assert combined([True, True]) is True and combined([True, None]) is None and combined([None, False]) is False
    assert combined([]) is None


def test_each_verdict_says_why_in_words_a_reader_can_act_on():
    crashed = sides([run("drl", 0, None, exit_code=1), run("drl", 1, None, exit_code=-9)], [run("sb3", 0, 5.0)])
    assert time_verdict(crashed, "ratio", 0.5) == (None, False, "drl failed: drl seed 0 (exit 1), drl seed 1 (exit -9)")
    assert time_verdict(sides([], [run("sb3", 0, 5.0)]), "ratio", 0.5) == (None, False, "drl failed: no runs")
    lost = sides([run("drl", 0, 1.0)], [run("sb3", 0, None, exit_code=1), run("sb3", 1, None, exit_code="timeout")])
    assert (
        time_verdict(lost, "ratio", 0.5)[2]
        == "no comparison: the baseline failed: sb3 seed 0 (exit 1), sb3 seed 1 (exit timeout)"
    )
    assert (
        time_verdict(sides([run("drl", 0, 1.0)], []), "ratio", 0.5)[2]
        == "no comparison: the baseline failed: no sb3 runs"
    )
    assert (
        time_verdict(sides([run("drl", 0, None)], [run("sb3", 0, 1.0)]), "ratio", 0.5)[2]
        == "drl did not reach the target"
    )
    assert (
        time_verdict(sides([run("drl", 0, 1.0)], [run("sb3", 0, None, exit_code="budget")]), "ratio", 0.5)[2]
        == "sb3 did not reach the target within its budget; drl did"
    )
    assert time_verdict(sides([run("drl", 0, 360.0)], []), "seconds", 360) == (None, True, "drl median 360.0 s")


def test_a_goal_exactly_on_its_bound_is_met():
    assert time_verdict(sides([run("drl", 0, 5.0)], [run("sb3", 0, 10.0)]), "ratio", 0.5) == (0.5, True, "ratio 0.500")


def test_a_time_counts_only_for_a_run_that_reached_the_target():
    from bench.verdicts import seconds

    assert seconds({"reached": True, "time_to_score_s": 3}) == 3.0
    assert seconds({"reached": False, "time_to_score_s": 3}) == float("inf")
    assert seconds({"reached": True, "time_to_score_s": None}) == float("inf")
