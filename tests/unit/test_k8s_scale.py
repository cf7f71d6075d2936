"""``drl-orchestrate scale/status --backend kubernetes`` against FakeKubeApi (tests/unit/test_k8s_backend.py),
extended with the Job listing, patching, scaler pods and metrics pages the scaling and status code read."""

from __future__ import annotations

import http.server
import io
import json
import threading
import urllib.parse

import kubernetes_validate
import pytest

from drl.config import ExperimentConfig
from orchestrator.backends.kubernetes import manifests as k8s
from orchestrator.backends.kubernetes.api import ContainerState, JobCondition, JobState, KubeError, PodState
from orchestrator.backends.kubernetes.scale import KubeScale
from orchestrator.backends.kubernetes.status import show_status, snapshot_from_metrics, status_rows
from orchestrator.cli import main
from tests.unit.test_k8s_backend import NS, RUN, FakeKubeApi, pod
from tests.unit.test_k8s_render import KUBE_VERSIONS

COMPLETE = (JobCondition("Complete"),)


def scaler_ok(args: list[str]) -> tuple[bool, list[str]]:
    """What a scaler pod prints for ``args``: progress on stderr, the JSON result last."""
    workers = int(args[args.index("--workers") + 1])
    if args[0] == "retire":
        return True, [
            "drl-scaler: retired rollout-2",
            json.dumps({"phase": "retire", "workers": workers, "retired": ["rollout-2"]}),
        ]
    size = int(args[args.index("--job-size") + 1])
    names = [f"rollout-{i}" for i in range(workers)]
    grows = workers > size
    return True, [
        f"drl-scaler: {workers} rollout workers share the 9,000 steps left",
        json.dumps(
            {
                "phase": "apply",
                "workers": workers,
                "job_size": workers,
                "collecting": names[: min(size, workers)],
                "added": names[size:] if grows else [],
                "returning": [],
                "remaining": 9000,
                "warnings": [],
            }
        ),
    ]


class FakeScaleApi(FakeKubeApi):
    """The fake with a run's Jobs in it; a created scaler Job runs at once as ``behaviour(args)`` says."""

    def __init__(
        self,
        workers: int = 3,
        behaviour=scaler_ok,
        fail_patch: KubeError | None = None,
        trainer_conditions: tuple = (),
        metrics: dict[str, str] | None = None,
        run_pods: list[PodState] | None = None,
        unreadable: tuple[str, ...] = (),
        no_scaler_pod: bool = False,
    ):
        super().__init__()
        self.unreadable = unreadable  # the phases (retire, apply) whose scaler pod's log the API refuses
        self.no_scaler_pod = no_scaler_pod
        for obj in k8s.manifests(ExperimentConfig(workers=workers), RUN, namespace=NS, env={}):
            self.create(obj)
        self.created.clear()
        self.behaviour = behaviour
        self.fail_patch = fail_patch
        self.trainer_conditions = trainer_conditions
        self.patches: list[tuple[str, dict]] = []
        self.calls: list[tuple[str, str]] = []
        self.scalers: dict[str, tuple[bool, list[str]]] = {}
        self.metrics = metrics or {}
        self.run_pods = run_pods or []
        self.metrics_requests: list[tuple[str, int]] = []
        self.phases: dict[str, str] = {}

    def create(self, obj: dict) -> None:
        super().create(obj)
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == "scaler":
            command = obj["spec"]["template"]["spec"]["containers"][0]["command"]
            self.calls.append(("scaler", " ".join(command[3:5])))
            self.scalers[obj["metadata"]["name"]] = self.behaviour(command[3:])
            self.phases[obj["metadata"]["name"]] = command[3]

    def list_jobs(self, namespace: str, selector: str) -> list[dict]:
        assert namespace == NS and selector == f"drl.dev/run={RUN}"
        out = []
        for (kind, _, name), obj in self.objects.items():
            if kind == "Job":
                conditions = self.trainer_conditions if name.endswith("-trainer") else ()
                if name in self.scalers:
                    conditions = ({"type": "Complete" if self.scalers[name][0] else "Failed", "status": "True"},)
                out.append({**obj, "status": {"conditions": list(conditions)}})
        return json.loads(json.dumps(out))

    def patch_job(self, namespace: str, name: str, patch: dict) -> None:
        if self.fail_patch is not None:
            raise self.fail_patch
        self.patches.append((name, patch))
        self.calls.append(("patch", str(patch["spec"]["completions"])))
        self.objects[("Job", namespace, name)]["spec"].update(patch["spec"])

    def job_status(self, namespace: str, name: str) -> JobState | None:
        if name in self.scalers:
            ok = self.scalers[name][0]
            failed = (JobCondition("Failed", "True", "PodFailurePolicy", "Container scaler exited with 2"),)
            return JobState(name, succeeded=int(ok), failed=int(not ok), conditions=COMPLETE if ok else failed)
        return super().job_status(namespace, name)

    def list_pods(self, namespace: str, selector: str) -> list[PodState]:
        assert namespace == NS and selector == f"drl.dev/run={RUN}"
        pods = list(self.run_pods)
        for name, (ok, _) in self.scalers.items() if not self.no_scaler_pod else ():
            labels = {**k8s.labels(RUN, "scaler"), "batch.kubernetes.io/job-name": name}
            code = 0 if ok else 2
            pods.append(
                PodState(
                    f"{name}-x",
                    "Succeeded" if ok else "Failed",
                    labels,
                    {},
                    False,
                    False,
                    "",
                    "",
                    (ContainerState("scaler", False, 0, "terminated", "", "", code),),
                )
            )
        return pods

    def pod_log(self, namespace: str, name: str, container: str, follow: bool = True):
        self.log_requests.append((name, container))
        if self.phases[name.removesuffix("-x")] in self.unreadable:
            raise KubeError(
                502, "Bad Gateway", 'Get "https://10.0.0.7:10250/containerLogs/...": dial tcp: connection refused'
            )
        return iter(self.scalers[name.removesuffix("-x")][1])

    def pod_metrics(self, namespace: str, name: str, port: int, timeout: float = 5.0) -> str:
        self.metrics_requests.append((name, port))
        if name not in self.metrics:
            raise KubeError(503, "Service Unavailable", "no endpoints available")
        return self.metrics[name]


