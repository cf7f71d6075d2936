"""Live scaling of a Kubernetes run (``drl-orchestrate scale RUN --workers N --backend kubernetes``).

The orchestrator changes only the rollout Indexed Job; the membership and shares in the run's memory server
change inside the cluster, in scaler Jobs (``orchestrator.backends.kubernetes.scaler``, made by ``manifests.scaler_job``), whose
results are read from their pods' logs. A result that cannot be read (no scaler pod, its log refused, no JSON
line in it) fails the scaling with exit 1 rather than guessing: the step did run, but what it decided (how large
the rollout Job must be) is unknown, and running the same scale again finishes it.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from drl.errors import UserError
from drl.naming import check_workers
from orchestrator.backends.kubernetes import manifests
from orchestrator.backends.kubernetes.api import FATAL_WAITING, Api, JobState, KubeError, PodState, default_api
from orchestrator.backends.kubernetes.run import IMAGE_ERROR_GRACE_S

SCALE_HAND_IN_S = 120.0
SCALER_START_S = 180.0


class ScaleFailed(Exception):
    """A step of scaling failed; the message says which and what to do (running the same scale again is safe)."""


def backoff_per_worker(spec: dict) -> int:
    """The rollout Job's pod failures tolerated per worker: its ``backoffLimit`` over its completions, as
    ``manifests`` and the chart made it (``backoffLimit x workers``); the default where the Job has neither."""
    completions = int(spec.get("completions") or 0)
    if spec.get("backoffLimit") is None or completions < 1:
        return manifests.BACKOFF_LIMIT
    return int(spec["backoffLimit"]) // completions


def _finished(job: dict) -> str:
    """``Complete`` or ``Failed`` when the Job has that condition, else ``""``."""
    for c in (job.get("status") or {}).get("conditions") or ():
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c["type"]
    return ""


@dataclass
class KubeScale:
    """Scales a Kubernetes run's rollout workers (protocol: ``orchestrator.backends.kubernetes.scaler``'s docstring).

    The orchestrator changes only the rollout Indexed Job (completions and parallelism together, as elastic
    Indexed Jobs require); the membership and shares in the run's Redis change inside the cluster, in scaler
    Jobs made from the trainer Job, whose result this class waits for and reads from the scaler pod's log.
    """

    api: Api
    run: str
    namespace: str
    err: TextIO = field(default_factory=lambda: sys.stderr)
    hand_in_s: float = SCALE_HAND_IN_S
    poll_s: float = 1.0
    image_error_grace_s: float = IMAGE_ERROR_GRACE_S
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    token: Callable[[], str] = lambda: secrets.token_hex(3)[:5]

    def say(self, text: str) -> None:
        print(f"drl: {text}", file=self.err, flush=True)

    def jobs(self) -> dict[str, list[dict]]:
        try:
            jobs = self.api.list_jobs(self.namespace, manifests.run_selector(self.run))
        except KubeError as exc:
            raise UserError(f"Jobs of run {self.run!r} in namespace {self.namespace} cannot be listed: {exc}") from None
        out: dict[str, list[dict]] = {}
        for job in jobs:
            out.setdefault(job["metadata"]["labels"].get("app.kubernetes.io/component", ""), []).append(job)
        return out

    def where(self, step: str, workers: int, current: int) -> str:
        """What a failure at ``step`` leaves behind, and that running the same scale again is safe."""
        again = (
            f"run the same scale again (drl-orchestrate scale {self.run} --workers {workers} --namespace "
            f"{self.namespace}): every step is safe to repeat"
        )
        if step == "retire":
            changed = f"workers {workers} and up may be marked retired in the run's memory server"
            return f"the rollout Job is unchanged at {current} workers; {changed}; {again}"
        if workers < current:
            return (
                f"the rollout Job is at {workers} workers, but the shares of the steps left may not be "
                f"spread over them yet; {again}"
            )
        return (
            f"the rollout Job is unchanged at {current} workers; the new workers' shares may already be "
            f"registered in the run's memory server; {again}"
        )

    def scale(self, workers: int) -> int:
        """0 once the run collects with the new workers; UserError for what the user can fix (no such run, it
        ended, a scaling in progress); 1 with one line when a step failed in the cluster."""
        check_workers(workers)
        jobs = self.jobs()
        trainer, rollout = (jobs.get(role, [None])[0] for role in ("trainer", "rollout"))
        if trainer is None or rollout is None:
            raise UserError(
                f"no run {self.run!r} in namespace {self.namespace} (no trainer and rollout Jobs "
                f"labelled {manifests.run_selector(self.run)})"
            )
        if _finished(trainer):
            raise UserError(
                f"run {self.run} has ended (Job {trainer['metadata']['name']} "
                f"{_finished(trainer).lower()}); nothing to scale"
            )
        busy = [j["metadata"]["name"] for j in jobs.get(manifests.SCALER_COMPONENT, []) if not _finished(j)]
        if busy:
            raise UserError(
                f"run {self.run} is being scaled already (Job {busy[0]}); wait for it or delete it "
                f"(kubectl -n {self.namespace} delete job {busy[0]})"
            )
        spec = rollout["spec"]
        if spec.get("completionMode") != "Indexed":
            raise UserError(f"Job {rollout['metadata']['name']} is not an Indexed Job; it cannot be scaled")
        current = int(spec.get("completions") or 0)
        self.trainer, self.rollout = trainer, rollout["metadata"]["name"]
        self.backoff_per_worker = backoff_per_worker(spec)
        self.say(f"scaling run {self.run} from {current} to {workers} rollout workers")
        self.current, self.workers = current, workers
        try:
            if workers < current:
                self.run_scaler(["retire", "--workers", str(workers)])
                self.patch(workers)
                result = self.run_scaler(
                    [
                        "apply",
                        "--workers",
                        str(workers),
                        "--job-size",
                        str(workers),
                        "--hand-in-timeout",
                        f"{self.hand_in_s:g}",
                    ]
                )
            else:
                result = self.run_scaler(
                    [
                        "apply",
                        "--workers",
                        str(workers),
                        "--job-size",
                        str(current),
                        "--hand-in-timeout",
                        f"{self.hand_in_s:g}",
                    ]
                )
                if int(result.get("job_size", current)) != current:
                    self.patch(int(result["job_size"]))
        except ScaleFailed as exc:
            print(f"drl-orchestrate: scaling run {self.run} failed: {exc}", file=self.err, flush=True)
            return 1
        self.report(workers, current, result)
        return 0

    def report(self, workers: int, current: int, result: dict) -> None:
        for warning in result.get("warnings", []):
            self.say(f"warning: {warning}")
        names = result.get("collecting", []) + result.get("added", [])
        if workers > current and int(result.get("job_size", current)) == current:
            self.say(f"run {self.run} has nothing left to produce; the rollout Job stays at {current} workers")
        if names:
            returning = result.get("returning") or []
            back = f" ({', '.join(returning)} back with what they produced before)" if returning else ""
            self.say(
                f"run {self.run} collects the {int(result.get('remaining', 0)):,} steps left with "
                f"{len(names)} rollout workers: {', '.join(names)}{back}"
            )
        else:
            self.say(f"run {self.run}: no worker gets a new share (nothing left to produce)")

    def patch(self, workers: int) -> None:
        """Completions and parallelism to ``workers`` together, and the Job's ``backoffLimit`` with them: the
        rollout Job tolerates the same failures per worker at every size (it was made with
        ``backoffLimit x workers``), so a grown Job is not failed by the restarts of a few of its many pods."""
        backoff = self.backoff_per_worker * workers
        spec = {"completions": workers, "parallelism": workers, "backoffLimit": backoff}
        try:
            self.api.patch_job(self.namespace, self.rollout, {"spec": spec})
        except KubeError as exc:
            hint = " (the orchestrator needs 'patch' on jobs)" if exc.status == 403 else ""
            raise ScaleFailed(
                f"Job {self.rollout} cannot be scaled to {workers}: {exc}{hint}; run the same scale again to finish it"
            ) from None
        self.say(f"Job {self.rollout} scaled to {workers} (completions and parallelism; backoffLimit {backoff})")

    def run_scaler(self, args: list[str]) -> dict:
        """Creates a scaler Job with ``args``, waits for it, and returns the JSON result its pod printed; a
        result that cannot be read is ``ScaleFailed`` (``retire``'s is not needed: its Job completing is all)."""
        name = manifests.scaler_job_name(self.trainer, self.token())
        limit = self.hand_in_s + SCALER_START_S
        job = manifests.scaler_job(self.trainer, name, args, int(limit))
        try:
            self.api.create(job)
        except KubeError as exc:
            hint = " (the orchestrator needs 'create' on jobs)" if exc.status == 403 else ""
            raise ScaleFailed(f"the scaler Job {name} cannot be created: {exc}{hint}") from None
        hint = f"see kubectl -n {self.namespace} logs job/{name}"
        left = self.where(args[0], self.workers, self.current)
        deadline = self.clock() + limit + 30
        stuck_since: float | None = None
        while True:
            state = self._job_state(name)
            if state is not None and state.condition("Complete"):
                break
            if state is not None and (cond := state.condition("Failed")):
                error = self._scaler_error(name) or f"{cond.reason}: {cond.message}"
                raise ScaleFailed(f"the scaler Job {name} ({args[0]}) failed: {error}; {hint}")
            waiting = self._waiting_reason(name)
            if waiting:
                stuck_since = stuck_since if stuck_since is not None else self.clock()
                if self.clock() - stuck_since >= self.image_error_grace_s:
                    raise ScaleFailed(f"the scaler pod of Job {name} cannot start: {waiting}; {left}; {hint}")
            else:
                stuck_since = None
            if self.clock() > deadline:
                raise ScaleFailed(
                    f"the scaler Job {name} ({args[0]}) did not finish within {limit + 30:.0f}s; {left}; {hint}"
                )
            self.sleep(self.poll_s)
        lines, unreadable = self._scaler_log(name)
        for line in lines:
            if line.startswith("drl-scaler: ") and not line.startswith("drl-scaler: error"):
                self.say(line.removeprefix("drl-scaler: "))
        if args[0] == "retire":
            return {}
        result = next((line for line in reversed(lines) if line.startswith("{")), None)
        why = unreadable or ("its log holds no result line" if result is None else "")
        if not why:
            assert result is not None  # else why says its log holds no result line
            try:
                return json.loads(result)
            except ValueError as exc:
                why = f"its result line is not JSON ({exc})"
        if why:
            raise ScaleFailed(
                f"the scaler Job {name} ({args[0]}) completed, but its result cannot be read: {why}; {left}; {hint}"
            )
        return {}

    def _job_state(self, name: str) -> JobState | None:
        try:
            return self.api.job_status(self.namespace, name)
        except KubeError as exc:
            self.say(f"warning: Kubernetes API call failed ({exc}); retrying")
            return None

    def _scaler_pods(self, name: str) -> list[PodState]:
        try:
            pods = self.api.list_pods(self.namespace, manifests.run_selector(self.run))
        except KubeError:
            return []
        return [
            p
            for p in pods
            if p.component == manifests.SCALER_COMPONENT
            and name in (p.labels.get("batch.kubernetes.io/job-name"), p.labels.get("job-name"))
        ]

    def _waiting_reason(self, name: str) -> str:
        for pod in self._scaler_pods(name):
            if pod.phase == "Pending" and pod.reason == "Unschedulable":
                return f"it cannot be scheduled: {pod.message or pod.reason}"
            for c in pod.containers:
                if c.state == "waiting" and c.reason in FATAL_WAITING:
                    return f"{c.reason}{': ' + c.message if c.message else ''}"
        return ""

    def _scaler_log(self, name: str) -> tuple[list[str], str]:
        """(lines of the newest finished scaler pod's log, "") or ([], why no log could be read)."""
        try:
            pods = self.api.list_pods(self.namespace, manifests.run_selector(self.run))
        except KubeError as exc:
            return [], f"its pod cannot be listed ({exc})"
        pods = [
            p
            for p in pods
            if p.component == manifests.SCALER_COMPONENT
            and name in (p.labels.get("batch.kubernetes.io/job-name"), p.labels.get("job-name"))
        ]
        done = [p for p in pods if p.phase in ("Succeeded", "Failed")] or pods
        if not done:
            return [], "its pod is gone (deleted before its log was read)"
        failures = []
        for pod in reversed(done):
            try:
                return list(self.api.pod_log(self.namespace, pod.name, manifests.SCALER_COMPONENT, follow=False)), ""
            except KubeError as exc:
                failures.append(f"the log of pod {pod.name} cannot be read ({exc})")
        return [], "; ".join(failures)

    def _scaler_error(self, name: str) -> str:
        errors = [line for line in self._scaler_log(name)[0] if line.startswith("drl-scaler: error: ")]
        return errors[-1].removeprefix("drl-scaler: error: ") if errors else ""


def scale_run(
    run: str, namespace: str, workers: int, *, api: Api | None = None, err: TextIO | None = None, **options
) -> int:
    return KubeScale(api or default_api(), run, namespace, err=err or sys.stderr, **options).scale(workers)
