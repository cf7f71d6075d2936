"""The helm chart (helm/), rendered by Helm's own engine (helm-python-sdk) and checked against the contract in
docs/kubernetes.md: lint, Kubernetes schemas (kubernetes-validate, strict), values.schema.json, names, labels,
commands, environment, credentials, security settings and the ConfigMap's configuration."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from drl.algorithms import ALGORITHMS
from drl.presets import PRESETS, resolve

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm"
RELEASE = "drl"
NAMESPACE = "drl-test"
# Recent Kubernetes minor versions the shipped kubernetes-validate has schemas for.
K8S_VERSIONS = ("1.35", "1.36", "1.37")
ROLES = ("trainer", "rollout", "evaluator")
LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "drl.dev/run",
)
WORKLOAD_KINDS = ("Job", "StatefulSet")

# The environment of each drl role, in the order the chart renders it (the table in docs/kubernetes.md).
ENV_ORDER = {
    "trainer": [
        "DRL_CONFIG",
        "DRL_RUN",
        "DRL_RUN_DIR",
        "DRL_MEMORY_URL",
        "DRL_MEMORY_PASSWORD",
        "DRL_STORE",
        "DRL_S3_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "DRL_S3_CREATE_BUCKET",
        "DRL_STEPS_DONE",
        "PYTHONUNBUFFERED",
        "OMP_NUM_THREADS",
        "DRL_RUN_FILES",
        "DRL_HEARTBEAT_FILE",
        "DRL_CACHE_DIR",
        "HOME",
        "DRL_CONTROL_HOST",
        "DRL_CONTROL_PORT",
        "DRL_METRICS_HOST",
        "DRL_METRICS_PORT",
    ],
    "rollout": [
        "DRL_CONFIG",
        "DRL_RUN",
        "DRL_RUN_DIR",
        "DRL_MEMORY_URL",
        "DRL_MEMORY_PASSWORD",
        "DRL_STORE",
        "DRL_S3_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "DRL_STEPS_DONE",
        "DRL_WORKER_INDEX",
        "PYTHONUNBUFFERED",
        "OMP_NUM_THREADS",
        "DRL_HEARTBEAT_FILE",
        "DRL_CACHE_DIR",
        "HOME",
        "DRL_CONTROL_HOST",
        "DRL_CONTROL_PORT",
        "DRL_METRICS_HOST",
        "DRL_METRICS_PORT",
    ],
    "evaluator": [
        "DRL_CONFIG",
        "DRL_RUN",
        "DRL_RUN_DIR",
        "DRL_MEMORY_URL",
        "DRL_MEMORY_PASSWORD",
        "DRL_STORE",
        "DRL_S3_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "DRL_STEPS_DONE",
        "PYTHONUNBUFFERED",
        "OMP_NUM_THREADS",
        "DRL_HEARTBEAT_FILE",
        "DRL_CACHE_DIR",
        "HOME",
        "DRL_CONTROL_HOST",
        "DRL_CONTROL_PORT",
        "DRL_METRICS_HOST",
        "DRL_METRICS_PORT",
    ],
}

EXTERNAL = {
    "externalRedis": {
        "enabled": True,
        "url": "rediss://redis.example.internal:6380/2",
        "existingSecret": "team-redis",
        "passwordKey": "password",
    },
    "externalS3": {
        "enabled": True,
        "endpoint": "https://s3.eu-west-1.amazonaws.com",
        "bucket": "team-runs",
        "prefix": "drl/exp",
        "existingSecret": "team-s3",
        "accessKeyKey": "id",
        "secretKeyKey": "key",
    },
}
CUSTOM = {
    "trainer": {
        "resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "16Gi"}},
        "nodeSelector": {"pool": "cpu-large"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "drl", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
                    ]
                }
            }
        },
        "extraEnv": [{"name": "DRL_LOG_LEVEL", "value": "DEBUG"}],
    },
    "rollout": {
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "2Gi"}},
        "nodeSelector": {"pool": "spot"},
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "evaluator": {"resources": {"requests": {"cpu": "1"}}, "nodeSelector": {"pool": "cpu"}},
    "redis": {
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
        "nodeSelector": {"pool": "infra"},
        "tolerations": [{"key": "infra", "operator": "Exists"}],
    },
    "s3": {
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
        "nodeSelector": {"pool": "infra"},
        "persistence": {"enabled": True, "size": "20Gi", "storageClass": "fast"},
    },
    "imagePullSecrets": [{"name": "registry"}],
    "image": {"repository": "registry.example.com/drl", "tag": "0.1.0", "pullPolicy": "Always"},
}
GPU = {
    "trainer": {
        "gpu": {"enabled": True, "count": 2},
        "resources": {"limits": {"memory": "32Gi"}},
        "image": {"repository": "registry.example.com/drl-cuda"},
    },
    "config": {"trainer_threads": 8},
}

# A group of two learners on GPUs: an Indexed trainer Job of two pods, one GPU each, over two experience streams.
LEARNERS = {"trainer": {"learners": 2, "gpu": {"enabled": True}}, "memory": {"shards": 2}, "workers": 4}
# The variables a group adds to the trainer's environment, after the one they follow.
GROUP_ENV = {"DRL_STEPS_DONE": ["DRL_LEARNER_RANK"], "OMP_NUM_THREADS": ["MASTER_ADDR", "MASTER_PORT"]}
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

MONITORING = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
API_SERVER = {"ipBlock": {"cidr": "10.0.0.1/32"}}
EXTERNAL_EGRESS = {
    "to": [{"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.9.0/24"]}}],
    "ports": [{"protocol": "TCP", "port": 6380}, {"protocol": "TCP", "port": 443}],
}
NETWORK = {
    "controlFrom": [API_SERVER],
    "metricsOpen": False,
    "metricsFrom": [MONITORING],
    "egress": {"extraRules": [EXTERNAL_EGRESS]},
}

# Security contexts given (merged with the restricted defaults), extra volumes, a priority class and a topology
# spread for each component.
CA = {"name": "ca", "configMap": {"name": "corporate-ca"}}
CA_MOUNT = {"name": "ca", "mountPath": "/etc/drl/ca", "readOnly": True}
SPREAD = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "ScheduleAnyway",
    "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "rollout", "drl.dev/run": RELEASE}},
}
POD_EXTRAS = {
    component: {
        "podSecurityContext": {"supplementalGroups": [4242]},
        "containerSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "extraVolumes": [CA],
        "extraVolumeMounts": [CA_MOUNT],
        "priorityClassName": "drl-batch",
        "topologySpreadConstraints": [SPREAD],
    }
    for component in ("trainer", "rollout", "evaluator", "redis", "s3")
}

VALUE_SETS = {
    "default": {},
    "sac-32": {"preset": "sac", "workers": 32},
    "external": EXTERNAL,
    "gpu": GPU,
    "learners": LEARNERS,
    "workers-64": {"workers": 64, "mode": "async", "steps": 1_000_000, "seed": 7, "env": "HalfCheetah-v5"},
    "custom": CUSTOM,
    "ppo": {"preset": "ppo", "workers": 8, "runName": "cartpole-1", "config": {"ppo": {"epochs": 5}}},
    "appo": {"preset": "appo", "workers": 32, "config": {"max_policy_lag": 20, "appo": {"segment": 64}}},
    "network": {"rbac": {"create": True}, "networkPolicy": NETWORK},
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    "pod-extras": POD_EXTRAS,
    "existing-secret": {
        "credentials": {
            "existingSecret": "drl-run-secrets",
            "redisPasswordKey": "valkey",
            "s3AccessKeyKey": "id",
            "s3SecretKeyKey": "key",
        }
    },
}


@functools.lru_cache(maxsize=None)
def _chart() -> helm.Chart:
    return helm.Chart.load(CHART)


# The drl image is published nowhere, so the chart refuses to render without one (test_an_unset_image_fails_...);
# every other test installs the image a kind cluster gets from scripts/kind-up.sh, unless it names its own.
IMAGE = {"repository": "drl", "tag": "dev"}


def with_image(values: dict | None) -> dict:
    values = dict(values or {})
    values["image"] = {**IMAGE, **values.get("image", {})}
    return values


@functools.lru_cache(maxsize=None)
def _render_files(values_json: str, name: str, kube_version: str | None = None) -> dict[str, str]:
    if kube_version is None:
        return _chart().render(json.loads(values_json), name=name, namespace=NAMESPACE)
    # `helm template --kube-version`: helm-python's Chart.render takes no such argument, but the render options of
    # the library under it do (the same "kube_version" its lint passes), and set .Capabilities.KubeVersion.
    from helm_python import _native

    options = {"name": name, "namespace": NAMESPACE, "kube_version": kube_version}
    return json.loads(_native.call_string("helm_render", _chart()._raw(), values_json, json.dumps(options)))


def render_files(values: dict | None = None, name: str = RELEASE, kube_version: str | None = None) -> dict[str, str]:
    """The rendered templates by path (NOTES.txt included), with ``IMAGE`` unless the values name an image;
    ``kube_version`` (``"v1.28.0"``) as `helm template --kube-version` takes it, else Helm's default (recent)."""
    return _render_files(json.dumps(with_image(values), sort_keys=True), name, kube_version)


def render(values: dict | None = None, name: str = RELEASE, kube_version: str | None = None) -> list[dict]:
    """Every Kubernetes object `helm template` would print for these values (the test hook included)."""
    docs = []
    for path, text in sorted(render_files(values, name, kube_version).items()):
        if path.endswith(".txt"):
            continue
        docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def find(docs: list[dict], kind: str, name: str) -> dict:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    found = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found in {found}"
    return matches[0]


