"""The Job controller's rules that drl's rollout Job relies on (docs/kubernetes.md, "One pod per identity" and
``backoffLimit``), on the real controller, with the rollout Job that ``drl-orchestrate render`` writes: an Indexed
Job, ``completions = parallelism = workers``, ``restartPolicy: OnFailure``, ``podReplacementPolicy: Failed``."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from tests.cluster.conftest import ORCHESTRATE, ROOT

RUN = "r1"
INDEX = "batch.kubernetes.io/job-completion-index"
HOLD = "drl.dev/test-hold"


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    """The manifests of a 4-worker sac run as ``render --backend kubernetes`` writes them (no namespace)."""
    proc = subprocess.run(
        [
            ORCHESTRATE,
            "render",
            "--backend",
            "kubernetes",
            "--preset",
            "sac",
            "--workers",
            "4",
            "--namespace",
            "placeholder",
            "--image",
            "drl:test",
            "--run-name",
            RUN,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    for doc in docs:
        doc["metadata"].pop("namespace", None)
    return docs


def pick(docs: list[dict], kind: str, suffix: str = "") -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, [d["metadata"]["name"] for d in found]
    return json.loads(json.dumps(found[0]))


@pytest.fixture
def rollout(rendered) -> dict:
    job = pick(rendered, "Job", "-rollout")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4
    assert spec["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert spec["podReplacementPolicy"] == "Failed"
    return job


def start(cluster, namespace: str, rendered: list[dict], *jobs: dict) -> None:
    """Applies ``jobs`` with the ServiceAccount their pods run as (admission refuses pods without it)."""
    accounts = {job["spec"]["template"]["spec"]["serviceAccountName"] for job in jobs}
    cluster.apply(
        [d for d in rendered if d["kind"] == "ServiceAccount" and d["metadata"]["name"] in accounts] + list(jobs),
        namespace=namespace,
    )


def job_state(cluster, namespace: str, name: str) -> dict:
    return cluster.kubectl_json("-n", namespace, "get", "job", name)


def failed_condition(job: dict) -> dict | None:
    return next(
        (c for c in job.get("status", {}).get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"),
        None,
    )


def worker_pods(cluster, namespace: str, job: str) -> list[dict]:
    return cluster.pods(namespace, f"batch.kubernetes.io/job-name={job}")


def ready(pod: dict) -> bool:
    return (
        pod["status"].get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
    )


def wait_workers(cluster, namespace: str, job: str, indexes: set[int]) -> dict[int, dict]:
    """Waits until exactly ``indexes`` have a Ready pod (and no other pod exists); returns them by index."""

    def probe():
        pods = worker_pods(cluster, namespace, job)
        by_index = {int(p["metadata"]["annotations"][INDEX]): p for p in pods}
        if len(pods) == len(indexes) and set(by_index) == indexes and all(map(ready, pods)):
            return by_index
        return None

    return cluster.wait_for(f"Ready workers {sorted(indexes)} of {job}", probe, timeout=30)


def hold_and_delete(cluster, namespace: str, pod: str) -> None:
    """Deletes ``pod`` with a finalizer of the test's on it: kwok then keeps it Running and terminating, as a
    kubelet keeps a pod whose process has not yet ended in its grace period."""
    cluster.kubectl(
        "-n",
        namespace,
        "patch",
        "pod",
        pod,
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}]),
    )
    cluster.kubectl("-n", namespace, "delete", "pod", pod, "--wait=false")


def release(cluster, namespace: str, pod: str) -> None:
    held = cluster.pod(namespace, pod)
    position = held["metadata"]["finalizers"].index(HOLD)
    cluster.kubectl(
        "-n",
        namespace,
        "patch",
        "pod",
        pod,
        "--type=json",
        "-p",
        json.dumps(
            [
                {"op": "test", "path": f"/metadata/finalizers/{position}", "value": HOLD},
                {"op": "remove", "path": f"/metadata/finalizers/{position}"},
            ]
        ),
    )


def test_no_second_pod_for_an_index_until_the_first_has_failed(cluster, namespace, rendered, rollout):
    """drl's rollout Job (podReplacementPolicy: Failed): a deleted worker whose termination is held keeps its
    index alone for as long as it is held; once it has ended, the replacement comes with the same index. Beside
    it, the same Job with Kubernetes' default (TerminatingOrFailed) shows what the test would see otherwise: the
    controller counts the terminating pod as failed at once and starts a second pod for its index after its
    failure backoff (10 s for a first failure), while the first still runs."""
    name = rollout["metadata"]["name"]
    control = json.loads(json.dumps(rollout))
    control["metadata"]["name"] = f"{name}-control"
    control["spec"]["podReplacementPolicy"] = "TerminatingOrFailed"
    start(cluster, namespace, rendered, rollout, control)
    pods = wait_workers(cluster, namespace, name, {0, 1, 2, 3})
    control_pods = wait_workers(cluster, namespace, control["metadata"]["name"], {0, 1, 2, 3})
    victim, control_victim = pods[1]["metadata"]["name"], control_pods[1]["metadata"]["name"]
    hold_and_delete(cluster, namespace, victim)
    hold_and_delete(cluster, namespace, control_victim)

    def index_1(job: str) -> list[dict]:
        return [p for p in worker_pods(cluster, namespace, job) if p["metadata"]["annotations"][INDEX] == "1"]

    # Until the control's second pod shows up, drl's index 1 has its one, terminating, Running pod, which the
    # controller does not count as failed.
    deadline = time.monotonic() + 30
    while len(index_1(control["metadata"]["name"])) < 2:
        assert time.monotonic() < deadline, "the control Job never started a second pod for index 1"
        now = index_1(name)
        assert [p["metadata"]["name"] for p in now] == [victim], "a second pod for index 1 while it is held"
        assert now[0]["status"]["phase"] == "Running"
        time.sleep(0.2)
    state = job_state(cluster, namespace, name)["status"]
    assert state.get("terminating") == 1 and not state.get("failed") and state.get("active") == 3, state
    assert job_state(cluster, namespace, control["metadata"]["name"])["status"].get("failed") == 1
    assert [p["metadata"]["name"] for p in index_1(name)] == [victim]

    release(cluster, namespace, victim)
    after = wait_workers(cluster, namespace, name, {0, 1, 2, 3})
    assert after[1]["metadata"]["name"] != victim and cluster.pod(namespace, victim) is None
    assert {i: p["metadata"]["uid"] for i, p in after.items() if i != 1} == {
        i: p["metadata"]["uid"] for i, p in pods.items() if i != 1
    }
    state = job_state(cluster, namespace, name)
    assert state["status"].get("failed") == 1 and not failed_condition(state)
    release(cluster, namespace, control_victim)


def test_scale_down_removes_the_highest_indexes(cluster, namespace, rendered, rollout):
    name = rollout["metadata"]["name"]
    start(cluster, namespace, rendered, rollout)
    before = wait_workers(cluster, namespace, name, {0, 1, 2, 3})
    # as `drl-orchestrate scale` patches an elastic Indexed Job: completions and parallelism together
    cluster.kubectl(
        "-n",
        namespace,
        "patch",
        "job",
        name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"completions": 2, "parallelism": 2, "backoffLimit": 12}}),
    )
    after = wait_workers(cluster, namespace, name, {0, 1})
    assert {i: p["metadata"]["uid"] for i, p in after.items()} == {i: before[i]["metadata"]["uid"] for i in (0, 1)}
    for i in (2, 3):
        assert cluster.pod(namespace, before[i]["metadata"]["name"]) is None
    for pod in after.values():
        cluster.finish_pod(namespace, pod["metadata"]["name"], 0)
    done = cluster.wait_for(
        "the Job complete", lambda: (j := job_state(cluster, namespace, name))["status"].get("succeeded") == 2 and j
    )
    assert done["status"]["completedIndexes"] == "0,1"
    assert not failed_condition(done)


def test_crash_loop_counts_against_backoff_limit(cluster, namespace, rendered, rollout):
    """With restartPolicy OnFailure the kubelet restarts a failing container in its pod, and the Job controller
    counts the restarts of its pods toward backoffLimit (6 x workers for the rollout Job): below it the Job runs
    on, at it the Job fails with BackoffLimitExceeded and its pods are removed."""
    name = rollout["metadata"]["name"]
    limit = rollout["spec"]["backoffLimit"]
    assert limit == 6 * 4
    start(cluster, namespace, rendered, rollout)
    pods = wait_workers(cluster, namespace, name, {0, 1, 2, 3})

    def restarts(pod_name: str) -> int:
        pod = cluster.pod(namespace, pod_name) or {"status": {}}
        return sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))

    # one worker crash-loops a few times, then recovers: fewer restarts than the limit, the Job runs on
    first = pods[0]["metadata"]["name"]
    cluster.finish_pod(namespace, first, 1, delay="100ms")
    cluster.wait_for("4 restarts of worker 0", lambda: restarts(first) >= 4, timeout=20)
    cluster.finish_pod(namespace, first, None)
    time.sleep(0.5)  # a restart already due when the annotation went may still land
    counted = restarts(first)
    assert 4 <= counted < limit
    state = job_state(cluster, namespace, name)
    assert not failed_condition(state) and state["status"].get("active") == 4

    # every worker crash-loops: at backoffLimit restarts in all the Job fails
    for pod in pods.values():
        cluster.finish_pod(namespace, pod["metadata"]["name"], 1, delay="100ms")
    failed = cluster.wait_for(
        "the Job failed", lambda: failed_condition(job_state(cluster, namespace, name)), timeout=30
    )
    assert failed["reason"] == "BackoffLimitExceeded", failed
    cluster.wait_for("the Job's pods removed", lambda: not worker_pods(cluster, namespace, name), timeout=20)


def test_deleting_by_the_run_label_leaves_no_pods(cluster, namespace, rendered):
    """What ``delete`` does: every object of the run by its label, background propagation; the garbage collector
    and kwok's kubelet remove the pods within seconds (Job pods carry the Job controller's finalizer)."""
    objects = [
        json.loads(json.dumps(d))
        for d in rendered
        if not (d["kind"] == "StatefulSet" and d["spec"].get("volumeClaimTemplates"))
    ]
    cluster.apply(objects, namespace=namespace)
    selector = f"drl.dev/run={RUN}"
    running = cluster.wait_for(
        "the run's pods Ready",
        lambda: (pods := cluster.pods(namespace, selector)) and len(pods) >= 7 and all(map(ready, pods)) and pods,
    )
    kinds = sorted({d["kind"] for d in objects})
    assert {"Job", "StatefulSet"} <= set(kinds)
    assert {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in running} >= {"rollout", "trainer"}
    cluster.kubectl(
        "-n",
        namespace,
        "delete",
        ",".join(k.lower() for k in kinds),
        "-l",
        selector,
        "--cascade=background",
        "--wait=false",
    )
    t0 = time.monotonic()
    cluster.wait_for("no pods of the run", lambda: not cluster.pods(namespace, selector), timeout=10, interval=0.1)
    assert time.monotonic() - t0 < 10
    left = cluster.kubectl("-n", namespace, "get", "jobs,statefulsets,pods", "-l", selector, "-o", "name").stdout
    assert left.strip() == ""