def scale(fake: FakeScaleApi, workers: int, tokens=("ab12c", "cd34e", "ef56a")) -> tuple[int, str]:
    err = io.StringIO()
    tokens = iter(tokens)
    code = KubeScale(fake, RUN, NS, err=err, sleep=fake.sleep, clock=fake.clock, token=lambda: next(tokens)).scale(
        workers
    )
    return code, err.getvalue()


def scaler_jobs(fake: FakeScaleApi) -> list[dict]:
    return [
        o
        for (kind, _, _), o in fake.objects.items()
        if kind == "Job" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "scaler"
    ]


def test_scale_down_with_fake_kube_api_retires_then_patches_then_applies():
    fake = FakeScaleApi(workers=3)
    code, err = scale(fake, 1)
    assert code == 0, err
    assert fake.calls == [("scaler", "retire --workers"), ("patch", "1"), ("scaler", "apply --workers")]
    assert fake.patches == [("drl-r1-rollout", {"spec": {"completions": 1, "parallelism": 1, "backoffLimit": 6}})]
    rollout = fake.objects[("Job", NS, "drl-r1-rollout")]["spec"]
    assert rollout["completions"] == rollout["parallelism"] == 1 and rollout["backoffLimit"] == 6
    commands = [job["spec"]["template"]["spec"]["containers"][0]["command"] for job in scaler_jobs(fake)]
    assert commands[0] == ["python", "-m", "orchestrator.backends.kubernetes.scaler", "retire", "--workers", "1"]
    assert commands[1] == [
        "python",
        "-m",
        "orchestrator.backends.kubernetes.scaler",
        "apply",
        "--workers",
        "1",
        "--job-size",
        "1",
        "--hand-in-timeout",
        "120",
    ]
    assert "scaling run r1 from 3 to 1 rollout workers" in err
    assert "drl: retired rollout-2" in err
    assert "run r1 collects the 9,000 steps left with 1 rollout workers: rollout-0" in err


