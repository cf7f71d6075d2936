"""The kubernetes backend against FakeKubeApi, a fake of orchestrator.backends.kubernetes.api.KubeApi.

The fake holds created objects and replays scripted pod and Job states, one step per poll (the backend's
``sleep`` advances it), so creating, waiting, replacing crash-looping workers, failing and finishing are
checked without a cluster.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal

import pytest

from drl.config import ExperimentConfig
from drl.errors import UserError
from orchestrator.backends.kubernetes import manifests as k8s
from orchestrator.backends.kubernetes.api import (
    RUN_KINDS,
    ContainerState,
    EventState,
    JobCondition,
    JobState,
    KubeError,
    PodState,
)
from orchestrator.backends.kubernetes.run import KubeRun, delete_run, run_kubernetes
from orchestrator.cli import main

RUN, NS = "r1", "team-a"
INDEX = "batch.kubernetes.io/job-completion-index"


class FakeKubeApi:
    """Same methods as KubeApi. ``pods``/``jobs`` are lists of states, one per poll (the last one repeats)."""

    def __init__(
        self,
        pods: list[list[PodState]] | None = None,
        jobs: dict[str, list[JobState]] | None = None,
        logs: dict[str, list[str]] | None = None,
        fail_create: dict[str, KubeError] | None = None,
        fail_list: dict[int, KubeError] | None = None,
        version: tuple[int, int] | None = (1, 35),
        storage_classes: list[tuple[str, bool]] | KubeError | None = None,
        events: list[list[EventState]] | KubeError | None = None,
    ):
        self.version = version
        self.classes = [("standard", True)] if storage_classes is None else storage_classes
        self.events = events or [[]]
        self.event_requests = 0
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.created: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.deleted_pods: list[str] = []
        self.pods = pods or [[]]
        self.jobs = jobs or {}
        self.logs = logs or {}
        self.log_requests: list[tuple[str, str]] = []
        self.fail_create = fail_create or {}
        self.fail_list = fail_list or {}
        self.tick = 0
        self.polls = 0

    # -- test clock: the backend sleeps between polls --------------------------------------------------
    def sleep(self, seconds: float) -> None:
        self.tick += 1
        assert self.tick < 200, "the backend never finished"

    def clock(self) -> float:
        return self.tick * 10.0

    @staticmethod
    def _at(script: list, tick: int):
        return script[min(tick, len(script) - 1)]

    # -- KubeApi ---------------------------------------------------------------------------------------
    def server_version(self) -> tuple[int, int] | None:
        return self.version

    def create(self, obj: dict) -> None:
        meta = obj["metadata"]
        key = (obj["kind"], meta["namespace"], meta["name"])
        if meta["name"] in self.fail_create:
            raise self.fail_create[meta["name"]]
        if key in self.objects:
            raise KubeError(409, "Conflict", f"{obj['kind']} {meta['name']!r} already exists")
        self.objects[key] = obj
        self.created.append((obj["kind"], meta["name"]))

    def delete(self, kind: str, namespace: str, name: str, propagation: str = "Background") -> bool:
        self.deleted.append((kind, name, propagation))
        return self.objects.pop((kind, namespace, name), None) is not None

    def delete_pod(self, namespace: str, name: str) -> bool:
        self.deleted_pods.append(name)
        return True

    def delete_by_label(
        self, namespace: str, selector: str, kinds: tuple[str, ...] = RUN_KINDS, propagation: str = "Background"
    ) -> list[tuple[str, str]]:
        key, value = selector.split("=")
        out = []
        for kind in kinds:
            for (k, ns, name), obj in list(self.objects.items()):
                if k == kind and ns == namespace and obj["metadata"]["labels"].get(key) == value:
                    self.delete(kind, namespace, name, propagation)
                    out.append((kind, name))
        return out

    def list_pods(self, namespace: str, selector: str) -> list[PodState]:
        assert selector == f"drl.dev/run={RUN}" and namespace == NS
        self.polls += 1
        if self.tick in self.fail_list:
            raise self.fail_list[self.tick]
        return [dataclasses.replace(p, deleting=p.name in self.deleted_pods) for p in self._at(self.pods, self.tick)]

    def job_status(self, namespace: str, name: str) -> JobState | None:
        script = self.jobs.get(name)
        return self._at(script, self.tick) if script else JobState(name, active=1)

    def pod_metrics(self, namespace: str, name: str, port: int, timeout: float = 5.0) -> str:
        raise KubeError(503, "Service Unavailable", "no endpoints available")

    def storage_classes(self) -> list[tuple[str, bool]]:
        if isinstance(self.classes, KubeError):
            raise self.classes
        return list(self.classes)

    def list_events(self, namespace: str, reason: str = "") -> list[EventState]:
        self.event_requests += 1
        if isinstance(self.events, KubeError):
            raise self.events
        return [e for e in self._at(self.events, self.tick) if not reason or e.reason == reason]

    def list_names(self, kind: str, namespace: str, selector: str) -> list[str]:
        key, value = selector.split("=")
        return [
            name
            for (k, ns, name), obj in self.objects.items()
            if k == kind and ns == namespace and obj["metadata"]["labels"].get(key) == value
        ]

    def list_jobs(self, namespace: str, selector: str) -> list[dict]:
        """The created Jobs with a status of their scripted state (uid: the Job's name)."""
        out = []
        for name in self.list_names("Job", namespace, selector):
            job = json.loads(json.dumps(self.objects[("Job", namespace, name)]))
            state = self.job_status(namespace, name)
            job["metadata"]["uid"] = f"uid-{name}"
            job["status"] = {
                "succeeded": state.succeeded,
                "conditions": [{"type": c.type, "status": c.status} for c in state.conditions],
            }
            out.append(job)
        return out

    def pod_log(self, namespace: str, name: str, container: str, follow: bool = True):
        self.log_requests.append((name, container))
        return iter(self.logs.get(name, []))


def pod(
    name: str,
    component: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    reason: str = "",
    restarts: int = 0,
    state: str = "running",
    exit_code: int | None = None,
    last_exit_code: int | None = None,
    index: int | None = None,
    pod_reason: str = "",
) -> PodState:
    labels = k8s.labels(RUN, component)
    if component in k8s.ROLES:
        labels["batch.kubernetes.io/job-name"] = f"drl-{RUN}-{component}"
    annotations = {INDEX: str(index)} if index is not None else {}
    container = ContainerState(component, ready, restarts, state, reason, "", exit_code, last_exit_code)
    return PodState(name, phase, labels, annotations, ready, False, pod_reason, "", (container,))


def healthy(workers: int = 2) -> list[PodState]:
    return [
        pod("drl-r1-redis-0", "redis"),
        pod("drl-r1-s3-0", "s3"),
        pod("drl-r1-trainer-abc", "trainer"),
        pod("drl-r1-evaluator-def", "evaluator"),
    ] + [pod(f"drl-r1-rollout-{i}-x{i}", "rollout", index=i) for i in range(workers)]


COMPLETE = JobState("drl-r1-trainer", succeeded=1, conditions=(JobCondition("Complete"),))
ACTIVE = JobState("drl-r1-trainer", active=1)


@pytest.fixture
def objects():
    return k8s.manifests(ExperimentConfig(workers=2), RUN, namespace=NS, env={})


def start(fake: FakeKubeApi, objects: list[dict], detach: bool = False, **options) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_kubernetes(
        RUN,
        objects,
        namespace=NS,
        detach=detach,
        api=fake,
        out=out,
        err=err,
        sleep=fake.sleep,
        clock=fake.clock,
        **options,
    )
    return code, out.getvalue(), err.getvalue()


def test_backend_with_fake_kube_api_creates_every_object_of_the_contract_once_in_order(objects):
    fake = FakeKubeApi(jobs={"drl-r1-trainer": [COMPLETE]})
    code, _, _ = start(fake, objects)
    assert code == 0
    assert sorted(fake.created) == sorted(
        {
            ("ServiceAccount", "drl-r1"),
            ("Role", "drl-r1"),
            ("RoleBinding", "drl-r1"),
            ("Secret", "drl-r1-credentials"),
            ("ConfigMap", "drl-r1-config"),
            ("Service", "drl-r1-redis"),
            ("StatefulSet", "drl-r1-redis"),
            ("Service", "drl-r1-s3"),
            ("StatefulSet", "drl-r1-s3"),
            ("NetworkPolicy", "drl-r1-redis"),
            ("NetworkPolicy", "drl-r1-s3"),
            ("NetworkPolicy", "drl-r1-roles"),
            ("Job", "drl-r1-trainer"),
            ("Job", "drl-r1-rollout"),
            ("Job", "drl-r1-evaluator"),
        }
    )
    order = [kind for kind, _ in fake.created]
    position = {kind: [i for i, k in enumerate(order) if k == kind] for kind in set(order)}
    assert max(position["ServiceAccount"] + position["Role"]) < min(position["RoleBinding"])
    assert max(position["Secret"] + position["ConfigMap"] + position["RoleBinding"]) < min(position["StatefulSet"])
    assert max(position["StatefulSet"] + position["Service"]) < min(position["Job"])
    assert max(position["NetworkPolicy"]) < min(position["StatefulSet"] + position["Job"])
    assert fake.created[position["Job"][0]] == ("Job", "drl-r1-trainer")
    assert all(ns == NS for _, ns, _ in fake.objects)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_backend_with_fake_kube_api_an_attached_run_ends_on_a_signal_even_with_sigint_ignored(objects, signum):
    """Ctrl-C or a supervisor's SIGTERM ends the watch with 130 and leaves the run in the cluster, also when the
    process started with SIGINT ignored (a background job of a non-interactive shell); the handlers it had are
    put back afterwards."""
    fake = FakeKubeApi(jobs={"drl-r1-trainer": [ACTIVE]})
    ticks = fake.sleep

    def sleep(seconds: float) -> None:
        ticks(seconds)
        if fake.tick == 3:
            os.kill(os.getpid(), signum)

    fake.sleep = sleep
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code, _, err = start(fake, objects)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130
    assert (
        f"drl: interrupted; run {RUN} goes on in the cluster (remove it with: drl-orchestrate delete {RUN} "
        f"--namespace {NS})" in err
    )
    assert fake.tick == 3 and not fake.deleted


def test_backend_with_fake_kube_api_detach_returns_at_once(objects):
    fake = FakeKubeApi()
    code, out, err = start(fake, objects, detach=True)
    assert code == 0
    assert len(fake.created) == len(objects)
    assert fake.polls == 0 and fake.tick == 0 and not fake.log_requests
    assert f"drl-orchestrate delete {RUN} --namespace {NS}" in err
    assert f"kubectl -n {NS} logs -f job/drl-r1-trainer" in err


def test_backend_with_fake_kube_api_waits_until_pods_are_ready(objects):
    pending = [
        pod(
            p.name,
            p.component,
            phase="Pending",
            ready=False,
            state="waiting",
            reason="ContainerCreating",
            index=int(p.annotations[INDEX]) if INDEX in p.annotations else None,
        )
        for p in healthy()
    ]
    half = healthy()[:3] + pending[3:]
    fake = FakeKubeApi(
        pods=[pending, half, healthy(), healthy()], jobs={"drl-r1-trainer": [ACTIVE, ACTIVE, ACTIVE, COMPLETE]}
    )
    code, _, err = start(fake, objects)
    assert code == 0
    lines = err.splitlines()
    waiting = [line for line in lines if "waiting for pods" in line]
    assert waiting[0].startswith("drl: waiting for pods: 0/6 ready; drl-r1-redis-0: ContainerCreating")
    assert "(+3 more)" in waiting[0]
    ready = [i for i, line in enumerate(lines) if line == "drl: all 6 pods of run r1 are ready"]
    assert len(ready) == 1
    assert any("waiting for pods: 3/6 ready" in line for line in lines[: ready[0]])
    assert "drl: run r1 finished: Job drl-r1-trainer complete" in err


def test_backend_with_fake_kube_api_counts_finished_workers_as_ready(objects):
    pods = healthy()
    pods[-1] = pod(pods[-1].name, "rollout", phase="Succeeded", ready=False, state="terminated", exit_code=0, index=1)
    fake = FakeKubeApi(pods=[pods], jobs={"drl-r1-trainer": [ACTIVE, COMPLETE]})
    code, _, err = start(fake, objects)
    assert code == 0 and "all 6 pods of run r1 are ready" in err


def test_backend_with_fake_kube_api_replaces_a_crash_looping_rollout_pod(objects):
    pods = healthy(4)
    pods[4] = pod(
        "drl-r1-rollout-0-x0",
        "rollout",
        ready=False,
        state="waiting",
        reason="CrashLoopBackOff",
        restarts=2,
        last_exit_code=1,
        index=0,
    )
    pods[5] = pod("drl-r1-rollout-1-x1", "rollout", restarts=4, last_exit_code=137, index=1)
    pods[6] = pod("drl-r1-rollout-2-x2", "rollout", restarts=1, last_exit_code=1, index=2)
    pods[7] = pod(
        "drl-r1-rollout-3-x3", "rollout", phase="Failed", ready=False, state="terminated", exit_code=1, index=3
    )
    pods[2] = pod(
        "drl-r1-trainer-abc",
        "trainer",
        ready=False,
        state="waiting",
        reason="CrashLoopBackOff",
        restarts=2,
        last_exit_code=1,
    )
    fake = FakeKubeApi(pods=[pods, pods, pods], jobs={"drl-r1-trainer": [ACTIVE, ACTIVE, COMPLETE]})
    code, _, err = start(fake, objects)
    assert code == 0
    assert fake.deleted_pods == ["drl-r1-rollout-0-x0", "drl-r1-rollout-1-x1", "drl-r1-rollout-3-x3"]
    assert "replacing rollout pod drl-r1-rollout-0-x0 (worker 0): CrashLoopBackOff, 2 restarts, last exit code 1" in err
    assert "replacing rollout pod drl-r1-rollout-1-x1 (worker 1): 4 restarts, last exit code 137" in err
    assert "replacing rollout pod drl-r1-rollout-3-x3 (worker 3): pod failed" in err


def test_backend_with_fake_kube_api_restart_threshold_is_configurable(objects):
    pods = healthy()
    pods[4] = pod("drl-r1-rollout-0-x0", "rollout", restarts=2, index=0)
    fake = FakeKubeApi(pods=[pods], jobs={"drl-r1-trainer": [ACTIVE, COMPLETE]})
    assert start(fake, objects, restart_threshold=1)[0] == 0
    assert fake.deleted_pods == ["drl-r1-rollout-0-x0"]


def test_backend_with_fake_kube_api_reports_a_failed_trainer_job(objects):
    crashing = healthy()
    crashing[2] = pod(
        "drl-r1-trainer-abc",
        "trainer",
        ready=False,
        state="waiting",
        reason="CrashLoopBackOff",
        restarts=6,
        last_exit_code=3,
    )
    failed = JobState(
        "drl-r1-trainer",
        failed=1,
        conditions=(
            JobCondition("Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
        ),
    )
    fake = FakeKubeApi(pods=[healthy(), crashing, []], jobs={"drl-r1-trainer": [ACTIVE, ACTIVE, failed]})
    code, _, err = start(fake, objects)
    assert code == 1
    last = err.strip().splitlines()
    assert (
        "drl-orchestrate: run r1 failed: trainer Job drl-r1-trainer failed (BackoffLimitExceeded: Job has "
        "reached the specified backoff limit); last exit code 3; see kubectl -n team-a logs job/drl-r1-trainer"
    ) in last
    assert not fake.deleted_pods, "a crash-looping trainer is not replaced: its Job restarts it"


def test_backend_with_fake_kube_api_reports_a_failed_trainer_pod_exit_1(objects):
    pods = healthy()
    pods[2] = pod(
        "drl-r1-trainer-abc", "trainer", phase="Failed", ready=False, state="terminated", exit_code=1, reason="Error"
    )
    fake = FakeKubeApi(pods=[healthy(), pods], logs={"drl-r1-trainer-abc": ["trainer ERROR boom"]})
    code, out, err = start(fake, objects)
    assert code == 1
    assert "drl-orchestrate: run r1 failed: trainer pod drl-r1-trainer-abc failed with exit code 1 (Error)" in err
    assert "trainer ERROR boom" in out


def test_backend_with_fake_kube_api_evicted_trainer_pod_does_not_end_the_run(objects):
    evicted = healthy()
    evicted[2] = pod(
        "drl-r1-trainer-abc",
        "trainer",
        phase="Failed",
        ready=False,
        state="terminated",
        exit_code=137,
        pod_reason="Evicted",
    )
    fake = FakeKubeApi(pods=[evicted, healthy()], jobs={"drl-r1-trainer": [ACTIVE, COMPLETE]})
    assert start(fake, objects)[0] == 0


def test_backend_with_fake_kube_api_reports_a_failed_rollout_job(objects):
    failed = JobState("drl-r1-rollout", conditions=(JobCondition("Failed", "True", "BackoffLimitExceeded", "limit"),))
    fake = FakeKubeApi(pods=[healthy()], jobs={"drl-r1-rollout": [JobState("drl-r1-rollout", active=2), failed]})
    code, _, err = start(fake, objects)
    assert code == 1
    assert "run r1 failed: rollout Job drl-r1-rollout failed (BackoffLimitExceeded: limit)" in err


def test_backend_with_fake_kube_api_fails_on_an_image_that_cannot_be_pulled(objects):
    pods = healthy()
    pods[2] = pod(
        "drl-r1-trainer-abc", "trainer", phase="Pending", ready=False, state="waiting", reason="ImagePullBackOff"
    )
    fake = FakeKubeApi(pods=[pods])
    code, _, err = start(fake, objects, image_error_grace_s=30)
    assert code == 1
    assert "pod drl-r1-trainer-abc cannot start its container trainer: ImagePullBackOff" in err
    assert "build it (docker build -f docker/Dockerfile" in err and "--image REGISTRY/drl:TAG" in err
    assert fake.tick == 3


def test_backend_with_fake_kube_api_succeeds_and_prints_the_trainers_log(objects):
    lines = ["trainer INFO restored nothing", "trainer INFO published v1", "trainer INFO finished: steps_done"]
    fake = FakeKubeApi(
        pods=[healthy(), healthy()], jobs={"drl-r1-trainer": [ACTIVE, COMPLETE]}, logs={"drl-r1-trainer-abc": lines}
    )
    code, out, err = start(fake, objects)
    assert code == 0
    assert out.splitlines() == lines
    assert fake.log_requests == [("drl-r1-trainer-abc", "trainer")]
    assert "drl: run r1 finished: Job drl-r1-trainer complete" in err
    assert "drl-orchestrate: " not in err


def test_backend_with_fake_kube_api_follows_the_trainer_again_after_a_restart(objects):
    restarted = healthy()
    restarted[2] = pod("drl-r1-trainer-abc", "trainer", restarts=1, last_exit_code=1)
    fake = FakeKubeApi(
        pods=[healthy(), restarted, restarted],
        jobs={"drl-r1-trainer": [ACTIVE, ACTIVE, COMPLETE]},
        logs={"drl-r1-trainer-abc": ["line"]},
    )
    code, out, _ = start(fake, objects)
    assert code == 0
    assert fake.log_requests == [("drl-r1-trainer-abc", "trainer")] * 2
    assert out.splitlines() == ["line", "line"]


def test_backend_with_fake_kube_api_follows_rank_0_of_a_group_of_learners():
    """Of the trainer Job's K pods (``--learners K``) the log printed is rank 0's, the learner that publishes and
    checkpoints, whatever order the pods are listed in."""
    objects = k8s.manifests(ExperimentConfig(workers=2, learners=2, memory_shards=2), RUN, namespace=NS, env={})
    pods = healthy()
    pods[2:3] = [pod("drl-r1-trainer-1-xyz", "trainer", index=1), pod("drl-r1-trainer-0-abc", "trainer", index=0)]
    fake = FakeKubeApi(
        pods=[pods, pods],
        jobs={"drl-r1-trainer": [ACTIVE, COMPLETE]},
        logs={"drl-r1-trainer-0-abc": ["rank 0"], "drl-r1-trainer-1-xyz": ["rank 1"]},
    )
    code, out, err = start(fake, objects)
    assert code == 0, err
    assert fake.log_requests == [("drl-r1-trainer-0-abc", "trainer")]
    assert out.splitlines() == ["rank 0"]
    assert "all 7 pods of run r1 are ready" in err


def test_backend_with_fake_kube_api_rides_out_api_errors(objects):
    fake = FakeKubeApi(
        pods=[healthy()],
        jobs={"drl-r1-trainer": [ACTIVE, ACTIVE, ACTIVE, COMPLETE]},
        fail_list={
            0: KubeError(0, "Unreachable", "connection refused"),
            1: KubeError(503, "Service Unavailable", "etcd"),
        },
    )
    code, _, err = start(fake, objects)
    assert code == 0
    assert err.count("warning: Kubernetes API call failed") == 1


def test_backend_with_fake_kube_api_gives_up_after_a_long_api_outage(objects):
    fake = FakeKubeApi(fail_list={t: KubeError(0, "Unreachable", "connection refused") for t in range(100)})
    code, _, err = start(fake, objects, api_error_limit_s=50)
    assert code == 1
    assert "the Kubernetes API failed for 50 s" in err


def test_backend_with_fake_kube_api_existing_run_is_refused_and_nothing_is_left_behind(objects):
    fake = FakeKubeApi(fail_create={"drl-r1-config": KubeError(409, "Conflict", "configmaps already exists")})
    with pytest.raises(
        UserError,
        match=r"ConfigMap drl-r1-config in namespace team-a already exists: run 'r1' is "
        r"there already; remove it with drl-orchestrate delete r1 --namespace team-a",
    ):
        start(fake, objects)
    assert not fake.objects
    assert [(k, n) for k, n, _ in fake.deleted] == list(reversed(fake.created))
    assert ("ConfigMap", "drl-r1-config") not in fake.created


def test_backend_with_fake_kube_api_forbidden_is_one_clear_error(objects):
    fake = FakeKubeApi(fail_create={"drl-r1": KubeError(403, "Forbidden", "serviceaccounts is forbidden")})
    with pytest.raises(UserError, match="not allowed to create ServiceAccount drl-r1 in namespace team-a"):
        start(fake, objects)


def test_backend_with_fake_kube_api_delete_run_removes_only_that_run(objects):
    fake = FakeKubeApi()
    for obj in objects + k8s.manifests(ExperimentConfig(), "r2", namespace=NS, env={}):
        fake.create(obj)
    err = io.StringIO()
    assert delete_run(RUN, NS, api=fake, err=err) == 0
    removed = {(k, n) for k, n, _ in fake.deleted}
    assert removed == {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert all(propagation == "Background" for _, _, propagation in fake.deleted)
    assert {obj["metadata"]["labels"]["drl.dev/run"] for obj in fake.objects.values()} == {"r2"}
    assert {o["kind"] for o in objects} <= set(RUN_KINDS)
    assert "deleted run r1 in namespace team-a: 3 Job, 2 StatefulSet, 2 Service" in err.getvalue()
    again = io.StringIO()
    assert delete_run(RUN, NS, api=fake, err=again) == 0
    assert "no objects of run r1 in namespace team-a" in again.getvalue()


def test_backend_with_fake_kube_api_through_the_cli(monkeypatch, capsys):
    fake = FakeKubeApi()
    monkeypatch.setattr("orchestrator.backends.kubernetes.api.KubeApi", lambda: fake)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--backend",
                "kubernetes",
                "--run-name",
                RUN,
                "--namespace",
                NS,
                "--workers",
                "3",
                "--steps",
                "3000",
                "--image",
                "registry.example/drl:2",
                "--detach",
            ]
        )
    assert exit_info.value.code == 0, capsys.readouterr().err
    assert len(fake.created) == 15
    rollout = fake.objects[("Job", NS, "drl-r1-rollout")]
    assert rollout["spec"]["parallelism"] == 3
    assert rollout["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/drl:2"
    with pytest.raises(SystemExit) as exit_info:
        main(["delete", RUN, "--namespace", NS])
    assert exit_info.value.code == 0
    assert not fake.objects
    assert "deleted run r1 in namespace team-a" in capsys.readouterr().err


REPLACEMENT_CASES = [
    ((1, 35), True),
    ((1, 34), True),
    ((1, 29), True),
    (None, True),
    ((1, 28), False),
    ((1, 27), False),
]


def replacement_policies(created: dict) -> dict[str, str | None]:
    return {name: obj["spec"].get("podReplacementPolicy") for (kind, _, name), obj in created.items() if kind == "Job"}


@pytest.mark.parametrize("version, has_field", REPLACEMENT_CASES)
def test_backend_with_fake_kube_api_sets_pod_replacement_policy_where_the_server_has_it(version, has_field):
    """The rollout Job and a group's Indexed trainer Job replace a pod only once it has failed, where the API
    server knows the field (1.29 on; an unreadable version counts as current); an older one gets the Jobs
    without it and a line saying that only the fencing keeps one writer per identity."""
    objects = k8s.manifests(ExperimentConfig(workers=2, learners=2, memory_shards=2), RUN, namespace=NS, env={})
    fake = FakeKubeApi(version=version)
    code, _, err = start(fake, objects, detach=True)
    assert code == 0
    expected = "Failed" if has_field else None
    assert replacement_policies(fake.objects) == {
        "drl-r1-trainer": expected,
        "drl-r1-rollout": expected,
        "drl-r1-evaluator": None,
    }
    assert ("has no podReplacementPolicy" in err) is not has_field
    if not has_field:
        assert f"Kubernetes {version[0]}.{version[1]} has no podReplacementPolicy" in err
    for job in (obj for (kind, _, _), obj in fake.objects.items() if kind == "Job"):
        assert "podFailurePolicy" not in job["spec"]


@pytest.mark.parametrize("version, has_field", REPLACEMENT_CASES)
def test_backend_with_fake_kube_api_through_the_cli_asks_the_server_its_version(
    monkeypatch, capsys, version, has_field
):
    fake = FakeKubeApi(version=version)
    monkeypatch.setattr("orchestrator.backends.kubernetes.api.KubeApi", lambda: fake)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--backend",
                "kubernetes",
                "--run-name",
                RUN,
                "--namespace",
                NS,
                "--workers",
                "3",
                "--steps",
                "3000",
                "--detach",
            ]
        )
    assert exit_info.value.code == 0, capsys.readouterr().err
    assert replacement_policies(fake.objects)["drl-r1-rollout"] == ("Failed" if has_field else None)