def pod_specs(docs: list[dict]) -> list[tuple[str, dict, dict]]:
    """(object name, pod metadata, pod spec) of every workload's pod template and of bare pods."""
    out = []
    for d in docs:
        if d["kind"] in WORKLOAD_KINDS:
            out.append((d["metadata"]["name"], d["spec"]["template"]["metadata"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "Pod":
            out.append((d["metadata"]["name"], d["metadata"], d["spec"]))
    return out


def role_container(docs: list[dict], role: str, fullname: str = RELEASE) -> dict:
    spec = find(docs, "Job", f"{fullname}-{role}")["spec"]["template"]["spec"]
    [container] = spec["containers"]
    return container


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def secret_values(docs: list[dict]) -> set[str]:
    """The values of the chart's Secret (none with credentials.existingSecret)."""
    secret = next((d for d in docs if d["kind"] == "Secret"), {})
    return {base64.b64decode(v).decode() for v in secret.get("data", {}).values() if v}


def strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


# -- the chart as a whole ------------------------------------------------------------------------------------


def test_chart_metadata():
    meta = _chart().metadata
    assert (meta["apiVersion"], meta["name"], meta["version"]) == ("v2", "drl", "0.1.0")
    assert meta["appVersion"]
    assert _chart().schema is not None


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_clean(name):
    report = helm.lint(CHART, with_image(VALUE_SETS[name]), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_manifests_valid_for_recent_kubernetes(name):
    docs = render(VALUE_SETS[name])
    assert docs
    for doc in docs:
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(
                    f"{doc['kind']}/{doc['metadata']['name']} invalid for Kubernetes {version}: {path}: {exc.message}"
                )


@pytest.mark.parametrize(
    "values, complaint",
    [
        ({"workers": 0}, "/workers"),
        ({"mode": "turbo"}, "/mode"),
        ({"turbo": True}, "turbo"),
        ({"preset": "a2c"}, "/preset"),
        ({"workers": "many"}, "/workers"),
        ({"steps": 0}, "/steps"),
        ({"seed": -1}, "/seed"),
        ({"runName": "bad name!"}, "/runName"),
        ({"trainer": {"gpu": {"enabled": True, "count": 0}}}, "/trainer/gpu/count"),
        ({"trainer": {"replicas": 3}}, "replicas"),
        ({"trainer": {"learners": 0}}, "/trainer/learners"),
        ({"trainer": {"learners": "two"}}, "/trainer/learners"),
        ({"memory": {"shards": 0}}, "/memory/shards"),
        ({"memory": {"servers": 2}}, "servers"),
        ({"rollout": {"extraEnv": [{"value": "x"}]}}, "/rollout/extraEnv/0"),
        ({"redis": {"image": {"pullPolicy": "Sometimes"}}}, "/redis/image/pullPolicy"),
        ({"externalRedis": {"enabled": True}}, "/externalRedis"),
        ({"externalRedis": {"enabled": True, "url": "http://redis:6379"}}, "/externalRedis/url"),
        ({"externalS3": {"enabled": True}}, "/externalS3"),
        ({"credentials": {"s3SecretKey": "short"}}, "/credentials/s3SecretKey"),
        ({"config": {"memory": "redis://user:pw@host:6379/0"}}, "/config/memory"),
        ({"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled"),
        ({"networkPolicy": {"ingress": []}}, "ingress"),
        ({"networkPolicy": {"metricsFrom": [{"namespace": "monitoring"}]}}, "/networkPolicy/metricsFrom/0"),
        ({"networkPolicy": {"metricsFrom": [{}]}}, "/networkPolicy/metricsFrom/0"),
        ({"networkPolicy": {"controlFrom": [{"ipBlock": {"cidr": "10.0.0.1"}}]}}, "/networkPolicy/controlFrom/0"),
        ({"networkPolicy": {"controlFrom": [{**API_SERVER, **MONITORING}]}}, "/networkPolicy/controlFrom/0"),
        (
            {
                "networkPolicy": {
                    "controlFrom": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}]
                }
            },
            "/networkPolicy/controlFrom/0",
        ),
        ({"networkPolicy": {"egress": {"restrict": "no"}}}, "/networkPolicy/egress/restrict"),
        (
            {"networkPolicy": {"egress": {"extraRules": [{"ports": [{"protocol": "ICMP"}]}]}}},
            "/networkPolicy/egress/extraRules/0",
        ),
        (
            {"networkPolicy": {"egress": {"extraRules": [{"ports": [{"port": 70000}]}]}}},
            "/networkPolicy/egress/extraRules/0",
        ),
        ({"networkPolicy": {"egress": {"extraRules": [{}]}}}, "/networkPolicy/egress/extraRules/0"),
        ({"rbac": {"create": "yes"}}, "/rbac/create"),
        ({"networkPolicy": {"apiServerCIDRs": ["10.0.0.1"]}}, "/networkPolicy/apiServerCIDRs/0"),
        (
            {"rollout": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}]}},
            "/rollout/topologySpreadConstraints/0",
        ),
        ({"trainer": {"extraVolumeMounts": [{"name": "ca", "mountPath": "relative"}]}}, "/trainer/extraVolumeMounts/0"),
        ({"redis": {"extraVolumes": [{"configMap": {"name": "x"}}]}}, "/redis/extraVolumes/0"),
        ({"s3": {"podSecurityContext": {"runAsUser": -1}}}, "/s3/podSecurityContext/runAsUser"),
        ({"evaluator": {"priorityClassName": 3}}, "/evaluator/priorityClassName"),
        ({"rbac": {"serviceAccountName": "x"}}, "serviceAccountName"),
    ],
)
def test_schema_rejects_wrong_values(values, complaint):
    with pytest.raises(helm.HelmValuesError, match=complaint):
        _chart().validate_schema(with_image(values))
    with pytest.raises(helm.HelmValuesError):
        _chart().render(with_image(values), name=RELEASE, namespace=NAMESPACE)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_schema_accepts_the_value_sets(name):
    _chart().validate_schema(with_image(VALUE_SETS[name]))


def test_external_redis_url_with_password_is_refused():
    values = {"externalRedis": {"enabled": True, "url": "redis://default:hunter2@redis:6379/0"}}
    with pytest.raises(helm.HelmError, match="must not carry a password"):
        _chart().render(with_image(values), name=RELEASE, namespace=NAMESPACE)


# -- objects, names and labels -----------------------------------------------------------------------------


def test_objects_of_a_default_release():
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in render())
    assert kinds == sorted(
        [
            ("ConfigMap", "drl-config"),
            ("Secret", "drl-credentials"),
            ("ServiceAccount", "drl"),
            ("Role", "drl"),
            ("RoleBinding", "drl"),
            ("Job", "drl-trainer"),
            ("Job", "drl-rollout"),
            ("Job", "drl-evaluator"),
            ("StatefulSet", "drl-redis"),
            ("Service", "drl-redis"),
            ("StatefulSet", "drl-s3"),
            ("Service", "drl-s3"),
            ("Pod", "drl-test-run"),
            ("NetworkPolicy", "drl-redis"),
            ("NetworkPolicy", "drl-s3"),
            ("NetworkPolicy", "drl-roles"),
        ]
    )


def test_names_follow_the_release_and_labels_the_run():
    docs = render({"runName": "exp-7"}, name="team")
    names = {d["metadata"]["name"] for d in docs}
    assert {
        "team-drl-config",
        "team-drl-credentials",
        "team-drl",
        "team-drl-trainer",
        "team-drl-rollout",
        "team-drl-evaluator",
        "team-drl-redis",
        "team-drl-s3",
    } <= names
    for doc in docs:
        assert doc["metadata"]["labels"]["drl.dev/run"] == "exp-7"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "exp-7"
    env = env_of(role_container(docs, "trainer", "team-drl"))
    assert env["DRL_RUN"]["value"] == "exp-7"
    assert env["DRL_MEMORY_URL"]["value"] == "redis://team-drl-redis:6379/0"
    assert json.loads(find(docs, "ConfigMap", "team-drl-config")["data"]["config.json"])["run_name"] == "exp-7"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_and_pod_carries_the_labels(name):
    values = VALUE_SETS[name]
    run = values.get("runName") or RELEASE
    docs = render(values)
    labelled = [(d["kind"], d["metadata"]) for d in docs]
    labelled += [("pod of " + n, meta) for n, meta, _ in pod_specs(docs)]
    for what, meta in labelled:
        labels = meta.get("labels", {})
        if labels.get("app.kubernetes.io/component") == "orchestrator":
            assert "drl.dev/run" not in labels, f"drl-orchestrate delete {run} would delete {meta['name']}"
            labels = {**labels, "drl.dev/run": run}
        missing = [k for k in LABELS if k not in labels]
        assert not missing, f"{what} {meta.get('name', '')} lacks {missing}"
        assert labels["app.kubernetes.io/name"] == "drl"
        assert labels["app.kubernetes.io/part-of"] == "drl"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == run
        assert labels["drl.dev/run"] == run
    shared = {
        "ConfigMap": "config",
        "Secret": "credentials",
        "ServiceAccount": "rbac",
        "Role": "rbac",
        "RoleBinding": "rbac",
        "Pod": "test",
        "NetworkPolicy": "network",
    }
    for d in docs:
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        if d["metadata"]["name"] == "drl-orchestrator":
            assert component == "orchestrator"
        elif d["kind"] in ("Job", "StatefulSet", "Service"):
            assert component == d["metadata"]["name"].removesuffix("-group").rsplit("-", 1)[1]
        else:
            assert component == shared[d["kind"]]


def test_service_account_and_role_grant_nothing_but_the_config():
    docs = render()
    assert find(docs, "ServiceAccount", "drl")["automountServiceAccountToken"] is False
    [rule] = find(docs, "Role", "drl")["rules"]
    assert rule == {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["drl-config"], "verbs": ["get"]}
    binding = find(docs, "RoleBinding", "drl")
    assert binding["roleRef"]["name"] == "drl"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "drl", "namespace": NAMESPACE}]
    for name, _, spec in pod_specs(docs):
        assert spec["serviceAccountName"] == "drl", name
        assert spec["automountServiceAccountToken"] is False, name


def test_no_pod_of_the_run_gets_a_kubernetes_api_token():
    for name in sorted(VALUE_SETS):
        docs = render(VALUE_SETS[name])
        for obj, _meta, spec in pod_specs(docs):
            assert spec["automountServiceAccountToken"] is False, (name, obj)
            assert spec["serviceAccountName"] == "drl", (name, obj)
            assert not any(v.get("projected") or v.get("secret") for v in spec.get("volumes", [])), (name, obj)


# -- network policies --------------------------------------------------------------------------------------

RUN_PODS = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "drl", "drl.dev/run": RELEASE}}}
DNS = {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def selects(selector: dict, labels: dict) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions with In) selects a pod with these labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def pod_labels(docs: list[dict]) -> dict[str, dict]:
    return {meta["labels"]["app.kubernetes.io/component"]: meta["labels"] for _, meta, _ in pod_specs(docs)}


def test_redis_and_the_s3_server_admit_only_the_runs_pods():
    docs = render()
    pods = pod_labels(docs)
    assert set(pods) == {"trainer", "rollout", "evaluator", "redis", "s3", "test"}
    for server, port in (("redis", 6379), ("s3", 9000)):
        policy = find(docs, "NetworkPolicy", f"drl-{server}")
        spec = policy["spec"]
        assert [c for c, labels in pods.items() if selects(spec["podSelector"], labels)] == [server]
        assert spec["podSelector"] == find(docs, "StatefulSet", f"drl-{server}")["spec"]["selector"]
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["ingress"] == [{"from": [RUN_PODS], "ports": [{"protocol": "TCP", "port": port}]}]
        assert "namespaceSelector" not in json.dumps(spec), "other namespaces stay out"
    assert all(selects(RUN_PODS["podSelector"], labels) for labels in pods.values()), "helm test reaches Redis"
    other_run = pod_labels(render({"runName": "other"}, name="other"))["trainer"]
    assert not selects(RUN_PODS["podSelector"], other_run)


ORCHESTRATOR_PODS = {
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "drl", "app.kubernetes.io/component": "orchestrator"}}
}


def admitted(rule: dict, labels: dict, namespace_labels: dict | None = None) -> bool:
    """Whether an ingress rule admits a pod with ``labels`` (in the release's namespace unless
    ``namespace_labels`` says otherwise); ipBlock peers never match a pod here."""
    if "from" not in rule:
        return True
    for peer in rule["from"]:
        if "ipBlock" in peer:
            continue
        in_namespace = namespace_labels is None
        if "namespaceSelector" in peer:
            in_namespace = selects(peer["namespaceSelector"], namespace_labels or {})
        if in_namespace and selects(peer.get("podSelector", {}), labels):
            return True
    return False


