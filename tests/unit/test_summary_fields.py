"""The summary's transition and evaluation fields (``drl.training.accounting.count_fields``, ``eval_fields``): a local
run's orchestrator and a Kubernetes run's trainer write them from the same code, so each key and the figure it
holds are checked here once."""

from __future__ import annotations

from drl.training.accounting import count_fields, eval_fields, tally


def test_the_transition_fields_name_each_figure_of_the_accounts():
    acc = tally(
        {"consumed": "90", "stale": "4", "lost": "3", "duplicates": "7"},
        {"rollout-0": 60, "rollout-1": 45},
        unconsumed=8,
        dead_letters={"truncated": 2},
    )
    assert count_fields(acc) == {
        "env_steps": 105,
        "transitions_produced": 105,
        "transitions_consumed": 90,
        "transitions_unconsumed": 8,
        "duplicates_dropped": 7,
        "stale_dropped": 4,
        "dead_lettered": {"truncated": 2},
        "dropped": {"stale": 4, "dead_letters": 0, "lost": 3},
    }


def test_accounts_without_a_stale_drop_report_none_dropped_as_stale():
    acc = {"produced": 5, "consumed": 5, "unconsumed": 0, "duplicates": 0, "dead_lettered": {}, "dropped": {}}
    assert count_fields(acc)["stale_dropped"] == 0


def test_the_evaluation_fields_count_the_evaluations_and_keep_the_best_and_the_last_return():
    evals = [{"mean_return": -900.5}, {"mean_return": -100.0}, {"mean_return": -400.0}]
    assert eval_fields(evals) == {"evaluations": 3, "best_eval_return": -100.0, "last_eval_return": -400.0}


def test_a_run_without_evaluations_has_no_returns():
    assert eval_fields([]) == {"evaluations": 0, "best_eval_return": None, "last_eval_return": None}
