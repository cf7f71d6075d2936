"""``drl-orchestrate --backend kubernetes`` against the real control plane (tests/cluster/conftest.py), with only
the token of the orchestrator's own ServiceAccount: the chart's ``rbac.create`` ServiceAccount, Role and
RoleBinding, rendered by the real Helm from helm/templates/orchestrator/rbac.yaml, in namespaces labelled
PodSecurity ``restricted``.

What the fakes of tests/unit/test_k8s_backend.py and test_k8s_scale.py stand for is checked here on the real API
server, controllers and scheduler: a run is created, followed until its pods are ready, read by ``status``,
scaled 2 -> 4 through a real scaler Job (kwok completes it; the test serves its log) and deleted without a trace;
a scaler result that cannot be read fails ``scale``; pods that cannot be scheduled (too many workers: the
scheduler's "Insufficient cpu"; a PVC that no class binds) or created (a ResourceQuota: the Job controller's
FailedCreate "exceeded quota") are reported within a minute and end the run with exit 1; a cluster without a
default StorageClass is refused before anything is created; and every manifest ``render`` writes passes admission
(a server-side dry run) in a restricted namespace. Short ``--pending-timeout`` values keep the tier fast.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest
import yaml

from tests.cluster.conftest import ORCHESTRATE, RESTRICTED, ROOT

IMAGE = "drl:cluster-test"  # never pulled: kwok runs no container
ACCOUNT = "drl-orchestrator"  # the chart's rbac.create ServiceAccount, Role and RoleBinding (release "drl")
RUN_KINDS = (
    "jobs,statefulsets,services,networkpolicies,roles,rolebindings,serviceaccounts,secrets,configmaps,pods,"
    "persistentvolumeclaims"
)
WARN_RESTRICTED = {"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "latest"}


def run_args(namespace: str, run: str, *extra: str) -> list[str]:
    return [
        "--backend",
        "kubernetes",
        "--namespace",
        namespace,
        "--run-name",
        run,
        "--preset",
        "sac",
        "--steps",
        "3000",
        "--image",
        IMAGE,
        *extra,
    ]


def with_orchestrator_role(cluster, namespace: str):
    """Applies the chart's orchestrator ServiceAccount, Role and RoleBinding (``helm template --set
    rbac.create=true --show-only templates/orchestrator/rbac.yaml``) and returns a kubeconfig with that
    account's token."""
    rendered = cluster.helm(
        "template",
        "drl",
        str(ROOT / "helm"),
        "--namespace",
        namespace,
        "--set",
        "rbac.create=true",
        "--set",
        "image.repository=drl",
        "--show-only",
        "templates/orchestrator/rbac.yaml",
    ).stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(rendered) if d)
    assert kinds == ["Role", "RoleBinding", "ServiceAccount"], kinds
    cluster.apply(rendered, namespace=namespace)
    kubeconfig = cluster.kubeconfig_for(ACCOUNT, namespace)
    can = cluster.kubectl("auth", "can-i", "list", "nodes", kubeconfig=kubeconfig, check=False)
    assert can.stdout.strip() == "no", "the token must carry the orchestrator's Role and nothing more"
    return kubeconfig


@pytest.fixture
def restricted(cluster, make_namespace):
    """(namespace, kubeconfig of the orchestrator's account in it): PodSecurity restricted, the chart's Role."""
    namespace = make_namespace(labels=RESTRICTED)
    return namespace, with_orchestrator_role(cluster, namespace)