def test_manifests_for_a_server_version_and_render_for_a_current_one():
    cfg = ExperimentConfig(workers=2, learners=2, memory_shards=2)
    for version, has_field in REPLACEMENT_CASES:
        assert k8s.has_pod_replacement_policy(version) is has_field, version
        objects = k8s.manifests(cfg, RUN, namespace=NS, env={}, kube_version=version)
        expected = "Failed" if has_field else None
        assert [o["spec"].get("podReplacementPolicy") for o in objects if o["kind"] == "Job"] == [
            expected,
            expected,
            None,
        ], version
    current = k8s.manifests(cfg, RUN, namespace=NS, env={})
    old = k8s.for_server(k8s.manifests(cfg, RUN, namespace=NS, env={}), (1, 28))
    assert [o["kind"] for o in old] == [o["kind"] for o in current]
    for ours, theirs in zip(old, current):
        if ours["kind"] == "Job":
            theirs["spec"].pop("podReplacementPolicy", None)
        if ours["kind"] != "Secret":  # generated credentials differ between calls
            assert ours == theirs


def test_backend_with_fake_kube_api_kube_run_can_be_driven_directly(objects):
    fake = FakeKubeApi(pods=[healthy()], jobs={"drl-r1-trainer": [COMPLETE]})
    watcher = KubeRun(fake, RUN, NS, objects, out=io.StringIO(), err=io.StringIO(), sleep=fake.sleep, clock=fake.clock)
    assert watcher.poll() is True


