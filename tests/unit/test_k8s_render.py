"""`drl-orchestrate render`: the manifests of docs/kubernetes.md, valid for recent Kubernetes, built from the plan."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions, major_minor

from drl.config import ExperimentConfig, replace
from drl.naming import default_kubernetes_run_name
from drl.presets import resolve
from orchestrator.backends import Deployment
from orchestrator.backends.kubernetes import KubernetesBackend
from orchestrator.backends.kubernetes import manifests as k8s
from orchestrator.cli import main, resolve_config
from orchestrator.plan import plan
from tests.conftest import ROOT

KUBE_VERSIONS = sorted({major_minor(v) for v in all_versions()}, key=lambda v: tuple(map(int, v.split("."))))[-3:]
FLAGS = [
    "--preset",
    "sac",
    "--workers",
    "32",
    "--steps",
    "50000",
    "--sac.lr",
    "0.001",
    "--run-name",
    "r1",
    "--namespace",
    "team-a",
]
SECRETS = {
    "DRL_MEMORY_PASSWORD": "memory-pass-1234",
    "AWS_ACCESS_KEY_ID": "AKIAEXTERNAL",
    "AWS_SECRET_ACCESS_KEY": "external-secret-5678",
}
EXTERNAL = ["--memory", "redis://valkey.example:6380/1", "--store", "s3://bucket/prefix"]
LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "drl.dev/run",
)


def render(capsys, args: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["render", *args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def rendered(capsys, args: list[str]) -> list[dict]:
    code, out, err = render(capsys, args)
    assert code == 0, err
    return [doc for doc in yaml.safe_load_all(out) if doc is not None]


def find(objects: list[dict], kind: str, name: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, (kind, name, [(o["kind"], o["metadata"]["name"]) for o in objects])
    return matches[0]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


@pytest.fixture
def objects(capsys, monkeypatch):
    for var in SECRETS:
        monkeypatch.delenv(var, raising=False)
    return rendered(capsys, FLAGS)


def test_render_is_a_yaml_stream_of_the_contracts_objects(objects):
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert names == {
        ("ServiceAccount", "drl-r1"),
        ("Role", "drl-r1"),
        ("RoleBinding", "drl-r1"),
        ("Secret", "drl-r1-credentials"),
        ("ConfigMap", "drl-r1-config"),
        ("Service", "drl-r1-redis"),
        ("StatefulSet", "drl-r1-redis"),
        ("Service", "drl-r1-s3"),
        ("StatefulSet", "drl-r1-s3"),
        ("Job", "drl-r1-trainer"),
        ("Job", "drl-r1-rollout"),
        ("Job", "drl-r1-evaluator"),
        ("NetworkPolicy", "drl-r1-redis"),
        ("NetworkPolicy", "drl-r1-s3"),
        ("NetworkPolicy", "drl-r1-roles"),
    }
    assert len(objects) == len(names)
    assert all(o["metadata"]["namespace"] == "team-a" for o in objects)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_manifest_is_valid_in_strict_mode(objects, version):
    assert len(KUBE_VERSIONS) >= 2
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_every_object_and_pod_carries_the_run_labels(objects):
    for obj in objects:
        pods = [obj["spec"]["template"]] if obj["kind"] in ("Job", "StatefulSet") else []
        for meta in [obj["metadata"]] + [p["metadata"] for p in pods]:
            labels = meta["labels"]
            assert set(LABELS) <= set(labels), obj["metadata"]["name"]
            assert labels["app.kubernetes.io/instance"] == labels["drl.dev/run"] == "r1"
            assert labels["app.kubernetes.io/managed-by"] == "drl-orchestrate"
            assert labels["app.kubernetes.io/name"] == labels["app.kubernetes.io/part-of"] == "drl"
    for role in k8s.ROLES:
        job = find(objects, "Job", f"drl-r1-{role}")
        assert job["metadata"]["labels"]["app.kubernetes.io/component"] == role
        assert [c["name"] for c in job["spec"]["template"]["spec"]["containers"]] == [role]


def test_configmap_resolves_to_the_flags_configuration(objects):
    data = json.loads(find(objects, "ConfigMap", "drl-r1-config")["data"]["config.json"])
    assert resolve(data, "ConfigMap") == resolve_config(FLAGS)
    assert resolve(data).workers == 32 and resolve(data).sac.lr == 0.001


def test_no_credential_in_the_configmap(capsys, monkeypatch):
    for var, value in SECRETS.items():
        monkeypatch.setenv(var, value)
    for args in (FLAGS, FLAGS + EXTERNAL):
        objs = rendered(capsys, args)
        secret = find(objs, "Secret", "drl-r1-credentials")
        assert set(secret["stringData"]) == {"redis-password", "s3-access-key", "s3-secret-key"}
        configmap = json.dumps(find(objs, "ConfigMap", "drl-r1-config"))
        for value in secret["stringData"].values():
            assert value and value not in configmap
        for value in SECRETS.values():
            assert value not in configmap
        for obj in objs:
            if obj["kind"] != "Secret":
                text = json.dumps(obj)
                assert not any(v in text for v in secret["stringData"].values()), obj["metadata"]["name"]


def test_rollout_job_is_indexed_with_one_completion_per_worker(objects):
    spec = find(objects, "Job", "drl-r1-rollout")["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 32
    assert spec["template"]["spec"]["restartPolicy"] == "OnFailure"
    index = env_of(spec["template"]["spec"]["containers"][0])["DRL_WORKER_INDEX"]
    assert (
        index["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert find(objects, "Job", "drl-r1-trainer")["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_render_assumes_a_current_cluster_the_indexed_jobs_replace_a_pod_only_once_it_has_failed(
    objects, group_objects
):
    """`render` reads no cluster, so it renders for a current one (as `helm template` does): the rollout Job and a
    group's Indexed trainer Job carry ``podReplacementPolicy: Failed``; no Job a ``podFailurePolicy`` (which
    ``restartPolicy: OnFailure`` forbids)."""
    for docs, trainer in ((objects, None), (group_objects, "Failed")):
        jobs = {o["metadata"]["name"]: o["spec"] for o in docs if o["kind"] == "Job"}
        assert {name: spec.get("podReplacementPolicy") for name, spec in jobs.items()} == {
            "drl-r1-trainer": trainer,
            "drl-r1-rollout": "Failed",
            "drl-r1-evaluator": None,
        }
        assert not [name for name, spec in jobs.items() if "podFailurePolicy" in spec]


def test_containers_run_the_plans_commands_and_environment(objects):
    """What the local backend would start, with the contract's Kubernetes-only differences."""
    cfg = resolve_config(FLAGS)
    workloads = {
        w.role: w
        for w in plan(
            cfg,
            run="r1",
            run_dir=k8s.RUN_DIR,
            memory_url="redis://drl-r1-redis:6379/0",
            store_url="s3://drl/runs",
            python="python",
        )
    }
    for role, workload in workloads.items():
        container = find(objects, "Job", f"drl-r1-{role}")["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", f"services.{role}"]
        assert "args" not in container
        env = env_of(container)
        assert env["DRL_CONFIG"]["valueFrom"] == {"configMapKeyRef": {"name": "drl-r1-config", "key": "config.json"}}
        for name, value in workload.env.items():
            if name != "DRL_CONFIG":
                assert env[name] == {"name": name, "value": value}, (role, name)
        assert env["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "drl-r1-credentials",
            "key": "redis-password",
        }
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["key"] == "s3-access-key"
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "s3-secret-key"
        assert env["DRL_S3_ENDPOINT"]["value"] == "http://drl-r1-s3:9000"
        assert env["DRL_HEARTBEAT_FILE"]["value"] == "/tmp/drl/heartbeat"
        assert env["DRL_CACHE_DIR"]["value"] == "/var/cache/drl"
        assert env["HOME"]["value"] == "/tmp"
        assert env["DRL_RUN_DIR"]["value"] == "/var/lib/drl/run"
        assert ("DRL_S3_CREATE_BUCKET" in env) == (role == "trainer")
        assert ("DRL_WORKER_INDEX" in env) == (role == "rollout")


