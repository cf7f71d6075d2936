"""End to end on a local kind cluster: build the image, install the chart, run a tiny SYNC run to completion.

Opt-in (it builds an image and starts a cluster): DRL_KIND_E2E=1 with kind, docker, helm and kubectl on PATH.

    DRL_KIND_E2E=1 .venv/bin/python -m pytest tests/e2e -m kind -v

It uses the scripts of the manual workflow (scripts/kind-up.sh, kind-deploy.sh, kind-down.sh) on the cluster
DRL_KIND_CLUSTER (default drl), in its own namespace and release (drl-e2e), which it uninstalls at the end; with
DRL_KIND_E2E_DELETE_CLUSTER=1 it also deletes the cluster. Besides the run, it checks the chart's defaults on the
cluster: resources on every container, the SeaweedFS S3 server on a bound PVC that goes with the release, the
NetworkPolicy of the control and metrics ports, and a passing `helm test` that leaves no pod.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("kind", "docker", "helm", "kubectl")
CLUSTER = os.environ.get("DRL_KIND_CLUSTER", "drl")
CONTEXT = f"kind-{CLUSTER}"
RELEASE = NAMESPACE = "drl-e2e"
STEPS, WORKERS = 2000, 2
JOB_TIMEOUT_S = 900


def _skip_reason() -> str | None:
    if os.environ.get("DRL_KIND_E2E") != "1":
        return "opt-in: set DRL_KIND_E2E=1 (needs kind, docker, helm and kubectl on PATH; see docs/kubernetes.md)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"DRL_KIND_E2E=1, but not on PATH: {', '.join(missing)}"
    return None


pytestmark = [
    pytest.mark.kind,
    pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or ""),
    pytest.mark.timeout(3600),
]


def script(name: str, *args: str, timeout: float, **env: str) -> subprocess.CompletedProcess:
    """Runs scripts/<name> for the test's cluster, release and namespace; output goes to the test's log."""
    full_env = {**os.environ, "DRL_KIND_CLUSTER": CLUSTER, "DRL_RELEASE": RELEASE, "DRL_NAMESPACE": NAMESPACE, **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], cwd=ROOT, env=full_env, timeout=timeout)


def kubectl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--context", CONTEXT, "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def release_jobs() -> dict[str, str]:
    """component -> Job name, for the Jobs of the release (read from its manifest, as kind-deploy.sh does)."""
    manifest = subprocess.run(
        ["helm", "get", "manifest", RELEASE, "--kube-context", CONTEXT, "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = subprocess.run(
        ["kubectl", "--context", CONTEXT, "--namespace", NAMESPACE, "get", "-f", "-", "-o", "json"],
        input=manifest.stdout,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(got.stdout)
    items = data.get("items", [data])
    return {
        item["metadata"].get("labels", {}).get("app.kubernetes.io/component", ""): item["metadata"]["name"]
        for item in items
        if item["kind"] == "Job"
    }


def diagnostics() -> str:
    """What the release's Jobs and pods look like, for a failure message."""
    commands = (
        ("get", "jobs,pods", "-o", "wide"),
        ("describe", "jobs"),
        ("logs", "-l", "app.kubernetes.io/part-of=drl", "--all-containers", "--prefix", "--tail", "40"),
    )
    parts = []
    for args in commands:
        proc = kubectl(*args)
        parts.append(f"$ kubectl {' '.join(args)}\n{proc.stdout}{proc.stderr}")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def cluster():
    """The kind cluster with the freshly built image loaded (scripts/kind-up.sh)."""
    up = script("kind-up.sh", timeout=2400)
    assert up.returncode == 0, "scripts/kind-up.sh failed (its output is above)"
    yield CONTEXT
    if os.environ.get("DRL_KIND_E2E_DELETE_CLUSTER") == "1":
        script("kind-down.sh", timeout=600)


