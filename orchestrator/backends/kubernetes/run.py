"""Creating a Kubernetes run and watching it the way the local backend watches processes; deleting it.

``run_kubernetes`` checks that a PVC of the run can be bound (``check_storage``), creates the objects of
``manifests.manifests`` (undoing what it created if one fails), then, unless detached, polls the run's pods and
Jobs: it reports once every pod is ready, reports at once a pod that cannot be scheduled or created (and gives
the run up when one stays so for ``--pending-timeout``), prints the trainer's log as it comes, replaces rollout
pods that crash-loop (deleting one makes the Indexed Job recreate that worker index, which continues its
sequence numbers), and ends with the trainer's outcome. ``delete_run`` removes every object
carrying the run's label. Everything goes through ``KubeApi`` (``api``), so tests drive this module with a fake
of it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator, TextIO

from drl.errors import UserError
from orchestrator.backends.kubernetes import manifests, pending
from orchestrator.backends.kubernetes.api import FATAL_WAITING, RUN_KINDS, Api, KubeError, PodState, default_api

RESTART_THRESHOLD = 3
IMAGE_ERROR_GRACE_S = 60.0
API_ERROR_LIMIT_S = 300.0
WAITING_REPORT_EVERY_S = 30.0
WAITING_CHANGE_EVERY_S = 5.0
LOG_DRAIN_S = 10.0
PENDING_TIMEOUT_S = manifests.PENDING_TIMEOUT_S  # --pending-timeout: a pod that cannot start ends a followed run
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
IMAGE_HINT = (
    "; the drl image is published nowhere: build it (docker build -f docker/Dockerfile -t REGISTRY/drl:TAG "
    ".), push it where the cluster pulls from and pass --image REGISTRY/drl:TAG (on kind: "
    "scripts/kind-up.sh builds and loads drl:dev; --image drl:dev)"
)


def check_storage(api: Api, objects: list[dict], err: TextIO) -> None:
    """Refuses, before anything is created, a run whose PVC no StorageClass would provision: one without a
    class where the cluster has no default class, or one naming a class the cluster lacks (its pod would stay
    Pending for ever). Where the account may not list StorageClasses (cluster-scoped: a namespaced Role such as
    the chart's ``rbac.create`` cannot grant it), it says so and goes on: a PVC that stays unbound is then
    reported by the watcher, as the scheduler's "unbound immediate PersistentVolumeClaims"."""
    claims = [
        (obj, template)
        for obj in objects
        if obj["kind"] == "StatefulSet"
        for template in obj["spec"].get("volumeClaimTemplates") or ()
    ]
    if not claims:
        return
    try:
        classes = api.storage_classes()
    except KubeError as exc:
        print(
            f"drl: StorageClasses cannot be listed ({exc.status or exc.reason}); a PVC that no class binds "
            f"shows below as a pod that cannot be scheduled",
            file=err,
            flush=True,
        )
        return
    names = [name for name, _ in classes]
    defaults = [name for name, default in classes if default]
    have = f"this cluster has {', '.join(names)}" if names else "this cluster has no StorageClass"
    for obj, template in claims:
        component = obj["metadata"]["labels"].get("app.kubernetes.io/component", obj["metadata"]["name"])
        size = template["spec"]["resources"]["requests"]["storage"]
        wanted = template["spec"].get("storageClassName")
        what = f"the {component} server's {size} PVC (StatefulSet {obj['metadata']['name']})"
        options = (
            "pass --s3-storage-class NAME, or --s3-storage emptydir (no PVC: policies and checkpoints are "
            "lost with the S3 server's pod)"
        )
        if wanted and wanted not in names:
            raise UserError(
                f"StorageClass {wanted!r} of {what} does not exist ({have}); {options}; nothing was created"
            )
        if not wanted and not defaults:
            raise UserError(
                f"the cluster has no default StorageClass, so {what} would never be bound and its pod "
                f"would wait for ever ({have}); {options}; nothing was created"
            )


class RunFailed(Exception):
    """The run cannot succeed any more; the message says which part failed and why."""


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
        return (
            f"{where} already exists: run {run!r} is there already; remove it with drl-orchestrate delete "
            f"{run} --namespace {meta['namespace']} or pick another --run-name"
        )
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
    pending_timeout_s: float = PENDING_TIMEOUT_S
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
        self.pending_since: dict[str, float] = {}
        self.pending_reported: set[str] = set()
        self.events_readable = True

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
            raise RunFailed(
                f"the Kubernetes API failed for {self.api_error_limit_s:.0f} s ({exc}); the run goes on in the cluster"
            )

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
            raise RunFailed(
                f"trainer Job {self.name}-trainer failed ({failed.reason}: {failed.message}){code}; "
                f"{self._hint('trainer')}"
            )
        for role in ("rollout", "evaluator"):
            job = self.api.job_status(self.namespace, f"{self.name}-{role}")
            cond = job.condition("Failed") if job is not None else None
            if cond is not None:
                raise RunFailed(
                    f"{role} Job {self.name}-{role} failed ({cond.reason}: {cond.message}); {self._hint(role)}"
                )
        self._replace_rollouts(pods)
        self._check_images(pods)
        self._check_pending(pods)
        self._report_readiness(pods)
        return False

    def _check_pending(self, pods: list[PodState]) -> None:
        """Reports each new reason why pods cannot be scheduled or created as soon as it shows, and fails the run
        when one pod (or one Job's or StatefulSet's missing pods) stays so for ``pending_timeout_s`` (0: never).
        A Role without ``list`` on events is said once; unschedulable pods are still seen."""
        if self.events_readable:
            found, trouble = pending.read_problems(self.api, self.namespace, self.run, pods)
            if trouble:
                self.events_readable = False
                self.say(f"warning: {trouble}")
        else:
            found = pending.unschedulable(pods)
        now = self.clock()
        self.pending_since = {p.key: self.pending_since.get(p.key, now) for p in found}
        groups = {p.group for p in found}
        for group, line in pending.describe(found, self.namespace):
            if group not in self.pending_reported:
                self.say(line)
        self.pending_reported = groups
        if found and self.pending_timeout_s > 0:
            longest = now - min(self.pending_since.values())
            if longest >= self.pending_timeout_s:
                lines = "; ".join(line for _, line in pending.describe(found, self.namespace))
                raise RunFailed(
                    f"it cannot start: {lines} (for {longest:.0f} s; --pending-timeout {self.pending_timeout_s:g})"
                )

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
                raise RunFailed(
                    f"trainer pod {pod.name} failed with exit code {code} "
                    f"({pod.reason or (c.reason if c else '') or 'Failed'}); {self._hint('trainer')}"
                )

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
            index = pod.annotations.get(INDEX_ANNOTATION, "?")
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
                        hint = IMAGE_HINT if c.reason in PULL_ERRORS else ""
                        raise RunFailed(
                            f"pod {pod.name} cannot start its container {c.name}: {c.reason}"
                            f"{': ' + c.message if c.message else ''}{hint}"
                        )
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
    """Prints the trainer container's log from a thread, attaching again after each restart of it. Of a group
    of learners it follows rank 0 (completion index 0), the one that publishes and checkpoints."""

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
            if pod.annotations.get(INDEX_ANNOTATION, "0") != "0":
                continue
            if c is None or (c.state == "waiting" and not c.restart_count):
                continue
            key = (pod.name, c.restart_count)
            if key in self.done:
                continue
            self.key = key
            self.thread = threading.Thread(target=self._print, args=(pod.name, key), daemon=True, name="trainer-log")
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


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM end the watch (KeyboardInterrupt) as the local backend's run ends on them, also when
    the process started with SIGINT ignored (a background job of a non-interactive shell inherits that: Python
    then installs no KeyboardInterrupt handler of its own) and when a supervisor stops it with SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_kubernetes(
    run: str,
    objects: list[dict],
    *,
    namespace: str,
    detach: bool = False,
    api: Api | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    **watch_options,
) -> int:
    """Creates the run's objects and, unless ``detach``, watches it to the end; returns the exit code.

    The objects are fitted to the API server's version first (``manifests.for_server``): a server older than
    1.29 gets its Jobs without ``podReplacementPolicy``, and this says so."""
    out = out or sys.stdout
    err = err or sys.stderr
    api = api or default_api()
    version = api.server_version()
    if version is not None and not manifests.has_pod_replacement_policy(version):
        print(
            f"drl: Kubernetes {version[0]}.{version[1]} has no podReplacementPolicy: a replaced pod may start "
            f"while its predecessor is still terminating; the memory server's fencing keeps one writer per "
            f"identity",
            file=err,
            flush=True,
        )
    objects = manifests.for_server(objects, version)
    check_storage(api, objects, err)
    create_objects(api, objects)
    name = manifests.object_name(run)
    print(f"drl: created {len(objects)} objects of run {run} in namespace {namespace}", file=err, flush=True)
    removal = f"remove it with: drl-orchestrate delete {run} --namespace {namespace}"
    if detach:
        print(
            f"drl: follow the trainer with: kubectl -n {namespace} logs -f job/{name}-trainer; {removal}",
            file=err,
            flush=True,
        )
        return 0
    watcher = KubeRun(api, run, namespace, objects, out=out, err=err, **watch_options)
    try:
        with _interruptible():
            code = watcher.watch()
    except KeyboardInterrupt:
        print(f"drl: interrupted; run {run} goes on in the cluster ({removal})", file=err, flush=True)
        return 130
    print(f"drl: the run's objects stay in the cluster for inspection; {removal}", file=err, flush=True)
    return code


def delete_run(run: str, namespace: str, *, api: Api | None = None, err: TextIO | None = None) -> int:
    """Deletes every object labelled with the run (dependents, such as a Job's pods, in the background)."""
    err = err or sys.stderr
    api = api or default_api()
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