class Attached:
    """``drl-orchestrate`` running in the cluster's network namespace, its stderr read line by line. It starts
    with SIGINT ignored, as a background job of a non-interactive shell does (a CI job's, say): Ctrl-C
    (``interrupt``) must end it all the same. A shell's ``trap`` ignores it rather than a ``preexec_fn``, which
    would have ``Popen`` fork this process (gRPC's fork handlers then abort the child now and then, see
    ``drl.process.spawn``)."""

    def __init__(self, cluster, args: list[str], kubeconfig):
        self.lines: list[str] = []
        self.out: list[str] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            ["sh", "-c", 'trap "" INT; exec "$@"', "sh", "ip", "netns", "exec", cluster.netns, str(ORCHESTRATE), *args],
            env=cluster.env(kubeconfig=kubeconfig),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.readers = [
            threading.Thread(target=self._read, args=(pipe, into), daemon=True)
            for pipe, into in ((self.proc.stderr, self.lines), (self.proc.stdout, self.out))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(pipe, into: list[str]) -> None:
        for line in pipe:
            into.append(line.rstrip("\n"))

    @property
    def stdout(self) -> str:
        return "\n".join(self.out)

    def _join(self) -> None:
        for reader in self.readers:
            reader.join(5)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, needle: str, timeout: float = 60) -> float:
        """Seconds from the start until a stderr line holds ``needle`` (AssertionError with the output if the
        process ends or ``timeout`` passes first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in line for line in self.lines):
                return time.monotonic() - self.started
            if self.proc.poll() is not None:
                self._join()
                if any(needle in line for line in self.lines):
                    return time.monotonic() - self.started
                raise AssertionError(f"drl-orchestrate exited {self.proc.returncode} before {needle!r}:\n{self.text}")
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} within {timeout:g}s:\n{self.text}")

    def wait(self, timeout: float = 60) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"drl-orchestrate did not end within {timeout:g}s:\n{self.text}") from None
        self._join()
        return self.proc.returncode

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.wait(30)


def run_objects(cluster, namespace: str, run: str) -> list[str]:
    out = cluster.kubectl("-n", namespace, "get", RUN_KINDS, "-l", f"drl.dev/run={run}", "-o", "name").stdout
    return sorted(out.split())


def job(cluster, namespace: str, name: str) -> dict:
    return cluster.kubectl_json("-n", namespace, "get", "job", name)


def running(cluster, namespace: str, selector: str) -> list[dict]:
    return [
        p
        for p in cluster.pods(namespace, selector)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


SCALER_RESULT = {
    "phase": "apply",
    "workers": 4,
    "job_size": 4,
    "collecting": ["rollout-0", "rollout-1"],
    "added": ["rollout-2", "rollout-3"],
    "returning": [],
    "remaining": 2000,
    "warnings": [],
}


def test_run_status_scale_and_delete_with_the_orchestrators_own_role_in_a_restricted_namespace(cluster, restricted):
    namespace, kubeconfig = restricted
    cluster.serve_logs(namespace, "drl-trainer: hello from the trainer pod", containers=["trainer"])

    # run, attached: every pod is admitted (restricted) and ready; the trainer's log is printed; Ctrl-C leaves it
    run = Attached(
        cluster,
        run_args(namespace, "r1", "--workers", "2", "--profile", "small", "--s3-storage", "emptydir"),
        kubeconfig,
    )
    run.wait_for_line("drl: all 6 pods of run r1 are ready", timeout=90)
    cluster.wait_for("the trainer's log printed", lambda: "hello from the trainer pod" in run.stdout, timeout=30)
    assert run.interrupt() == 130, run.text
    assert "drl: created 15 objects of run r1" in run.text
    assert "drl: interrupted; run r1 goes on in the cluster" in run.text
    assert "hello from the trainer pod" in run.stdout
    assert "cannot be scheduled" not in run.text and "cannot create" not in run.text
    pods = cluster.pods(namespace, "drl.dev/run=r1")
    assert len(pods) == 6 and all(
        p["spec"]["containers"][0]["image"] in (IMAGE, "valkey/valkey:8.1-alpine", "chrislusf/seaweedfs:4.48")
        for p in pods
    )
    trainer = cluster.pods(namespace, "app.kubernetes.io/component=trainer")[0]
    assert trainer["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}

    # status: one row per pod, nothing that cannot start
    status = cluster.orchestrate("status", "r1", "--namespace", namespace, kubeconfig=kubeconfig, check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"run r1: Kubernetes namespace {namespace}, 6 pods" in status.stdout
    for pod in pods:
        assert pod["metadata"]["name"] in status.stdout
    assert "cannot start" not in status.stdout

    # scale 2 -> 4: a real scaler Job (kwok completes it), its result read from its pod's log, the Job patched
    result = "drl-scaler: 4 rollout workers share the 2,000 steps left\n" + json.dumps(SCALER_RESULT)
    cluster.serve_logs(namespace, result, containers=["scaler"])
    scale = cluster.orchestrate(
        "scale", "r1", "--workers", "4", "--namespace", namespace, kubeconfig=kubeconfig, check=False, timeout=120
    )
    assert scale.returncode == 0, scale.stderr
    assert "drl: Job drl-r1-rollout scaled to 4 (completions and parallelism; backoffLimit 24)" in scale.stderr
    assert (
        "collects the 2,000 steps left with 4 rollout workers: rollout-0, rollout-1, rollout-2, rollout-3"
        in scale.stderr
    )
    spec = job(cluster, namespace, "drl-r1-rollout")["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (4, 4, 24)
    scalers = cluster.kubectl_json("-n", namespace, "get", "jobs", "-l", "app.kubernetes.io/component=scaler")
    [scaler] = scalers["items"]
    assert scaler["spec"]["template"]["spec"]["containers"][0]["command"][3:7] == [
        "apply",
        "--workers",
        "4",
        "--job-size",
    ]
    indexes = cluster.wait_for(
        "4 rollout pods running",
        lambda: (
            sorted(
                int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
                for p in running(cluster, namespace, "app.kubernetes.io/component=rollout")
            )
            == [0, 1, 2, 3]
        ),
        timeout=30,
    )
    assert indexes

    # scale 4 -> 5 when the scaler's log cannot be read: exit 1, the Job unchanged, and what to do
    cluster.stop_logs(namespace)
    scale = cluster.orchestrate(
        "scale", "r1", "--workers", "5", "--namespace", namespace, kubeconfig=kubeconfig, check=False, timeout=120
    )
    assert scale.returncode == 1, scale.stderr
    last = scale.stderr.strip().splitlines()[-1]
    assert last.startswith("drl-orchestrate: scaling run r1 failed: the scaler Job drl-r1-scaler-"), last
    assert "(apply) completed, but its result cannot be read: the log of pod drl-r1-scaler-" in last
    assert "the rollout Job is unchanged at 4 workers" in last
    assert "run the same scale again (drl-orchestrate scale r1 --workers 5" in last
    assert "nothing left to produce" not in scale.stderr
    spec = job(cluster, namespace, "drl-r1-rollout")["spec"]
    assert (spec["completions"], spec["parallelism"]) == (4, 4)

    # delete: nothing of the run is left (pods go with their Jobs and StatefulSets), the orchestrator's own
    # account stays
    deleted = cluster.orchestrate("delete", "r1", "--namespace", namespace, kubeconfig=kubeconfig, check=False)
    assert deleted.returncode == 0, deleted.stderr
    assert f"drl: deleted run r1 in namespace {namespace}: " in deleted.stderr
    cluster.wait_for("nothing of run r1 left", lambda: run_objects(cluster, namespace, "r1") == [], timeout=30)
    assert cluster.kubectl("-n", namespace, "get", "role,rolebinding,serviceaccount", ACCOUNT, "-o", "name").stdout


def test_too_many_workers_are_reported_with_the_schedulers_reason_within_a_minute(cluster, restricted):
    """24 workers at the default 500m each (16 CPUs in all) on 3 nodes of 4 CPUs: the scheduler's "Insufficient
    cpu" is reported at once; after --pending-timeout the run gives up with exit 1, and status says the same."""
    namespace, kubeconfig = restricted
    run = Attached(
        cluster,
        run_args(namespace, "big", "--workers", "24", "--s3-storage", "emptydir", "--pending-timeout", "5"),
        kubeconfig,
    )
    seconds = run.wait_for_line("cannot be scheduled: 0/3 nodes are available: ", timeout=60)
    assert seconds < 60
    assert run.wait(60) == 1, run.text
    report = next(line for line in run.lines if "cannot be scheduled" in line)
    assert "Insufficient cpu" in report and report.startswith("drl: ")
    assert "lower the requests (--profile small, --resources ROLE.requests.cpu=...;" in report
    failed = [line for line in run.lines if line.startswith("drl-orchestrate: run big failed: it cannot start: ")]
    assert failed and "Insufficient cpu" in failed[0] and "--pending-timeout 5" in failed[0], run.text
    status = cluster.orchestrate("status", "big", "--namespace", namespace, kubeconfig=kubeconfig, check=False)
    assert status.returncode == 1, status.stdout + status.stderr
    assert "run big cannot start: " in status.stdout and "Insufficient cpu" in status.stdout
    cluster.orchestrate("delete", "big", "--namespace", namespace, kubeconfig=kubeconfig)
    cluster.wait_for("the 16 CPUs given back", lambda: run_objects(cluster, namespace, "big") == [], timeout=30)


