"""Pods of a run that cannot be scheduled or cannot be created, and why, as Kubernetes says it.

A pod the scheduler cannot place stays ``Pending`` with its ``PodScheduled`` condition ``False``, reason
``Unschedulable``, and the scheduler's message ("0/3 nodes are available: 3 Insufficient cpu. ..."; "pod has
unbound immediate PersistentVolumeClaims"). A pod its Job or StatefulSet cannot create (a ResourceQuota without
room, a PodSecurity violation) does not exist at all: only the controller's ``FailedCreate`` Warning event says
so ("Error creating: pods ... is forbidden: exceeded quota: ..."). ``read_problems`` finds both, for the run
being followed (``run.KubeRun``: reported at once, fatal after ``--pending-timeout``) and for ``status``
(reported, exit 1). An event counts only while its object still lacks pods (events outlive the trouble by an
hour), and only for the object it names (the same ``uid``, where the event carries one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.backends.kubernetes import manifests
from orchestrator.backends.kubernetes.api import Api, KubeError, PodState

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


@dataclass(frozen=True)
class Problem:
    """One thing of the run that cannot start: a pod (``cannot be scheduled``) or a Job or StatefulSet whose
    pods cannot be created (``cannot create its pods``)."""

    key: str  # "pod NAME", "Job NAME", "StatefulSet NAME"
    what: str  # "cannot be scheduled" | "cannot create its pods"
    message: str  # the scheduler's or the controller's own words

    @property
    def group(self) -> str:
        """What a report tells apart: pods by the scheduler's message, an object by itself (its controller's
        message names the refused pod and the quota's usage, which change with every try)."""
        return self.message if self.key.startswith("pod ") else self.key


def unschedulable(pods: list[PodState]) -> list[Problem]:
    return [
        Problem(f"pod {p.name}", "cannot be scheduled", p.message or p.reason)
        for p in pods
        if p.phase == "Pending" and not p.deleting and p.reason == "Unschedulable"
    ]


def _job_missing_pods(job: dict, pods: list[PodState]) -> bool:
    """Whether the Job has fewer active pods than it should run now (it is not finished or suspended)."""
    spec: dict[str, Any] = job.get("spec") or {}
    status: dict[str, Any] = job.get("status") or {}
    if spec.get("suspend") or any(
        c.get("type") in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget") and c.get("status") == "True"
        for c in status.get("conditions") or ()
    ):
        return False
    name = job["metadata"]["name"]
    declared = spec.get("parallelism")
    parallelism = int(declared if declared is not None else 1)
    completions = spec.get("completions")
    succeeded = int(status.get("succeeded") or 0)
    wanted = parallelism if completions is None else min(parallelism, int(completions) - succeeded)
    active = [
        p
        for p in pods
        if name in (p.labels.get(k) for k in JOB_NAME_LABELS) and p.phase in ("Pending", "Running") and not p.deleting
    ]
    return len(active) < wanted


def uncreatable(api: Api, namespace: str, run: str, pods: list[PodState]) -> list[Problem]:
    """The run's Jobs and StatefulSets that lack pods and have a ``FailedCreate`` event (with the message of the
    last one listed). Raises ``KubeError`` when events or objects cannot be listed."""
    events = [e for e in api.list_events(namespace, "FailedCreate") if e.kind in ("Job", "StatefulSet")]
    if not events:
        return []
    selector = manifests.run_selector(run)
    jobs = (
        {j["metadata"]["name"]: j for j in api.list_jobs(namespace, selector)}
        if any(e.kind == "Job" for e in events)
        else {}
    )
    sets = (
        set(api.list_names("StatefulSet", namespace, selector))
        if any(e.kind == "StatefulSet" for e in events)
        else set()
    )
    present = {p.name for p in pods if not p.deleting}
    found: dict[str, Problem] = {}
    for event in events:
        if event.kind == "Job":
            job = jobs.get(event.name)
            if job is None or (event.uid and job["metadata"].get("uid") and event.uid != job["metadata"]["uid"]):
                continue
            if not _job_missing_pods(job, pods):
                continue
        elif event.name not in sets or f"{event.name}-0" in present:
            continue
        found[f"{event.kind} {event.name}"] = Problem(
            f"{event.kind} {event.name}", "cannot create its pods", event.message
        )
    return list(found.values())


def hint(message: str, namespace: str) -> str:
    """What to do about a scheduler's or a controller's message, or ""."""
    text = message.lower()
    if "exceeded quota" in text:
        return (
            f"the namespace's ResourceQuota has no room for it (kubectl -n {namespace} describe resourcequota): "
            "lower the requests and limits (--profile small, --resources ROLE.requests.cpu=...; the chart: "
            "-f helm/profiles/small.yaml), run fewer --workers, or raise the quota"
        )
    if "persistentvolumeclaim" in text:
        return (
            "the S3 server's PVC is not bound (no default StorageClass, or none that provisions it): pass "
            "--s3-storage-class NAME, or --s3-storage emptydir (policies and checkpoints are then lost with the "
            "S3 server's pod); the chart: s3.persistence.storageClass or s3.persistence.enabled=false"
        )
    if "insufficient" in text:
        return (
            "the pods request more than the nodes have free: lower the requests (--profile small, --resources "
            "ROLE.requests.cpu=...; the chart: -f helm/profiles/small.yaml), run fewer --workers, or add nodes"
        )
    if "podsecurity" in text:
        return "the namespace's PodSecurity level refuses the pod"
    return ""


def describe(found: list[Problem], namespace: str) -> list[tuple[str, str]]:
    """(group, line) per ``Problem.group``: pods with the same message are counted, not listed one by one."""
    groups: dict[str, list[Problem]] = {}
    for p in found:
        groups.setdefault(p.group, []).append(p)
    lines = []
    for group, members in groups.items():
        first = members[0]
        if len(members) == 1:
            subject = first.key
        else:
            names = ", ".join(p.key.split(" ", 1)[1] for p in members[:3])
            more = f" and {len(members) - 3} more" if len(members) > 3 else ""
            subject = f"{len(members)} pods ({names}{more})"
        advice = hint(first.message, namespace)
        lines.append((group, f"{subject} {first.what}: {first.message}" + (f" ({advice})" if advice else "")))
    return lines


def read_problems(api: Api, namespace: str, run: str, pods: list[PodState]) -> tuple[list[Problem], str]:
    """What of the run cannot start now, and why the events could not be read ("" when they could): a Role
    without ``list`` on events still sees the unschedulable pods."""
    found = unschedulable(pods)
    try:
        found += uncreatable(api, namespace, run, pods)
    except KubeError as exc:
        return found, f"events cannot be read ({exc}): pods that cannot be created are not reported"
    return found, ""