# -- the real wrapper, against the official client's classes (no cluster) -----------------------------------


def test_kube_api_names_only_methods_the_official_client_has():
    from kubernetes import client

    from orchestrator.backends.kubernetes.api import KINDS

    classes = {
        "core": client.CoreV1Api,
        "apps": client.AppsV1Api,
        "batch": client.BatchV1Api,
        "rbac": client.RbacAuthorizationV1Api,
        "networking": client.NetworkingV1Api,
    }
    for kind, (group, suffix) in KINDS.items():
        for verb in ("create", "list", "delete"):
            assert hasattr(classes[group], f"{verb}_namespaced_{suffix}"), (kind, verb)
    assert hasattr(client.BatchV1Api, "read_namespaced_job")
    assert hasattr(client.CoreV1Api, "read_namespaced_pod_log")
    assert hasattr(client.StorageV1Api, "list_storage_class")


class _Recorder:
    """Stands in for one of the client's API classes: records calls, returns or raises what it is told."""

    def __init__(self, results: dict):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.results = results

    def __getattr__(self, method: str):
        def call(*args, **kwargs):
            self.calls.append((method, args, kwargs))
            result = self.results.get(method)
            if isinstance(result, Exception):
                raise result
            return result

        return call


def _wrapper(results: dict):
    from kubernetes import client

    from orchestrator.backends.kubernetes.api import KubeApi

    api = KubeApi.__new__(KubeApi)
    api.client = client
    recorder = _Recorder(results)
    api.groups = {"core": recorder, "apps": recorder, "batch": recorder, "rbac": recorder}
    return api, recorder