def test_pods_follow_the_security_contract(objects):
    for obj in objects:
        if obj["kind"] not in ("Job", "StatefulSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["serviceAccountName"] == "drl-r1"
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == (
            10001 if obj["kind"] == "Job" else {"redis": 999, "s3": 1000}[pod["containers"][0]["name"]]
        )
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert all(set(v) == {"name", "emptyDir"} for v in pod["volumes"])
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert c["imagePullPolicy"] == "IfNotPresent"
            if obj["kind"] == "Job":
                mounts = {m["mountPath"] for m in c["volumeMounts"]}
                assert mounts == {"/tmp", "/tmp/drl", "/var/lib/drl/run", "/var/cache/drl"}
                assert pod["restartPolicy"] == "OnFailure"
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    assert c[probe]["grpc"] == {"port": 50051}
                assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"grpc": 50051, "metrics": 9090}
                assert c["image"] == "drl:latest"


def test_role_grants_only_get_on_the_runs_configmap(objects):
    role = find(objects, "Role", "drl-r1")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["drl-r1-config"], "verbs": ["get"]}
    ]
    assert find(objects, "ServiceAccount", "drl-r1")["automountServiceAccountToken"] is False
    binding = find(objects, "RoleBinding", "drl-r1")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "drl-r1", "namespace": "team-a"}]


RUN_PODS = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "drl", "drl.dev/run": "r1"}}}


def selects(selector: dict, pod_labels: dict) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions with In) selects a pod with these labels."""
    if any(pod_labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if pod_labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_network_policies_admit_only_the_runs_pods_to_redis_and_the_s3_server(objects):
    pods = {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in ("Job", "StatefulSet")
    }
    for server, port in (("redis", 6379), ("s3", 9000)):
        spec = find(objects, "NetworkPolicy", f"drl-r1-{server}")["spec"]
        assert [c for c, labels in pods.items() if selects(spec["podSelector"], labels)] == [server]
        assert spec["podSelector"] == find(objects, "StatefulSet", f"drl-r1-{server}")["spec"]["selector"]
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["ingress"] == [{"from": [RUN_PODS], "ports": [{"protocol": "TCP", "port": port}]}]
        assert all(selects(RUN_PODS["podSelector"], labels) for labels in pods.values())
        other_run = {**pods["trainer"], "drl.dev/run": "r2", "app.kubernetes.io/instance": "r2"}
        assert not selects(RUN_PODS["podSelector"], other_run)


def test_network_policy_of_the_roles_admits_the_run_and_its_orchestrator_and_limits_egress(objects):
    spec = find(objects, "NetworkPolicy", "drl-r1-roles")["spec"]
    pods = {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in ("Job", "StatefulSet")
    }
    assert sorted(c for c, labels in pods.items() if selects(spec["podSelector"], labels)) == [
        "evaluator",
        "rollout",
        "trainer",
    ]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    run_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "drl", "drl.dev/run": "r1"}}}
    assert spec["ingress"] == [
        {"from": [run_pods, k8s.ORCHESTRATOR_PODS], "ports": [{"protocol": "TCP", "port": 50051}]}
    ], "and nobody on the metrics port"
    dns, redis, s3 = spec["egress"]
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    for rule, server, port in ((redis, "redis", 6379), (s3, "s3", 9000)):
        [peer] = rule["to"]
        assert peer == {"podSelector": find(objects, "StatefulSet", f"drl-r1-{server}")["spec"]["selector"]}
        assert rule["ports"] == [{"protocol": "TCP", "port": port}]


def test_network_policies_with_external_servers_leave_egress_open(capsys, monkeypatch):
    """A NetworkPolicy cannot name an external server's host, so the roles may then connect anywhere."""
    for var, value in SECRETS.items():
        monkeypatch.setenv(var, value)
    objs = rendered(capsys, FLAGS + EXTERNAL)
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "NetworkPolicy"] == ["drl-r1-roles"]
    spec = find(objs, "NetworkPolicy", "drl-r1-roles")["spec"]
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    objs = rendered(capsys, FLAGS + ["--memory", "redis://valkey.example:6380/1"])
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "NetworkPolicy"] == ["drl-r1-s3", "drl-r1-roles"]
    assert "egress" not in find(objs, "NetworkPolicy", "drl-r1-roles")["spec"]


