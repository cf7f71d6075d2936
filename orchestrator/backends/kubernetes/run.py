"""Kubernetes backend: a run's workloads as Jobs in a cluster, watched the way the local backend watches processes.

``run_kubernetes`` creates the objects of ``manifests.manifests`` (undoing what it created if one fails), then,
unless detached, polls the run's pods and Jobs: it reports once every pod is ready, prints the trainer's log as
it comes, replaces rollout pods that crash-loop (deleting one makes the Indexed Job recreate that worker index,
which continues its sequence numbers), and ends with the trainer's outcome. ``delete_run`` removes every object
carrying the run's label. Everything goes through ``KubeApi`` (``api``), so tests drive this module with a fake
of it.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Protocol, TextIO

from drl.errors import UserError
from drl.naming import check_workers
from orchestrator.backends.kubernetes import manifests
from orchestrator.backends.kubernetes.api import RUN_KINDS, JobState, KubeError, PodState

RESTART_THRESHOLD = 3
IMAGE_ERROR_GRACE_S = 60.0
API_ERROR_LIMIT_S = 300.0
WAITING_REPORT_EVERY_S = 30.0
WAITING_CHANGE_EVERY_S = 5.0
LOG_DRAIN_S = 10.0
FATAL_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError")


class Api(Protocol):
    """What the backend needs of ``KubeApi`` (and what a fake provides)."""

    def create(self, obj: dict) -> None: ...
    def delete(self, kind: str, namespace: str, name: str, propagation: str = "Background") -> bool: ...
    def delete_pod(self, namespace: str, name: str) -> bool: ...
    def delete_by_label(self, namespace: str, selector: str, kinds: tuple[str, ...] = RUN_KINDS,
                        propagation: str = "Background") -> list[tuple[str, str]]: ...
    def list_pods(self, namespace: str, selector: str) -> list[PodState]: ...
    def job_status(self, namespace: str, name: str) -> JobState | None: ...
    def pod_log(self, namespace: str, name: str, container: str, follow: bool = True) -> Iterator[str]: ...
    def list_jobs(self, namespace: str, selector: str) -> list[dict]: ...
    def patch_job(self, namespace: str, name: str, patch: dict) -> None: ...
    def pod_metrics(self, namespace: str, name: str, port: int, timeout: float = 5.0) -> str: ...


class RunFailed(Exception):
    """The run cannot succeed any more; the message says which part failed and why."""


def _default_api() -> Api:
    from orchestrator.backends.kubernetes.api import KubeApi

    return KubeApi()


def create_objects(api: Api, objects: list[dict]) -> None:
    """Creates the objects in order; if one fails, deletes those already created and raises UserError."""
    created: list[dict] = []
    for obj in objects:
        try:
            api.create(obj)
        except KubeError as exc:
            for done in reversed(created):
                try:
                    api.delete(done["kind"], done["metadata"]["namespace"], done["metadata"]["name"])
                except KubeError:
                    pass
            raise UserError(_create_error(obj, exc)) from None
        created.append(obj)


def _create_error(obj: dict, exc: KubeError) -> str:
    kind, meta = obj["kind"], obj["metadata"]
    run = meta["labels"][manifests.RUN_LABEL]
    where = f"{kind} {meta['name']} in namespace {meta['namespace']}"
    if exc.status == 409:
        return (f"{where} already exists: run {run!r} is there already; remove it with drl-orchestrate delete "
                f"{run} --namespace {meta['namespace']} or pick another --run-name")
    if exc.status == 403:
        return f"not allowed to create {where}: {exc.message}"
    if exc.status == 404:
        return f"cannot create {where}: {exc.message} (does the namespace exist?)"
    return f"cannot create {where}: {exc}"


@dataclass
class KubeRun:
    """Watches a created run until the trainer's Job completes or fails."""

    api: Api
    run: str
    namespace: str
    objects: list[dict]
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    poll_s: float = 2.0
    restart_threshold: int = RESTART_THRESHOLD
    image_error_grace_s: float = IMAGE_ERROR_GRACE_S
    api_error_limit_s: float = API_ERROR_LIMIT_S
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.name = manifests.object_name(self.run)
        self.expected = manifests.expected_pods(self.objects)
        self.replaced: set[str] = set()
        self.all_ready = False
        self.image_errors: dict[str, float] = {}
        self.last_trainer_code: int | None = None
        self.log = _LogFollower(self)
        self._waiting_reported = -WAITING_REPORT_EVERY_S
        self._ready_reported = -1
        self._api_failing_since: float | None = None

    def say(self, text: str) -> None:
        print(f"drl: {text}", file=self.err, flush=True)

    def watch(self) -> int:
        """0 once the trainer's Job completes; 1 (with one line saying why) when the run fails."""
        try:
            while True:
                try:
                    if self.poll():
                        self.log.finish()
                        self.say(f"run {self.run} finished: Job {self.name}-trainer complete")
                        return 0
                    self._api_failing_since = None
                except KubeError as exc:
                    self._api_trouble(exc)
                self.sleep(self.poll_s)
        except RunFailed as exc:
            self.log.finish()
            print(f"drl-orchestrate: run {self.run} failed: {exc}", file=self.err, flush=True)
            return 1

    def _api_trouble(self, exc: KubeError) -> None:
        now = self.clock()
        if self._api_failing_since is None:
            self._api_failing_since = now
            self.say(f"warning: Kubernetes API call failed ({exc}); retrying")
        elif now - self._api_failing_since > self.api_error_limit_s:
            raise RunFailed(f"the Kubernetes API failed for {self.api_error_limit_s:.0f} s ({exc}); the run goes "
                            f"on in the cluster")

    def poll(self) -> bool:
        """One look at the run; True when the trainer's Job is complete, RunFailed when the run cannot end well."""
        trainer = self.api.job_status(self.namespace, f"{self.name}-trainer")
        pods = [p for p in self.api.list_pods(self.namespace, manifests.run_selector(self.run)) if not p.deleting]
        self.log.follow(pods)
        if trainer is not None and trainer.condition("Complete"):
            return True
        self._check_trainer_pods(pods)
        failed = trainer.condition("Failed") if trainer is not None else None
        if failed is not None:
            code = f"; last exit code {self.last_trainer_code}" if self.last_trainer_code is not None else ""
            raise RunFailed(f"trainer Job {self.name}-trainer failed ({failed.reason}: {failed.message}){code}; "
                            f"{self._hint('trainer')}")
        for role in ("rollout", "evaluator"):
            job = self.api.job_status(self.namespace, f"{self.name}-{role}")
            cond = job.condition("Failed") if job is not None else None
            if cond is not None:
                raise RunFailed(f"{role} Job {self.name}-{role} failed ({cond.reason}: {cond.message}); "
                                f"{self._hint(role)}")
        self._replace_rollouts(pods)
        self._check_images(pods)
        self._report_readiness(pods)
        return False

    def _hint(self, role: str) -> str:
        return f"see kubectl -n {self.namespace} logs job/{self.name}-{role}"

    def _check_trainer_pods(self, pods: list[PodState]) -> None:
        """Remembers the trainer's last failing exit code; a trainer pod in phase Failed ends the run (an
        evicted one does not: its Job starts another, which resumes).

        A container that exits non-zero is restarted (``restartPolicy: OnFailure``) and resumes from its
        checkpoint, until the Job's backoff limit fails the Job: even exit code 2 can be passing (the memory
        server not up yet when pods start together), so one failed container alone does not end the run.
        """
        for pod in pods:
            if pod.component != "trainer":
                continue
            c = pod.container("trainer")
            codes = [x for x in (c.exit_code, c.last_exit_code) if x not in (None, 0)] if c else []
            if codes:
                self.last_trainer_code = codes[0]
            if pod.phase == "Failed" and pod.reason != "Evicted":
                code = codes[0] if codes else "unknown"
                raise RunFailed(f"trainer pod {pod.name} failed with exit code {code} "
                                f"({pod.reason or (c.reason if c else '') or 'Failed'}); {self._hint('trainer')}")

    def _replace_rollouts(self, pods: list[PodState]) -> None:
        for pod in pods:
            if pod.component != "rollout" or pod.name in self.replaced:
                continue
            c = pod.container("rollout")
            if pod.phase == "Failed":
                why = [f"pod failed ({pod.reason or 'Failed'})"]
            elif c is not None and (c.reason == "CrashLoopBackOff" or c.restart_count > self.restart_threshold):
                why = [c.reason] if c.reason == "CrashLoopBackOff" else []
            else:
                continue
            if c is not None and c.restart_count:
                why.append(f"{c.restart_count} restarts")
            if c is not None and (c.exit_code or c.last_exit_code):
                why.append(f"last exit code {c.exit_code or c.last_exit_code}")
            index = pod.annotations.get("batch.kubernetes.io/job-completion-index", "?")
            self.say(f"replacing rollout pod {pod.name} (worker {index}): {', '.join(why)}")
            self.api.delete_pod(self.namespace, pod.name)
            self.replaced.add(pod.name)

    def _check_images(self, pods: list[PodState]) -> None:
        """A pod that cannot get its image or its container configuration for a while fails the run."""
        now = self.clock()
        seen = set()
        for pod in pods:
            for c in pod.containers:
                if c.state == "waiting" and c.reason in FATAL_WAITING:
                    seen.add(pod.name)
                    since = self.image_errors.setdefault(pod.name, now)
                    if now - since >= self.image_error_grace_s:
                        raise RunFailed(f"pod {pod.name} cannot start its container {c.name}: {c.reason}"
                                        f"{': ' + c.message if c.message else ''}")
        self.image_errors = {k: v for k, v in self.image_errors.items() if k in seen}

    def _report_readiness(self, pods: list[PodState]) -> None:
        if self.all_ready:
            return
        up = Counter(p.component for p in pods if p.ready or p.phase == "Succeeded")
        total = sum(self.expected.values())
        if all(up[c] >= n for c, n in self.expected.items()):
            self.all_ready = True
            self.say(f"all {total} pods of run {self.run} are ready")
            return
        now = self.clock()
        ready = sum(min(up[c], n) for c, n in self.expected.items())
        since = now - self._waiting_reported
        if since >= WAITING_REPORT_EVERY_S or (ready != self._ready_reported and since >= WAITING_CHANGE_EVERY_S):
            self._waiting_reported, self._ready_reported = now, ready
            waiting = [f"{p.name}: {_why_not_ready(p)}" for p in pods if not (p.ready or p.phase == "Succeeded")]
            more = f" (+{len(waiting) - 3} more)" if len(waiting) > 3 else ""
            listing = f"; {', '.join(waiting[:3])}{more}" if waiting else ""
            self.say(f"waiting for pods: {ready}/{total} ready{listing}")