def test_kube_api_over_a_fake_client_creates_lists_deletes_and_reports_errors():
    from kubernetes.client import V1ConfigMap, V1ConfigMapList, V1ObjectMeta
    from kubernetes.client.exceptions import ApiException

    conflict = ApiException(status=409, reason="Conflict")
    conflict.body = '{"kind": "Status", "message": "configmaps \\"drl-r1-config\\" already exists"}'
    gone = ApiException(status=404, reason="Not Found")
    listing = V1ConfigMapList(items=[V1ConfigMap(metadata=V1ObjectMeta(name="drl-r1-config"))])
    api, rec = _wrapper(
        {
            "create_namespaced_config_map": conflict,
            "list_namespaced_config_map": listing,
            "delete_namespaced_secret": gone,
        }
    )
    obj = {"kind": "StatefulSet", "metadata": {"name": "x", "namespace": "ns"}}
    api.create(obj)
    assert rec.calls[-1] == ("create_namespaced_stateful_set", ("ns", obj), {})
    with pytest.raises(KubeError) as error:
        api.create({"kind": "ConfigMap", "metadata": {"name": "drl-r1-config", "namespace": "ns"}})
    assert error.value.status == 409 and error.value.message == 'configmaps "drl-r1-config" already exists'
    assert api.list_names("ConfigMap", "ns", "drl.dev/run=r1") == ["drl-r1-config"]
    assert rec.calls[-1][2] == {"label_selector": "drl.dev/run=r1"}
    assert api.delete("Secret", "ns", "s") is False
    assert api.delete("Job", "ns", "j", "Foreground") is True
    assert rec.calls[-1] == ("delete_namespaced_job", ("j", "ns"), {"propagation_policy": "Foreground"})
    assert api.delete_by_label("ns", "drl.dev/run=r1", ("ConfigMap",)) == [("ConfigMap", "drl-r1-config")]