def test_network_policies_come_before_every_pod(objects):
    kinds = [o["kind"] for o in objects]
    last_policy = max(i for i, k in enumerate(kinds) if k == "NetworkPolicy")
    assert last_policy < min(i for i, k in enumerate(kinds) if k in ("Job", "StatefulSet"))


@pytest.mark.parametrize("learners", [1, 2])
@pytest.mark.parametrize("external", [False, True])
def test_network_policies_equal_the_charts_defaults(external, learners, monkeypatch):
    from tests.chart.test_chart import EXTERNAL as CHART_EXTERNAL
    from tests.chart.test_chart import render as render_chart

    env = {"AWS_ACCESS_KEY_ID": "a" * 8, "AWS_SECRET_ACCESS_KEY": "s" * 16} if external else {}
    urls = {"memory_url": "redis://valkey.example:6380/1", "store_url": "s3://bucket/prefix"} if external else {}
    ours = k8s.manifests(ExperimentConfig(learners=learners, memory_shards=learners), "r1", env=env, **urls)
    group = {"trainer": {"learners": learners}, "memory": {"shards": learners}}
    theirs = render_chart(
        {**(CHART_EXTERNAL if external else {}), **group, "runName": "r1", "fullnameOverride": "drl-r1"}
    )
    policies = [
        {(d["metadata"]["name"], json.dumps(d["spec"], sort_keys=True)) for d in docs if d["kind"] == "NetworkPolicy"}
        for docs in (ours, theirs)
    ]
    assert policies[0] == policies[1]
    assert ("drl-r1-trainer-group" in {name for name, _ in policies[0]}) == (learners > 1)


HELM_ONLY_LABELS = ("app.kubernetes.io/version", "helm.sh/chart", "app.kubernetes.io/managed-by")


def without_helm(obj: dict) -> dict:
    """An object as both deployments must make it: without the chart's own labels and checksum annotation, the
    namespace (the chart leaves it to Helm) and the Secret's name-independent parts."""
    obj = json.loads(json.dumps(obj))

    def clean(meta: dict) -> None:
        meta.pop("namespace", None)
        meta.pop("annotations", None)
        for key in HELM_ONLY_LABELS:
            meta.get("labels", {}).pop(key, None)

    clean(obj["metadata"])
    spec = obj.get("spec", {})
    if "template" in spec:
        clean(spec["template"]["metadata"])
    for claim in spec.get("volumeClaimTemplates", []):
        clean(claim["metadata"])
    return obj


def charted_defaults(values: dict | None = None) -> list[dict]:
    from tests.chart.test_chart import render as render_chart

    return render_chart({"runName": "r1", "fullnameOverride": "drl-r1", **(values or {})})


def test_data_servers_equal_the_charts_defaults():
    """The run's own Valkey and S3 server (StatefulSet and Service) are the same objects from render as from
    the chart with its default values: images, commands, probes, security, volumes and claims."""
    ours = {
        (o["kind"], o["metadata"]["name"]): without_helm(o) for o in k8s.manifests(ExperimentConfig(), "r1", env={})
    }
    theirs = {(d["kind"], d["metadata"]["name"]): without_helm(d) for d in charted_defaults()}
    for key in (
        ("StatefulSet", "drl-r1-redis"),
        ("Service", "drl-r1-redis"),
        ("StatefulSet", "drl-r1-s3"),
        ("Service", "drl-r1-s3"),
    ):
        assert ours[key] == theirs[key], key


@pytest.mark.parametrize(
    "cfg, values",
    [
        (ExperimentConfig(), {}),
        (
            ExperimentConfig(device="cuda", learners=2, memory_shards=2),
            {"trainer": {"learners": 2, "gpu": {"enabled": True}}, "memory": {"shards": 2}},
        ),
    ],
)
def test_resources_security_and_volumes_of_the_jobs_equal_the_charts_defaults(cfg, values):
    """Beyond commands and environment (test_k8s_parity.py), the drl roles' pods are the chart's: resources (a
    GPU per trainer pod), security contexts, probes, ports and volumes."""
    ours = {o["metadata"]["name"]: o for o in k8s.manifests(cfg, "r1", env={}) if o["kind"] == "Job"}
    theirs = {d["metadata"]["name"]: d for d in charted_defaults(values) if d["kind"] == "Job"}
    assert set(ours) == set(theirs)
    for name in ours:
        pod, chart_pod = ours[name]["spec"]["template"]["spec"], theirs[name]["spec"]["template"]["spec"]
        for key in (
            "securityContext",
            "volumes",
            "restartPolicy",
            "automountServiceAccountToken",
            "serviceAccountName",
            "enableServiceLinks",
        ):
            assert pod.get(key) == chart_pod.get(key), (name, key)
        [c], [chart_c] = pod["containers"], chart_pod["containers"]
        for key in (
            "resources",
            "securityContext",
            "ports",
            "startupProbe",
            "livenessProbe",
            "readinessProbe",
            "volumeMounts",
            "imagePullPolicy",
        ):
            assert c.get(key) == chart_c.get(key), (name, key)