def test_a_resource_quota_without_room_is_reported_with_its_reason(cluster, restricted):
    """The Job controller cannot create pods beyond the namespace's ResourceQuota; only its FailedCreate events
    say so. A detached run: ``status`` reports it (exit 1) within a minute; an attached run reports it and gives
    up with exit 1."""
    namespace, kubeconfig = restricted
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "cpu"},
            "spec": {"hard": {"requests.cpu": "800m"}},
        },
        namespace=namespace,
    )
    cluster.wait_for(
        "the quota's usage",
        lambda: cluster.kubectl_json("-n", namespace, "get", "resourcequota", "cpu").get("status", {}).get("used"),
        timeout=30,
    )
    small = ("--workers", "2", "--profile", "small", "--s3-storage", "emptydir")  # 1 CPU of requests in all

    first = cluster.orchestrate(*run_args(namespace, "q1", *small, "--detach"), kubeconfig=kubeconfig, check=False)
    assert first.returncode == 0, first.stderr

    def reported():
        status = cluster.orchestrate("status", "q1", "--namespace", namespace, kubeconfig=kubeconfig, check=False)
        return status if status.returncode == 1 and "exceeded quota" in status.stdout else None

    status = cluster.wait_for("status reporting the quota", reported, timeout=60, interval=1)
    line = next(line for line in status.stdout.splitlines() if "exceeded quota" in line)
    assert line.startswith("run q1 cannot start: ") and "cannot create its pods: " in line, line
    assert "is forbidden: exceeded quota: cpu" in line
    assert f"(the namespace's ResourceQuota has no room for it (kubectl -n {namespace} describe resourcequota)" in line

    second = Attached(cluster, run_args(namespace, "q2", *small, "--pending-timeout", "5"), kubeconfig)
    seconds = second.wait_for_line("exceeded quota", timeout=60)
    assert second.wait(60) == 1, second.text
    assert seconds < 60
    assert any(
        line.startswith("drl: ") and "cannot create its pods: " in line and "exceeded quota" in line
        for line in second.lines
    ), second.text
    assert any(
        line.startswith("drl-orchestrate: run q2 failed: it cannot start: ") and "exceeded quota" in line
        for line in second.lines
    ), second.text