def test_kube_api_over_a_fake_client_lists_warning_events_and_storage_classes():
    from kubernetes import client as c

    event = c.CoreV1Event(
        metadata=c.V1ObjectMeta(name="e1"),
        reason="FailedCreate",
        message=QUOTA + "\n",
        count=3,
        involved_object=c.V1ObjectReference(kind="Job", name="drl-r1-rollout", uid="u1"),
    )
    classes = c.V1StorageClassList(
        items=[
            c.V1StorageClass(metadata=c.V1ObjectMeta(name="slow"), provisioner="p"),
            c.V1StorageClass(
                metadata=c.V1ObjectMeta(
                    name="fast", annotations={"storageclass.kubernetes.io/is-default-class": "true"}
                ),
                provisioner="p",
            ),
        ]
    )
    api, rec = _wrapper({"list_namespaced_event": c.CoreV1EventList(items=[event]), "list_storage_class": classes})
    api.groups["storage"] = rec
    assert api.list_events("ns", "FailedCreate") == [
        EventState("Job", "drl-r1-rollout", "u1", "FailedCreate", QUOTA, 3)
    ]
    assert rec.calls[-1] == ("list_namespaced_event", ("ns",), {"field_selector": "type=Warning,reason=FailedCreate"})
    assert api.storage_classes() == [("slow", False), ("fast", True)]