def test_scale_up_with_fake_kube_api_registers_shares_before_the_job_grows():
    fake = FakeScaleApi(workers=2)
    code, err = scale(fake, 4)
    assert code == 0, err
    assert fake.calls == [("scaler", "apply --workers"), ("patch", "4")]
    command = scaler_jobs(fake)[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[3:] == ["apply", "--workers", "4", "--job-size", "2", "--hand-in-timeout", "120"]
    assert "4 rollout workers: rollout-0, rollout-1, rollout-2, rollout-3" in err


def test_scale_with_fake_kube_api_rescales_the_rollout_jobs_backoff_limit_with_the_workers():
    """2 -> 32 workers: the Job tolerates 6 failures per worker at 32 as it did at 2 (it kept 12 before)."""
    fake = FakeScaleApi(workers=2)
    assert fake.objects[("Job", NS, "drl-r1-rollout")]["spec"]["backoffLimit"] == 12
    code, err = scale(fake, 32)
    assert code == 0, err
    assert fake.patches == [
        ("drl-r1-rollout", {"spec": {"completions": 32, "parallelism": 32, "backoffLimit": 6 * 32}})
    ]
    assert "Job drl-r1-rollout scaled to 32 (completions and parallelism; backoffLimit 192)" in err


def test_scale_with_fake_kube_api_keeps_the_charts_backoff_limit_per_worker():
    """A chart release with backoffLimit 2 made the rollout Job with 2 x workers: scaling keeps 2 per worker,
    read back from the Job as the cluster holds it; a Job without one gets the default."""
    from orchestrator.backends.kubernetes.scale import backoff_per_worker

    fake = FakeScaleApi(workers=3)
    fake.objects[("Job", NS, "drl-r1-rollout")]["spec"]["backoffLimit"] = 2 * 3
    code, err = scale(fake, 5)
    assert code == 0, err
    assert fake.patches[-1][1]["spec"]["backoffLimit"] == 2 * 5
    assert backoff_per_worker({"completions": 4, "backoffLimit": 0}) == 0
    assert backoff_per_worker({"completions": 4}) == 6


def test_scale_up_with_fake_kube_api_and_nothing_left_leaves_the_job_alone():
    def nothing_left(args):
        return True, [
            json.dumps(
                {
                    "phase": "apply",
                    "workers": 5,
                    "job_size": 2,
                    "collecting": [],
                    "added": [],
                    "remaining": 0,
                    "warnings": [],
                }
            )
        ]

    fake = FakeScaleApi(workers=2, behaviour=nothing_left)
    code, err = scale(fake, 5)
    assert code == 0 and fake.patches == []
    assert "has nothing left to produce; the rollout Job stays at 2 workers" in err


def test_scale_up_with_fake_kube_api_and_an_unreadable_result_fails_and_changes_no_job():
    """The scaler completed, but its pod's log cannot be read: without its result the Job's new size is unknown,
    so scaling fails with exit 1 and says what is left and that the same scale may be run again (before: "has
    nothing left to produce; the rollout Job stays at 2 workers", exit 0; tests/cluster/test_orchestrator.py
    shows the same on a real control plane)."""
    fake = FakeScaleApi(workers=2, unreadable=("apply",))
    code, err = scale(fake, 4)
    assert code == 1 and fake.patches == []
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "drl-orchestrate: scaling run r1 failed: the scaler Job drl-r1-scaler-ab12c (apply) "
        "completed, but its result cannot be read: the log of pod drl-r1-scaler-ab12c-x cannot be "
        "read (502 Bad Gateway: "
    )
    assert (
        "; the rollout Job is unchanged at 2 workers; the new workers' shares may already be registered in the "
        "run's memory server; run the same scale again (drl-orchestrate scale r1 --workers 4 --namespace "
        "team-a): every step is safe to repeat; see kubectl -n team-a logs job/drl-r1-scaler-ab12c"
    ) in last
    assert "nothing left to produce" not in err
    fake.unreadable = ()
    assert scale(fake, 4, tokens=("0a0a0",))[0] == 0, "running it again finishes"
    assert fake.patches[-1][1]["spec"]["completions"] == 4


@pytest.mark.parametrize(
    "lines, why",
    [
        (["drl-scaler: 4 rollout workers share the 9,000 steps left"], "its log holds no result line"),
        (["{not json"], "its result line is not JSON"),
    ],
)
def test_scale_with_fake_kube_api_and_no_result_in_the_log_fails(lines, why):
    fake = FakeScaleApi(workers=2, behaviour=lambda args: (True, lines))
    code, err = scale(fake, 4)
    assert code == 1 and fake.patches == []
    assert f"completed, but its result cannot be read: {why}" in err