GROUP = ["--learners", "2", "--memory-shards", "2"]


@pytest.fixture
def group_objects(capsys, monkeypatch):
    for var in SECRETS:
        monkeypatch.delenv(var, raising=False)
    return rendered(capsys, FLAGS + GROUP)


def test_a_group_of_learners_is_an_indexed_trainer_job_with_a_headless_service(group_objects):
    """``--learners 2``: the plan's learner workload folds into the trainer Job (K pods, rank = completion index),
    whose pods find rank 0 at ``drl-r1-trainer-0.drl-r1-trainer-group:29500``; nothing else changes."""
    names = {(o["kind"], o["metadata"]["name"]) for o in group_objects}
    assert names - {("Service", "drl-r1-trainer-group"), ("NetworkPolicy", "drl-r1-trainer-group")} == {
        (o["kind"], o["metadata"]["name"]) for o in rendered_without_group()
    }
    assert not [o for o in group_objects if "learner" in o["metadata"]["name"]]
    job = find(group_objects, "Job", "drl-r1-trainer")["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 2, 2)
    assert job["backoffLimit"] == 2 * k8s.BACKOFF_LIMIT
    pod = job["template"]["spec"]
    assert pod["subdomain"] == "drl-r1-trainer-group" and pod["restartPolicy"] == "OnFailure"
    env = env_of(pod["containers"][0])
    assert (
        env["DRL_LEARNER_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert env["MASTER_ADDR"]["value"] == "drl-r1-trainer-0.drl-r1-trainer-group"
    assert env["MASTER_PORT"]["value"] == "29500"
    order = [e["name"] for e in pod["containers"][0]["env"]]
    assert order.index("DRL_STEPS_DONE") + 1 == order.index("DRL_LEARNER_RANK")
    assert order.index("OMP_NUM_THREADS") + 1 == order.index("MASTER_ADDR")
    service = find(group_objects, "Service", "drl-r1-trainer-group")
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    spec = service["spec"]
    assert spec["clusterIP"] == "None" and spec["publishNotReadyAddresses"] is True
    assert spec["ports"] == [{"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]
    assert selects({"matchLabels": spec["selector"]}, job["template"]["metadata"]["labels"])
    for role in ("rollout", "evaluator"):
        other = find(group_objects, "Job", f"drl-r1-{role}")["spec"]["template"]
        assert not selects({"matchLabels": spec["selector"]}, other["metadata"]["labels"]), role
        assert "subdomain" not in other["spec"]
        assert not {"DRL_LEARNER_RANK", "MASTER_ADDR", "MASTER_PORT"} & set(env_of(other["spec"]["containers"][0]))
    created = [(o["kind"], o["metadata"]["name"]) for o in group_objects]
    assert created.index(("Service", "drl-r1-trainer-group")) < created.index(("Job", "drl-r1-trainer")), (
        "the pods' DNS names exist before the pods"
    )
    assert k8s.expected_pods(group_objects)["trainer"] == 2
    data = json.loads(find(group_objects, "ConfigMap", "drl-r1-config")["data"]["config.json"])
    assert (resolve(data).learners, resolve(data).memory_shards) == (2, 2)


def rendered_without_group() -> list[dict]:
    """The objects of the same run without the group (``FLAGS`` alone), built without the CLI."""
    cfg = replace(resolve_config(FLAGS), run_name="r1")
    return k8s.manifests(cfg, "r1", namespace="team-a", env={})


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_a_group_of_learners_is_valid_in_strict_mode(group_objects, version):
    for obj in group_objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_trainer_pods_of_a_group_admit_one_another_on_every_port(group_objects):
    """gloo and NCCL connect the ranks on ports they pick at run time: the group's NetworkPolicy opens the trainer
    pods to one another (ingress, and egress where the roles' egress is limited), and to nobody else."""
    policy = find(group_objects, "NetworkPolicy", "drl-r1-trainer-group")["spec"]
    trainers = {
        "podSelector": {"matchLabels": find(group_objects, "Service", "drl-r1-trainer-group")["spec"]["selector"]}
    }
    assert policy == {
        **trainers,
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [trainers]}],
        "egress": [{"to": [trainers]}],
    }


def test_a_gpu_device_gives_each_trainer_pod_one_gpu(capsys, monkeypatch):
    for var in SECRETS:
        monkeypatch.delenv(var, raising=False)
    for extra, pods in (([], 1), (GROUP, 2)):
        objs = rendered(capsys, FLAGS + extra + ["--device", "cuda"])
        job = find(objs, "Job", "drl-r1-trainer")["spec"]
        assert job["parallelism"] == pods
        limits = job["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {**k8s.RESOURCES["trainer"]["limits"], "nvidia.com/gpu": 1}
        for role in ("rollout", "evaluator"):
            container = find(objs, "Job", f"drl-r1-{role}")["spec"]["template"]["spec"]["containers"][0]
            assert "nvidia.com/gpu" not in container["resources"]["limits"]
    for device in ("auto", "cpu"):
        objs = rendered(capsys, FLAGS + GROUP + ["--device", device])
        trainer = find(objs, "Job", "drl-r1-trainer")["spec"]["template"]["spec"]["containers"][0]
        assert trainer["resources"] == k8s.RESOURCES["trainer"]


def test_builtin_data_services(objects):
    redis = find(objects, "StatefulSet", "drl-r1-redis")["spec"]
    container = redis["template"]["spec"]["containers"][0]
    assert container["image"].startswith("valkey/valkey")
    script = container["command"][-1]
    assert 'requirepass "$VALKEY_PASSWORD"' in script and "--save ''" in script and "--appendonly no" in script
    assert "args" not in container, "the password goes to valkey-server on stdin, never in its arguments"
    assert env_of(container)["VALKEY_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "redis-password"
    assert find(objects, "Service", "drl-r1-redis")["spec"]["ports"][0]["port"] == 6379
    s3 = find(objects, "StatefulSet", "drl-r1-s3")["spec"]["template"]["spec"]["containers"][0]
    assert s3["image"] == "chrislusf/seaweedfs:4.48"
    assert env_of(s3)["S3_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "s3-access-key"
    assert env_of(s3)["S3_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "s3-secret-key"
    assert find(objects, "Service", "drl-r1-s3")["spec"]["ports"][0]["port"] == 9000
    for name in ("drl-r1-redis", "drl-r1-s3"):
        sts, svc = find(objects, "StatefulSet", name), find(objects, "Service", name)
        assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert set(svc["spec"]["selector"].items()) <= set(sts["spec"]["template"]["metadata"]["labels"].items())


def test_external_memory_and_store_omit_redis_and_the_s3_server(capsys, monkeypatch):
    for var, value in SECRETS.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("DRL_S3_ENDPOINT", "https://s3.example.com")
    objs = rendered(capsys, FLAGS + EXTERNAL)
    assert not [o for o in objs if o["kind"] in ("StatefulSet", "Service")]
    assert find(objs, "Secret", "drl-r1-credentials")["stringData"] == {
        "redis-password": "memory-pass-1234",
        "s3-access-key": "AKIAEXTERNAL",
        "s3-secret-key": "external-secret-5678",
    }
    for role in k8s.ROLES:
        env = env_of(find(objs, "Job", f"drl-r1-{role}")["spec"]["template"]["spec"]["containers"][0])
        assert env["DRL_MEMORY_URL"]["value"] == "redis://valkey.example:6380/1"
        assert env["DRL_STORE"]["value"] == "s3://bucket/prefix"
        assert env["DRL_S3_ENDPOINT"]["value"] == "https://s3.example.com"
        assert "DRL_S3_CREATE_BUCKET" not in env
    for version in KUBE_VERSIONS[-2:]:
        for obj in objs:
            kubernetes_validate.validate(obj, version, strict=True)


def test_external_memory_alone_keeps_the_s3_server(capsys, monkeypatch):
    monkeypatch.delenv("DRL_MEMORY_PASSWORD", raising=False)
    objs = rendered(capsys, FLAGS + ["--memory", "redis://valkey.example:6380/1"])
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("StatefulSet", "drl-r1-s3") in kinds and ("StatefulSet", "drl-r1-redis") not in kinds
    assert find(objs, "Secret", "drl-r1-credentials")["stringData"]["redis-password"] == ""


def test_generated_credentials_differ_between_renders(capsys, monkeypatch):
    for var in SECRETS:
        monkeypatch.delenv(var, raising=False)
    first, second = (find(rendered(capsys, FLAGS), "Secret", "drl-r1-credentials")["stringData"] for _ in range(2))
    assert all(len(v) >= 16 for v in first.values())
    assert all(first[k] != second[k] for k in first)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--store", "/tmp/drl-store"], "--store '/tmp/drl-store' is a local directory, which pods cannot share"),
        (["--store", "file:///tmp/drl-store"], "is a local directory, which pods cannot share"),
        (["--namespace", "Team_A"], "--namespace must be a DNS label"),
        (["--namespace", "team-"], "--namespace must be a DNS label"),
        (["--run-name", "Run_1"], "--run-name on Kubernetes must be lowercase letters"),
        (["--run-name", "r" * 41], "at most 40 characters"),
        (["--memory", "unix:///tmp/valkey.sock"], "cannot be reached from pods"),
        (
            ["--memory", "redis://a:6379/0,unix:///tmp/b.sock", "--memory-shards", "2"],
            "--memory 'unix:///tmp/b.sock' cannot be reached from pods",
        ),
        (["--memory", "redis://:pw@host:6379/0"], "the memory URL must not carry a password"),
        (["--store", "s3://bucket/prefix"], "needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        (["--backend", "local"], "render prints Kubernetes manifests; --backend local has none"),
        (["--backend", "nomad"], "invalid choice: 'nomad'"),
        (["--workers", "0"], "--workers must be a positive integer, got 0"),
        (["--resume", "r1"], "--resume applies to local runs"),
        (
            ["--learners", "2", "--memory-shards", "1"],
            "--learners 2 needs --memory-shards 2 or more: each learner reads whole experience streams",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, args, expected):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    code, out, err = render(capsys, args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drl-orchestrate: error: "), err
    assert expected in lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--backend", "kubernetes", "--store", "/tmp/drl-store"], "is a local directory, which pods cannot share"),
        (["--backend", "kubernetes", "--namespace", "a.b"], "--namespace must be a DNS label"),
        (["--namespace", "x"], "--namespace applies to --backend kubernetes only"),
        (["delete", "Bad_Run"], "RUN on Kubernetes must be lowercase letters"),
        (["delete", "r1", "--namespace", "UPPER"], "--namespace must be a DNS label"),
        (["delete"], "the following arguments are required: RUN"),
    ],
)
def test_bad_run_and_delete_input_is_one_line_and_exit_2(capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--steps", "1000"] if args[0] != "delete" else args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines


def test_help_lists_the_deployment_flags_and_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--backend {local,kubernetes}",
        "--namespace NS",
        "--image IMAGE",
        "--s3-image IMAGE",
        "--detach",
        "  render ",
        "  delete RUN",
    ):
        assert flag in out, flag


def test_deployment_flags_stay_out_of_the_configuration(capsys):
    cfg = resolve_config(
        [
            "--backend",
            "kubernetes",
            "--namespace",
            "ns",
            "--image",
            "x:1",
            "--s3-image",
            "s3:1",
            "--detach",
            "--workers",
            "3",
        ]
    )
    assert cfg == replace(resolve_config([]), workers=3)
    assert not {"backend", "namespace", "image", "s3_image", "detach"} & set(json.loads(cfg.to_json()))


def test_image_flag_and_default_run_name(capsys):
    objs = rendered(capsys, ["--namespace", "ns", "--image", "registry.example/drl:1.2", "--env", "Pendulum-v1"])
    run = objs[0]["metadata"]["labels"]["drl.dev/run"]
    assert run.startswith("sac-pendulum-v1-sync-") and len(run) <= k8s.MAX_RUN_LEN
    assert k8s.check_run_name(run) == run
    for role in k8s.ROLES:
        assert (
            find(objs, "Job", f"drl-{run}-{role}")["spec"]["template"]["spec"]["containers"][0]["image"]
            == "registry.example/drl:1.2"
        )


def test_s3_image_flag_picks_the_s3_servers_image_and_store_an_external_one(capsys, monkeypatch):
    """The chart's choice, as flags: the run's own S3 server (SeaweedFS, --s3-image) or an S3 store of yours
    (--store, no server of the run's)."""
    objs = rendered(capsys, FLAGS + ["--s3-image", "registry.example/seaweedfs:4.48"])
    s3 = find(objs, "StatefulSet", "drl-r1-s3")["spec"]["template"]["spec"]["containers"][0]
    assert s3["image"] == "registry.example/seaweedfs:4.48"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    objs = rendered(capsys, FLAGS + ["--store", "s3://bucket/prefix"])
    assert not [o for o in objs if o["metadata"]["name"] == "drl-r1-s3"]
    code, _, err = render(capsys, FLAGS + ["--s3-image", "bad image"])
    assert code == 2 and "--s3-image must name an image" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["--s3-image", "x:1", "--workers", "1"])
    assert exit_info.value.code == 2
    assert "--s3-image applies to --backend kubernetes only" in capsys.readouterr().err


def test_default_run_names_fit_kubernetes_for_long_env_ids():
    cfg = ExperimentConfig(env="ALE/MontezumaRevenge-NoFrameskip.v4_long.name", mode="async")
    run = default_kubernetes_run_name(cfg.preset, cfg.env, cfg.mode, now=0)
    assert k8s.check_run_name(run) == run
    assert run.startswith("sac-ale-montezuma") and re.search(r"-async-\d{8}-\d{6}$", run), run


def test_manifests_is_callable_without_the_cli():
    cfg = ExperimentConfig(workers=3, run_name="ignored")
    objs = k8s.manifests(cfg, "t1", namespace="ns", env={})
    rollout = find(objs, "Job", "drl-t1-rollout")
    assert rollout["spec"]["completions"] == 3
    config = json.loads(find(objs, "ConfigMap", "drl-t1-config")["data"]["config.json"])
    assert ExperimentConfig.from_json(json.dumps(config)) == replace(cfg, run_name="t1")
    creds = k8s.Credentials("p" * 16, "a" * 16, "s" * 16)
    objs = k8s.manifests(cfg, "t1", credentials=creds, env={})
    assert find(objs, "Secret", "drl-t1-credentials")["stringData"]["redis-password"] == "p" * 16


def test_render_and_local_runs_do_not_import_the_kubernetes_client(tmp_path):
    (tmp_path / "config").write_text(
        "current-context: c\ncontexts: [{name: c, context: {namespace: from-kubeconfig}}]\n"
    )
    code = (
        "import sys, io, contextlib\n"
        "from orchestrator.cli import main, resolve_config\n"
        "import orchestrator.backends.local.run\n"
        "resolve_config(['--workers', '2'])\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        main(['render', '--run-name', 'x'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "assert 'namespace: from-kubeconfig' in out.getvalue()\n"
        "loaded = sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.'))\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "KUBECONFIG": f"{tmp_path / 'missing'}:{tmp_path / 'config'}"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr


def test_shards_on_several_external_servers_reach_the_pods_as_one_list(capsys, monkeypatch):
    monkeypatch.delenv("DRL_MEMORY_PASSWORD", raising=False)
    servers = "redis://valkey-a.example:6379/0,redis://valkey-b.example:6379/0"
    objs = rendered(capsys, FLAGS + ["--memory", servers, "--memory-shards", "2"])
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("StatefulSet", "drl-r1-redis") not in kinds
    for job in (o for o in objs if o["kind"] == "Job"):
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["DRL_MEMORY_URL"] == servers, job["metadata"]["name"]


# -- the S3 server's storage, and requests and limits from the command line ----------------------------------

SMALL = {  # docs/kubernetes.md "Resources", the small profile: exactly these figures (helm/profiles/small.yaml)
    "trainer": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
    "rollout": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "evaluator": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "redis": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "s3": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}


def resources_by_component(objects: list[dict]) -> dict[str, dict]:
    out = {}
    for obj in objects:
        if obj["kind"] in ("Job", "StatefulSet"):
            [container] = obj["spec"]["template"]["spec"]["containers"]
            out[obj["metadata"]["labels"]["app.kubernetes.io/component"]] = container["resources"]
    return out


def test_s3_storage_emptydir_or_a_size_and_a_class(objects, capsys):
    s3 = find(objects, "StatefulSet", "drl-r1-s3")["spec"]
    [claim] = s3["volumeClaimTemplates"]
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    objs = rendered(capsys, FLAGS + ["--s3-storage", "emptydir"])
    s3 = find(objs, "StatefulSet", "drl-r1-s3")["spec"]
    assert "volumeClaimTemplates" not in s3 and "persistentVolumeClaimRetentionPolicy" not in s3
    assert {"name": "data", "emptyDir": {}} in s3["template"]["spec"]["volumes"]
    objs = rendered(capsys, FLAGS + ["--s3-storage", "20Gi", "--s3-storage-class", "fast-ssd"])
    [claim] = find(objs, "StatefulSet", "drl-r1-s3")["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    for version in KUBE_VERSIONS:
        for obj in objs:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize(
    "values",
    [
        {"s3": {"persistence": {"enabled": False}}},
        {"s3": {"persistence": {"size": "20Gi", "storageClass": "fast-ssd"}}},
    ],
)
def test_s3_storage_options_make_the_charts_s3_server(values):
    persistence = values["s3"]["persistence"]
    storage = persistence.get("size", "emptydir") if persistence.get("enabled", True) else "emptydir"
    ours = {
        (o["kind"], o["metadata"]["name"]): without_helm(o)
        for o in k8s.manifests(
            ExperimentConfig(), "r1", env={}, s3_storage=storage, s3_storage_class=persistence.get("storageClass", "")
        )
    }
    theirs = {(d["kind"], d["metadata"]["name"]): without_helm(d) for d in charted_defaults(values)}
    assert ours[("StatefulSet", "drl-r1-s3")] == theirs[("StatefulSet", "drl-r1-s3")]


def test_profile_small_and_resources_set_requests_and_limits(objects, capsys):
    assert resources_by_component(objects) == {c: k8s.RESOURCES[c] for c in k8s.RESOURCE_ROLES}
    objs = rendered(capsys, FLAGS + ["--profile", "small"])
    assert resources_by_component(objs) == SMALL
    objs = rendered(
        capsys,
        FLAGS
        + [
            "--profile",
            "small",
            "--resources",
            "rollout.requests.cpu=250m,rollout.limits.memory=2Gi",
            "--resources",
            "trainer.limits.cpu=3",
        ],
    )
    got = resources_by_component(objs)
    assert got["rollout"] == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    assert got["trainer"]["limits"] == {"cpu": "3", "memory": "4Gi"}
    assert {c: got[c] for c in ("evaluator", "redis", "s3")} == {c: SMALL[c] for c in ("evaluator", "redis", "s3")}
    for version in KUBE_VERSIONS:
        for obj in objs:
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_small_profile_fits_a_node_of_2_cpus():
    """2 rollout workers, the trainer, the evaluator, Valkey and the S3 server request at most 2 CPUs (and what
    a small node's memory holds)."""
    objs = k8s.manifests(ExperimentConfig(workers=2), "r1", env={}, resources=k8s.resources_for("small"))
    pods = k8s.expected_pods(objs)
    requests = resources_by_component(objs)
    cpu = sum(k8s.parse_quantity(requests[c]["requests"]["cpu"]) * n for c, n in pods.items())
    memory = sum(k8s.parse_quantity(requests[c]["requests"]["memory"]) * n for c, n in pods.items())
    assert cpu == 1 and memory == 2.5 * 2**30


def test_resources_like_the_charts_values():
    """--resources ROLE.KIND.RES=Q sets what the chart's ROLE.resources.KIND.RES sets."""
    settings = (
        "trainer.requests.cpu=2,trainer.limits.memory=12Gi",
        "rollout.limits.cpu=2",
        "s3.requests.memory=512Mi",
        "redis.requests.cpu=500m,redis.limits.cpu=500m",
        "evaluator.requests.memory=1Gi",
    )
    values = {
        "trainer": {"resources": {"requests": {"cpu": "2"}, "limits": {"memory": "12Gi"}}},
        "rollout": {"resources": {"limits": {"cpu": "2"}}},
        "s3": {"resources": {"requests": {"memory": "512Mi"}}},
        "redis": {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}},
        "evaluator": {"resources": {"requests": {"memory": "1Gi"}}},
    }
    ours = k8s.manifests(ExperimentConfig(), "r1", env={}, resources=k8s.resources_for("", settings))
    assert resources_by_component(ours) == resources_by_component(charted_defaults(values))
    assert resources_by_component(ours) != resources_by_component(charted_defaults())


def test_the_small_profile_is_the_charts_helm_profiles_small_yaml():
    """PROFILES["small"] and helm/profiles/small.yaml give every pod the same requests and limits."""
    path = ROOT / "helm" / "profiles" / "small.yaml"
    assert path.exists(), "helm/profiles/small.yaml: the chart's small profile (docs/kubernetes.md 'Resources')"
    values = yaml.safe_load(path.read_text())
    assert {c: values[c]["resources"] for c in k8s.RESOURCE_ROLES} == SMALL == k8s.PROFILES["small"]
    chart = resources_by_component(charted_defaults(values))
    ours = resources_by_component(k8s.manifests(ExperimentConfig(), "r1", env={}, resources=k8s.resources_for("small")))
    assert chart == ours


def test_the_local_profile_is_the_charts_helm_profiles_local_yaml():
    """--profile local and helm/profiles/local.yaml make the same pods: small's requests and limits, the images
    `scripts/local-cluster.sh images` imports (LOCAL_IMAGES) with imagePullPolicy Never, and no PVC for either
    data server."""
    path = ROOT / "helm" / "profiles" / "local.yaml"
    assert path.exists(), "helm/profiles/local.yaml: the chart's local profile (docs/kubernetes.md 'A local run')"
    values = yaml.safe_load(path.read_text())
    assert {c: values[c]["resources"] for c in k8s.RESOURCE_ROLES} == SMALL == k8s.PROFILES["local"]
    deployment = Deployment(profile="local")
    ours = {
        (o["kind"], o["metadata"]["name"]): without_helm(o)
        for o in k8s.manifests(
            ExperimentConfig(),
            "r1",
            env={},
            resources=k8s.resources_for("local"),
            **KubernetesBackend.images_and_storage(deployment),
        )
    }
    theirs = {(d["kind"], d["metadata"]["name"]): without_helm(d) for d in charted_defaults(values)}
    for key in (("StatefulSet", "drl-r1-redis"), ("StatefulSet", "drl-r1-s3")):
        assert ours[key] == theirs[key], key
        assert "volumeClaimTemplates" not in ours[key]["spec"], key
    for name in ("drl-r1-trainer", "drl-r1-rollout", "drl-r1-evaluator"):
        [c], [chart_c] = (objs[("Job", name)]["spec"]["template"]["spec"]["containers"] for objs in (ours, theirs))
        assert {k: c[k] for k in ("image", "imagePullPolicy", "resources")} == {
            k: chart_c[k] for k in ("image", "imagePullPolicy", "resources")
        }, name
    images = {
        c["image"]: c["imagePullPolicy"]
        for o in ours.values()
        if o["kind"] in ("Job", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {image: "Never" for image in k8s.LOCAL_IMAGES.values()}


def test_the_local_profiles_images_and_storage_give_way_to_the_flags(capsys):
    objs = rendered(capsys, FLAGS + ["--profile", "local", "--image", "localhost/drl:ctx-1", "--s3-storage", "2Gi"])
    trainer = find(objs, "Job", "drl-r1-trainer")["spec"]["template"]["spec"]["containers"][0]
    assert (trainer["image"], trainer["imagePullPolicy"]) == ("localhost/drl:ctx-1", "Never")
    [claim] = find(objs, "StatefulSet", "drl-r1-s3")["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    redis = find(objs, "StatefulSet", "drl-r1-redis")["spec"]["template"]["spec"]["containers"][0]
    assert redis["image"] == k8s.LOCAL_IMAGES["redis"]
    default = rendered(capsys, FLAGS)
    assert {
        c["imagePullPolicy"]
        for o in default
        if o["kind"] in ("Job", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    } == {"IfNotPresent"}


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--s3-storage", "lots"],
            "--s3-storage must be emptydir (no PVC: checkpoints are lost with the S3 server's pod) "
            "or the size of its PVC, such as 10Gi, got 'lots'",
        ),
        (["--s3-storage", "0"], "--s3-storage must be emptydir"),
        (["--s3-storage", "emptydir", "--s3-storage-class", "fast"], "--s3-storage emptydir has none"),
        (["--s3-storage-class", "Fast_SSD"], "--s3-storage-class must name a StorageClass"),
        (["--profile", "tiny"], "argument --profile: invalid choice: 'tiny' (choose from 'default', 'small', 'local')"),
        (["--resources", "worker.requests.cpu=1"], "the role must be one of trainer, rollout, evaluator, redis, s3"),
        (["--resources", "rollout.request.cpu=1"], "set requests or limits of cpu or memory"),
        (["--resources", "rollout.requests.gpu=1"], "set requests or limits of cpu or memory"),
        (["--resources", "rollout.cpu=1"], "--resources takes ROLE.requests|limits.cpu|memory=QUANTITY"),
        (["--resources", "rollout.requests.cpu"], "--resources takes ROLE.requests|limits.cpu|memory=QUANTITY"),
        (["--resources", "rollout.requests.cpu=half"], "'half' is not a positive Kubernetes quantity"),
        (["--resources", "rollout.requests.cpu=-1"], "'-1' is not a positive Kubernetes quantity"),
        (["--resources", "rollout.requests.memory=1.5m"], "memory must be a whole number of bytes"),
        (
            ["--resources", "rollout.requests.cpu=2"],
            "rollout's cpu request 2 is above its limit 1; raise "
            "rollout.limits.cpu or lower rollout.requests.cpu (--resources)",
        ),
        (
            ["--profile", "small", "--resources", "trainer.limits.memory=768Mi"],
            "trainer's memory request 1Gi is above its limit 768Mi",
        ),
        (["--resources", "trainer.limits.memory=1536Mi"], "trainer's memory request 2Gi is above its limit 1536Mi"),
        (["--pending-timeout", "-1"], "--pending-timeout must be 0 (wait for ever) or more seconds, got '-1'"),
        (["--pending-timeout", "soon"], "--pending-timeout takes seconds, got 'soon'"),
    ],
)
def test_bad_storage_and_resources_are_one_line_and_exit_2(capsys, args, expected):
    code, out, err = render(capsys, FLAGS + args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drl-orchestrate: error: "), err
    assert expected in lines[0], lines[0]


def test_s3_storage_with_an_external_store_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    code, _, err = render(capsys, FLAGS + ["--store", "s3://bucket/prefix", "--s3-storage", "emptydir"])
    assert code == 2 and "--s3-storage and --s3-storage-class apply to the run's own S3 server" in err


@pytest.mark.parametrize(
    "flag",
    [
        ["--s3-storage", "emptydir"],
        ["--s3-storage-class", "fast"],
        ["--profile", "small"],
        ["--resources", "rollout.requests.cpu=250m"],
        ["--pending-timeout", "30"],
    ],
)
def test_kubernetes_only_flags_are_refused_for_local_runs_and_stay_out_of_the_configuration(capsys, flag):
    with pytest.raises(SystemExit) as exit_info:
        main([*flag, "--workers", "1", "--steps", "1000"])
    assert exit_info.value.code == 2
    assert f"{flag[0]} applies to --backend kubernetes only" in capsys.readouterr().err
    cfg = resolve_config(["--backend", "kubernetes", *flag])
    assert cfg == resolve_config(["--backend", "kubernetes"])


def test_parse_quantity():
    assert k8s.parse_quantity("500m") == k8s.parse_quantity("0.5")
    assert k8s.parse_quantity("1Gi") == 2**30 and k8s.parse_quantity("1G") == 10**9
    assert k8s.parse_quantity(".5") == k8s.parse_quantity("500m")
    assert k8s.parse_quantity("1e3") is None and k8s.parse_quantity("") is None and k8s.parse_quantity("1 Gi") is None