def test_kube_api_over_a_fake_client_reads_pod_and_job_states_from_client_objects():
    from kubernetes import client as c

    from orchestrator.backends.kubernetes.api import _pod_state

    crash = c.V1Pod(
        metadata=c.V1ObjectMeta(name="drl-r1-rollout-0-x", labels=k8s.labels(RUN, "rollout"), annotations={INDEX: "0"}),
        status=c.V1PodStatus(
            phase="Running",
            conditions=[c.V1PodCondition(type="Ready", status="False")],
            container_statuses=[
                c.V1ContainerStatus(
                    name="rollout",
                    ready=False,
                    restart_count=3,
                    image="drl",
                    image_id="",
                    started=False,
                    state=c.V1ContainerState(
                        waiting=c.V1ContainerStateWaiting(reason="CrashLoopBackOff", message="back-off 40s")
                    ),
                    last_state=c.V1ContainerState(terminated=c.V1ContainerStateTerminated(exit_code=1, reason="Error")),
                )
            ],
        ),
    )
    state = _pod_state(crash)
    assert state.component == "rollout" and state.annotations[INDEX] == "0" and not state.ready
    assert state.container("rollout") == ContainerState(
        "rollout", False, 3, "waiting", "CrashLoopBackOff", "back-off 40s", None, 1
    )
    pending = c.V1Pod(
        metadata=c.V1ObjectMeta(name="p"),
        status=c.V1PodStatus(
            phase="Pending",
            conditions=[
                c.V1PodCondition(
                    type="PodScheduled",
                    status="False",
                    reason="Unschedulable",
                    message="0/3 nodes are available: 3 Insufficient cpu.",
                )
            ],
        ),
    )
    state = _pod_state(pending)
    assert (state.phase, state.reason, state.containers) == ("Pending", "Unschedulable", ())
    job = c.V1Job(
        status=c.V1JobStatus(
            failed=7,
            conditions=[c.V1JobCondition(type="Failed", status="True", reason="BackoffLimitExceeded", message="limit")],
        )
    )
    api, _ = _wrapper({"read_namespaced_job": job})
    status = api.job_status("ns", "drl-r1-trainer")
    assert status.failed == 7 and status.condition("Failed").reason == "BackoffLimitExceeded"
    assert status.condition("Complete") is None


def test_kube_api_over_a_fake_client_pod_log_yields_lines_across_chunks():
    class Response:
        released = False

        def stream(self, amount, decode_content=True):
            yield from (b"trainer INFO a\ntrainer ", b"INFO b\n", b"tail without newline")

        def release_conn(self):
            Response.released = True

    api, rec = _wrapper({"read_namespaced_pod_log": Response()})
    assert list(api.pod_log("ns", "p", "trainer")) == ["trainer INFO a", "trainer INFO b", "tail without newline"]
    assert rec.calls[-1] == (
        "read_namespaced_pod_log",
        ("p", "ns"),
        {"container": "trainer", "follow": True, "_preload_content": False},
    )
    assert Response.released


