"""The scaling benchmark's bookkeeping (``bench/scaling.py``): alternating windows take turns with the other side
frozen, and the goal is judged on the alternating ratio where one was measured. The sides here are stand-ins
for ``SystemRun`` and ``RawLoop`` (the benchmark's own classes, which start real processes)."""

from __future__ import annotations

import pytest

from bench import scaling


class Side:
    """Records the calls, and fails a window taken while the other side runs."""

    def __init__(self, name: str, rate: float, log: list[str]):
        self.name, self.rate, self.log = name, rate, log
        self.running = True
        self.other: Side | None = None

    def pause(self) -> None:
        self.running = False

    def resume(self) -> None:
        self.running = True

    def window(self, seconds: float) -> dict:
        assert self.running and not self.other.running, "a window was taken with the other side running"
        self.log.append(self.name)
        return {"rate": self.rate}


def test_alternating_windows_take_turns_with_the_other_side_frozen(monkeypatch):
    monkeypatch.setattr(scaling.time, "sleep", lambda s: None)
    log: list[str] = []
    system, reference = Side("system", 30.0, log), Side("reference", 40.0, log)
    system.other, reference.other = reference, system
    pairs = scaling.alternate(system, reference, rounds=3, window=1.0, settle=0.0)
    assert log == ["system", "reference", "reference", "system", "system", "reference"]
    assert pairs == [({"rate": 30.0}, {"rate": 40.0})] * 3
    assert not system.running and not reference.running


def run(workers: int, rate: float, raw: float) -> dict:
    return {
        "workers": workers,
        "rate": rate,
        "produced_rate": rate,
        "raw": {"rate": raw, "cpu_us_per_step": 40.0},
        "raw_parallel": {"rate": raw * min(workers, 2)},
        "system_cpu_us_per_step": 60.0,
        "startup_s": 1.0,
        "transitions_per_entry": 100.0,
        "cpu_share": {role: 0.1 for role in scaling.CpuMeter.ROLES},
    }


def test_the_goal_is_judged_on_the_alternating_ratio_where_there_is_one():
    pairs = {2: [run(2, 14_000.0, 10_000.0)], 32: [run(32, 20_000.0, 10_000.0)]}
    rows, met, base, raw = scaling.summarise([2, 32], pairs, 2)
    assert base == 2 and raw == 10_000.0
    assert rows[0]["efficiency"] == pytest.approx(0.7) and not rows[0]["goal_met"]
    assert rows[1]["vs_cores_rate"] == pytest.approx(20 / 14, abs=1e-3) and rows[1]["goal_met"]
    assert rows[0]["goal_basis"] == rows[1]["goal_basis"] == "repeats" and not met

    alternating = {2: {"ratio": 0.93, "ratios": [0.92, 0.93, 0.95]}, 32: {"ratio": 0.75, "ratios": [0.75] * 3}}
    rows, met, _, _ = scaling.summarise([2, 32], pairs, 2, alternating)
    assert [r["goal_basis"] for r in rows] == ["alternating", "alternating"]
    assert rows[0]["goal_met"] and not rows[1]["goal_met"] and not met
    assert rows[0]["alternating_ratios"] == [0.92, 0.93, 0.95]

    rows, met, _, _ = scaling.summarise([2, 32], pairs, 2, {2: {"ratio": 0.91}, 32: {"ratio": 0.85}})
    assert met


def test_a_failed_alternating_measurement_falls_back_on_the_repeats_and_is_shown(capsys):
    pairs = {2: [run(2, 19_000.0, 10_000.0)]}
    rows, met, _, _ = scaling.summarise([2], pairs, 2, {2: {"error": "RuntimeError: no steady state"}})
    assert rows[0]["goal_basis"] == "repeats" and rows[0]["goal_met"] and met
    scaling.print_table(rows, 2, 2)
    assert "failed alternating measurement: RuntimeError: no steady state" in capsys.readouterr().out


def test_the_machine_ceiling_is_shown_beside_the_goal_without_moving_it(capsys):
    pairs = {1: [run(1, 9_500.0, 10_000.0)], 2: [run(2, 17_600.0, 10_000.0)]}
    alternating = {1: {"ratio": 0.95}, 2: {"ratio": 0.88}}
    rows, met, _, _ = scaling.summarise([1, 2], pairs, 2, alternating, {2: {"ratio": 0.96, "ratios": [0.96] * 3}})
    assert rows[0]["ceiling"] is None and rows[0]["of_ceiling"] is None
    assert rows[1]["ceiling"] == 0.96 and rows[1]["of_ceiling"] == pytest.approx(0.88 / 0.96, abs=1e-3)
    assert not rows[1]["goal_met"] and not met
    rows, _, _, _ = scaling.summarise([2], {2: pairs[2]}, 2, alternating, {2: {"error": "RuntimeError: x"}})
    assert rows[0]["of_ceiling"] is None
    scaling.print_table(rows, 2, 2)
    assert "failed machine ceiling measurement: RuntimeError: x" in capsys.readouterr().out


def test_raw_loops_are_frozen_and_read_together(monkeypatch):
    monkeypatch.setattr(scaling.time, "sleep", lambda s: None)

    class Loop:
        def __init__(self, steps_per_read):
            self.steps, self.per, self.t, self.signals = 0, steps_per_read, 0.0, []

        def _read(self):
            self.steps += self.per
            self.t += 0.5
            return {"steps": self.steps, "t": self.t}

        def pause(self):
            self.signals.append("stop")

        def resume(self):
            self.signals.append("cont")

    group = scaling.RawLoops.__new__(scaling.RawLoops)
    group.loops = [Loop(100), Loop(300)]
    assert group.window(1.0) == {"rate": pytest.approx(200.0 + 600.0)}
    group.pause()
    group.resume()
    assert all(loop.signals == ["stop", "cont"] for loop in group.loops)