def _why_not_ready(pod: PodState) -> str:
    for c in pod.containers:
        if c.reason:
            return c.reason
    return pod.reason or pod.phase


class _LogFollower:
    """Prints the trainer container's log from a thread, attaching again after each restart of it."""

    def __init__(self, run: KubeRun):
        self.run = run
        self.thread: threading.Thread | None = None
        self.key: tuple[str, int] | None = None
        self.done: set[tuple[str, int]] = set()

    def follow(self, pods: list[PodState]) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        for pod in pods:
            c = pod.container("trainer") if pod.component == "trainer" else None
            if c is None or (c.state == "waiting" and not c.restart_count):
                continue
            key = (pod.name, c.restart_count)
            if key in self.done:
                continue
            self.key = key
            self.thread = threading.Thread(target=self._print, args=(pod.name, key), daemon=True,
                                           name="trainer-log")
            self.thread.start()
            return

    def _print(self, pod: str, key: tuple[str, int]) -> None:
        try:
            for line in self.run.api.pod_log(self.run.namespace, pod, "trainer", follow=True):
                print(line, file=self.run.out, flush=True)
        except KubeError:
            return
        self.done.add(key)

    def finish(self) -> None:
        """Lets the log reach its end (the container has exited) for a few seconds."""
        if self.thread is not None:
            self.thread.join(LOG_DRAIN_S)