@pytest.mark.parametrize(
    "major, minor, git_version, expected",
    [
        ("1", "29", "v1.29.3", (1, 29)),
        ("1", "29+", "v1.29.3-eks-adc7111", (1, 29)),
        ("1", "28+", "v1.28.15-gke.1", (1, 28)),
        ("", "", "v1.30.2-gke.1587003", (1, 30)),
        ("1", "", "1.34.0", (1, 34)),
        (None, None, None, None),
        ("", "", "unknown", None),
    ],
)
def test_kube_version_reads_what_providers_report(major, minor, git_version, expected):
    from orchestrator.backends.kubernetes.api import kube_version

    assert kube_version(major, minor, git_version) == expected


def test_kube_api_server_version_over_a_fake_client():
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import MaxRetryError

    from orchestrator.backends.kubernetes.api import KubeApi

    class VersionApi:
        def __init__(self, answer):
            self.answer = answer

        def get_code(self, **kwargs):
            assert kwargs.get("_request_timeout"), "a server that does not answer does not hold the run up"
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    def api_with(answer) -> KubeApi:
        api = KubeApi.__new__(KubeApi)
        api.client, api.groups = client, {"version": VersionApi(answer)}
        return api

    assert hasattr(client.VersionApi, "get_code")
    assert api_with(
        client.VersionInfo(
            major="1",
            minor="28+",
            git_version="v1.28.9-eks-1",
            build_date="",
            compiler="",
            git_commit="",
            git_tree_state="",
            go_version="",
            platform="",
        )
    ).server_version() == (1, 28)
    emulating = client.VersionInfo(
        major="1",
        minor="33",
        git_version="v1.33.0",
        emulation_major="1",
        emulation_minor="31",
        build_date="",
        compiler="",
        git_commit="",
        git_tree_state="",
        go_version="",
        platform="",
    )
    assert api_with(emulating).server_version() == (1, 31), "the version it emulates is what it offers"
    assert api_with(ApiException(status=403, reason="Forbidden")).server_version() is None
    assert api_with(MaxRetryError(None, "/version")).server_version() is None


def test_kube_api_without_configuration_is_one_clear_error(monkeypatch, tmp_path):
    from orchestrator.backends.kubernetes.api import KubeApi, default_namespace

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UserError, match="no Kubernetes configuration"):
        KubeApi()
    assert default_namespace() == "default"
    (tmp_path / "config").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 'https://k:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: team-b}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    assert default_namespace() == "team-b"
    api = KubeApi()
    assert api.groups["core"].api_client.configuration.host == "https://k:6443"


# -- storage, and pods that cannot be scheduled or created (tests/cluster/test_orchestrator.py: the same on a
# real control plane) ---------------------------------------------------------------------------------------

INSUFFICIENT = (
    "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption "
    "victims found for incoming pod."
)
QUOTA = (
    'Error creating: pods "drl-r1-rollout-1-abcde" is forbidden: exceeded quota: q, requested: requests.cpu=500m, '
    "used: requests.cpu=3500m, limited: requests.cpu=4"
)


def unschedulable(name: str, component: str, message: str = INSUFFICIENT, index: int | None = None) -> PodState:
    return dataclasses.replace(
        pod(name, component, phase="Pending", ready=False, state="waiting", index=index),
        reason="Unschedulable",
        message=message,
        containers=(),
    )


def test_storage_check_with_fake_kube_api_refuses_a_pvc_no_class_binds_before_creating_anything(objects):
    fake = FakeKubeApi(storage_classes=[("slow", False), ("fast", False)])
    with pytest.raises(UserError) as error:
        start(fake, objects)
    message = str(error.value)
    assert "no default StorageClass" in message and "s3 server's 10Gi PVC (StatefulSet drl-r1-s3)" in message
    assert "this cluster has slow, fast" in message
    assert "--s3-storage-class NAME" in message and "--s3-storage emptydir" in message
    assert "nothing was created" in message and fake.created == []
    named = k8s.manifests(ExperimentConfig(workers=2), RUN, namespace=NS, env={}, s3_storage_class="gold")
    with pytest.raises(UserError, match="StorageClass 'gold' of the s3 server's 10Gi PVC .* does not exist"):
        start(FakeKubeApi(storage_classes=[("fast", True)]), named)
    empty = k8s.manifests(ExperimentConfig(workers=2), RUN, namespace=NS, env={}, s3_storage="emptydir")
    fake = FakeKubeApi(storage_classes=[], jobs={"drl-r1-trainer": [COMPLETE]})
    assert start(fake, empty)[0] == 0 and len(fake.created) == len(empty)


def test_storage_check_with_fake_kube_api_goes_on_where_storage_classes_cannot_be_listed(objects):
    fake = FakeKubeApi(
        storage_classes=KubeError(403, "Forbidden", "storageclasses is forbidden"), jobs={"drl-r1-trainer": [COMPLETE]}
    )
    code, _, err = start(fake, objects)
    assert code == 0 and len(fake.created) == len(objects)
    assert "StorageClasses cannot be listed (403)" in err


def test_backend_with_fake_kube_api_reports_unschedulable_pods_at_once_and_gives_up_after_the_timeout(objects):
    stuck = healthy(2)[:4] + [unschedulable(f"drl-r1-rollout-{i}-x{i}", "rollout", index=i) for i in range(2)]
    fake = FakeKubeApi(pods=[stuck])
    code, _, err = start(fake, objects, pending_timeout_s=60)
    assert code == 1
    lines = err.splitlines()
    report = [line for line in lines if "cannot be scheduled" in line]
    assert report[0] == (
        f"drl: 2 pods (drl-r1-rollout-0-x0, drl-r1-rollout-1-x1) cannot be scheduled: {INSUFFICIENT} "
        "(the pods request more than the nodes have free: lower the requests (--profile small, "
        "--resources ROLE.requests.cpu=...; the chart: -f helm/profiles/small.yaml), run fewer "
        "--workers, or add nodes)"
    )
    assert lines.index(report[0]) < 3, "reported on the first look, not after the timeout"
    assert lines[-2].startswith("drl-orchestrate: run r1 failed: it cannot start: 2 pods (drl-r1-rollout-0-x0")
    assert "(for 60 s; --pending-timeout 60)" in lines[-2]
    assert fake.tick == 6


