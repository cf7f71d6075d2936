"""One plan, three deployments: the command and environment of each role are the same in what the local backend
runs (``orchestrator.plan``), in ``drl-orchestrate render`` (``orchestrator.backends.kubernetes.manifests``) and in
the helm chart rendered by Helm's own engine.

Values that name a place (run directory, memory URL, store, a group's rendezvous) differ by backend, so for them
only the name must be present in all three; every other variable present locally must carry the same value on
Kubernetes, and the configuration every backend hands its services must resolve to the same ExperimentConfig.
A group of learners is K local processes (the trainer and K - 1 learners) and one Indexed trainer Job of K pods
on Kubernetes, its rank the completion index.
"""

from __future__ import annotations

import json
import sys

import pytest

from drl.config import ExperimentConfig, replace
from drl.presets import get_preset, resolve
from orchestrator.backends.kubernetes import manifests as k8s
from orchestrator.plan import plan
from tests.chart.test_chart import render as render_chart

RUN = "parity"
ROLES = ("trainer", "rollout", "evaluator")
PLACES = {"DRL_RUN_DIR", "DRL_MEMORY_URL", "DRL_STORE", "MASTER_ADDR", "MASTER_PORT"}
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
CASES = {
    "sac-3-workers": (
        {"preset": "sac", "workers": 3, "config": {"trainer_threads": 2}},
        lambda: replace(get_preset("sac"), workers=3, trainer_threads=2),
    ),
    "ppo-cartpole": (
        {"preset": "ppo", "env": "CartPole-v1", "workers": 4, "mode": "sync"},
        lambda: replace(get_preset("ppo", "CartPole-v1"), workers=4),
    ),
    "dqn-async-prioritized": (
        {"preset": "dqn", "workers": 2, "mode": "async", "config": {"prioritized": True, "worker_priorities": True}},
        lambda: replace(get_preset("dqn"), workers=2, mode="async", prioritized=True, worker_priorities=True),
    ),
    "appo-lag-bound": (
        {"preset": "appo", "workers": 8, "config": {"max_policy_lag": 20, "appo": {"segment": 64}}},
        lambda: replace(get_preset("appo"), workers=8, max_policy_lag=20, **{"appo.segment": 64}),
    ),
    "sac-2-learners-2-shards": (
        {"preset": "sac", "workers": 4, "trainer": {"learners": 2}, "memory": {"shards": 2}},
        lambda: replace(get_preset("sac"), workers=4, learners=2, memory_shards=2),
    ),
}
# Where a role runs on Kubernetes: each workload of the plan is one Job (the trainer's K replicas, its group of
# learners, are the completion indexes of one Indexed Job).
K8S_ROLE = {"trainer": "trainer", "rollout": "rollout", "evaluator": "evaluator"}


def local_roles(cfg: ExperimentConfig) -> dict[str, tuple[list[str], dict[str, str]]]:
    workloads = plan(
        cfg,
        run=RUN,
        run_dir=f"/runs/{RUN}",
        memory_url="redis://127.0.0.1:1/0",
        store_url="/runs",
        python=sys.executable,
    )
    return {w.role: (list(w.command), w.replica_env(w.first_index)) for w in workloads}


def k8s_roles(docs: list[dict]) -> dict[str, tuple[list[str], dict[str, dict], dict]]:
    """role -> (command, env by name (value or valueFrom), the ConfigMap's config.json)."""
    configs = [json.loads(d["data"]["config.json"]) for d in docs if d["kind"] == "ConfigMap"]
    assert len(configs) == 1
    out = {}
    for d in docs:
        if d["kind"] != "Job":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["name"] in ROLES:
                out[c["name"]] = (c["command"] + c.get("args", []), {e["name"]: e for e in c["env"]}, configs[0])
    assert set(out) == set(ROLES)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_local_render_and_chart_run_the_same_commands_with_the_same_environment(case):
    values, expected_cfg = CASES[case]
    cfg = expected_cfg().validate()
    local = local_roles(replace(cfg, run_name=RUN))
    rendered = k8s_roles(k8s.manifests(cfg, RUN, namespace="ns", env={}))
    charted = k8s_roles(render_chart({**values, "runName": RUN}))
    assert set(local) == set(ROLES), "the plan's trainer is one workload of K replicas: no learner workload"
    for role in local:
        command, env = local[role]
        k8s_role = K8S_ROLE[role]
        for name, (k_command, k_env, config) in (("render", rendered[k8s_role]), ("chart", charted[k8s_role])):
            where = f"{name}/{role}"
            assert k_command[0] == "python" and k_command[1:] == command[1:], where
            assert set(env) <= set(k_env), f"{where}: missing {sorted(set(env) - set(k_env))}"
            for var, value in env.items():
                item = k_env[var]
                if var == "DRL_CONFIG":
                    assert item["valueFrom"]["configMapKeyRef"]["key"] == "config.json", where
                    assert resolve(config) == resolve(json.loads(value)) == replace(cfg, run_name=RUN), where
                elif var in ("DRL_WORKER_INDEX", "DRL_LEARNER_RANK"):
                    assert item["valueFrom"]["fieldRef"]["fieldPath"] == COMPLETION_INDEX, where
                elif var not in PLACES:
                    assert item.get("value") == value, f"{where}: {var}"
            assert k_env["DRL_RUN"]["value"] == RUN, where