def kubectl_json(*args: str) -> dict:
    proc = kubectl(*args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def check_the_defaults(jobs: dict[str, str]) -> None:
    """What a first install on a real cluster relied on (issue 27): every container with requests and limits,
    the S3 server (SeaweedFS) on a bound PVC, the control port closed to the namespace, the metrics port to all."""
    pods = kubectl_json("get", "pods", "-l", f"drl.dev/run={RELEASE}")["items"]
    assert pods
    for pod in pods:
        for container in pod["spec"]["containers"]:
            resources = container.get("resources", {})
            assert {"cpu", "memory"} <= set(resources.get("requests", {})), pod["metadata"]["name"]
            assert {"cpu", "memory"} <= set(resources.get("limits", {})), pod["metadata"]["name"]
    name = jobs["trainer"].removesuffix("-trainer")
    s3 = kubectl_json("get", "statefulset", f"{name}-s3")
    assert s3["spec"]["template"]["spec"]["containers"][0]["image"].startswith("chrislusf/seaweedfs:")
    claim = kubectl_json("get", "pvc", f"data-{name}-s3-0")
    assert claim["status"]["phase"] == "Bound", claim["status"]
    roles = kubectl_json("get", "networkpolicy", f"{name}-roles")["spec"]
    control = next(rule for rule in roles["ingress"] if rule["ports"][0]["port"] == 50051)
    assert {"podSelector": {}} not in control["from"], "the control port is not open to the namespace"
    assert all(rule["ports"][0]["port"] != 9090 for rule in roles["ingress"]), "no /metrics reader by default"


def helm_test() -> subprocess.CompletedProcess:
    """``helm test`` of the release; its pod is deleted when it passes (hook-succeeded)."""
    return subprocess.run(
        ["helm", "test", RELEASE, "--kube-context", CONTEXT, "--namespace", NAMESPACE, "--timeout", "5m"],
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_tiny_sync_run_completes(cluster):
    try:
        deploy = script(
            "kind-deploy.sh",
            timeout=600,
            DRL_PRESET="sac",
            DRL_WORKERS=str(WORKERS),
            DRL_STEPS=str(STEPS),
            DRL_MODE="sync",
            DRL_FOLLOW="none",
        )
        assert deploy.returncode == 0, "scripts/kind-deploy.sh failed (its output is above)"
        jobs = release_jobs()
        assert {"trainer", "rollout", "evaluator"} <= set(jobs), jobs

        wait = kubectl(
            "wait",
            "--for=condition=complete",
            f"job/{jobs['trainer']}",
            f"--timeout={JOB_TIMEOUT_S}s",
            timeout=JOB_TIMEOUT_S + 60,
        )
        assert wait.returncode == 0, f"trainer Job not complete:\n{wait.stderr}\n{diagnostics()}"

        trainer_log = kubectl("logs", f"job/{jobs['trainer']}").stdout
        assert "finished (steps_done)" in trainer_log, f"trainer log:\n{trainer_log[-4000:]}\n{diagnostics()}"
        evaluator_log = kubectl("logs", f"job/{jobs['evaluator']}").stdout
        assert "): return " in evaluator_log, f"no evaluation in the evaluator's log:\n{evaluator_log[-4000:]}"

        check_the_defaults(jobs)
        tested = helm_test()
        assert tested.returncode == 0, f"helm test failed:\n{tested.stdout}{tested.stderr}\n{diagnostics()}"
        leftover = kubectl("get", "pods", "-l", "app.kubernetes.io/component=test", "-o", "name").stdout.strip()
        assert not leftover, f"a passed helm test leaves no pod: {leftover}"
    finally:
        script("kind-down.sh", "--keep-cluster", timeout=600)
        claims = ""
        for _ in range(30):
            claims = kubectl("get", "pvc", "-l", f"drl.dev/run={RELEASE}", "-o", "name").stdout.strip()
            if not claims:
                break
            time.sleep(2)
        kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    assert not claims, f"helm uninstall left the run's claims behind: {claims}"