def test_backend_with_fake_kube_api_waits_for_ever_with_pending_timeout_0_and_reports_once(objects):
    stuck = healthy(2)[:5] + [unschedulable("drl-r1-rollout-1-x1", "rollout", index=1)]
    fake = FakeKubeApi(pods=[stuck] * 12 + [healthy()], jobs={"drl-r1-trainer": [ACTIVE] * 13 + [COMPLETE]})
    code, _, err = start(fake, objects, pending_timeout_s=0)
    assert code == 0
    assert len([line for line in err.splitlines() if "cannot be scheduled" in line]) == 1


def test_backend_with_fake_kube_api_reports_a_pvc_that_no_class_binds(objects):
    message = (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes "
        "are available: 3 Preemption is not helpful for scheduling."
    )
    pods = [p for p in healthy() if p.component != "s3"] + [unschedulable("drl-r1-s3-0", "s3", message)]
    fake = FakeKubeApi(pods=[pods], storage_classes=KubeError(403, "Forbidden", "no"))
    code, _, err = start(fake, objects, pending_timeout_s=30)
    assert code == 1
    assert f"drl: pod drl-r1-s3-0 cannot be scheduled: {message} (the S3 server's PVC is not bound" in err
    assert "--s3-storage-class NAME, or --s3-storage emptydir" in err


def test_backend_with_fake_kube_api_reports_pods_the_job_controller_cannot_create(objects):
    """A worker refused by a ResourceQuota does not exist: only its Job's FailedCreate event says why."""
    present = healthy(2)[:5]  # worker 1 was never created
    event = EventState("Job", "drl-r1-rollout", "uid-drl-r1-rollout", "FailedCreate", QUOTA, 4)
    fake = FakeKubeApi(pods=[present], events=[[event]])
    code, _, err = start(fake, objects, pending_timeout_s=40)
    assert code == 1
    assert (
        f"drl: Job drl-r1-rollout cannot create its pods: {QUOTA} (the namespace's ResourceQuota has no room "
        f"for it (kubectl -n {NS} describe resourcequota)" in err
    )
    assert len([line for line in err.splitlines() if line.startswith("drl: Job drl-r1-rollout cannot")]) == 1
    assert "run r1 failed: it cannot start: Job drl-r1-rollout cannot create its pods" in err


@pytest.mark.parametrize(
    "event, pods",
    [
        (EventState("Job", "drl-r1-rollout", "uid-of-an-earlier-run", "FailedCreate", QUOTA), healthy(2)[:5]),
        (EventState("Job", "drl-r1-rollout", "uid-drl-r1-rollout", "FailedCreate", QUOTA), healthy(2)),
        (EventState("StatefulSet", "drl-r1-s3", "", "FailedCreate", QUOTA), healthy(2)),
        (EventState("Job", "drl-other-rollout", "", "FailedCreate", QUOTA), healthy(2)[:5]),
    ],
    ids=["earlier-object-of-that-name", "pods-created-since", "statefulset-has-its-pod", "another-run"],
)
def test_backend_with_fake_kube_api_ignores_failed_creates_that_are_over_or_not_its_own(objects, event, pods):
    fake = FakeKubeApi(
        pods=[pods] * 8 + [healthy()], events=[[event]], jobs={"drl-r1-trainer": [ACTIVE] * 9 + [COMPLETE]}
    )
    code, _, err = start(fake, objects, pending_timeout_s=20)
    assert code == 0 and "cannot create" not in err, err


def test_backend_with_fake_kube_api_without_list_on_events_says_so_once_and_still_sees_unschedulable_pods(objects):
    stuck = healthy(2)[:5] + [unschedulable("drl-r1-rollout-1-x1", "rollout", index=1)]
    fake = FakeKubeApi(pods=[stuck], events=KubeError(403, "Forbidden", 'events is forbidden: cannot list "events"'))
    code, _, err = start(fake, objects, pending_timeout_s=30)
    assert code == 1 and fake.event_requests == 1
    assert err.count("warning: events cannot be read (403 Forbidden") == 1
    assert "pod drl-r1-rollout-1-x1 cannot be scheduled" in err


def test_status_with_fake_kube_api_reports_what_cannot_start_and_exits_1(capsys):
    from orchestrator.backends.kubernetes.status import show_status

    stuck = healthy(2)[:5] + [unschedulable("drl-r1-rollout-1-x1", "rollout", index=1)]
    fake = FakeKubeApi(pods=[stuck])
    for obj in k8s.manifests(ExperimentConfig(workers=2), RUN, namespace=NS, env={}):
        fake.create(obj)
    out = io.StringIO()
    assert show_status(RUN, NS, api=fake, stream=out) == 1
    text = out.getvalue()
    assert f"run r1 cannot start: pod drl-r1-rollout-1-x1 cannot be scheduled: {INSUFFICIENT}" in text
    assert "Unschedulable: 0/3 nodes are available" in text, "the pod's row says it too"
    fake.events = [[EventState("Job", "drl-r1-rollout", "uid-drl-r1-rollout", "FailedCreate", QUOTA)]]
    fake.pods = [healthy(2)[:5]]
    out = io.StringIO()
    assert show_status(RUN, NS, api=fake, stream=out) == 1
    assert f"run r1 cannot start: Job drl-r1-rollout cannot create its pods: {QUOTA}" in out.getvalue()
    fake.pods = [healthy(2)]
    assert show_status(RUN, NS, api=fake, stream=io.StringIO()) == 0