def test_drl_roles_admit_only_the_run_and_its_orchestrator_on_control_nobody_on_metrics_and_reach_only_dns():
    """Who may call what (docs/security.md): Stop (port 50051, no credential) only from the run's own pods and
    an in-cluster drl-orchestrate, not from any pod of the namespace; /metrics from nobody until metricsFrom or
    apiServerCIDRs name a reader."""
    docs = render()
    spec = find(docs, "NetworkPolicy", "drl-roles")["spec"]
    pods = pod_labels(docs)
    assert sorted(c for c, labels in pods.items() if selects(spec["podSelector"], labels)) == sorted(ROLES)
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    [control] = spec["ingress"]
    assert control == {"from": [RUN_PODS, ORCHESTRATOR_PODS], "ports": [{"protocol": "TCP", "port": 50051}]}
    assert all(admitted(control, labels) for labels in pods.values()), "the run's own pods"
    orchestrator = {"app.kubernetes.io/name": "drl", "app.kubernetes.io/component": "orchestrator", "app": "ci"}
    assert admitted(control, orchestrator)
    other_run = pod_labels(render({"runName": "other"}, name="other"))["trainer"]
    for stranger in ({}, {"app": "web"}, other_run):
        assert not admitted(control, stranger), stranger
    assert not admitted(control, orchestrator, {"kubernetes.io/metadata.name": "elsewhere"}), "other namespaces"
    dns, redis, s3 = spec["egress"]
    assert dns == DNS
    for rule, server, port in ((redis, "redis", 6379), (s3, "s3", 9000)):
        assert rule == {
            "to": [{"podSelector": find(docs, "StatefulSet", f"drl-{server}")["spec"]["selector"]}],
            "ports": [{"protocol": "TCP", "port": port}],
        }
    open_metrics = find(render({"networkPolicy": {"metricsOpen": True}}), "NetworkPolicy", "drl-roles")["spec"]
    assert open_metrics["ingress"][1] == {"ports": [{"protocol": "TCP", "port": 9090}]}
    ports = {p["containerPort"] for p in role_container(docs, "trainer")["ports"]}
    assert ports == {r["ports"][0]["port"] for r in open_metrics["ingress"]}, "every port the roles listen on"


def test_network_policy_peers_and_extra_egress_rules_are_added():
    docs = render(VALUE_SETS["network"])
    spec = find(docs, "NetworkPolicy", "drl-roles")["spec"]
    control, metrics = spec["ingress"]
    assert control["from"] == [RUN_PODS, ORCHESTRATOR_PODS, API_SERVER] and control["ports"][0]["port"] == 50051
    assert metrics["from"] == [MONITORING] and metrics["ports"][0]["port"] == 9090
    prometheus = {"app.kubernetes.io/name": "prometheus"}
    assert admitted(metrics, prometheus, {"kubernetes.io/metadata.name": "monitoring"})
    assert not admitted(metrics, prometheus, {"kubernetes.io/metadata.name": "default"})
    assert not admitted(metrics, pod_labels(docs)["trainer"]), "not even the run's own pods"
    assert spec["egress"][0] == DNS and spec["egress"][-1] == EXTERNAL_EGRESS and len(spec["egress"]) == 4
    spec = find(
        render({"networkPolicy": {"apiServerCIDRs": ["172.18.0.2/32", "fd00::2/128"]}}), "NetworkPolicy", "drl-roles"
    )["spec"]
    blocks = [{"ipBlock": {"cidr": "172.18.0.2/32"}}, {"ipBlock": {"cidr": "fd00::2/128"}}]
    assert spec["ingress"][1] == {"from": blocks, "ports": [{"protocol": "TCP", "port": 9090}]}


