"""The /metrics page: served on a free port, parsed by Prometheus' own parser, equal to the telemetry."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services import metrics
from services.telemetry import TELEMETRY


@pytest.fixture
def telemetry():
    """The process-wide telemetry with a trainer's identity and fields, put back afterwards."""
    saved = (
        TELEMETRY.role,
        TELEMETRY.name,
        TELEMETRY.run,
        TELEMETRY.restarts,
        dict(TELEMETRY.ports),
        TELEMETRY.fields(),
    )
    TELEMETRY.role, TELEMETRY.name, TELEMETRY.run, TELEMETRY.restarts = "trainer", "trainer", "run-m", 2
    TELEMETRY.update(
        {
            "state": "running",
            "env_steps": 1500,
            "updates": 500,
            "transitions_per_s": 812.5,
            "backlog": 3,
            "policy_version": 7,
            "critic_loss": 0.25,
            "alpha": 0.1,
            "last_eval_return": -900.5,
            "exit_reason": "",
            "episode_return": "",
        }
    )
    yield TELEMETRY
    TELEMETRY.role, TELEMETRY.name, TELEMETRY.run, TELEMETRY.restarts = saved[:4]
    TELEMETRY.ports.clear()
    TELEMETRY.ports.update(saved[4])
    with TELEMETRY._lock:
        TELEMETRY._fields = saved[5]


def scrape(port: int) -> dict[str, object]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_page_shows_the_telemetry_snapshot(telemetry, monkeypatch):
    monkeypatch.delenv("DRL_METRICS_PORT", raising=False)
    monkeypatch.delenv("DRL_METRICS_HOST", raising=False)
    port = metrics.start_metrics()
    assert port > 0 and telemetry.ports["metrics_port"] == port
    families = scrape(port)
    snap = telemetry.snapshot()
    numeric = {k: v for k, v in snap.items() if isinstance(v, (int, float)) and k not in ("metrics_port", "uptime_s")}
    assert {
        "env_steps",
        "updates",
        "transitions_per_s",
        "backlog",
        "policy_version",
        "restarts",
        "critic_loss",
        "last_eval_return",
    } <= set(numeric)
    for field, value in numeric.items():
        family = families[f"drl_{field}"]
        (sample,) = family.samples
        assert sample.labels == {"run": "run-m", "role": "trainer", "id": "trainer"}
        assert sample.value == pytest.approx(value), field
    assert families["drl_env_steps"].type == "counter"
    assert families["drl_env_steps"].samples[0].name == "drl_env_steps_total"
    assert families["drl_backlog"].type == "gauge"
    assert "drl_metrics_port" not in families and "drl_episode_return" not in families
    (info,) = families["drl_info"].samples
    assert info.labels["state"] == "running" and info.value == 1


def test_metrics_follow_the_telemetry_between_scrapes(telemetry, monkeypatch):
    monkeypatch.delenv("DRL_METRICS_PORT", raising=False)
    port = metrics.start_metrics()
    telemetry.update({"env_steps": 4000, "policy_version": 9})
    families = scrape(port)
    assert families["drl_env_steps"].samples[0].value == 4000
    assert families["drl_policy_version"].samples[0].value == 9


def test_bad_port_setting_leaves_the_service_running(telemetry, monkeypatch, caplog):
    monkeypatch.setenv("DRL_METRICS_PORT", "http")
    assert metrics.start_metrics() == 0
    assert "DRL_METRICS_PORT" in caplog.text


def test_busy_port_is_a_warning(telemetry, monkeypatch, caplog):
    monkeypatch.delenv("DRL_METRICS_PORT", raising=False)
    port = metrics.start_metrics()
    monkeypatch.setenv("DRL_METRICS_PORT", str(port))
    assert metrics.start_metrics() == 0
    assert "cannot be served" in caplog.text


def test_tensorboard_scalars_are_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from drl.tensorboard import ScalarLog

    log = ScalarLog(tmp_path / "tb" / "trainer")
    log.scalars({"learner/critic_loss": 0.5, "memory/backlog": 3, "skipped": float("nan")}, step=100)
    log.scalars({"learner/critic_loss": 0.25, "memory/backlog": 0}, step=200)
    log.close()
    events = EventAccumulator(str(tmp_path / "tb" / "trainer"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"learner/critic_loss", "memory/backlog"}
    assert [(e.step, e.value) for e in events.Scalars("learner/critic_loss")] == [(100, 0.5), (200, 0.25)]


def test_unwritable_tensorboard_folder_warns_once(tmp_path, caplog):
    from drl.tensorboard import ScalarLog

    (tmp_path / "file").write_text("not a folder")
    log = ScalarLog(tmp_path / "file" / "trainer")
    for step in range(3):
        log.scalars({"x": 1.0}, step=step)
    log.flush()
    log.close()
    assert caplog.text.count("TensorBoard scalars are not written") == 1


def _lag_fields() -> dict:
    from drl.training.learning import LagHistogram, QueueLearning

    lag = LagHistogram()
    lag.add(0, 60)
    lag.add(3, 30)
    lag.add(40, 10)
    learning = object.__new__(QueueLearning)
    learning.__dict__.update(lag=lag, lag_dropped=7, queued=5)
    return learning.report()


def test_the_policy_lag_is_a_prometheus_histogram(telemetry, monkeypatch):
    monkeypatch.delenv("DRL_METRICS_PORT", raising=False)
    telemetry.update(_lag_fields())
    families = scrape(metrics.start_metrics())
    family = families["drl_policy_lag"]
    assert family.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "drl_policy_lag_bucket"}
    assert (buckets["0"], buckets["2"], buckets["4"], buckets["32"], buckets["64"], buckets["+Inf"]) == (
        60,
        60,
        90,
        90,
        100,
        100,
    )
    samples = {s.name: s.value for s in family.samples}
    assert samples["drl_policy_lag_count"] == 100 and samples["drl_policy_lag_sum"] == 3 * 30 + 40 * 10
    assert families["drl_lag_dropped"].samples[0].value == 7
    assert "drl_policy_lag_squares" not in families


def test_tensorboard_shows_the_policy_lag(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from drl.tensorboard import ScalarLog, TrainerCurves

    curves = TrainerCurves(ScalarLog(tmp_path / "tb"), now=0.0, consumed=0, updates=0)
    fields = {"backlog": 0, "backlog_bytes": 0, "policy_version": 3, "replay_size": 0, **_lag_fields()}
    curves.add(2.0, consumed=1000, updates=10, metrics={"entropy": 0.6}, fields=fields, final=True)
    curves.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert events.Scalars("policy_lag/mean")[0].value == pytest.approx(4.9)
    assert events.Scalars("policy_lag/dropped")[0].value == 7
    (histogram,) = events.Histograms("policy_lag/versions")
    assert histogram.step == 1000 and histogram.histogram_value.num == 100
    assert histogram.histogram_value.sum == 490 and histogram.histogram_value.max == 40