def test_a_pvc_without_a_storage_class_is_refused_before_anything_is_created_or_reported(cluster, restricted):
    """This cluster has no default StorageClass. An account that may list StorageClasses (the admin) is refused
    the run before anything is created; the orchestrator's own account may not (a Role cannot grant it), so its run
    goes on and the S3 server's pod is reported with the scheduler's reason, "unbound immediate
    PersistentVolumeClaims"."""
    namespace, kubeconfig = restricted
    classes = cluster.kubectl_json("get", "storageclasses")["items"]
    assert not [
        c
        for c in classes
        if (c["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    ], "the tier's cluster has no default StorageClass"

    refused = cluster.orchestrate(*run_args(namespace, "pvc", "--workers", "1"), check=False)
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "drl-orchestrate: error: the cluster has no default StorageClass, so the s3 server's "
        "10Gi PVC (StatefulSet drl-pvc-s3) would never be bound"
    ), line
    assert (
        "pass --s3-storage-class NAME, or --s3-storage emptydir (no PVC: policies and checkpoints are lost with "
        "the S3 server's pod); nothing was created" in line
    )
    named = cluster.orchestrate(
        *run_args(namespace, "pvc", "--workers", "1", "--s3-storage-class", "no-such-class"), check=False
    )
    assert named.returncode == 2 and "StorageClass 'no-such-class' of the s3 server's 10Gi PVC" in named.stderr
    assert run_objects(cluster, namespace, "pvc") == []

    run = Attached(
        cluster,
        run_args(namespace, "pvc", "--workers", "1", "--profile", "small", "--pending-timeout", "5"),
        kubeconfig,
    )
    run.wait_for_line("pod drl-pvc-s3-0 cannot be scheduled: ", timeout=60)
    assert run.wait(60) == 1, run.text
    assert "drl: StorageClasses cannot be listed (403)" in run.text
    report = next(line for line in run.lines if "pod drl-pvc-s3-0 cannot be scheduled" in line)
    assert "pod has unbound immediate PersistentVolumeClaims" in report
    assert "pass --s3-storage-class NAME, or --s3-storage emptydir" in report


@pytest.mark.parametrize(
    "extra",
    [
        (),
        (
            "--learners",
            "2",
            "--memory-shards",
            "2",
            "--profile",
            "small",
            "--s3-storage",
            "20Gi",
            "--s3-storage-class",
            "fast",
        ),
    ],
    ids=["defaults", "group-small-storage-class"],
)
def test_every_rendered_manifest_passes_admission_in_a_restricted_namespace(cluster, make_namespace, extra):
    """A server-side dry run of everything ``render`` writes, and of each workload's pod template as a bare Pod
    (which PodSecurity enforces; a workload it only warns about, so warnings count as failures here), in a
    namespace enforcing and warning ``restricted``. (As the admin: a dry run creates no Role, so the orchestrator's
    account could not bind one; its real runs above create every kind.)"""
    namespace = make_namespace(labels={**RESTRICTED, **WARN_RESTRICTED})
    rendered = subprocess.run(
        [str(ORCHESTRATE), "render", *run_args(namespace, "dry", "--workers", "3", *extra)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    applied = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered.stdout, check=False)
    assert applied.returncode == 0, applied.stderr
    assert "Warning" not in applied.stderr, applied.stderr
    assert len(applied.stdout.strip().splitlines()) == len(docs)
    assert all(line.endswith("created (server dry run)") for line in applied.stdout.strip().splitlines())
    pods = []
    for d in docs:
        if d["kind"] not in ("Job", "StatefulSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        spec["volumes"] += [
            {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": "x"}}
            for claim in d["spec"].get("volumeClaimTemplates", [])
        ]  # as the StatefulSet adds it
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "spec": spec,
                "metadata": {
                    "name": f"{d['metadata']['name']}-pod",
                    "namespace": namespace,
                    "labels": d["spec"]["template"]["metadata"]["labels"],
                },
            }
        )
    assert len(pods) == 5
    cluster.apply([d for d in docs if d["kind"] == "ServiceAccount"])  # admission looks the pods' account up
    as_pods = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(pods), check=False)
    assert as_pods.returncode == 0, as_pods.stderr
    assert "Warning" not in as_pods.stderr, as_pods.stderr