def test_render_and_chart_agree_on_kubernetes_only_variables():
    values, expected_cfg = CASES["sac-3-workers"]
    rendered = k8s_roles(k8s.manifests(expected_cfg(), RUN, namespace="ns", env={}))
    charted = k8s_roles(render_chart({**values, "runName": RUN}))
    for role in ROLES:
        r_env, c_env = rendered[role][1], charted[role][1]
        assert set(r_env) == set(c_env), role
        for var in (
            "DRL_HEARTBEAT_FILE",
            "DRL_CACHE_DIR",
            "HOME",
            "PYTHONUNBUFFERED",
            "OMP_NUM_THREADS",
            "DRL_CONTROL_HOST",
            "DRL_CONTROL_PORT",
            "DRL_METRICS_HOST",
            "DRL_METRICS_PORT",
        ):
            assert r_env[var].get("value") == c_env[var].get("value"), f"{role}: {var}"
        for var in ("DRL_MEMORY_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert r_env[var]["valueFrom"]["secretKeyRef"]["key"] == c_env[var]["valueFrom"]["secretKeyRef"]["key"]


@pytest.mark.parametrize("case", ["sac-3-workers", "sac-2-learners-2-shards"])
@pytest.mark.parametrize("kube_version", [None, (1, 28), (1, 29), (1, 34)])
def test_render_and_chart_agree_on_pod_replacement_policy(case, kube_version):
    """Both set ``podReplacementPolicy: Failed`` on the same Jobs (the rollout Job, a group's Indexed trainer Job)
    for a cluster of 1.29 or later and on none for 1.28; with no version given (``render``, `helm template`'s
    default) both assume a current cluster. Neither sets a ``podFailurePolicy``."""
    values, expected_cfg = CASES[case]
    rendered = k8s.manifests(expected_cfg(), RUN, namespace="ns", env={}, kube_version=kube_version)
    helm_version = None if kube_version is None else "v{}.{}.0".format(*kube_version)
    charted = render_chart({**values, "runName": RUN}, kube_version=helm_version)

    def policies(docs: list[dict]) -> dict[str, str | None]:
        assert not [d for d in docs if d["kind"] == "Job" and "podFailurePolicy" in d["spec"]]
        return {
            d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"].get("podReplacementPolicy")
            for d in docs
            if d["kind"] == "Job"
        }

    expected = None if kube_version == (1, 28) else "Failed"
    group = expected_cfg().learners > 1
    assert (
        policies(rendered)
        == policies(charted)
        == {"trainer": expected if group else None, "rollout": expected, "evaluator": None}
    )


def test_render_and_chart_run_a_group_of_learners_as_one_indexed_trainer_job_with_a_headless_service():
    """K learners are K pods of the trainer Job (no Job of their own), rank = completion index, meeting at rank 0's
    DNS name under the group's headless Service: ``<job>-0.<service>:29500``."""
    values, expected_cfg = CASES["sac-2-learners-2-shards"]
    rendered = k8s.manifests(expected_cfg(), RUN, namespace="ns", env={})
    charted = render_chart({**values, "runName": RUN})
    for where, docs in (("render", rendered), ("chart", charted)):
        jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
        assert len(jobs) == 3, f"{where}: {sorted(jobs)}"
        [job] = [d for d in jobs.values() if d["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"]
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2, where
        assert spec["backoffLimit"] == 2 * 6, where
        pod = spec["template"]["spec"]
        [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == pod["subdomain"]]
        assert service["metadata"]["name"] == job["metadata"]["name"] + "-group", where
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True, where
        labels = spec["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items(), where
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == "trainer", where
        assert service["spec"]["ports"] == [
            {"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}
        ], where
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["MASTER_ADDR"]["value"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}", where
        assert env["MASTER_PORT"]["value"] == "29500", where
        assert env["DRL_LEARNER_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == COMPLETION_INDEX, where
        for other in (j["spec"]["template"]["spec"] for j in jobs.values() if j is not job):
            assert "subdomain" not in other, where
            assert not {"DRL_LEARNER_RANK", "MASTER_ADDR"} & {e["name"] for e in other["containers"][0]["env"]}, where
    r_env, c_env = (k8s_roles(docs)["trainer"][1] for docs in (rendered, charted))
    assert list(r_env) == list(c_env), "the same variables in the same order"
