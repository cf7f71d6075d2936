"""``drl-orchestrate status RUN --backend kubernetes``: one row per pod of a run, in the table local runs show.

A pod's counters come from its service's Prometheus page (``/metrics``), read through the API server's pod proxy,
so the orchestrator needs no route into the cluster; where no page answers, the row shows the pod's Kubernetes
state alone. Pods that cannot be scheduled, and pods a Job or StatefulSet cannot create, are listed below the
table with Kubernetes' reason (``pending``), and make the exit code 1: the run cannot start as it is.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from drl.errors import UserError
from drl.status import status_message
from orchestrator.backends.kubernetes import manifests, pending
from orchestrator.backends.kubernetes.api import FATAL_WAITING, Api, KubeError, PodState, default_api
from orchestrator.status import Row, format_lags, format_table, row_from_status

METRICS_ROLES = ("trainer", "rollout", "evaluator")
ABNORMAL = (
    "CrashLoopBackOff",
    "Error",
    "OOMKilled",
    "ContainerCannotRun",
    "DeadlineExceeded",
    "Evicted",
    "Unschedulable",
) + FATAL_WAITING


NO_METRICS_HINT = (
    "no running pod's /metrics answered through the API server's pod proxy, so the table shows "
    "their Kubernetes states only; where NetworkPolicies are enforced the metrics port admits only "
    "the chart's networkPolicy.metricsFrom and apiServerCIDRs (docs/security.md)"
)


def snapshot_from_metrics(text: str) -> dict:
    """A service's telemetry snapshot rebuilt from its Prometheus page (``services.metrics``): ``drl_info``'s
    labels give the identity and state, every other ``drl_<field>`` sample the field's value, and a histogram
    its status field's text again (``drl.training.learning.LagHistogram.text``) with its sum."""
    from prometheus_client.parser import text_string_to_metric_families

    snapshot: dict = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("drl_"):
            continue
        if family.type == "histogram":
            field, pairs, before = family.name.removeprefix("drl_"), [], 0.0
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    bound = "inf" if sample.labels["le"] == "+Inf" else sample.labels["le"]
                    pairs.append(f"{bound}:{int(sample.value - before)}")
                    before = sample.value
                elif sample.name.endswith("_sum"):
                    snapshot[f"{field}_sum"] = sample.value
            snapshot[field] = ",".join(pairs)
            continue
        for sample in family.samples:
            if family.name == "drl_info":
                snapshot.update({k: v for k, v in sample.labels.items()})
            elif sample.name in (family.name, family.name + "_total"):
                snapshot[family.name.removeprefix("drl_")] = sample.value
    return snapshot


def _pod_state_label(pod: PodState) -> str:
    if pod.deleting:
        return "terminating"
    container = pod.containers[0] if pod.containers else None
    if pod.phase == "Succeeded":
        return "exited (0)"
    if pod.phase == "Failed":
        code = container.exit_code if container is not None else None
        return f"exited ({code})" if code is not None else "failed"
    if container is not None and container.state == "waiting" and container.reason:
        return container.reason
    if pod.phase == "Running":
        return "running" if pod.ready else "starting"
    return (pod.reason or pod.phase).lower() if pod.phase == "Pending" else pod.phase.lower()


def _pod_error(pod: PodState) -> str:
    """The most telling trouble Kubernetes reports for the pod, or ""."""
    if pod.reason in ABNORMAL:
        return f"{pod.reason}: {pod.message}" if pod.message else pod.reason
    for c in pod.containers:
        if c.reason in ABNORMAL:
            code = c.exit_code if c.exit_code is not None else c.last_exit_code
            detail = c.message or (f"exit code {code}" if code else "")
            return f"{c.reason}: {detail}" if detail else c.reason
        if c.last_exit_code:
            return f"last exit code {c.last_exit_code}"
    return ""


def status_rows(api: Api, run: str, namespace: str, timeout: float = 5.0, report: dict | None = None):
    """One ``Row`` per pod of the run: counters from the pod's ``/metrics`` (read through
    the API server's pod proxy) where it answers, else its Kubernetes state alone. Restarts are the
    container restarts Kubernetes counts; the last error is what Kubernetes reports for the pod. ``report``,
    when given, gets how many pages were asked for and how many answered."""
    try:
        pods = api.list_pods(namespace, manifests.run_selector(run))
    except KubeError as exc:
        raise UserError(f"pods of run {run!r} in namespace {namespace} cannot be listed: {exc}") from None
    if not pods:
        raise UserError(f"no pods of run {run!r} in namespace {namespace}")
    pods = sorted(pods, key=lambda p: (p.component not in METRICS_ROLES, p.component, p.name))

    def metrics(pod: PodState) -> tuple[dict, str]:
        """(snapshot, why the page could not be read back): a page that does not answer is normal for a pod
        that is starting or stopping and says nothing; one that answers but does not parse is reported."""
        if pod.component not in METRICS_ROLES or pod.phase != "Running" or pod.deleting:
            return {}, ""
        asked.append(pod.name)
        try:
            page = api.pod_metrics(namespace, pod.name, manifests.METRICS_PORT, timeout)
        except KubeError:
            return {}, ""
        answered.append(pod.name)
        try:
            return snapshot_from_metrics(page), ""
        except ValueError as exc:
            return {}, f"metrics page unreadable: {exc}"[:200]

    asked: list[str] = []
    answered: list[str] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(metrics, pods))
    if report is not None:
        report.update(asked=len(asked), answered=len(answered), pods=pods)
    rows = []
    for pod, (snap, unreadable) in zip(pods, results):
        restarts = sum(c.restart_count for c in pod.containers)
        if snap.get("run") == run:
            row = row_from_status(pod.name, status_message(snap))
            if row.state == "running" and not pod.ready:
                row.state = "starting"
        else:
            row = Row(pod.name, pod.component or "-", _pod_state_label(pod))
        row.restarts = restarts
        row.last_error = _pod_error(pod) or row.last_error or unreadable
        rows.append(row)
    return rows


def show_status(run: str, namespace: str, *, api: Api | None = None, stream: TextIO | None = None) -> int:
    stream = stream or sys.stdout
    manifests.check_run_name(run, "RUN")
    manifests.check_namespace(namespace)
    report: dict = {"pods": []}
    api = api or default_api()
    try:
        rows = status_rows(api, run, namespace, report=report)
    except UserError:
        if not pending.read_problems(api, namespace, run, [])[0]:
            raise
        rows = []  # no pod at all, because none can be created: said below
    print(f"run {run}: Kubernetes namespace {namespace}, {len(rows)} pods", file=stream)
    if rows:
        print(format_table(rows), file=stream)
    if report.get("asked") and not report.get("answered"):
        print(NO_METRICS_HINT, file=stream)
    if format_lags(rows):
        print(format_lags(rows), file=stream)
    found, trouble = pending.read_problems(api, namespace, run, report["pods"])
    if trouble:
        print(f"warning: {trouble}", file=stream)
    for _, line in pending.describe(found, namespace):
        print(f"run {run} cannot start: {line}", file=stream)
    return 1 if found else 0
