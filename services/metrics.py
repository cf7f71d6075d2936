"""A Prometheus ``/metrics`` page for every service, computed from the service's telemetry at scrape time.

The page shows the same numbers as the Redis status hash and the control service's status because all three
read ``services.telemetry.TELEMETRY``: a custom collector turns the snapshot into metric families when
Prometheus scrapes, so there is no second set of counters to keep in step. Every numeric status field ``f``
becomes ``drl_<f>`` with the labels ``run``, ``role`` and ``id``; fields that only ever grow (``COUNTERS``)
are counters (samples ``drl_<f>_total``, so ``rate()`` works), the others gauges. ``drl_info`` carries the
state and exit reason as labels, and the standard ``process_*`` metrics come along. A field holding a
histogram (``HISTOGRAMS``: the trainer's policy lag, ``drl.training.learning.LagHistogram``'s text with its sum in
``<field>_sum``) becomes a Prometheus histogram of that name.

Where: ``127.0.0.1`` unless ``DRL_METRICS_HOST`` names another address (``0.0.0.0`` in a pod), port
``DRL_METRICS_PORT`` (0 or unset: a free port, which the local backend wants because all its services share
one host). The port is recorded in ``TELEMETRY.ports["metrics_port"]`` and logged. Metrics are never worth a
service: a bad setting or a busy port is logged and the service goes on without the page.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.process_collector import ProcessCollector

from drl.training.learning import LagHistogram
from services.telemetry import TELEMETRY, Telemetry

log = logging.getLogger("drl.metrics")

PREFIX = "drl_"
LABELS = ("run", "role", "id")
IDENTITY = {"run", "role", "id", "state", "exit_reason", "last_error"}
COUNTERS = frozenset(
    {
        "env_steps",
        "transitions_consumed",
        "updates",
        "duplicates_dropped",
        "stale_dropped",
        "dead_lettered",
        "lost",
        "memory_resets",
        "produced",
        "seq",
        "backpressure_s",
        "resent",
        "evaluations",
        "restarts",
        "lag_dropped",
    }
)
HELP = {
    "env_steps": "Environment steps: consumed by the trainer, or of the last evaluated version (evaluator).",
    "transitions_consumed": "Transitions the trainer took into replay (or into the iteration's rollout).",
    "updates": "Gradient updates (learner steps) so far.",
    "transitions_per_s": "Transitions per second since this process started: consumed (trainer), produced "
    "(rollout worker).",
    "backlog": "Entries waiting in the experience stream (unread plus unacknowledged).",
    "backlog_bytes": "Bytes of the entries waiting in the experience stream.",
    "policy_version": "Policy version published (trainer), acted with (rollout) or evaluated (evaluator).",
    "restarts": "Times this service was restarted inside the run.",
    "uptime_s": "Seconds since this process started.",
    "last_eval_return": "Mean return of the latest evaluation.",
    "best_eval_return": "Best mean return of the run's evaluations so far.",
    "produced": "Transitions this rollout worker appended.",
    "total": "Transitions this rollout worker is to collect (its share of --steps).",
    "backpressure_s": "Seconds this rollout worker waited for room in the backlog.",
    "lag_dropped": "Transitions consumed but not learned from: collected more than --max-policy-lag versions "
    "before the trainer's newest (appo).",
    "queued": "Transitions waiting in the trainer's queue for their batch (appo).",
}


HISTOGRAMS = {
    "policy_lag": "Transitions the learner trained on, by policy lag: the trainer's newest version minus the "
    "version that collected them (appo).",
}


HISTOGRAM_PARTS = {f"{name}_{part}" for name in HISTOGRAMS for part in ("sum", "squares")}
"""Status fields a histogram's family carries (its sum) or leaves out (the sum of squares, for TensorBoard)."""


def _histogram(name: str, text: str, total, labels: list[str]) -> HistogramMetricFamily | None:
    """A histogram family from "le:count,..." (non-cumulative counts, ``inf`` last) and its sum, or None when
    the text is not one."""
    try:
        pairs = LagHistogram.parse(text)
    except ValueError:
        return None
    buckets, running = [], 0
    for bound, count in pairs:
        running += count
        buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", float(running)))
    family = HistogramMetricFamily(PREFIX + name, HISTOGRAMS[name], labels=LABELS)
    family.add_metric(labels, buckets, sum_value=_number(total) or 0.0)
    return family


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


class TelemetryCollector:
    """Metric families from one ``Telemetry`` snapshot, taken when the page is scraped."""

    def __init__(self, telemetry: Telemetry = TELEMETRY):
        self.telemetry = telemetry

    def collect(self):
        snap = self.telemetry.snapshot()
        labels = [str(snap.get(k, "")) for k in LABELS]
        info = GaugeMetricFamily(
            PREFIX + "info",
            "Identity and state of the service (value always 1).",
            labels=[*LABELS, "state", "exit_reason"],
        )
        info.add_metric([*labels, str(snap.get("state", "")), str(snap.get("exit_reason", ""))], 1.0)
        yield info
        ports = set(self.telemetry.ports)
        for field, raw in sorted(snap.items()):
            if field in HISTOGRAMS:
                family = _histogram(field, str(raw), snap.get(f"{field}_sum"), labels)
                if family is not None:
                    yield family
                continue
            if field in HISTOGRAM_PARTS:
                continue
            value = _number(raw)
            if field in IDENTITY or field in ports or value is None:
                continue
            name = PREFIX + _metric_name(field)
            help_text = HELP.get(field, f"Status field {field!r} of the service.")
            kind = CounterMetricFamily if field in COUNTERS else GaugeMetricFamily
            family = kind(name, help_text, labels=LABELS)
            family.add_metric(labels, value)
            yield family


def _metric_name(field: str) -> str:
    """A status field as a valid metric name part (learner metric names are free-form)."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in field)
    return out if not out[:1].isdigit() else "_" + out


def registry(telemetry: Telemetry = TELEMETRY) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(TelemetryCollector(telemetry))
    ProcessCollector(registry=reg)
    return reg


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # a scrape every few seconds is not worth a log line
        pass


def serve_page(host: str, port: int, reg: CollectorRegistry) -> WSGIServer:
    """Serves ``reg`` on ``host:port`` from a daemon thread that sleeps until a request comes.

    Not ``prometheus_client.start_http_server``: its thread wakes twice a second to look for a shutdown
    request, and each wake-up takes the GIL, queued behind the service's main loop, which releases and retakes it
    at every numpy or torch call (see ``services.control.ControlServer``), which slows an acting loop without I/O
    (bench/README.md, "Measurements behind the code"). Nothing shuts the page down before the process ends, so
    the thread never needs to."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    httpd: WSGIServer = make_server(host, port, make_wsgi_app(reg), server_class, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": None}, name="metrics", daemon=True).start()
    return httpd


def start_metrics() -> int:
    """Serves ``/metrics`` from a daemon thread; returns the port, or 0 when the page could not be served."""
    host = os.environ.get("DRL_METRICS_HOST") or "127.0.0.1"
    raw = os.environ.get("DRL_METRICS_PORT") or "0"
    try:
        port = int(raw)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        log.warning("DRL_METRICS_PORT must be a port number, got %r; no metrics endpoint", raw)
        return 0
    try:
        server = serve_page(host, port, registry())
    except OSError as exc:
        log.warning("metrics endpoint on %s:%d cannot be served (%s); going on without it", host, port, exc)
        return 0
    port = int(server.server_port)
    TELEMETRY.ports["metrics_port"] = port
    log.info("metrics on http://%s:%d/metrics", host, port)
    return port