def run_kubernetes(run: str, objects: list[dict], *, namespace: str, detach: bool = False,
                   api: Api | None = None, out: TextIO | None = None, err: TextIO | None = None,
                   **watch_options) -> int:
    """Creates the run's objects and, unless ``detach``, watches it to the end; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    api = api or _default_api()
    create_objects(api, objects)
    name = manifests.object_name(run)
    print(f"drl: created {len(objects)} objects of run {run} in namespace {namespace}", file=err, flush=True)
    removal = f"remove it with: drl-orchestrate delete {run} --namespace {namespace}"
    if detach:
        print(f"drl: follow the trainer with: kubectl -n {namespace} logs -f job/{name}-trainer; {removal}",
              file=err, flush=True)
        return 0
    watcher = KubeRun(api, run, namespace, objects, out=out, err=err, **watch_options)
    try:
        code = watcher.watch()
    except KeyboardInterrupt:
        print(f"drl: interrupted; run {run} goes on in the cluster ({removal})", file=err, flush=True)
        return 130
    print(f"drl: the run's objects stay in the cluster for inspection; {removal}", file=err, flush=True)
    return code


def delete_run(run: str, namespace: str, *, api: Api | None = None, err: TextIO | None = None) -> int:
    """Deletes every object labelled with the run (dependents, such as a Job's pods, in the background)."""
    err = err or sys.stderr
    api = api or _default_api()
    try:
        deleted = api.delete_by_label(namespace, manifests.run_selector(run), RUN_KINDS, "Background")
    except KubeError as exc:
        raise UserError(f"cannot delete run {run!r} in namespace {namespace}: {exc}") from None
    if not deleted:
        print(f"drl: no objects of run {run} in namespace {namespace}", file=err, flush=True)
        return 0
    kinds = Counter(kind for kind, _ in deleted)
    listing = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    print(f"drl: deleted run {run} in namespace {namespace}: {listing}", file=err, flush=True)
    return 0


# -- scaling (drl-orchestrate scale RUN --workers N --backend kubernetes) ----------------------------------

SCALE_HAND_IN_S = 120.0
SCALER_START_S = 180.0


class ScaleFailed(Exception):
    """A step of scaling failed; the message says which and what to do (running the same scale again is safe)."""


def _finished(job: dict) -> str:
    """``Complete`` or ``Failed`` when the Job has that condition, else ``""``."""
    for c in (job.get("status") or {}).get("conditions") or ():
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c["type"]
    return ""


@dataclass
class KubeScale:
    """Scales a Kubernetes run's rollout workers (protocol: ``orchestrator.scaler``'s docstring).

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
            raise UserError(f"Jobs of run {self.run!r} in namespace {self.namespace} cannot be listed: {exc}") \
                from None
        out: dict[str, list[dict]] = {}
        for job in jobs:
            out.setdefault(job["metadata"]["labels"].get("app.kubernetes.io/component", ""), []).append(job)
        return out

    def scale(self, workers: int) -> int:
        """0 once the run collects with the new workers; UserError for what the user can fix (no such run, it
        ended, a scaling in progress); 1 with one line when a step failed in the cluster."""
        check_workers(workers)
        jobs = self.jobs()
        trainer, rollout = (jobs.get(role, [None])[0] for role in ("trainer", "rollout"))
        if trainer is None or rollout is None:
            raise UserError(f"no run {self.run!r} in namespace {self.namespace} (no trainer and rollout Jobs "
                            f"labelled {manifests.run_selector(self.run)})")
        if _finished(trainer):
            raise UserError(f"run {self.run} has ended (Job {trainer['metadata']['name']} "
                            f"{_finished(trainer).lower()}); nothing to scale")
        busy = [j["metadata"]["name"] for j in jobs.get(manifests.SCALER_COMPONENT, []) if not _finished(j)]
        if busy:
            raise UserError(f"run {self.run} is being scaled already (Job {busy[0]}); wait for it or delete it "
                            f"(kubectl -n {self.namespace} delete job {busy[0]})")
        spec = rollout["spec"]
        if spec.get("completionMode") != "Indexed":
            raise UserError(f"Job {rollout['metadata']['name']} is not an Indexed Job; it cannot be scaled")
        current = int(spec.get("completions") or 0)
        self.trainer, self.rollout = trainer, rollout["metadata"]["name"]
        self.say(f"scaling run {self.run} from {current} to {workers} rollout workers")
        try:
            if workers < current:
                self.run_scaler(["retire", "--workers", str(workers)])
                self.patch(workers)
                result = self.run_scaler(["apply", "--workers", str(workers), "--job-size", str(workers),
                                          "--hand-in-timeout", f"{self.hand_in_s:g}"])
            else:
                result = self.run_scaler(["apply", "--workers", str(workers), "--job-size", str(current),
                                          "--hand-in-timeout", f"{self.hand_in_s:g}"])
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
            self.say(f"run {self.run} collects the {int(result.get('remaining', 0)):,} steps left with "
                     f"{len(names)} rollout workers: {', '.join(names)}{back}")
        else:
            self.say(f"run {self.run}: no worker gets a new share (nothing left to produce)")

    def patch(self, workers: int) -> None:
        try:
            self.api.patch_job(self.namespace, self.rollout, {"spec": {"completions": workers,
                                                                       "parallelism": workers}})
        except KubeError as exc:
            hint = " (the orchestrator needs 'patch' on jobs)" if exc.status == 403 else ""
            raise ScaleFailed(f"Job {self.rollout} cannot be scaled to {workers}: {exc}{hint}; run the same scale "
                              f"again to finish it") from None
        self.say(f"Job {self.rollout} scaled to {workers} (completions and parallelism)")

    def run_scaler(self, args: list[str]) -> dict:
        """Creates a scaler Job with ``args``, waits for it, and returns the JSON result its pod printed."""
        name = manifests.scaler_job_name(self.trainer, self.token())
        limit = self.hand_in_s + SCALER_START_S
        job = manifests.scaler_job(self.trainer, name, args, int(limit))
        try:
            self.api.create(job)
        except KubeError as exc:
            hint = " (the orchestrator needs 'create' on jobs)" if exc.status == 403 else ""
            raise ScaleFailed(f"the scaler Job {name} cannot be created: {exc}{hint}") from None
        hint = f"see kubectl -n {self.namespace} logs job/{name}"
        deadline = self.clock() + limit + 30
        stuck_since: float | None = None
        while True:
            state = self._job_state(name)
            if state is not None and state.condition("Complete"):
                break
            if state is not None and state.condition("Failed"):
                cond = state.condition("Failed")
                error = self._scaler_error(name) or f"{cond.reason}: {cond.message}"
                raise ScaleFailed(f"the scaler Job {name} ({args[0]}) failed: {error}; {hint}")
            waiting = self._waiting_reason(name)
            if waiting:
                stuck_since = stuck_since if stuck_since is not None else self.clock()
                if self.clock() - stuck_since >= self.image_error_grace_s:
                    raise ScaleFailed(f"the scaler pod of Job {name} cannot start: {waiting}; {hint}")
            else:
                stuck_since = None
            if self.clock() > deadline:
                raise ScaleFailed(f"the scaler Job {name} ({args[0]}) did not finish within {limit + 30:.0f}s; "
                                  f"{hint}")
            self.sleep(self.poll_s)
        lines = self._scaler_lines(name)
        for line in lines:
            if line.startswith("drl-scaler: ") and not line.startswith("drl-scaler: error"):
                self.say(line.removeprefix("drl-scaler: "))
        result = next((line for line in reversed(lines) if line.startswith("{")), None)
        try:
            return json.loads(result) if result else {}
        except ValueError:
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
        return [p for p in pods if p.component == manifests.SCALER_COMPONENT
                and name in (p.labels.get("batch.kubernetes.io/job-name"), p.labels.get("job-name"))]

    def _waiting_reason(self, name: str) -> str:
        for pod in self._scaler_pods(name):
            for c in pod.containers:
                if c.state == "waiting" and c.reason in FATAL_WAITING:
                    return f"{c.reason}{': ' + c.message if c.message else ''}"
        return ""

    def _scaler_lines(self, name: str) -> list[str]:
        pods = self._scaler_pods(name)
        done = [p for p in pods if p.phase in ("Succeeded", "Failed")] or pods
        for pod in reversed(done):
            try:
                return list(self.api.pod_log(self.namespace, pod.name, manifests.SCALER_COMPONENT, follow=False))
            except KubeError:
                continue
        return []

    def _scaler_error(self, name: str) -> str:
        errors = [line for line in self._scaler_lines(name) if line.startswith("drl-scaler: error: ")]
        return errors[-1].removeprefix("drl-scaler: error: ") if errors else ""


def scale_run(run: str, namespace: str, workers: int, *, api: Api | None = None, err: TextIO | None = None,
              **options) -> int:
    return KubeScale(api or _default_api(), run, namespace, err=err or sys.stderr, **options).scale(workers)


# -- status (drl-orchestrate status RUN --backend kubernetes) ----------------------------------------------

METRICS_ROLES = ("trainer", "rollout", "evaluator")
ABNORMAL = ("CrashLoopBackOff", "Error", "OOMKilled", "ContainerCannotRun", "DeadlineExceeded", "Evicted",
            "Unschedulable") + FATAL_WAITING


def snapshot_from_metrics(text: str) -> dict:
    """A service's telemetry snapshot rebuilt from its Prometheus page (``services.metrics``): ``drl_info``'s
    labels give the identity and state, every other ``drl_<field>`` sample the field's value."""
    from prometheus_client.parser import text_string_to_metric_families

    snapshot: dict = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("drl_"):
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


def status_rows(api: Api, run: str, namespace: str, timeout: float = 5.0):
    """One ``orchestrator.status.Row`` per pod of the run: counters from the pod's ``/metrics`` (read through
    the API server's pod proxy) where it answers, else its Kubernetes state alone. Restarts are the
    container restarts Kubernetes counts; the last error is what Kubernetes reports for the pod."""
    from orchestrator.status import Row, row_from_status
    from services.control import status_message

    try:
        pods = api.list_pods(namespace, manifests.run_selector(run))
    except KubeError as exc:
        raise UserError(f"pods of run {run!r} in namespace {namespace} cannot be listed: {exc}") from None
    if not pods:
        raise UserError(f"no pods of run {run!r} in namespace {namespace}")
    pods = sorted(pods, key=lambda p: (p.component not in METRICS_ROLES, p.component, p.name))

    def metrics(pod: PodState) -> dict:
        if pod.component not in METRICS_ROLES or pod.phase != "Running" or pod.deleting:
            return {}
        try:
            return snapshot_from_metrics(api.pod_metrics(namespace, pod.name, manifests.METRICS_PORT, timeout))
        except (KubeError, ValueError):
            return {}

    with ThreadPoolExecutor(max_workers=8) as pool:
        snapshots = list(pool.map(metrics, pods))
    rows = []
    for pod, snap in zip(pods, snapshots):
        restarts = sum(c.restart_count for c in pod.containers)
        if snap.get("run") == run:
            row = row_from_status(pod.name, status_message(snap))
            if row.state == "running" and not pod.ready:
                row.state = "starting"
        else:
            row = Row(pod.name, pod.component or "-", _pod_state_label(pod))
        row.restarts = restarts
        row.last_error = _pod_error(pod) or row.last_error
        rows.append(row)
    return rows


def show_status(run: str, namespace: str, *, api: Api | None = None, stream: TextIO | None = None) -> int:
    from orchestrator.status import format_table

    stream = stream or sys.stdout
    manifests.check_run_name(run, "RUN")
    manifests.check_namespace(namespace)
    rows = status_rows(api or _default_api(), run, namespace)
    print(f"run {run}: Kubernetes namespace {namespace}, {len(rows)} pods", file=stream)
    print(format_table(rows), file=stream)
    return 0