def test_external_servers_leave_egress_open_unless_extra_rules_name_them():
    docs = render(EXTERNAL)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"] == ["drl-roles"]
    spec = find(docs, "NetworkPolicy", "drl-roles")["spec"]
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    spec = find(
        render({**EXTERNAL, "networkPolicy": {"egress": {"extraRules": [EXTERNAL_EGRESS]}}}),
        "NetworkPolicy",
        "drl-roles",
    )["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [DNS, EXTERNAL_EGRESS]
    external_s3 = {"externalS3": EXTERNAL["externalS3"]}
    docs = render(external_s3)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"] == ["drl-redis", "drl-roles"]
    assert "egress" not in find(docs, "NetworkPolicy", "drl-roles")["spec"]


def test_egress_restrict_false_leaves_egress_open():
    spec = find(
        render({"networkPolicy": {"egress": {"restrict": False, "extraRules": [EXTERNAL_EGRESS]}}}),
        "NetworkPolicy",
        "drl-roles",
    )["spec"]
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec


def test_network_policies_can_be_turned_off():
    docs = render({"networkPolicy": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert len(docs) == len(render()) - 3


# -- the in-cluster orchestrator's RBAC --------------------------------------------------------------------

API_GROUPS = {
    "core": "",
    "apps": "apps",
    "batch": "batch",
    "rbac": "rbac.authorization.k8s.io",
    "networking": "networking.k8s.io",
}
CONNECT_VERBS = {
    "get": "get",
    "head": "get",
    "options": "get",
    "post": "create",
    "put": "update",
    "patch": "patch",
    "delete": "delete",
}
CLIENT_VERBS = {
    "create": "create",
    "read": "get",
    "list": "list",
    "delete": "delete",
    "patch": "patch",
    "replace": "update",
    "delete_collection": "deletecollection",
}


def _resource(kind: str) -> str:
    plural = kind.lower()
    return plural[:-1] + "ies" if plural.endswith("y") else plural + "s"


def rbac_need(group: str, method: str) -> tuple[str, str, str]:
    """(apiGroup, resource[/subresource], verb) that a kubernetes-client method call needs.

    ``create_namespaced_job`` -> (batch, jobs, create); ``read_namespaced_pod_log`` -> ("", pods/log, get);
    ``connect_get_namespaced_pod_proxy_with_path`` -> ("", pods/proxy, get).
    """
    from orchestrator.backends.kubernetes.api import KINDS

    verb, sep, rest = method.partition("_namespaced_")
    assert sep, f"{method}: not a namespaced call; extend rbac_need for it"
    if verb.startswith("connect_"):
        rbac_verb = CONNECT_VERBS[verb.removeprefix("connect_")]
    else:
        assert verb in CLIENT_VERBS, f"{method}: unknown verb {verb!r}; extend CLIENT_VERBS"
        rbac_verb = CLIENT_VERBS[verb]
    by_suffix = {suffix: kind for kind, (_, suffix) in KINDS.items()}
    suffix = max((s for s in by_suffix if rest == s or rest.startswith(s + "_")), key=len, default=None)
    assert suffix, f"{method}: no kind of kubernetes.api.KINDS matches {rest!r}"
    resource = _resource(by_suffix[suffix])
    sub = rest[len(suffix) + 1 :].removesuffix("_with_path")
    if sub:
        resource += "/" + sub
    assert group in API_GROUPS, f"{method}: unknown client group {group!r}; add it to API_GROUPS"
    return API_GROUPS[group], resource, rbac_verb


class _RecordingClient:
    """Stands in for one kubernetes client API object: records every method called, answers with real models."""

    def __init__(self, group: str, calls: set):
        from kubernetes import client

        self.group, self.calls = group, calls
        self.api_client = client.ApiClient()

    def __getattr__(self, method: str):
        from types import SimpleNamespace

        from kubernetes import client

        def call(*args, **kwargs):
            if self.group == "version":
                # GET /version, a non-resource URL every account may read (the ClusterRole
                # system:public-info-viewer); a namespaced Role neither can nor need grant it.
                assert method == "get_code", method
                return client.VersionInfo(
                    major="1",
                    minor="35",
                    git_version="v1.35.0",
                    build_date="",
                    compiler="",
                    git_commit="",
                    git_tree_state="",
                    go_version="",
                    platform="",
                )
            if self.group == "storage":
                # StorageClasses are cluster-scoped: a namespaced Role cannot grant them, and the orchestrator
                # goes on when it is refused (the run's PVC is then reported from its pod).
                assert method == "list_storage_class", method
                return client.V1StorageClassList(items=[])
            self.calls.add(rbac_need(self.group, method))
            meta = client.V1ObjectMeta(name="x", labels={})
            if method == "list_namespaced_event":
                involved = client.V1ObjectReference(kind="Job", name="drl-r1-rollout", uid="u")
                return client.CoreV1EventList(
                    items=[
                        client.CoreV1Event(
                            involved_object=involved, metadata=meta, reason="FailedCreate", message="quota"
                        )
                    ]
                )
            if method == "list_namespaced_pod":
                return client.V1PodList(items=[client.V1Pod(metadata=meta, status=client.V1PodStatus(phase="Running"))])
            if method.startswith("list_"):
                return client.V1JobList(items=[client.V1Job(metadata=meta)])
            if method == "read_namespaced_pod_log":
                return SimpleNamespace(stream=lambda *a, **k: iter([b"line\n"]), release_conn=lambda: None)
            if method.startswith("connect_"):
                assert kwargs.get("_preload_content") is False, "the proxy's body is read raw (see pod_metrics)"
                return SimpleNamespace(data=b"drl_updates_total 1\n", headers={}, release_conn=lambda: None)
            return client.V1Job(metadata=meta, status=client.V1JobStatus(active=1))

        return call


class _Groups(dict):
    def __init__(self, calls: set):
        super().__init__()
        self.calls = calls

    def __missing__(self, group: str):
        self[group] = _RecordingClient(group, self.calls)
        return self[group]


def orchestrator_calls() -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) the kubernetes backend's client makes, by driving each public method of
    KubeApi as the backend uses it (every object of a run created, deleted, listed; pods, Jobs and logs read)."""
    pytest.importorskip("kubernetes")
    import inspect

    from drl.config import ExperimentConfig
    from orchestrator.backends.kubernetes import manifests as k8s
    from orchestrator.backends.kubernetes.api import RUN_KINDS, KubeApi

    calls: set = set()
    api = KubeApi.__new__(KubeApi)
    api.client = __import__("kubernetes").client
    api.groups = _Groups(calls)
    objects = k8s.manifests(ExperimentConfig(), "r1", namespace="ns", env={})
    kinds = sorted({o["kind"] for o in objects} | set(RUN_KINDS))
    drivers = {
        "create": lambda: [api.create(o) for o in objects],
        "delete": lambda: [api.delete(kind, "ns", "x") for kind in kinds],
        "list_names": lambda: [api.list_names(kind, "ns", "drl.dev/run=r1") for kind in kinds],
        "delete_by_label": lambda: api.delete_by_label("ns", "drl.dev/run=r1"),
        "delete_pod": lambda: api.delete_pod("ns", "x"),
        "list_pods": lambda: api.list_pods("ns", "drl.dev/run=r1"),
        "job_status": lambda: api.job_status("ns", "drl-r1-trainer"),
        "pod_log": lambda: list(api.pod_log("ns", "x", "trainer")),
        "list_jobs": lambda: api.list_jobs("ns", "drl.dev/run=r1"),
        "patch_job": lambda: api.patch_job("ns", "drl-r1-rollout", {"spec": {"parallelism": 3}}),
        "pod_metrics": lambda: api.pod_metrics("ns", "x", 9090),
        "server_version": lambda: api.server_version(),
        "list_events": lambda: api.list_events("ns", "FailedCreate"),
        "storage_classes": lambda: api.storage_classes(),
    }
    public = {n for n, _ in inspect.getmembers(KubeApi, inspect.isfunction) if not n.startswith("_")}
    missing = sorted(public - set(drivers))
    assert not missing, (
        f"KubeApi.{', KubeApi.'.join(missing)}: new API calls; drive them in orchestrator_calls "
        "(tests/chart/test_chart.py) and grant them in helm/templates/orchestrator/rbac.yaml"
    )
    for name in sorted(public):
        drivers[name]()
    assert {o["kind"] for o in objects} <= set(RUN_KINDS), "drl-orchestrate delete must remove every kind it creates"
    return calls


def escalation_needs() -> set[tuple[str, str, str]]:
    """Kubernetes lets an account create a Role (or bind one) only if it holds every permission the Role grants."""
    from drl.config import ExperimentConfig
    from orchestrator.backends.kubernetes import manifests as k8s

    out = set()
    for obj in k8s.manifests(ExperimentConfig(), "r1", namespace="ns", env={}):
        if obj["kind"] == "Role":
            out |= {
                (g, r, v)
                for rule in obj["rules"]
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
            }
    return out


def granted(role: dict) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role["rules"]:
        assert not {"*"} & set(rule["apiGroups"] + rule["resources"] + rule["verbs"]), rule
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_orchestrator_role_grants_exactly_what_the_kubernetes_backend_calls():
    role = find(render({"rbac": {"create": True}}), "Role", "drl-orchestrator")
    have = granted(role)
    need = orchestrator_calls() | escalation_needs()
    assert not need - have, f"the orchestrator's Role lacks {sorted(need - have)}"
    assert not have - need, f"the orchestrator's Role grants unused {sorted(have - need)}"
    assert ("networking.k8s.io", "networkpolicies", "create") in need
    assert ("", "pods/log", "get") in need and ("", "pods/proxy", "get") in need
    assert ("batch", "jobs", "patch") in need
    assert ("", "events", "list") in need


def test_orchestrator_rbac_only_when_asked_and_bound_to_its_own_account():
    assert not [d for d in render() if d["metadata"]["name"] == "drl-orchestrator"]
    docs = render({"rbac": {"create": True}})
    account = find(docs, "ServiceAccount", "drl-orchestrator")
    assert account["automountServiceAccountToken"] is True
    binding = find(docs, "RoleBinding", "drl-orchestrator")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "drl-orchestrator"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "drl-orchestrator", "namespace": NAMESPACE}]
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for obj, _, spec in pod_specs(docs):
        assert spec["serviceAccountName"] != "drl-orchestrator", obj


# -- jobs, commands, environment ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 32, 64])
def test_rollout_job_runs_one_indexed_pod_per_worker(workers):
    docs = render({"workers": workers})
    job = find(docs, "Job", "drl-rollout")["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["parallelism"] == job["completions"] == workers
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"
    index = env_of(role_container(docs, "rollout"))["DRL_WORKER_INDEX"]
    assert index["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    config = json.loads(find(docs, "ConfigMap", "drl-config")["data"]["config.json"])
    assert config["workers"] == workers


def test_a_group_of_learners_is_an_indexed_trainer_job_with_a_headless_service():
    """trainer.learners K > 1: one trainer Job of K pods (the completion index is the rank, each pod one GPU), a
    headless Service <fullname>-trainer-group whose DNS names the pods, rank 0's name and port the rendezvous."""
    docs = render(LEARNERS)
    job = find(docs, "Job", "drl-trainer")["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimit"]) == ("Indexed", 2, 2, 12)
    pod = job["template"]["spec"]
    assert pod["subdomain"] == "drl-trainer-group" and pod["restartPolicy"] == "OnFailure"
    container = role_container(docs, "trainer")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1, "one GPU per learner"
    env = env_of(container)
    assert env["DRL_LEARNER_RANK"]["valueFrom"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
    assert env["MASTER_ADDR"]["value"] == "drl-trainer-0.drl-trainer-group"
    assert env["MASTER_PORT"]["value"] == "29500"
    service = find(docs, "Service", "drl-trainer-group")
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    spec = service["spec"]
    assert spec["clusterIP"] == "None" and spec["publishNotReadyAddresses"] is True
    assert spec["ports"] == [{"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]
    pods = pod_labels(docs)
    assert [c for c, labels in pods.items() if selects({"matchLabels": spec["selector"]}, labels)] == ["trainer"]
    for role in ("rollout", "evaluator"):
        assert not {"DRL_LEARNER_RANK", "MASTER_ADDR", "MASTER_PORT"} & set(env_of(role_container(docs, role)))
        assert "subdomain" not in find(docs, "Job", f"drl-{role}")["spec"]["template"]["spec"]
    assert not [d for d in docs if "learner" in d["metadata"]["name"]]
    config = resolve(json.loads(find(docs, "ConfigMap", "drl-config")["data"]["config.json"]))
    assert (config.learners, config.memory_shards, config.device) == (2, 2, "cuda")
    notes = render_files(LEARNERS)["drl/templates/NOTES.txt"]
    assert "batch.kubernetes.io/job-name=drl-trainer,batch.kubernetes.io/job-completion-index=0" in notes


def test_learners_and_shards_come_from_the_values_or_the_config_overrides():
    """trainer.learners and memory.shards above 1 are written to config.json over config.learners and
    config.memory_shards; at 1 (the defaults) config.json is what it was, so the overrides still apply."""

    def group(values: dict) -> tuple[int, int, int]:
        docs = render(values)
        config = json.loads(find(docs, "ConfigMap", "drl-config")["data"]["config.json"])
        return (
            find(docs, "Job", "drl-trainer")["spec"]["parallelism"],
            config.get("learners"),
            config.get("memory_shards"),
        )

    assert group({}) == (1, None, None)
    assert group({"config": {"learners": 2, "memory_shards": 4}}) == (2, 2, 4)
    assert group({"trainer": {"learners": 3}, "memory": {"shards": 3}, "config": {"learners": 2}}) == (3, 3, 3)
    assert group({"memory": {"shards": 4}}) == (1, None, 4)
    assert [
        d["metadata"]["name"] for d in render({"config": {"learners": 2, "memory_shards": 2}}) if d["kind"] == "Service"
    ] == ["drl-redis", "drl-s3", "drl-trainer-group"]


def test_learners_alone_get_a_shard_each_as_on_the_command_line():
    """trainer.learners (or config.learners) without any shard count: one shard per learner, as ``--learners N``
    alone gives (``drl.config.learner_shards``), and config.json passes the configuration's own check."""
    for values in ({"trainer": {"learners": 2}}, {"config": {"learners": 3}}):
        config = json.loads(find(render(values), "ConfigMap", "drl-config")["data"]["config.json"])
        learners = config["learners"]
        assert config["memory_shards"] == learners > 1
        assert resolve(config).memory_shards == learners


@pytest.mark.parametrize(
    "values, got",
    [
        (
            {"trainer": {"learners": 2}, "config": {"memory_shards": 1}},
            "trainer.learners 2 needs memory.shards 2 or more: each learner reads whole "
            "experience streams (got memory.shards 1)",
        ),
        ({"trainer": {"learners": 4}, "memory": {"shards": 3}}, "trainer.learners 4 needs memory.shards 4 or more"),
        ({"config": {"learners": 3, "memory_shards": 2}}, "trainer.learners 3 needs memory.shards 3 or more"),
    ],
)
def test_more_learners_than_shards_is_refused_as_the_cli_refuses_it(values, got):
    with pytest.raises(helm.HelmError, match=re.escape(got)):
        _chart().render(with_image(values), name=RELEASE, namespace=NAMESPACE)


def test_the_trainer_pods_of_a_group_admit_one_another_on_every_port():
    """gloo and NCCL connect the ranks on ports they pick at run time, so the group's NetworkPolicy opens the
    trainer pods to one another (and nobody else); egress only where the roles' egress is limited."""
    docs = render(LEARNERS)
    spec = find(docs, "NetworkPolicy", "drl-trainer-group")["spec"]
    trainers = {"podSelector": {"matchLabels": find(docs, "Service", "drl-trainer-group")["spec"]["selector"]}}
    assert spec == {
        **trainers,
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [trainers]}],
        "egress": [{"to": [trainers]}],
    }
    assert [c for c, labels in pod_labels(docs).items() if selects(spec["podSelector"], labels)] == ["trainer"]
    spec = find(render({**LEARNERS, **EXTERNAL}), "NetworkPolicy", "drl-trainer-group")["spec"]
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    assert not [d for d in render({**LEARNERS, "networkPolicy": {"enabled": False}}) if d["kind"] == "NetworkPolicy"]


def test_trainer_and_evaluator_jobs():
    docs = render()
    for role in ("trainer", "evaluator"):
        job = find(docs, "Job", f"drl-{role}")["spec"]
        assert job["completions"] == job["parallelism"] == 1
        assert "completionMode" not in job
        assert job["template"]["spec"]["restartPolicy"] == "OnFailure"


def replacement_policies(docs: list[dict]) -> dict[str, str | None]:
    """Job name -> its podReplacementPolicy (None where the Job has none)."""
    return {d["metadata"]["name"]: d["spec"].get("podReplacementPolicy") for d in docs if d["kind"] == "Job"}


def test_indexed_jobs_replace_a_pod_only_once_it_has_failed():
    """The rollout Job and a group's trainer Job start a replacement pod only once the pod it replaces has failed
    (podReplacementPolicy: Failed), not beside it while it terminates: one pod per worker index and per rank.
    Helm's default Kubernetes version is recent, so a plain `helm template` has the field; no Job has a
    podFailurePolicy, which their restartPolicy OnFailure forbids."""
    assert replacement_policies(render()) == {"drl-trainer": None, "drl-rollout": "Failed", "drl-evaluator": None}
    assert replacement_policies(render(LEARNERS)) == {
        "drl-trainer": "Failed",
        "drl-rollout": "Failed",
        "drl-evaluator": None,
    }
    for docs in (render(), render(LEARNERS)):
        for job in (d for d in docs if d["kind"] == "Job"):
            assert "podFailurePolicy" not in job["spec"], job["metadata"]["name"]
            assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure", job["metadata"]["name"]


@pytest.mark.parametrize(
    "kube_version, has_field",
    [
        ("v1.28.15", False),
        ("v1.28.0-eks-1", False),
        ("v1.29.0", True),
        ("v1.29.3-gke.1200000", True),
        ("v1.33.1", True),
        ("v1.34.0", True),
    ],
)
def test_pod_replacement_policy_only_where_the_clusters_version_has_it(kube_version, has_field):
    """Beta (on by default) from Kubernetes 1.29, GA in 1.34: `helm template --kube-version 1.28` (the oldest the
    chart installs on) renders the Indexed Jobs without it; a provider's pre-release suffix counts as its version."""
    expected = "Failed" if has_field else None
    assert replacement_policies(render(LEARNERS, kube_version=kube_version)) == {
        "drl-trainer": expected,
        "drl-rollout": expected,
        "drl-evaluator": None,
    }
    assert replacement_policies(render(kube_version=kube_version))["drl-rollout"] == expected


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_role_containers_commands_and_environment(name):
    values = VALUE_SETS[name]
    docs = render(values)
    external = bool(values.get("externalS3", {}).get("enabled"))
    threads = str(values.get("config", {}).get("trainer_threads", 1))
    for role in ROLES:
        container = role_container(docs, role)
        assert container["name"] == role
        assert container["command"] == ["python", "-m", f"services.{role}"]
        assert "args" not in container
        env = env_of(container)
        expected = [n for n in ENV_ORDER[role] if not (n == "DRL_S3_CREATE_BUCKET" and external)]
        if role == "trainer" and values.get("trainer", {}).get("learners", 1) > 1:
            expected = [m for n in expected for m in [n, *GROUP_ENV.get(n, [])]]
        extra = [e["name"] for e in values.get(role, {}).get("extraEnv", [])]
        assert [e["name"] for e in container["env"]] == expected + extra
        assert env["DRL_CONFIG"]["valueFrom"] == {"configMapKeyRef": {"name": "drl-config", "key": "config.json"}}
        assert env["DRL_RUN"]["value"] == (values.get("runName") or RELEASE)
        assert env["DRL_RUN_DIR"]["value"] == "/var/lib/drl/run"
        assert env["DRL_STEPS_DONE"]["value"] == "0"
        assert env["PYTHONUNBUFFERED"]["value"] == "1"
        assert env["OMP_NUM_THREADS"]["value"] == (threads if role == "trainer" else "1")
        assert env.get("DRL_RUN_FILES", {}).get("value") == ("trainer" if role == "trainer" else None), (
            "the chart's trainer writes the run's files: no orchestrator stays beside a helm install"
        )
        assert env["DRL_HEARTBEAT_FILE"]["value"] == "/tmp/drl/heartbeat"
        assert env["DRL_CACHE_DIR"]["value"] == "/var/cache/drl"
        assert env["HOME"]["value"] == "/tmp"
        if not external:
            assert env["DRL_STORE"]["value"] == "s3://drl/runs"
            assert env["DRL_S3_ENDPOINT"]["value"] == "http://drl-s3:9000"
        if role == "trainer" and not external:
            assert env["DRL_S3_CREATE_BUCKET"]["value"] == "1"


def test_images():
    docs = render(CUSTOM)
    assert role_container(docs, "rollout")["image"] == "registry.example.com/drl:0.1.0"
    assert role_container(docs, "rollout")["imagePullPolicy"] == "Always"
    for _, _, spec in pod_specs(docs):
        assert spec["imagePullSecrets"] == [{"name": "registry"}]
    docs = render(GPU)
    assert role_container(docs, "trainer")["image"] == "registry.example.com/drl-cuda:dev"
    assert role_container(docs, "evaluator")["image"] == "drl:dev"
    docs = render({"image": {"tag": ""}})
    assert role_container(docs, "trainer")["image"] == f"drl:{_chart().metadata['appVersion']}"
    docs = render()
    assert (
        find(docs, "StatefulSet", "drl-redis")["spec"]["template"]["spec"]["containers"][0]["image"]
        == "valkey/valkey:8.1-alpine"
    )
    assert (
        find(docs, "StatefulSet", "drl-s3")["spec"]["template"]["spec"]["containers"][0]["image"]
        == "chrislusf/seaweedfs:4.48"
    )


# -- credentials -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_credentials_are_referenced_never_inlined(name):
    values = VALUE_SETS[name]
    docs = render(values)
    secrets = secret_values(docs)
    for doc in docs:
        if doc["kind"] == "Secret":
            continue
        leaked = secrets & set(strings(doc))
        assert not leaked, f"{doc['kind']}/{doc['metadata']['name']} inlines a credential"
    own = values.get("credentials", {}).get("existingSecret") or "drl-credentials"
    redis_secret = values.get("externalRedis", {}).get("existingSecret") or own
    s3_secret = values.get("externalS3", {}).get("existingSecret") or own
    for role in ROLES:
        env = env_of(role_container(docs, role))
        for var, secret in (
            ("DRL_MEMORY_PASSWORD", redis_secret),
            ("AWS_ACCESS_KEY_ID", s3_secret),
            ("AWS_SECRET_ACCESS_KEY", s3_secret),
        ):
            assert "value" not in env[var], var
            assert env[var]["valueFrom"]["secretKeyRef"]["name"] == secret, var


def test_given_credentials_stay_in_the_secret():
    given = {"redisPassword": "redis-pass-0123", "s3AccessKey": "access-0123", "s3SecretKey": "secret-key-0123456"}
    docs = render({"credentials": given})
    assert secret_values(docs) == set(given.values())
    for doc in docs:
        if doc["kind"] != "Secret":
            assert not set(given.values()) & set(strings(doc)), doc["metadata"]["name"]
    redis = find(docs, "StatefulSet", "drl-redis")["spec"]["template"]["spec"]["containers"][0]
    assert env_of(redis)["VALKEY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "drl-credentials",
        "key": "redis-password",
    }
    s3 = env_of(find(docs, "StatefulSet", "drl-s3")["spec"]["template"]["spec"]["containers"][0])
    assert s3["S3_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "drl-credentials", "key": "s3-access-key"}
    assert s3["S3_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "drl-credentials", "key": "s3-secret-key"}


def test_an_existing_secret_replaces_the_charts_and_every_reference_follows_it():
    """Bitnami's existingSecret: the chart renders no Secret (so renders without a cluster, where lookup sees
    nothing and passwords would be generated anew, are stable) and the roles, Valkey, the S3 server and the test
    pod read the user's Secret under the key names given."""
    values = VALUE_SETS["existing-secret"]
    docs = render(values)
    assert not [d for d in docs if d["kind"] == "Secret"]
    ref = {
        "redis": {"name": "drl-run-secrets", "key": "valkey"},
        "access": {"name": "drl-run-secrets", "key": "id"},
        "secret": {"name": "drl-run-secrets", "key": "key"},
    }
    for role in ROLES:
        env = env_of(role_container(docs, role))
        assert env["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == ref["redis"]
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == ref["access"]
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == ref["secret"]
    redis = find(docs, "StatefulSet", "drl-redis")["spec"]["template"]["spec"]["containers"][0]
    assert env_of(redis)["VALKEY_PASSWORD"]["valueFrom"]["secretKeyRef"] == ref["redis"]
    s3 = env_of(s3_server(docs)[1])
    assert s3["S3_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == ref["access"]
    assert s3["S3_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == ref["secret"]
    test_pod = find(docs, "Pod", "drl-test-run")["spec"]["containers"][0]
    assert env_of(test_pod)["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == ref["redis"]
    assert render_files(values) == _chart().render(with_image(values), name=RELEASE, namespace=NAMESPACE), (
        "nothing random: two renders are the same"
    )
    external = render({**values, **EXTERNAL})
    env = env_of(role_container(external, "trainer"))
    assert env["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "team-redis", "key": "password"}, (
        "an external server's own Secret wins"
    )


def test_without_an_existing_secret_renders_without_a_cluster_generate_new_passwords():
    """What existingSecret is for: helm template (and Argo CD) have no cluster for lookup."""
    first = _chart().render(with_image({}), name=RELEASE, namespace=NAMESPACE)["drl/templates/secret.yaml"]
    second = _chart().render(with_image({}), name=RELEASE, namespace=NAMESPACE)["drl/templates/secret.yaml"]
    assert first != second


@pytest.mark.parametrize("key", ["redisPassword", "s3AccessKey", "s3SecretKey"])
def test_an_existing_secret_and_a_given_credential_are_refused_together(key):
    values = {"credentials": {"existingSecret": "mine", key: "value-long-enough"}}
    both = f"credentials.existingSecret \\(mine\\) and credentials.{key} are both set"
    with pytest.raises(helm.HelmError, match=both):
        _chart().render(with_image(values), name=RELEASE, namespace=NAMESPACE)


def test_generated_credentials_are_long_enough_for_the_s3_server():
    secret = next(d for d in render() if d["kind"] == "Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(data) == {"redis-password", "s3-access-key", "s3-secret-key"}
    assert len(data["redis-password"]) >= 24
    assert len(data["s3-access-key"]) >= 3 and len(data["s3-secret-key"]) >= 8


# -- the configuration -------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset, workers", [("sac", 32), ("td3", 2), ("ppo", 4), ("dqn", 64)])
def test_config_json_resolves_to_the_requested_run(preset, workers):
    docs = render({"preset": preset, "workers": workers, "config": {"eval_episodes": 3}})
    config_map = find(docs, "ConfigMap", "drl-config")
    assert set(config_map["data"]) == {"config.json"}
    data = json.loads(config_map["data"]["config.json"])
    assert "env" not in data
    cfg = resolve(data)
    assert (cfg.preset, cfg.algorithm, cfg.workers, cfg.mode, cfg.run_name, cfg.eval_episodes) == (
        preset,
        preset,
        workers,
        "sync",
        RELEASE,
        3,
    )


def test_an_empty_mode_is_the_presets():
    """appo runs only ASYNC and the others start SYNC: the chart leaves mode out unless it is set."""
    for preset, mode in (("appo", "async"), ("sac", "sync")):
        data = json.loads(find(render({"preset": preset}), "ConfigMap", "drl-config")["data"]["config.json"])
        assert "mode" not in data and resolve(data).mode == mode
    config_map = find(render({"preset": "sac", "mode": "async"}), "ConfigMap", "drl-config")
    data = json.loads(config_map["data"]["config.json"])
    assert data["mode"] == "async"


def test_chart_lists_exactly_the_registrys_presets():
    """The schema's preset enum (and algorithm enum, should the chart ever list one), the values.yaml comment and
    docs/kubernetes.md name every preset of drl.presets and nothing else, so a preset cannot be added or removed
    without the chart following."""
    props = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert props["preset"]["enum"] == list(PRESETS)
    if "algorithm" in props:
        assert props["algorithm"]["enum"] == list(ALGORITHMS)
    comment = next(
        line
        for line in (CHART / "values.yaml").read_text().splitlines()
        if line.startswith("# -- Preset the run starts from:")
    )
    named = comment.split(":", 1)[1].rstrip(".").replace(" or ", ", ").split(", ")
    assert [n.strip() for n in named] == list(PRESETS)
    assert "/".join(f"`{p}`" for p in PRESETS) in (ROOT / "docs" / "kubernetes.md").read_text()


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_renders_and_resolves(preset):
    data = json.loads(find(render({"preset": preset}), "ConfigMap", "drl-config")["data"]["config.json"])
    cfg = resolve(data)
    assert cfg.preset == preset and cfg.algorithm in ALGORITHMS


def test_config_json_overrides_and_top_level_values_win():
    values = {
        "preset": "sac",
        "env": "HalfCheetah-v5",
        "workers": 3,
        "mode": "async",
        "steps": 50_000,
        "seed": 11,
        "config": {"sac": {"lr": 0.001}, "workers": 99, "trainer_threads": 4, "batch_transitions": 128},
    }
    docs = render(values)
    data = json.loads(find(docs, "ConfigMap", "drl-config")["data"]["config.json"])
    cfg = resolve(data)
    assert (cfg.env, cfg.workers, cfg.mode, cfg.steps, cfg.seed) == ("HalfCheetah-v5", 3, "async", 50_000, 11)
    assert (cfg.sac.lr, cfg.trainer_threads, cfg.batch_transitions) == (0.001, 4, 128)
    assert cfg.sac.hidden == (256, 256)
    assert env_of(role_container(docs, "trainer"))["OMP_NUM_THREADS"]["value"] == "4"
    assert find(docs, "Job", "drl-rollout")["spec"]["parallelism"] == 3


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_config_map_holds_no_credentials(name):
    docs = render(VALUE_SETS[name])
    config_map = find(docs, "ConfigMap", "drl-config")
    text = json.dumps(config_map)
    for secret in secret_values(docs):
        assert secret not in text
    data = json.loads(config_map["data"]["config.json"])
    assert not {"memory", "store"} & set(data)
    assert "password" not in text.lower()
    resolve(data)


# -- external services and GPU -----------------------------------------------------------------------------


def test_external_redis_and_s3_replace_the_built_in_ones():
    docs = render(EXTERNAL)
    assert not [d for d in docs if d["kind"] in ("StatefulSet", "Service")]
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs}
    assert not {"redis", "s3"} & components
    for role in ROLES:
        env = env_of(role_container(docs, role))
        assert env["DRL_MEMORY_URL"]["value"] == "rediss://redis.example.internal:6380/2"
        assert env["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "team-redis", "key": "password"}
        assert env["DRL_STORE"]["value"] == "s3://team-runs/drl/exp"
        assert env["DRL_S3_ENDPOINT"]["value"] == "https://s3.eu-west-1.amazonaws.com"
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "team-s3", "key": "id"}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "team-s3", "key": "key"}
        assert "DRL_S3_CREATE_BUCKET" not in env
    test_pod = find(docs, "Pod", "drl-test-run")
    assert env_of(test_pod["spec"]["containers"][0])["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "team-redis",
        "key": "password",
    }


def test_external_redis_without_secret_uses_the_release_secret():
    docs = render(
        {
            "externalRedis": {"enabled": True, "url": "redis://redis.shared:6379/0"},
            "credentials": {"redisPassword": "shared-pass"},
        }
    )
    assert not [d for d in docs if d["metadata"]["name"] == "drl-redis"]
    assert [d for d in docs if d["metadata"]["name"] == "drl-s3"]
    env = env_of(role_container(docs, "rollout"))
    assert env["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "drl-credentials",
        "key": "redis-password",
    }
    assert "shared-pass" in secret_values(docs)


def test_gpu_trainer_gets_the_gpu_limit():
    docs = render(GPU)
    resources = role_container(docs, "trainer")["resources"]
    assert resources["limits"] == {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 2}, "merged with the defaults"
    for role in ("rollout", "evaluator"):
        assert "nvidia.com/gpu" not in json.dumps(role_container(docs, role))
    docs = render({"trainer": {"gpu": {"enabled": True, "resourceName": "amd.com/gpu"}}})
    assert role_container(docs, "trainer")["resources"]["limits"] == {"cpu": "4", "memory": "10Gi", "amd.com/gpu": 1}
    assert "nvidia.com/gpu" not in json.dumps(role_container(render(), "trainer"))


def test_gpu_trainer_trains_on_the_gpu():
    """The GPU option also sets the run's device (the trainer is the only service that reads it), unless the
    configuration names one; without it the device is the default, auto."""

    def device_of(values: dict) -> str:
        data = json.loads(find(render(values), "ConfigMap", "drl-config")["data"]["config.json"])
        return resolve(data).device

    assert device_of(GPU) == "cuda"
    assert device_of({"trainer": {"gpu": {"enabled": True}}, "config": {"device": "cuda:1"}}) == "cuda:1"
    assert device_of({}) == "auto"


# The chart's default resources (helm/values.yaml); drl-orchestrate render sets the same (manifests.RESOURCES).
DEFAULT_RESOURCES = {
    "trainer": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "4", "memory": "10Gi"}},
    "rollout": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
    "evaluator": {"requests": {"cpu": "250m", "memory": "768Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
    "redis": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "s3": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_container_has_requests_and_limits(name):
    """No BestEffort pod: a namespace with a ResourceQuota (requests and limits of cpu and memory) admits every
    pod, 32 workers cannot pack one node unaccounted, and the memory server is Guaranteed (evicted last)."""
    docs = render(VALUE_SETS[name])
    for obj, _meta, spec in pod_specs(docs):
        for container in spec["containers"]:
            resources = container["resources"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[kind]), (obj, kind)
    if name == "default":
        for component, expected in DEFAULT_RESOURCES.items():
            kind = "StatefulSet" if component in ("redis", "s3") else "Job"
            container = find(docs, kind, f"drl-{component}")["spec"]["template"]["spec"]["containers"][0]
            assert container["resources"] == expected, component
        redis = DEFAULT_RESOURCES["redis"]
        assert redis["requests"] == redis["limits"], "Guaranteed QoS"


def test_a_default_can_be_dropped_with_null():
    docs = render({"trainer": {"resources": {"limits": {"cpu": None}}}})
    assert role_container(docs, "trainer")["resources"]["limits"] == {"memory": "10Gi"}


def test_custom_resources_and_scheduling():
    docs = render(CUSTOM)
    for component, kind in (
        ("trainer", "Job"),
        ("rollout", "Job"),
        ("evaluator", "Job"),
        ("redis", "StatefulSet"),
        ("s3", "StatefulSet"),
    ):
        spec = find(docs, kind, f"drl-{component}")["spec"]["template"]["spec"]
        block = CUSTOM[component]
        defaults = DEFAULT_RESOURCES[component]
        merged = {kind: {**defaults.get(kind, {}), **block["resources"].get(kind, {})} for kind in defaults}
        assert spec["containers"][0]["resources"] == merged, component
        assert spec["nodeSelector"] == block["nodeSelector"], component
        assert spec.get("tolerations") == block.get("tolerations"), component
        assert spec.get("affinity") == block.get("affinity"), component
    s3 = find(docs, "StatefulSet", "drl-s3")["spec"]
    [claim] = s3["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert "data" not in {v["name"] for v in s3["template"]["spec"]["volumes"]}
    default_spec = find(render(), "Job", "drl-trainer")["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "affinity"} & set(default_spec)


# -- pods: checksum, security, probes ----------------------------------------------------------------------


def config_without_workers(docs: list[dict]) -> dict:
    config = json.loads(find(docs, "ConfigMap", "drl-config")["data"]["config.json"])
    config.pop("workers")
    return config


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_job_pod_templates_carry_the_config_checksum_without_workers_and_statefulsets_none(name):
    """The drl roles' Job templates carry sha256 of config.json less `workers` (the one value a running run
    takes); Valkey and the S3 server read no config.json, so no configuration change rolls them (and loses the
    run's streams with the Valkey pod)."""
    docs = render(VALUE_SETS[name])
    expected = hashlib.sha256(
        json.dumps(config_without_workers(docs), separators=(",", ":"), sort_keys=True).encode()
    ).hexdigest()
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert sorted(j["metadata"]["name"] for j in jobs) == ["drl-evaluator", "drl-rollout", "drl-trainer"]
    for job in jobs:
        assert job["spec"]["template"]["metadata"]["annotations"] == {"checksum/config": expected}, job["metadata"][
            "name"
        ]
    sets = [d for d in docs if d["kind"] == "StatefulSet"]
    assert len(sets) == (0 if name == "external" else 2)
    for obj in sets:
        assert "annotations" not in obj["spec"]["template"]["metadata"], obj["metadata"]["name"]


def pod_templates(values: dict) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"] for d in render(values) if d["kind"] in WORKLOAD_KINDS}


def test_a_changed_worker_count_changes_no_pod_template_and_only_the_rollout_jobs_size():
    """`--set workers=3` goes through the elastic path: every pod template (Jobs and StatefulSets) stays as it
    was; of the Jobs only the rollout Job's completions, parallelism and backoffLimit change."""
    assert pod_templates({"workers": 2}) == pod_templates({"workers": 3})
    two, three = render({"workers": 2}), render({"workers": 3})
    for kind, name in (
        ("Job", "drl-trainer"),
        ("Job", "drl-evaluator"),
        ("StatefulSet", "drl-redis"),
        ("StatefulSet", "drl-s3"),
    ):
        assert find(two, kind, name) == find(three, kind, name), name
    a, b = find(two, "Job", "drl-rollout"), find(three, "Job", "drl-rollout")
    changed = {k for k in set(a["spec"]) | set(b["spec"]) if a["spec"].get(k) != b["spec"].get(k)}
    assert changed == {"completions", "parallelism", "backoffLimit"}
    assert (b["spec"]["completions"], b["spec"]["parallelism"], b["spec"]["backoffLimit"]) == (3, 3, 18)
    assert a["metadata"] == b["metadata"]
    assert json.loads(find(three, "ConfigMap", "drl-config")["data"]["config.json"])["workers"] == 3


def test_any_other_configuration_change_changes_every_jobs_template_and_no_statefulset():
    def checksum(values):
        return pod_templates(values)["drl-trainer"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"config": {"sac": {"lr": 0.01}}})
    assert checksum({}) != checksum({"seed": 3})
    before, after = pod_templates({}), pod_templates({"seed": 3})
    for name in ("drl-trainer", "drl-rollout", "drl-evaluator"):
        assert before[name] != after[name], name
    for name in ("drl-redis", "drl-s3"):
        assert before[name] == after[name], name


def pod_template_parts(values: dict, role: str) -> dict:
    job = find(render(values), "Job", f"drl-{role}")
    return json.loads(job["metadata"]["annotations"]["drl.dev/pod-template"])


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_each_job_records_what_its_pods_run_part_by_part(name):
    """drl.dev/pod-template, which an upgrade compares with the live Job's before applying anything: the image
    as it is, the configuration's checksum, and a hash of every other part of the pod template."""
    values = VALUE_SETS[name]
    docs = render(values)
    for role in ROLES:
        job = find(docs, "Job", f"drl-{role}")
        template = job["spec"]["template"]
        [container] = template["spec"]["containers"]
        parts = pod_template_parts(values, role)
        assert parts["image"] == container["image"]
        assert template["metadata"]["annotations"]["checksum/config"].startswith(parts["config"])
        expected = {"image", "config", "metadata.labels", "metadata.annotations"}
        expected |= {f"spec.{k}" for k in template["spec"] if k != "containers"}
        expected |= {f"container.{k}" for k in container if k != "image"}
        assert set(parts) == expected, role


@pytest.mark.parametrize(
    "change, parts",
    [
        ({"workers": 5}, set()),
        ({"image": {"tag": "v2"}}, {"image"}),
        ({"seed": 4}, {"config"}),
        ({"config": {"trainer_threads": 2}}, {"config"}),
        ({"rollout": {"resources": {"limits": {"cpu": "2"}}}}, {"container.resources"}),
        ({"rollout": {"nodeSelector": {"pool": "spot"}}}, {"spec.nodeSelector"}),
        ({"rollout": {"extraEnv": [{"name": "A", "value": "1"}]}}, {"container.env"}),
    ],
)
def test_the_parts_name_what_changed(change, parts):
    before = pod_template_parts({}, "rollout")
    after = pod_template_parts(change, "rollout")
    assert {k for k in set(before) | set(after) if before.get(k) != after.get(k)} == parts
    if "image" in parts:
        assert (before["image"], after["image"]) == ("drl:dev", "drl:v2")


def test_the_trainers_threads_change_its_environment_too():
    before = pod_template_parts({}, "trainer")
    after = pod_template_parts({"config": {"trainer_threads": 2}}, "trainer")
    assert {k for k in before if before[k] != after[k]} == {"config", "container.env"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_pod_runs_non_root_and_locked_down(name):
    docs = render(VALUE_SETS[name])
    uids = {"redis": 999, "s3": 1000}
    for obj, meta, spec in pod_specs(docs):
        component = meta["labels"]["app.kubernetes.io/component"]
        uid = uids.get(component, 10001)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == uid, obj
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, obj
        assert spec["enableServiceLinks"] is False, obj
        emptydirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == uid, obj
            assert sc["readOnlyRootFilesystem"] is True, obj
            assert sc["allowPrivilegeEscalation"] is False, obj
            assert sc["capabilities"] == {"drop": ["ALL"]}, obj
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, obj
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/tmp"] in emptydirs, obj
            if component in ROLES:
                assert mounts["/var/lib/drl/run"] in emptydirs, obj
                assert mounts["/var/cache/drl"] in emptydirs, obj
                assert mounts["/tmp/drl"] in emptydirs, obj
            if component in ("redis", "s3"):
                assert "/data" in mounts, obj


def test_security_contexts_volumes_priority_and_spread_come_from_each_components_values():
    docs = render(POD_EXTRAS)
    specs = {meta["labels"]["app.kubernetes.io/component"]: spec for _, meta, spec in pod_specs(docs)}
    for component in ("trainer", "rollout", "evaluator", "redis", "s3", "test"):
        spec = specs[component]
        assert spec["securityContext"]["supplementalGroups"] == [4242], component
        assert spec["securityContext"]["runAsNonRoot"] is True, "merged with the defaults"
        assert CA in spec["volumes"], component
        [container] = spec["containers"]
        assert CA_MOUNT in container["volumeMounts"], component
        assert container["volumeMounts"][0]["mountPath"] in ("/tmp", "/data"), "the chart's own mounts first"
        if component != "test":
            assert spec["priorityClassName"] == "drl-batch" and spec["topologySpreadConstraints"] == [SPREAD]
    test_pod = find(
        render(
            {
                "evaluator": {
                    "extraEnv": [{"name": "DRL_MEMORY_TLS_CA", "value": "/etc/drl/ca/ca.pem"}],
                    "extraVolumes": [CA],
                    "extraVolumeMounts": [CA_MOUNT],
                }
            }
        ),
        "Pod",
        "drl-test-run",
    )["spec"]
    assert env_of(test_pod["containers"][0])["DRL_MEMORY_TLS_CA"]["value"] == "/etc/drl/ca/ca.pem", (
        "the test pod reaches a TLS Redis as the evaluator does"
    )
    default = find(render(), "Job", "drl-rollout")["spec"]["template"]["spec"]
    assert not {"priorityClassName", "topologySpreadConstraints"} & set(default)
    assert [v["name"] for v in default["volumes"]] == ["tmp", "heartbeat", "run", "cache"]


def test_a_security_context_can_be_changed_and_a_default_dropped():
    """For a cluster that assigns user ids itself (OpenShift's restricted SCC): runAsUser and fsGroup removed."""
    none = {"runAsUser": None, "runAsGroup": None, "fsGroup": None}
    docs = render(
        {
            "trainer": {
                "podSecurityContext": none,
                "containerSecurityContext": {"runAsUser": None, "runAsGroup": None},
            },
            "s3": {"containerSecurityContext": {"readOnlyRootFilesystem": False}},
        }
    )
    trainer = find(docs, "Job", "drl-trainer")["spec"]["template"]["spec"]
    assert trainer["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert "runAsUser" not in trainer["containers"][0]["securityContext"]
    assert trainer["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    s3 = find(docs, "StatefulSet", "drl-s3")["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert s3["readOnlyRootFilesystem"] is False and s3["runAsUser"] == 1000
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_drl_roles_probe_the_grpc_health_service_and_expose_their_endpoints():
    docs = render()
    for role in ROLES:
        container = role_container(docs, role)
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert container[probe]["grpc"] == {"port": 50051}, (role, probe)
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"grpc": 50051, "metrics": 9090}
        env = env_of(container)
        assert env["DRL_CONTROL_PORT"]["value"] == "50051" and env["DRL_METRICS_PORT"]["value"] == "9090"
        assert env["DRL_CONTROL_HOST"]["value"] == env["DRL_METRICS_HOST"]["value"] == "0.0.0.0"


def test_valkey_takes_its_password_on_stdin():
    docs = render()
    container = find(docs, "StatefulSet", "drl-redis")["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][-1]
    assert "valkey-server" in script and "--save ''" in script and "--appendonly no" in script
    assert 'requirepass "$VALKEY_PASSWORD"' in script
    assert container["ports"][0]["containerPort"] == 6379
    service = find(docs, "Service", "drl-redis")["spec"]
    assert service["ports"][0]["port"] == 6379
    assert service["selector"] == find(docs, "StatefulSet", "drl-redis")["spec"]["selector"]["matchLabels"]
    s3 = find(docs, "Service", "drl-s3")["spec"]
    assert s3["ports"][0]["port"] == 9000


def s3_server(docs: list[dict]) -> tuple[dict, dict]:
    stateful_set = find(docs, "StatefulSet", "drl-s3")
    return stateful_set["spec"], stateful_set["spec"]["template"]["spec"]["containers"][0]


def test_the_s3_server_is_seaweedfs_with_its_one_identity_from_the_secret(tmp_path):
    """MinIO's community images are published no more: the run's own S3 server is SeaweedFS in one process
    (``weed mini``), its S3 port 9000, its identity (the Secret's keys, with every action, for the trainer to
    create the bucket) written to a file by the script, not given as an argument. The script runs here under
    sh with a stand-in ``weed``."""
    docs = render()
    _, container = s3_server(docs)
    assert container["image"] == "chrislusf/seaweedfs:4.48"
    script = container["command"][-1]
    assert container["command"][:2] == ["sh", "-c"]
    assert "exec weed mini -dir=/data -ip.bind=0.0.0.0 -s3.port=9000 -s3.config=/tmp/s3.json" in script
    assert "-webdav=false -admin.ui=false" in script
    env = env_of(container)
    assert env["S3_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "drl-credentials", "key": "s3-access-key"}
    assert env["S3_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "drl-credentials", "key": "s3-secret-key"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "s3"}
    assert container["livenessProbe"]["tcpSocket"] == {"port": "s3"}
    assert env_of(role_container(docs, "trainer"))["DRL_S3_ENDPOINT"]["value"] == "http://drl-s3:9000"

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "weed").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n')
    (bin_dir / "weed").chmod(0o755)
    local = script.replace("/tmp/s3.json", str(tmp_path / "s3.json"))
    keys = {"S3_ACCESS_KEY": "drl0abc", "S3_SECRET_KEY": "s3cr%t-with $pecial 'chars'"}
    subprocess.run(["sh", "-c", local], env={"PATH": f"{bin_dir}:/usr/bin:/bin", **keys}, check=True, timeout=30)
    identity = json.loads((tmp_path / "s3.json").read_text())
    [user] = identity["identities"]
    assert user["credentials"] == [{"accessKey": "drl0abc", "secretKey": keys["S3_SECRET_KEY"]}]
    assert {"Admin", "Read", "Write", "List"} <= set(user["actions"])
    assert oct((tmp_path / "s3.json").stat().st_mode & 0o777) == "0o600"
    args = (tmp_path / "args").read_text()
    assert "mini -dir=/data" in args and "drl0abc" not in args


@pytest.mark.parametrize("key", ["s3AccessKey", "s3SecretKey"])
@pytest.mark.parametrize("bad", ['quote"inside', "back\\slash", "line\nbreak"])
def test_s3_keys_that_would_break_the_identity_file_are_refused(key, bad):
    with pytest.raises(helm.HelmValuesError, match=f"/credentials/{key}"):
        _chart().validate_schema({"credentials": {key: bad + "-long-enough"}})


def test_the_s3_server_keeps_checkpoints_on_a_pvc_that_goes_with_the_release():
    spec, _ = s3_server(render())
    [claim] = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi" and "storageClassName" not in claim["spec"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"}
    assert "data" not in {v["name"] for v in spec["template"]["spec"]["volumes"]}
    spec, _ = s3_server(render({"s3": {"persistence": {"keepOnUninstall": True, "storageClass": "fast"}}}))
    assert spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    assert spec["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast"
    spec, _ = s3_server(render({"s3": {"persistence": {"enabled": False}}}))
    assert "volumeClaimTemplates" not in spec and "persistentVolumeClaimRetentionPolicy" not in spec
    assert {"name": "data", "emptyDir": {}} in spec["template"]["spec"]["volumes"]


def test_valkey_keeps_an_append_only_file_on_a_pvc_when_asked():
    """Off by default (the run's state in memory); with redis.persistence a restarted Valkey pod reloads the
    streams and the control state (membership and shares that scale set) from its AOF."""
    docs = render()
    stateful_set = find(docs, "StatefulSet", "drl-redis")["spec"]
    script = stateful_set["template"]["spec"]["containers"][0]["command"][-1]
    assert "--appendonly no" in script and "volumeClaimTemplates" not in stateful_set
    docs = render({"redis": {"persistence": {"enabled": True, "size": "4Gi"}}})
    stateful_set = find(docs, "StatefulSet", "drl-redis")["spec"]
    script = stateful_set["template"]["spec"]["containers"][0]["command"][-1]
    assert "--dir /data --save '' --appendonly yes --appendfsync everysec -" in script
    assert 'requirepass "$VALKEY_PASSWORD"' in script
    [claim] = stateful_set["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "4Gi"
    assert stateful_set["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"
    assert "data" not in {v["name"] for v in stateful_set["template"]["spec"]["volumes"]}
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_notes_say_where_the_checkpoints_live_and_what_a_memory_server_restart_loses():
    notes = render_files()["drl/templates/NOTES.txt"]
    assert "PVC data-drl-s3-0, deleted with the release" in notes
    assert "a restart of\nits pod loses them (redis.persistence.enabled" in notes
    notes = render_files({"s3": {"persistence": {"enabled": False}}, "redis": {"persistence": {"enabled": True}}})[
        "drl/templates/NOTES.txt"
    ]
    assert "emptyDir, lost when its pod moves" in notes and "redis.persistence" not in notes
    notes = render_files({"s3": {"persistence": {"keepOnUninstall": True}}})["drl/templates/NOTES.txt"]
    assert "outlives helm uninstall" in notes and "kubectl delete pvc -n drl-test data-drl-s3-0" in notes


# -- helm test and NOTES -----------------------------------------------------------------------------------


def test_helm_test_pod():
    docs = render()
    pod = find(docs, "Pod", "drl-test-run")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    policies = pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
    assert sorted(policies) == ["before-hook-creation", "hook-failed", "hook-succeeded"], (
        "the test pod goes when the test ends, passed or failed: helm uninstall deletes no hook"
    )
    assert pod["metadata"]["annotations"]["helm.sh/hook-output-log-policy"] == "hook-failed", (
        "helm test prints a failed test pod's log before deleting it"
    )
    assert pod["spec"]["restartPolicy"] == "Never"
    [container] = pod["spec"]["containers"]
    assert container["image"] == "drl:dev"
    assert container["command"][:2] == ["python", "-c"]
    compile(container["command"][2], "test-run", "exec")
    env = env_of(container)
    assert env["DRL_MEMORY_URL"]["value"] == "redis://drl-redis:6379/0"
    assert env["DRL_MEMORY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "drl-credentials",
        "key": "redis-password",
    }


def test_helm_test_script_against_a_real_server(redis_server, redis_client):
    """The hook's check, run against a real Valkey/Redis server: no status, a running trainer, a failed one."""
    script = find(render(), "Pod", "drl-test-run")["spec"]["containers"][0]["command"][2]
    env = {**os.environ, "DRL_RUN": "chart-test", "DRL_MEMORY_URL": redis_server.url, "PYTHONPATH": str(ROOT)}
    env.pop("DRL_MEMORY_PASSWORD", None)

    def check():
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)

    key = "drl:{chart-test}:status:trainer"
    result = check()
    assert result.returncode == 1 and "no trainer status" in result.stderr
    redis_client.hset(
        key, mapping={"role": "trainer", "state": "running", "policy_version": 3, "env_steps": 100, "updates": 50}
    )
    result = check()
    assert result.returncode == 0, result.stderr
    assert "healthy: trainer running" in result.stdout
    redis_client.hset(key, mapping={"state": "failed", "exit_reason": "boom"})
    result = check()
    assert result.returncode == 1 and "failed" in result.stderr


@pytest.mark.parametrize(
    "values, complaint",
    [
        ({}, "at '/image': missing property 'repository'"),
        ({"image": {"tag": "v1"}}, "at '/image': missing property 'repository'"),
        ({"image": {"repository": "", "tag": "v1"}}, "at '/image/repository': minLength"),
        (
            {"trainer": {"image": {"repository": "registry.example.com/drl-cuda"}}},
            "at '/image': missing property 'repository'",
        ),
    ],
)
def test_an_unset_image_is_refused_by_the_schema(values, complaint):
    """drl's image is in no registry: without one the values schema refuses the install, helm template and helm
    lint at once (pods would wait in ImagePullBackOff while Helm reports success; a template's fail shows in
    helm lint only as an INFO line)."""
    with pytest.raises(helm.HelmValuesError, match=re.escape(complaint)):
        _chart().render(values, name=RELEASE, namespace=NAMESPACE)
    report = helm.lint(CHART, values, strict=True)
    assert any(complaint in error for error in report["errors"]), report
    fixed = {**values, "image": {**values.get("image", {}), "repository": "registry.example.com/drl"}}
    assert helm.lint(CHART, fixed, strict=True)["errors"] == []


@pytest.mark.parametrize(
    "values, component",
    [
        ({}, "(trainer|rollout|evaluator)"),
        ({"image": {"repository": "", "tag": "v1"}}, "(trainer|rollout|evaluator)"),
        ({"trainer": {"image": {"repository": "registry.example.com/drl-cuda"}}}, "(rollout|evaluator)"),
    ],
)
def test_without_the_schema_an_unset_image_still_fails_with_how_to_get_one(values, component, tmp_path):
    """Past the schema (helm --skip-schema-validation), the templates still refuse an unset image, naming the
    build, the push and the kind scripts."""
    shutil.copytree(CHART, tmp_path / "drl")
    (tmp_path / "drl" / "values.schema.json").unlink()
    with pytest.raises(helm.HelmError) as error:
        helm.Chart.load(tmp_path / "drl").render(values, name=RELEASE, namespace=NAMESPACE)
    message = str(error.value)
    assert re.search(rf"image\.repository is not set \({component}\.image\.repository neither\)", message)
    for hint in (
        "docker build -f docker/Dockerfile",
        "--set image.repository=REGISTRY/drl",
        "scripts/kind-up.sh",
        "scripts/kind-deploy.sh",
    ):
        assert hint in message


def test_notes_name_the_image_and_what_an_image_pull_error_means():
    notes = render_files()["drl/templates/NOTES.txt"]
    assert "Image: drl:dev (pull policy IfNotPresent)." in notes
    assert "ImagePullBackOff" in notes and "kind load docker-image" in notes
    assert "WARNING" not in notes
    notes = render_files({**GPU, "image": {"tag": "latest"}})["drl/templates/NOTES.txt"]
    assert "Images: registry.example.com/drl-cuda:latest, drl:latest (pull policy IfNotPresent)." in notes
    assert "WARNING: drl:latest with pull policy IfNotPresent" in notes


def test_notes_tell_how_to_follow_and_delete_the_run():
    notes = render_files({"workers": 32})["drl/templates/NOTES.txt"]
    assert "kubectl logs -n drl-test -f job/drl-trainer" in notes
    assert "kubectl get pods -n drl-test -l drl.dev/run=drl" in notes
    assert "helm uninstall -n drl-test drl" in notes
    assert "helm test" in notes and "32 rollout worker(s)" in notes
    assert "helm upgrade -n drl-test drl ./helm --reuse-values --set workers=N" in notes


# -- upgrades: the scaler hooks, the volume claims, the configuration diff ----------------------------------
# The templates that read the live cluster (templates/checks.yaml, templates/rollout/scaler-hooks.yaml) render
# nothing here, where lookup sees no cluster; tests/cluster/test_chart.py runs them against a real API server.
# Their building blocks are rendered here through a copy of the chart with one more template that calls them.


def render_with(template: str, values: dict | None = None, tmp_path: Path | None = None) -> list[dict]:
    """Renders the chart plus ``template`` (as templates/zz-probe.yaml) and returns that template's objects."""
    chart = tmp_path / "drl"
    if not chart.exists():
        shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-probe.yaml").write_text(template)
    files = helm.Chart.load(chart).render(with_image(values), name=RELEASE, namespace=NAMESPACE)
    return [d for d in yaml.safe_load_all(files["drl/templates/zz-probe.yaml"]) if d]


SCALER = (
    '{{ include "drl.scalerJob" (dict "ctx" . "phase" "grow" "hook" "pre-upgrade" "args" '
    '(list "apply" "--workers" "4" "--job-size" "2" "--hand-in-timeout" "120")) }}'
)


@pytest.mark.parametrize("name", ["default", "learners", "pod-extras", "existing-secret", "custom"])
def test_the_scaler_hook_job_runs_like_the_trainer_as_the_orchestrators_scaler_job(name, tmp_path):
    """The hook Job a changed worker count renders is what `drl-orchestrate scale` creates
    (manifests.scaler_job from the trainer Job): the trainer's image, environment (less a group's rank and
    rendezvous), security contexts and volumes; small resources; restartPolicy Never, exit code 2 fails the Job;
    Helm deletes it whether it passed or failed and prints a failed pod's log."""
    from orchestrator.backends.kubernetes import manifests

    values = VALUE_SETS[name]
    [job] = render_with(SCALER, values, tmp_path)
    trainer_job = find(render(values), "Job", "drl-trainer")
    expected = manifests.scaler_job(
        {**trainer_job, "metadata": {**trainer_job["metadata"], "namespace": NAMESPACE}},
        "drl-scaler-grow",
        ["apply", "--workers", "4", "--job-size", "2", "--hand-in-timeout", "120"],
        300,
    )
    assert job["metadata"]["name"] == "drl-scaler-grow"
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "scaler"
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "scaler"
    assert job["metadata"]["annotations"] == {
        "helm.sh/hook": "pre-upgrade",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded,hook-failed",
        "helm.sh/hook-output-log-policy": "hook-failed",
    }
    assert job["spec"]["template"]["spec"] == expected["spec"]["template"]["spec"]
    assert job["spec"]["podFailurePolicy"] == expected["spec"]["podFailurePolicy"]
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (2, 300)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "python",
        "-m",
        "orchestrator.backends.kubernetes.scaler",
        "apply",
        "--workers",
        "4",
        "--job-size",
        "2",
        "--hand-in-timeout",
        "120",
    ]
    assert not {"DRL_LEARNER_RANK", "MASTER_ADDR", "MASTER_PORT"} & set(env_of(container))
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(job, version, strict=True)


def test_the_small_profile_fits_a_two_cpu_node_and_matches_the_orchestrators(tmp_path):
    """helm/profiles/small.yaml: with 2 workers the run requests 1 CPU, and the figures are the CLI's
    `--profile small` (manifests.PROFILES)."""
    from orchestrator.backends.kubernetes import manifests

    profile = yaml.safe_load((CHART / "profiles" / "small.yaml").read_text())
    _chart().validate_schema(with_image(profile))
    docs = render(profile)
    requests = {"cpu": 0.0, "memory": 0.0}
    units = {"m": 1e-3, "Mi": 2**20, "Gi": 2**30}
    for obj, meta, spec in pod_specs(docs):
        if meta["labels"]["app.kubernetes.io/component"] == "test":
            continue
        [container] = spec["containers"]
        component = meta["labels"]["app.kubernetes.io/component"]
        assert container["resources"] == manifests.PROFILES["small"][component], obj
        count = find(docs, "Job", obj)["spec"]["parallelism"] if component == "rollout" else 1
        for key in requests:
            quantity = str(container["resources"]["requests"][key])
            unit = next((u for u in units if quantity.endswith(u)), "")
            requests[key] += count * float(quantity.removesuffix(unit) if unit else quantity) * units.get(unit, 1)
    assert round(requests["cpu"], 3) == 1.0
    assert requests["memory"] == 2.5 * 2**30


def test_the_local_profile_runs_only_local_images_keeps_no_claim_and_fits_a_two_cpu_node():
    """helm/profiles/local.yaml needs no further value: every pod (the test pod too) runs one of the images
    `scripts/local-cluster.sh images` imports into the real node, never pulled; neither data server asks for a
    PVC (the node has no provisioner); with 3 workers, the helm test pod and a scaler hook (100m) the run requests
    at most 2 CPUs. Its requests and limits are the small profile's, which are the CLI's `--profile local`."""
    from orchestrator.backends.kubernetes import manifests

    profile = yaml.safe_load((CHART / "profiles" / "local.yaml").read_text())
    _chart().validate_schema(profile)
    small = yaml.safe_load((CHART / "profiles" / "small.yaml").read_text())
    assert {c: profile[c]["resources"] for c in small} == {c: small[c]["resources"] for c in small}
    docs = render({**profile, "workers": 3})
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    for name in ("drl-redis", "drl-s3"):
        assert "volumeClaimTemplates" not in find(docs, "StatefulSet", name)["spec"], name
    cpu = 0.1  # a scaler hook (drl.scalerJob), rendered on an upgrade only
    for name, _, spec in pod_specs(docs):
        [container] = spec["containers"]
        assert container["image"] in manifests.LOCAL_IMAGES.values(), (name, container["image"])
        assert container["imagePullPolicy"] == "Never", name
        count = find(docs, "Job", name)["spec"]["parallelism"] if "rollout" in name else 1
        request = str(container["resources"]["requests"]["cpu"])
        cpu += count * (float(request[:-1]) / 1000 if request.endswith("m") else float(request))
    assert round(cpu, 3) == 1.25


def test_volume_claims_carry_no_version_labels_and_the_statefulsets_name_them():
    """volumeClaimTemplates cannot change on a StatefulSet: they carry no label that a new chart version changes,
    and the StatefulSet's annotation drl.dev/volume-claim, which an upgrade compares with the live one."""
    docs = render({"redis": {"persistence": {"enabled": True, "size": "4Gi", "storageClass": "fast"}}})
    for name, claim in (("drl-s3", "10Gi default"), ("drl-redis", "4Gi fast")):
        obj = find(docs, "StatefulSet", name)
        assert obj["metadata"]["annotations"] == {"drl.dev/volume-claim": claim}
        [template] = obj["spec"]["volumeClaimTemplates"]
        labels = template["metadata"]["labels"]
        assert not {"helm.sh/chart", "app.kubernetes.io/version"} & set(labels)
        assert set(LABELS) <= set(labels)
    obj = find(render(), "StatefulSet", "drl-redis")
    assert obj["metadata"]["annotations"] == {"drl.dev/volume-claim": "none"}


def test_the_configuration_diff_names_the_keys_that_changed(tmp_path):
    probe = (
        '{{- $d := include "drl.configDiff" (dict "old" (fromJson .Values.config.old) '
        '"new" (fromJson .Values.config.new)) | trim | splitList "\\n" | compact }}'
        "kind: Diff\nkeys: {{ toJson $d }}\n"
    )

    def diff(old: dict, new: dict) -> list[str]:
        values = {"config": {"old": json.dumps(old), "new": json.dumps(new)}}
        return render_with(probe, values, tmp_path)[0]["keys"]

    assert diff({"seed": 1, "sac": {"lr": 1}}, {"seed": 1, "sac": {"lr": 1}}) == []
    assert diff({"seed": 1, "sac": {"lr": 1, "tau": 2}}, {"seed": 2, "sac": {"lr": 3, "tau": 2}}) == ["sac.lr", "seed"]
    assert diff({"env": "A"}, {"mode": "async"}) == ["env", "mode"]
    assert diff({"sac": {"lr": 1}}, {"sac": 5}) == ["sac"]


@pytest.mark.parametrize(
    "quantity, milli",
    [
        ("500m", 500),
        ("1", 1000),
        ("0.5", 500),
        ("2", 2000),
        ("1.5", 1500),
        ("256Mi", 256 * 2**20 * 1000),
        ("1Gi", 2**30 * 1000),
        ("10Gi", 10 * 2**30 * 1000),
        ("1G", 10**12),
        ("100k", 10**8),
        ("0", 0),
        ("1e3", ""),
        ("-1", ""),
        ("lots", ""),
    ],
)
def test_the_quota_check_reads_quantities_in_thousandths(quantity, milli, tmp_path):
    """drl.milliQuantity, which the ResourceQuota check compares with: exact integers, and "" (check skipped) for
    what it does not parse."""
    probe = 'kind: Q\nvalue: {{ include "drl.milliQuantity" .Values.config.q | quote }}\n'
    [doc] = render_with(probe, {"config": {"q": quantity}}, tmp_path)
    assert doc["value"] == str(milli)