def test_scale_with_fake_kube_api_without_the_scaler_pod_fails():
    fake = FakeScaleApi(workers=2, no_scaler_pod=True)
    code, err = scale(fake, 4)
    assert code == 1 and "its result cannot be read: its pod is gone" in err


def test_scale_down_with_fake_kube_api_needs_no_result_of_retire_but_one_of_apply():
    fake = FakeScaleApi(workers=3, unreadable=("retire",))
    assert scale(fake, 1)[0] == 0, "retire's completion is all scaling needs of it"
    fake = FakeScaleApi(workers=3, unreadable=("apply",))
    code, err = scale(fake, 1)
    assert code == 1 and fake.patches[-1][1]["spec"]["completions"] == 1
    assert "the rollout Job is at 1 workers, but the shares of the steps left may not be spread over them yet" in err


def test_scale_with_fake_kube_api_gives_up_on_a_scaler_pod_that_cannot_be_scheduled():
    class Stuck(FakeScaleApi):
        def job_status(self, namespace, name):
            return JobState(name, active=1) if name in self.scalers else super().job_status(namespace, name)

        def list_pods(self, namespace, selector):
            labels = {**k8s.labels(RUN, "scaler"), "batch.kubernetes.io/job-name": next(iter(self.scalers))}
            return [
                PodState(
                    "drl-r1-scaler-ab12c-x",
                    "Pending",
                    labels,
                    {},
                    False,
                    False,
                    "Unschedulable",
                    "0/3 nodes are available: 3 Insufficient memory.",
                )
            ]

    fake = Stuck(workers=2)
    code, err = scale(fake, 4)
    assert code == 1 and fake.patches == []
    assert (
        "the scaler pod of Job drl-r1-scaler-ab12c cannot start: it cannot be scheduled: 0/3 nodes are available: "
        "3 Insufficient memory.; the rollout Job is unchanged at 2 workers"
    ) in err


def test_scaler_job_with_fake_kube_api_runs_like_the_trainer_and_is_valid():
    fake = FakeScaleApi(workers=3)
    assert scale(fake, 1)[0] == 0
    trainer = fake.objects[("Job", NS, "drl-r1-trainer")]
    trainer_pod = trainer["spec"]["template"]["spec"]
    trainer_container = trainer_pod["containers"][0]
    for job in scaler_jobs(fake):
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(job, version, strict=True)
        assert job["metadata"]["name"] in ("drl-r1-scaler-ab12c", "drl-r1-scaler-cd34e")
        assert job["metadata"]["labels"] == k8s.labels(RUN, "scaler")
        assert job["spec"]["template"]["metadata"]["labels"] == k8s.labels(RUN, "scaler")
        spec = job["spec"]["template"]["spec"]
        container = spec["containers"][0]
        assert container["image"] == trainer_container["image"]
        assert container["env"] == trainer_container["env"]
        env = {e["name"]: e for e in container["env"]}
        assert env["DRL_MEMORY_PASSWORD"]["valueFrom"] == {
            "secretKeyRef": {"name": "drl-r1-credentials", "key": "redis-password"}
        }
        assert env["DRL_CONFIG"]["valueFrom"]["configMapKeyRef"]["name"] == "drl-r1-config"
        assert env["DRL_MEMORY_URL"]["value"] == "redis://drl-r1-redis:6379/0"
        assert container["securityContext"] == trainer_container["securityContext"]
        assert spec["securityContext"] == trainer_pod["securityContext"]
        assert spec["serviceAccountName"] == "drl-r1" and spec["automountServiceAccountToken"] is False
        assert spec["restartPolicy"] == "Never"
        assert not {"startupProbe", "livenessProbe", "readinessProbe", "ports"} & set(container)
        assert container["resources"] == k8s.RESOURCES["scaler"], "its own, small: a ResourceQuota admits it"
        assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]
        assert job["spec"]["ttlSecondsAfterFinished"] > 0 and job["spec"]["activeDeadlineSeconds"] >= 120


