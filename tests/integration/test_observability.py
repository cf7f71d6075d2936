"""One tiny real run, observed the three ways a user can: /metrics while it runs, TensorBoard event files and
``drl-orchestrate plot`` afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, run_cli

METRICS_LINE = re.compile(r"metrics on (http://[\d.]+:\d+/metrics)")


def scrape_trainer(log, proc, timeout=120):
    """Metric families of the trainer's /metrics page once it shows the trainer's counters (its URL is in
    the log: the port is a free one)."""
    deadline = time.monotonic() + timeout
    url = None
    while time.monotonic() < deadline and proc.poll() is None:
        if url is None and log.exists():
            found = METRICS_LINE.search(log.read_text())
            url = found.group(1) if found else None
        if url is not None:
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                text = ""
            families = {f.name: f for f in text_string_to_metric_families(text)}
            if "drl_env_steps" in families:
                return families
        time.sleep(0.05)
    raise AssertionError(f"no trainer metrics scraped (url {url}, orchestrator exit {proc.poll()})")


def test_tiny_run_is_observable(tmp_path):
    run = "observed"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "--preset",
            "sac",
            "--steps",
            "1500",
            "--workers",
            "2",
            "--eval-episodes",
            "1",
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        families = scrape_trainer(tmp_path / run / "logs" / "trainer.log", proc)
    finally:
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (sample,) = families["drl_env_steps"].samples
    assert sample.labels == {"run": run, "role": "trainer", "id": "trainer"}
    assert 0 <= sample.value <= 1500
    assert {"drl_updates", "drl_backlog", "drl_policy_version", "drl_transitions_per_s", "drl_restarts"} <= set(
        families
    )
    assert "[########################] 100% 1,500/1,500 steps" in err

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    expected = {
        "trainer": {
            "learner/critic_loss",
            "learner/alpha",
            "learner/entropy",
            "memory/backlog",
            "throughput/transitions_per_s",
            "throughput/updates_per_s",
        },
        "evaluator": {"eval/mean_return", "eval/mean_return_by_wall_s"},
    }
    for role, tags in expected.items():
        events = EventAccumulator(str(tmp_path / run / "tensorboard" / role))
        events.Reload()
        assert tags <= set(events.Tags()["scalars"]), role
    evaluations = (tmp_path / run / "evaluations.jsonl").read_text().splitlines()
    assert len(events.Scalars("eval/mean_return")) == len(evaluations)

    plotted = run_cli(["plot", run, "--output", str(tmp_path)], timeout=120)
    assert plotted.returncode == 0, plotted.stderr
    png = tmp_path / run / "learning_curve.png"
    assert plotted.stdout.strip() == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
