"""The control plane itself: its network namespace has no way off the machine, the versions are the pinned ones,
the nodes stay Ready, admission enforces PodSecurity, and kwok's stages (tests/cluster/conftest.py) run, end and
log pods as the other tests rely on."""

from __future__ import annotations

import sys
from datetime import datetime

from tests.cluster.conftest import KUBERNETES_VERSION, RESTRICTED, _no_route_off

PAUSE = "registry.k8s.io/pause:3.10"


def pod_manifest(name: str, privileged: bool = False, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": PAUSE, "securityContext": {"privileged": privileged}}]},
    }


def job_manifest(name: str, labels: dict | None = None, restart: str = "Never", backoff: int = 0) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff,
            "template": {
                "metadata": {"labels": labels or {}},
                "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": PAUSE}]},
            },
        },
    }


def condition(obj: dict, kind: str) -> dict | None:
    return next(
        (c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"), None
    )


def job_pod(cluster, namespace: str, job: str) -> dict | None:
    pods = cluster.pods(namespace, f"batch.kubernetes.io/job-name={job}")
    return pods[0] if pods else None


def test_namespace_has_no_route_off_the_machine(cluster):
    _no_route_off(cluster.netns)
    probe = (
        "import socket, sys\n"
        "def connect(addr):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect(addr); return 'connected'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__ + ' ' + str(e.errno)\n"
        "print(connect(('192.0.2.1', 80)))\n"  # TEST-NET-1: off the machine
        "print(connect(('10.244.7.7', 8080)))\n"
    )  # a pod address: local in the namespace
    out = cluster.run([sys.executable, "-c", probe], check=True).stdout.split("\n")
    assert out[0].startswith("OSError 101"), out  # ENETUNREACH: no route, nothing sent
    assert out[1].startswith("ConnectionRefusedError"), out  # ends at once on lo


def test_versions_are_the_pinned_ones(cluster):
    version = cluster.kubectl_json("version")
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert version["clientVersion"]["gitVersion"] == KUBERNETES_VERSION
    helm = cluster.helm("version", "--short").stdout
    assert helm.startswith("v4."), helm


def test_restricted_namespace_refuses_a_privileged_pod(cluster, make_namespace):
    restricted = make_namespace(labels=RESTRICTED)
    plain = make_namespace()
    refused = cluster.apply(pod_manifest("priv", privileged=True), namespace=restricted, check=False)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr and "privileged" in refused.stderr
    # the same pod passes admission where no PodSecurity level is enforced
    cluster.kubectl(
        "-n",
        plain,
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=__import__("yaml").safe_dump(pod_manifest("priv", privileged=True)),
    )
    assert cluster.pod(restricted, "priv") is None


def test_job_pod_runs_on_a_node_and_ends_with_the_chosen_exit_code(cluster, namespace):
    cluster.apply([job_manifest("ok"), job_manifest("bad")], namespace=namespace)
    pods = {}
    for job in ("ok", "bad"):
        pods[job] = cluster.wait_for(
            f"pod of job {job} Ready",
            lambda job=job: (p := job_pod(cluster, namespace, job)) and condition(p, "Ready") and p,
            timeout=30,
        )
        assert pods[job]["spec"]["nodeName"].startswith("kwok-node-")
        assert pods[job]["status"]["podIP"].startswith("10.244.")
        assert pods[job]["status"]["phase"] == "Running"
    # nothing ends a pod by itself
    assert not condition(cluster.kubectl_json("-n", namespace, "get", "job", "ok"), "Complete")
    cluster.finish_pod(namespace, pods["ok"]["metadata"]["name"], 0)
    cluster.finish_pod(namespace, pods["bad"]["metadata"]["name"], 3)
    ok = cluster.wait_for(
        "job ok Complete", lambda: condition(cluster.kubectl_json("-n", namespace, "get", "job", "ok"), "Complete")
    )
    assert ok["reason"] == "CompletionsReached"
    failed = cluster.wait_for(
        "job bad Failed", lambda: condition(cluster.kubectl_json("-n", namespace, "get", "job", "bad"), "Failed")
    )
    assert failed["reason"] == "BackoffLimitExceeded"
    for job, code, phase in (("ok", 0, "Succeeded"), ("bad", 3, "Failed")):
        pod = cluster.pod(namespace, pods[job]["metadata"]["name"])
        assert pod["status"]["phase"] == phase
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == code


def test_scaler_pods_complete_by_themselves_unless_held(cluster, make_namespace):
    scaler = {"app.kubernetes.io/component": "scaler"}
    free, held = make_namespace(), make_namespace(hold_scalers=True)
    assert held.endswith("-hold-scalers")
    for ns in (free, held):
        cluster.apply(job_manifest("scaler", labels=scaler), namespace=ns)
    done = cluster.wait_for(
        "the scaler Job Complete",
        lambda: condition(cluster.kubectl_json("-n", free, "get", "job", "scaler"), "Complete"),
        timeout=30,
    )
    assert done
    pod = job_pod(cluster, free, "scaler")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    held_pod = cluster.wait_for(
        "the held scaler pod Ready", lambda: (p := job_pod(cluster, held, "scaler")) and condition(p, "Ready") and p
    )
    assert held_pod["status"]["phase"] == "Running"
    assert not condition(cluster.kubectl_json("-n", held, "get", "job", "scaler"), "Complete")
    cluster.finish_pod(held, held_pod["metadata"]["name"], 2)
    assert cluster.wait_for(
        "the held scaler Job Failed",
        lambda: condition(cluster.kubectl_json("-n", held, "get", "job", "scaler"), "Failed"),
    )


def test_pod_logs_only_where_served(cluster, namespace):
    cluster.apply([pod_manifest("a"), pod_manifest("b")], namespace=namespace)
    for pod in ("a", "b"):
        cluster.wait_for(f"pod {pod} Ready", lambda pod=pod: condition(cluster.pod(namespace, pod) or {}, "Ready"))
    unserved = cluster.kubectl("-n", namespace, "logs", "a", check=False)
    assert unserved.returncode != 0 and "no logs found" in unserved.stderr, unserved.stderr

    cluster.serve_logs(namespace, 'first line\n{"workers": 3}')
    for pod in ("a", "b"):
        out = cluster.wait_for(
            f"log of {pod}", lambda pod=pod: cluster.kubectl("-n", namespace, "logs", pod, check=False).stdout
        )
        assert out == 'first line\n{"workers": 3}\n'
    # one pod's own log wins over the namespace's; the API server's log endpoint returns the same
    cluster.serve_logs(namespace, "only b", pod="b")
    assert cluster.wait_for(
        "b's own log", lambda: cluster.kubectl("-n", namespace, "logs", "b", check=False).stdout == "only b\n"
    )
    raw = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/b/log?container=main").stdout
    assert raw == "only b\n"
    cluster.stop_logs(namespace)
    assert cluster.wait_for(
        "a's log gone", lambda: cluster.kubectl("-n", namespace, "logs", "a", check=False).returncode != 0
    )


def test_three_nodes_ready_with_renewed_leases(cluster):
    """Last in this file: by then kwok has renewed the leases at least once (every 10 s with 40 s leases)."""
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    assert len(nodes) == 3
    for node in nodes:
        assert condition(node, "Ready"), node["status"].get("conditions")
        assert not node["spec"].get("taints"), node["spec"]["taints"]
        alloc = node["status"]["allocatable"]
        assert (alloc["cpu"], alloc["memory"], alloc["pods"]) == ("4", "16Gi", "110")

    # Without kwok's --node-lease-duration-seconds the nodes go NotReady after 40 s: each has a 40 s lease, held by
    # kwok and renewed every 10 s (so later than 5 s after the lease was made means renewed at least once).
    def leases():
        return {
            lease["metadata"]["name"]: lease
            for lease in cluster.kubectl_json("-n", "kube-node-lease", "get", "leases")["items"]
        }

    assert sorted(leases()) == sorted(n["metadata"]["name"] for n in nodes)
    assert {lease["spec"]["leaseDurationSeconds"] for lease in leases().values()} == {40}

    def renewed():
        def seconds(stamp: str) -> float:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

        return all(
            seconds(lease["spec"]["renewTime"]) - seconds(lease["metadata"]["creationTimestamp"]) > 5
            for lease in leases().values()
        )

    cluster.wait_for("every node lease renewed", renewed, timeout=30, interval=0.5)