def test_scaler_job_from_a_job_as_the_cluster_returns_it_leaves_out_controller_fields():
    trainer = json.loads(
        json.dumps(
            next(
                o
                for o in k8s.manifests(ExperimentConfig(), RUN, namespace=NS, env={})
                if o["metadata"]["name"] == "drl-r1-trainer"
            )
        )
    )
    trainer["metadata"].update({"uid": "1234", "resourceVersion": "99", "creationTimestamp": "2025-01-01T00:00:00Z"})
    trainer["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "1234"}}
    trainer["spec"]["template"]["metadata"]["labels"].update(
        {
            "batch.kubernetes.io/controller-uid": "1234",
            "batch.kubernetes.io/job-name": "drl-r1-trainer",
            "controller-uid": "1234",
            "job-name": "drl-r1-trainer",
        }
    )
    trainer["status"] = {"active": 1}
    job = k8s.scaler_job(trainer, "drl-r1-scaler-x", ["retire", "--workers", "1"], 300)
    kubernetes_validate.validate(job, KUBE_VERSIONS[-1], strict=True)
    assert job["spec"]["template"]["metadata"]["labels"] == k8s.labels(RUN, "scaler")
    assert "selector" not in job["spec"] and "status" not in job and "uid" not in job["metadata"]


def test_scaler_job_of_a_group_of_learners_is_no_rank_of_the_group():
    """The trainer Job of ``--learners 2`` is Indexed: the scaler Job made from it is a plain one-pod Job, without
    the rank (its completion-index annotation would not exist), the rendezvous or the group's DNS subdomain."""
    cfg = ExperimentConfig(learners=2, memory_shards=2)
    trainer = next(
        o
        for o in k8s.manifests(cfg, RUN, namespace=NS, env={})
        if o["kind"] == "Job" and o["metadata"]["name"] == "drl-r1-trainer"
    )
    job = k8s.scaler_job(trainer, "drl-r1-scaler-x", ["retire", "--workers", "1"], 300)
    kubernetes_validate.validate(job, KUBE_VERSIONS[-1], strict=True)
    assert "completionMode" not in job["spec"] and "subdomain" not in job["spec"]["template"]["spec"]
    names = [e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]]
    trainer_names = [e["name"] for e in trainer["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names == [n for n in trainer_names if n not in ("DRL_LEARNER_RANK", "MASTER_ADDR", "MASTER_PORT")]
    assert len(names) == len(trainer_names) - 3


def test_scale_with_fake_kube_api_reports_a_failed_scaler_job_with_exit_1():
    def refuses(args):
        return False, ["drl-scaler: error: run scale-k8s is stopping (stopped); nothing to scale"]

    fake = FakeScaleApi(workers=3, behaviour=refuses)
    code, err = scale(fake, 1)
    assert code == 1
    assert fake.patches == [], "nothing is patched after a failed retire"
    last = err.strip().splitlines()[-1]
    assert last == (
        "drl-orchestrate: scaling run r1 failed: the scaler Job drl-r1-scaler-ab12c (retire) failed: "
        "run scale-k8s is stopping (stopped); nothing to scale; see kubectl -n team-a logs "
        "job/drl-r1-scaler-ab12c"
    )


def test_scale_with_fake_kube_api_reports_a_forbidden_patch_with_exit_1():
    fake = FakeScaleApi(workers=3, fail_patch=KubeError(403, "Forbidden", "jobs.batch is forbidden"))
    code, err = scale(fake, 2)
    assert code == 1
    assert (
        "Job drl-r1-rollout cannot be scaled to 2: 403 Forbidden: jobs.batch is forbidden (the orchestrator "
        "needs 'patch' on jobs); run the same scale again to finish it"
    ) in err


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["scale", RUN, "--workers", "0", "--backend", "kubernetes", "--namespace", NS],
            "--workers must be a positive integer, got 0",
        ),
        (["scale", RUN, "--workers", "two", "--backend", "kubernetes"], "invalid int value: 'two'"),
        (["scale", "Bad_Run", "--workers", "2", "--backend", "kubernetes"], "RUN on Kubernetes must be lowercase"),
        (["scale", RUN, "--workers", "2", "--namespace", "No"], "--namespace must be a DNS label"),
        (["scale", RUN, "--backend", "kubernetes"], "the following arguments are required: --workers"),
        (
            ["scale", "other", "--workers", "2", "--backend", "kubernetes", "--namespace", NS],
            "no run 'other' in namespace team-a",
        ),
        (["status", "--namespace", NS], "status of a Kubernetes run needs the run's name"),
    ],
)
def test_scale_bad_input_with_fake_kube_api_is_one_line_and_exit_2(argv, expected, monkeypatch, capsys):
    fake = FakeScaleApi()

    def list_jobs(namespace, selector):
        return FakeScaleApi.list_jobs(fake, namespace, selector) if selector.endswith(RUN) else []

    fake.list_jobs = list_jobs
    monkeypatch.setattr("orchestrator.backends.kubernetes.api.KubeApi", lambda: fake)
    code, out, err = cli(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("drl-orchestrate: error: "), err
    assert expected in lines[0]
    assert not scaler_jobs(fake) and not fake.patches


def test_scale_of_an_ended_or_busy_run_with_fake_kube_api_is_exit_2(monkeypatch, capsys):
    fake = FakeScaleApi(trainer_conditions=({"type": "Complete", "status": "True"},))
    monkeypatch.setattr("orchestrator.backends.kubernetes.api.KubeApi", lambda: fake)
    code, _, err = cli(["scale", RUN, "--workers", "2", "--backend", "kubernetes", "--namespace", NS], capsys)
    assert code == 2 and "run r1 has ended (Job drl-r1-trainer complete); nothing to scale" in err
    fake.trainer_conditions = ()
    busy = k8s.scaler_job(fake.objects[("Job", NS, "drl-r1-trainer")], "drl-r1-scaler-old", ["apply"], 300)
    FakeKubeApi.create(fake, busy)
    code, _, err = cli(["scale", RUN, "--workers", "2", "--backend", "kubernetes", "--namespace", NS], capsys)
    assert code == 2 and "run r1 is being scaled already (Job drl-r1-scaler-old)" in err


def test_scale_through_the_cli_with_fake_kube_api(monkeypatch, capsys):
    fake = FakeScaleApi(workers=3)
    monkeypatch.setattr("orchestrator.backends.kubernetes.api.KubeApi", lambda: fake)
    monkeypatch.setattr("orchestrator.backends.kubernetes.scale.KubeScale.poll_s", 0.0)
    code, _, err = cli(["scale", RUN, "--workers", "2", "--namespace", NS, "--timeout", "30"], capsys)
    assert code == 0, err
    assert fake.calls == [("scaler", "retire --workers"), ("patch", "2"), ("scaler", "apply --workers")]
    apply = scaler_jobs(fake)[1]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert apply[-2:] == ["--hand-in-timeout", "30"]


# -- status -------------------------------------------------------------------------------------------------


def metrics_page(role: str, name: str, state: str = "", **fields: float) -> str:
    """A /metrics page as services.metrics writes it, from a real Telemetry object."""
    from prometheus_client import generate_latest

    from services.metrics import registry
    from services.telemetry import Telemetry

    telemetry = Telemetry()
    telemetry.role, telemetry.name, telemetry.run = role, name, RUN
    telemetry.update({"role": role, **({"state": state} if state else {}), **fields})
    return generate_latest(registry(telemetry)).decode()


def test_snapshot_from_metrics_reads_back_the_status_fields():
    snap = snapshot_from_metrics(
        metrics_page(
            "trainer", "trainer", "running", env_steps=4000, policy_version=7, transitions_per_s=512.5, updates=99
        )
    )
    assert snap["run"] == RUN and snap["role"] == "trainer" and snap["id"] == "trainer"
    assert snap["state"] == "running"
    assert (snap["env_steps"], snap["policy_version"], snap["transitions_per_s"], snap["updates"]) == (
        4000,
        7,
        512.5,
        99,
    )


def test_status_with_fake_kube_api_reads_each_pods_metrics():
    pods = [
        pod("drl-r1-trainer-abc", "trainer", restarts=1, last_exit_code=137),
        pod("drl-r1-rollout-0-x0", "rollout", index=0),
        pod(
            "drl-r1-rollout-1-x1",
            "rollout",
            ready=False,
            state="waiting",
            reason="CrashLoopBackOff",
            restarts=4,
            last_exit_code=1,
            index=1,
        ),
        pod("drl-r1-evaluator-def", "evaluator", phase="Succeeded", ready=False, state="terminated", exit_code=0),
        pod("drl-r1-redis-0", "redis"),
    ]
    pages = {
        "drl-r1-trainer-abc": metrics_page(
            "trainer", "trainer", "running", env_steps=4000, policy_version=7, transitions_per_s=512.5
        ),
        "drl-r1-rollout-0-x0": metrics_page("rollout", "rollout-0", produced=640, policy_version=6, uptime_s=10.0),
    }
    fake = FakeScaleApi(metrics=pages, run_pods=pods)
    rows = {r.name: r for r in status_rows(fake, RUN, NS)}
    trainer, worker = rows["drl-r1-trainer-abc"], rows["drl-r1-rollout-0-x0"]
    assert (trainer.role, trainer.state, trainer.policy_version, trainer.env_steps, trainer.rate) == (
        "trainer",
        "running",
        7,
        4000,
        512.5,
    )
    assert trainer.restarts == 1 and trainer.last_error == "last exit code 137"
    assert (worker.role, worker.state, worker.env_steps, worker.policy_version) == ("rollout", "running", 640, 6)
    assert worker.rate == pytest.approx(64.0, rel=0.2)
    crashing = rows["drl-r1-rollout-1-x1"]
    assert (crashing.state, crashing.restarts, crashing.env_steps) == ("CrashLoopBackOff", 4, None)
    assert crashing.last_error == "CrashLoopBackOff: exit code 1"
    assert rows["drl-r1-evaluator-def"].state == "exited (0)"
    assert rows["drl-r1-redis-0"].role == "redis" and rows["drl-r1-redis-0"].state == "running"
    assert ("drl-r1-evaluator-def", 9090) not in fake.metrics_requests, "only running pods are asked"
    assert ("drl-r1-redis-0", 9090) not in fake.metrics_requests
    assert ("drl-r1-rollout-0-x0", 9090) in fake.metrics_requests
    assert list(rows)[-1] == "drl-r1-redis-0", "the run's services first, then its data services"


def test_status_through_the_cli_with_fake_kube_api(monkeypatch, capsys):
    pods = [pod("drl-r1-trainer-abc", "trainer"), pod("drl-r1-rollout-0-x0", "rollout", index=0)]
    pages = {"drl-r1-trainer-abc": metrics_page("trainer", "trainer", "running", env_steps=1234, policy_version=3)}
    fake = FakeScaleApi(metrics=pages, run_pods=pods)
    monkeypatch.setattr("orchestrator.backends.kubernetes.api.KubeApi", lambda: fake)
    code, out, err = cli(["status", RUN, "--backend", "kubernetes", "--namespace", NS], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == "run r1: Kubernetes namespace team-a, 2 pods"
    assert lines[1].split() == [
        "NAME",
        "ROLE",
        "STATE",
        "POLICY",
        "ENV",
        "STEPS",
        "RATE/S",
        "RESTARTS",
        "LAST",
        "ERROR",
    ]
    assert lines[2].split()[:5] == ["drl-r1-rollout-0-x0", "rollout", "running", "-", "-"]
    assert lines[3].split()[:5] == ["drl-r1-trainer-abc", "trainer", "running", "3", "1,234"]


def test_status_of_a_run_without_pods_with_fake_kube_api_is_exit_2():
    with pytest.raises(Exception, match="no pods of run 'r1' in namespace team-a"):
        show_status(RUN, NS, api=FakeScaleApi(), stream=io.StringIO())


# -- the metrics page through the real client (kubernetes 36), served over real HTTP -------------------------


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    """The API server's pod proxy as the client sees it: ``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH``."""

    pages: dict[str, tuple[int, str, bytes]] = {}
    paths: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = urllib.parse.unquote(self.path)
        type(self).paths.append(path)
        status, content_type, body = self.pages.get(
            path, (404, "application/json", b'{"kind": "Status", "message": "pods not found"}')
        )
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def proxy_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
    _ProxyHandler.pages, _ProxyHandler.paths = {}, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _ProxyHandler
    server.shutdown()
    server.server_close()


def real_kube_api(server):
    """A ``KubeApi`` whose official client (the installed kubernetes package) talks HTTP to ``server``."""
    from kubernetes import client

    from orchestrator.backends.kubernetes.api import KubeApi

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    api = KubeApi.__new__(KubeApi)
    api.client = client
    api.groups = {"core": client.CoreV1Api(client.ApiClient(configuration))}
    return api


PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def test_the_installed_kubernetes_client_returns_the_repr_of_a_text_body(proxy_server):
    """Why ``KubeApi.pod_metrics`` reads the body itself: asked the default way, the client (36.x) gives
    ``str(bytes)`` for a body that is not JSON."""
    import kubernetes

    server, handler = proxy_server
    page = metrics_page("trainer", "trainer", "running", env_steps=4000, policy_version=7)
    handler.pages["/api/v1/namespaces/team-a/pods/drl-r1-trainer-abc:9090/proxy/metrics"] = (
        200,
        PROMETHEUS_TEXT,
        page.encode(),
    )
    core = real_kube_api(server).groups["core"]
    raw = core.connect_get_namespaced_pod_proxy_with_path(
        name="drl-r1-trainer-abc:9090", namespace="team-a", path="metrics"
    )
    assert kubernetes.__version__.split(".")[0] == "36"
    assert raw.startswith("b'") and raw != page


def test_pod_metrics_with_the_real_client_decodes_the_page_and_status_with_fake_kube_api_shows_its_counters(
    proxy_server,
):
    server, handler = proxy_server
    page = (
        metrics_page("trainer", "trainer", "running", env_steps=4000, policy_version=7, transitions_per_s=512.5)
        + "# é\n"
    )
    base = "/api/v1/namespaces/team-a/pods"
    handler.pages[f"{base}/drl-r1-trainer-abc:9090/proxy/metrics"] = (200, PROMETHEUS_TEXT, page.encode())
    handler.pages[f"{base}/drl-r1-rollout-0-x0:9090/proxy/metrics"] = (
        503,
        "application/json",
        b'{"kind": "Status", "message": "error trying to reach service: dial tcp"}',
    )
    api = real_kube_api(server)
    assert api.pod_metrics(NS, "drl-r1-trainer-abc", 9090) == page
    assert handler.paths[-1] == f"{base}/drl-r1-trainer-abc:9090/proxy/metrics"
    with pytest.raises(KubeError) as error:
        api.pod_metrics(NS, "drl-r1-rollout-0-x0", 9090)
    assert error.value.status == 503 and "dial tcp" in error.value.message

    class Pods(FakeScaleApi):
        def pod_metrics(self, namespace, name, port, timeout=5.0):
            return api.pod_metrics(namespace, name, port, timeout)

    fake = Pods(run_pods=[pod("drl-r1-trainer-abc", "trainer"), pod("drl-r1-rollout-0-x0", "rollout", index=0)])
    rows = {r.name: r for r in status_rows(fake, RUN, NS)}
    trainer = rows["drl-r1-trainer-abc"]
    assert (trainer.policy_version, trainer.env_steps, trainer.rate) == (7, 4000, 512.5)
    assert rows["drl-r1-rollout-0-x0"].env_steps is None and rows["drl-r1-rollout-0-x0"].last_error == ""


def test_decode_body_follows_the_charset():
    from orchestrator.backends.kubernetes.api import decode_body

    assert decode_body("é".encode("latin-1"), "text/plain; charset=ISO-8859-1") == "é"
    assert decode_body("é".encode(), "text/plain") == "é"
    assert decode_body(b"\xff ok", "text/plain; charset=no-such-codec") == "\ufffd ok"
    assert decode_body("already text") == "already text"


def test_status_with_fake_kube_api_reports_a_page_that_does_not_parse():
    pages = {"drl-r1-trainer-abc": "b'# HELP drl_info The service.\\n# TYPE drl_info gauge\\n'"}
    fake = FakeScaleApi(metrics=pages, run_pods=[pod("drl-r1-trainer-abc", "trainer")])
    [row] = status_rows(fake, RUN, NS)
    assert row.state == "running" and row.env_steps is None
    assert row.last_error.startswith("metrics page unreadable")


def test_status_with_fake_kube_api_says_why_no_page_answered():
    """Every running pod's page kept out (the NetworkPolicy admits no API server by default): the table shows
    pod states and one line says where to open the metrics port; one answer is enough to say nothing."""
    pods = [pod("drl-r1-trainer-abc", "trainer"), pod("drl-r1-rollout-0-x0", "rollout", index=0)]
    out = io.StringIO()
    assert show_status(RUN, NS, api=FakeScaleApi(run_pods=pods), stream=out) == 0
    assert "networkPolicy.metricsFrom and apiServerCIDRs" in out.getvalue()
    pages = {"drl-r1-trainer-abc": metrics_page("trainer", "trainer", "running", env_steps=10)}
    out = io.StringIO()
    assert show_status(RUN, NS, api=FakeScaleApi(metrics=pages, run_pods=pods), stream=out) == 0
    assert "apiServerCIDRs" not in out.getvalue()
