"""Config -> Kubernetes manifests: the objects of docs/kubernetes.md, built from the same plan as local processes.

``manifests(cfg, run)`` is a pure function (no cluster, no kubernetes package): it turns the workloads of
``orchestrator.plan.plan`` into pod specs, so the pods run exactly the command and environment a local run
gives its processes, with the few differences the contract names (the configuration through a ConfigMap, the
worker index from the Indexed Job, credentials from a Secret, writable paths on emptyDir volumes).
``drl-orchestrate render`` prints its result; the kubernetes backend creates it.

A group of learners (``--learners`` K > 1) is the trainer Job made Indexed (K pods, rank = completion index)
with a headless Service for its rendezvous, not a Job of its own: the plan's ``learner`` workload runs the
trainer's command, and one Job lets the pods of the group find rank 0 by a stable name.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from drl.config import ExperimentConfig
from drl.errors import EXIT_USAGE, UserError
from drl.naming import MAX_KUBERNETES_RUN_LEN, memory_servers
from orchestrator.plan import Workload, plan

MANAGED_BY = "drl-orchestrate"
RUN_LABEL = "drl.dev/run"
ROLES = ("trainer", "rollout", "evaluator")

DEFAULT_IMAGE = "drl:latest"
REDIS_IMAGE = "valkey/valkey:8.1-alpine"
S3_IMAGE = "chrislusf/seaweedfs:4.48"  # SeaweedFS `weed mini`: maintained, amd64 and arm64 (MinIO's images are gone)
BUCKET = "drl"
PREFIX = "runs"
REDIS_PORT = 6379
S3_PORT = 9000
S3_STORAGE = "10Gi"  # the S3 server's PVC: checkpoints survive its pod moving
S3_EMPTYDIR = "emptydir"  # --s3-storage emptydir: no PVC; checkpoints and policies go with the S3 server's pod

RUN_DIR = "/var/lib/drl/run"
CACHE_DIR = "/var/cache/drl"
HEARTBEAT_FILE = "/tmp/drl/heartbeat"
UID = 10001
REDIS_UID = 999  # the valkey user of the valkey/valkey image
S3_UID = 1000
BACKOFF_LIMIT = 6  # per pod: the rollout Job gets this many per worker
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
CONTROL_PORT = 50051  # gRPC: drl.v1.Control and grpc.health.v1 (the probes)
METRICS_PORT = 9090  # Prometheus /metrics
RENDEZVOUS_PORT = 29500  # torch.distributed's TCP store on the trainer (rank 0), torchrun's default port
GPU_RESOURCE = "nvidia.com/gpu"
# Requests and limits of every container, the chart's defaults (helm/values.yaml, where the figures are
# explained): a namespace with a ResourceQuota admits the pods, 32 workers do not pack one node as BestEffort
# pods, and the memory server (Guaranteed) is the last of a node to be evicted.
RESOURCES = {
    "trainer": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "4", "memory": "10Gi"}},
    "rollout": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
    "evaluator": {"requests": {"cpu": "250m", "memory": "768Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
    "redis": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "s3": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "scaler": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}
# The components whose requests and limits a run may set (--profile, --resources; the chart's
# <component>.resources); the scaler Job keeps its own small ones.
RESOURCE_ROLES = ("trainer", "rollout", "evaluator", "redis", "s3")
# Named sets of requests and limits (--profile NAME), the same figures as the chart's helm/profiles/NAME.yaml.
# small: a run with 2 rollout workers fits one node of 2 CPUs (requests 1 CPU, 2.5 GiB; every pod Burstable).
# local: small's figures, for scripts/local-cluster.sh's real node; the profile also picks LOCAL_IMAGES, never
# pulled, and no PVC for the S3 server (the node has no storage provisioner).
_SMALL = {
    "trainer": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
    "rollout": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "evaluator": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "redis": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "s3": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}
PROFILES = {
    "default": {role: RESOURCES[role] for role in RESOURCE_ROLES},
    "small": _SMALL,
    "local": _SMALL,
}
LOCAL_PROFILE = "local"
# The images of --profile local (the chart's helm/profiles/local.yaml): built on this machine and imported into
# the real node's containerd under these names by `scripts/local-cluster.sh images`; imagePullPolicy Never.
LOCAL_IMAGES = {"drl": "drl.local/drl:local", "redis": "drl.local/valkey:local", "s3": "drl.local/s3:local"}
PULL_POLICY = "IfNotPresent"
# How long a followed run waits while a pod cannot be scheduled or created (--pending-timeout): long enough for
# a cluster autoscaler's new node, short enough that a run that cannot fit is given up while the user watches.
PENDING_TIMEOUT_S = 120.0
GROUP_ENV = ("DRL_LEARNER_RANK", "MASTER_ADDR", "MASTER_PORT")
# An Indexed Job's replacement pod starts only once the pod it replaces has failed, not while that pod is still
# terminating (the default, TerminatingOrFailed, runs both at once: two processes with one identity); Kubernetes
# has the field from 1.29 (beta, on by default; GA in 1.34). The chart sets it where .Capabilities.KubeVersion
# is >= 1.29; `for_server` leaves it out for an older API server. docs/kubernetes.md, "One pod per identity".
POD_REPLACEMENT_POLICY = "Failed"
POD_REPLACEMENT_SINCE = (1, 29)

# "drl-<run>-redis" names a StatefulSet, whose pods get a controller-revision-hash label of
# "<statefulset>-<10 chars>"; labels hold at most 63 characters, so the run name may hold 40.
MAX_RUN_LEN = MAX_KUBERNETES_RUN_LEN
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

SECRET_KEYS = ("redis-password", "s3-access-key", "s3-secret-key")


@dataclass(frozen=True)
class Credentials:
    """The values of the run's Secret; never written anywhere else (not the ConfigMap, not an argument)."""

    redis_password: str
    s3_access_key: str
    s3_secret_key: str

    def string_data(self) -> dict[str, str]:
        return dict(zip(SECRET_KEYS, (self.redis_password, self.s3_access_key, self.s3_secret_key)))


def object_name(run: str) -> str:
    return f"drl-{run}"


def labels(run: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "drl",
        "app.kubernetes.io/instance": run,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "drl",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        RUN_LABEL: run,
    }


def run_selector(run: str) -> str:
    return f"{RUN_LABEL}={run}"


# -- input checks ---------------------------------------------------------------------------------------


def check_namespace(namespace: str) -> str:
    if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        raise UserError(
            f"--namespace must be a DNS label (lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most 63 characters), got {namespace!r}"
        )
    return namespace


def check_run_name(run: str, what: str = "--run-name") -> str:
    """Run names become object names and label values; Kubernetes allows fewer characters than local runs."""
    if len(run) > MAX_RUN_LEN or not _DNS_LABEL.match(run):
        raise UserError(
            f"{what} on Kubernetes must be lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most {MAX_RUN_LEN} characters, got {run!r}"
        )
    return run


def check_memory_url(url: str) -> None:
    """An external memory URL must be reachable from pods and carry no password (that goes to the Secret)."""
    if not url:
        return
    from drl.memory import url_has_password

    if url_has_password(url):
        raise UserError(
            "the memory URL must not carry a password (it would show in the ConfigMap); put it in "
            "DRL_MEMORY_PASSWORD, which goes into the run's Secret"
        )
    for one in memory_servers(url):
        scheme = one.split("://", 1)[0] if "://" in one else ""
        if scheme not in ("redis", "rediss") or not urlsplit(one).hostname:
            raise UserError(
                f"--memory {one!r} cannot be reached from pods; on Kubernetes use redis://HOST:PORT/DB "
                "or rediss://HOST:PORT/DB (several separated by commas), or leave it empty for the "
                "run's own Valkey"
            )


def check_store_url(url: str) -> None:
    """Pods share nothing but the network: the store must be S3 (the run's own S3 server when empty)."""
    if not url:
        return
    if url.startswith("file://") or "://" not in url:
        raise UserError(
            f"--store {url!r} is a local directory, which pods cannot share; on Kubernetes use "
            "--store s3://BUCKET/PREFIX or leave it empty for the run's own S3 server"
        )
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise UserError(
            f"--store {url!r} is not supported on Kubernetes; use s3://BUCKET/PREFIX or leave it empty "
            "for the run's own S3 server"
        )
    if "@" in parts.netloc:
        raise UserError("store URL must not carry credentials; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")


_QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|)$")
_SUFFIX: dict[str, Decimal | int] = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(text: str) -> Decimal | None:
    """The value of a Kubernetes quantity in the forms requests and limits are written in (``500m``, ``2``,
    ``1.5``, ``256Mi``, ``1G``); None for anything else (no exponents, no sign: the API server takes those, but
    nobody writes a request so)."""
    match = _QUANTITY.match(text)
    if not match:
        return None
    return Decimal(match.group("number")) * Decimal(_SUFFIX[match.group("suffix")])


def resource_settings(settings: tuple[str, ...] | list[str]) -> list[tuple[str, str, str, str]]:
    """(role, requests|limits, cpu|memory, quantity) of each ``ROLE.requests|limits.cpu|memory=QUANTITY`` (an
    entry may hold several, separated by commas); an unknown role, key or quantity is one ``UserError`` line."""
    out = []
    form = "ROLE.requests|limits.cpu|memory=QUANTITY, e.g. rollout.requests.cpu=250m"
    for entry in settings:
        for item in (part.strip() for part in entry.split(",")):
            if not item:
                continue
            path, eq, value = item.partition("=")
            parts = path.strip().split(".")
            if not eq or len(parts) != 3:
                raise UserError(f"--resources takes {form}; got {item!r}")
            role, kind, resource = parts
            if role not in RESOURCE_ROLES:
                raise UserError(f"--resources {item!r}: the role must be one of {', '.join(RESOURCE_ROLES)}")
            if kind not in ("requests", "limits") or resource not in ("cpu", "memory"):
                raise UserError(f"--resources {item!r}: set requests or limits of cpu or memory ({form})")
            value = value.strip()
            amount = parse_quantity(value)
            if amount is None or amount <= 0:
                raise UserError(
                    f"--resources {item!r}: {value!r} is not a positive Kubernetes quantity "
                    f"(cpu: 500m, 1, 2.5; memory: 512Mi, 4Gi, 1G)"
                )
            if resource == "memory" and amount != amount.to_integral_value():
                raise UserError(f"--resources {item!r}: memory must be a whole number of bytes (use Mi or Gi)")
            out.append((role, kind, resource, value))
    return out


def resources_for(profile: str = "", settings: tuple[str, ...] | list[str] = ()) -> dict[str, dict]:
    """Requests and limits per component (``RESOURCE_ROLES``): the profile's (``PROFILES``; empty: ``default``,
    the chart's values.yaml), then each of ``settings`` (``resource_settings``), as ``helm --set
    ROLE.resources.requests.cpu=...`` sets them. Refuses, in one line, an unknown profile and a request above its
    limit (which the API server would refuse only once the run is half created)."""
    name = profile or "default"
    if name not in PROFILES:
        raise UserError(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    out = json.loads(json.dumps(PROFILES[name]))
    for role, kind, resource, value in resource_settings(settings):
        out[role][kind][resource] = value
    for role, spec in out.items():
        for resource in ("cpu", "memory"):
            request, limit = spec["requests"].get(resource), spec["limits"].get(resource)
            low, high = (parse_quantity(request) if request else None), (parse_quantity(limit) if limit else None)
            if low is not None and high is not None and low > high:
                raise UserError(
                    f"{role}'s {resource} request {request} is above its limit {limit}; raise "
                    f"{role}.limits.{resource} or lower {role}.requests.{resource} (--resources)"
                )
    return out


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_s3_storage(storage: str, storage_class: str = "") -> str:
    """``--s3-storage``: ``emptydir`` or the size of the S3 server's PVC (empty: ``S3_STORAGE``), returned as
    ``manifests`` takes it; ``--s3-storage-class`` must be a StorageClass name and needs a PVC."""
    storage = storage.strip() or S3_STORAGE
    if storage.lower() == S3_EMPTYDIR:
        if storage_class:
            raise UserError(
                f"--s3-storage-class names the class of the S3 server's PVC; --s3-storage {S3_EMPTYDIR} has none"
            )
        return S3_EMPTYDIR
    amount = parse_quantity(storage)
    if amount is None or amount <= 0 or amount != amount.to_integral_value():
        raise UserError(
            f"--s3-storage must be {S3_EMPTYDIR} (no PVC: checkpoints are lost with the S3 server's pod) "
            f"or the size of its PVC, such as 10Gi, got {storage!r}"
        )
    if storage_class and (len(storage_class) > 253 or not _DNS_SUBDOMAIN.match(storage_class)):
        raise UserError(
            f"--s3-storage-class must name a StorageClass (lowercase letters, digits, '-' and '.'), "
            f"got {storage_class!r}"
        )
    return storage


def make_credentials(memory_url: str, store_url: str, env: dict[str, str] | None = None) -> Credentials:
    """Generated values for the run's own Valkey and S3 server; the orchestrator's environment for external ones.

    An external Redis without ``DRL_MEMORY_PASSWORD`` (or ``DRL_MEMORY_PASSWORD_FILE``) gets an empty password
    (no AUTH); an external S3 store needs ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``.
    """
    env = dict(os.environ if env is None else env)
    if memory_url:
        password = env.get("DRL_MEMORY_PASSWORD", "")
        if not password and env.get("DRL_MEMORY_PASSWORD_FILE"):
            try:
                with open(env["DRL_MEMORY_PASSWORD_FILE"]) as f:
                    password = f.read().strip()
            except OSError as exc:
                raise UserError(
                    f"DRL_MEMORY_PASSWORD_FILE {env['DRL_MEMORY_PASSWORD_FILE']} cannot be read: {exc.strerror}"
                ) from None
    else:
        password = secrets.token_hex(24)
    if store_url:
        missing = [v for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not env.get(v)]
        if missing:
            raise UserError(
                f"--store {store_url} on Kubernetes needs {' and '.join(missing)} in the environment "
                "(they go into the run's Secret)"
            )
        access, secret = env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    else:
        access, secret = "drl-" + secrets.token_hex(8), secrets.token_hex(24)
    return Credentials(password, access, secret)


# -- manifests ------------------------------------------------------------------------------------------


def manifests(
    cfg: ExperimentConfig,
    run: str,
    *,
    image: str = DEFAULT_IMAGE,
    namespace: str = "default",
    memory_url: str | None = None,
    store_url: str | None = None,
    credentials: Credentials | None = None,
    env: dict[str, str] | None = None,
    redis_image: str = REDIS_IMAGE,
    s3_image: str = S3_IMAGE,
    kube_version: tuple[int, int] | None = None,
    resources: dict[str, dict] | None = None,
    s3_storage: str = S3_STORAGE,
    s3_storage_class: str = "",
    pull_policy: str = PULL_POLICY,
) -> list[dict]:
    """Every object of a run, in creation order: identity and access, configuration, data services, Jobs.

    ``memory_url``/``store_url`` default to the configuration's ``memory``/``store``; empty ones add the run's
    own Valkey and S3 server (``s3_image``, a SeaweedFS image). ``credentials`` default to ``make_credentials``
    (generated, or from ``env``); ``env`` also supplies an external store's ``DRL_S3_ENDPOINT``. Names and
    labels follow docs/kubernetes.md. ``kube_version``: the (major, minor) of the API server the objects are
    for (``for_server``); None, as for ``render``, is a current one. ``resources``: requests and limits per
    component (``resources_for``; None: the chart's defaults). ``s3_storage``: the size of the S3 server's PVC,
    or ``emptydir`` for none; ``s3_storage_class``: the PVC's StorageClass (empty: the cluster's default).
    ``pull_policy``: every container's ``imagePullPolicy`` (``Never`` for images imported into a node).
    """
    check_run_name(run)
    check_namespace(namespace)
    memory_url = cfg.memory if memory_url is None else memory_url
    store_url = cfg.store if store_url is None else store_url
    check_memory_url(memory_url)
    check_store_url(store_url)
    s3_storage = check_s3_storage(s3_storage, s3_storage_class)
    resources = resources_for() if resources is None else resources
    env = dict(os.environ if env is None else env)
    credentials = credentials or make_credentials(memory_url, store_url, env)
    cfg = dataclasses.replace(cfg, run_name=run)
    name = object_name(run)
    builtin_memory, builtin_store = not memory_url, not store_url
    if builtin_memory:
        memory_url = f"redis://{name}-redis:{REDIS_PORT}/0"
    if builtin_store:
        store_url = f"s3://{BUCKET}/{PREFIX}"
        s3_endpoint = f"http://{name}-s3:{S3_PORT}"
    else:
        s3_endpoint = env.get("DRL_S3_ENDPOINT", "")
    ctx = _Context(
        run,
        name,
        namespace,
        image,
        s3_endpoint,
        builtin_store,
        {role: resources.get(role, RESOURCES[role]) for role in RESOURCE_ROLES},
        pull_policy,
    )

    objects = [
        _meta("v1", "ServiceAccount", name, ctx, "rbac", automountServiceAccountToken=False),
        _meta(
            "rbac.authorization.k8s.io/v1",
            "Role",
            name,
            ctx,
            "rbac",
            rules=[
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [f"{name}-config"], "verbs": ["get"]}
            ],
        ),
        _meta(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            name,
            ctx,
            "rbac",
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            subjects=[{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        ),
        _meta(
            "v1",
            "Secret",
            f"{name}-credentials",
            ctx,
            "credentials",
            type="Opaque",
            stringData=credentials.string_data(),
        ),
        _meta("v1", "ConfigMap", f"{name}-config", ctx, "config", data={"config.json": cfg.to_json()}),
        *_network_policies(ctx, builtin_memory, builtin_store, group=cfg.learners > 1),
    ]
    if builtin_memory:
        objects += _redis(ctx, redis_image)
    if builtin_store:
        objects += _s3(ctx, s3_image, "" if s3_storage == S3_EMPTYDIR else s3_storage, s3_storage_class)
    group = group_name(name)
    workloads = plan(
        cfg,
        run=run,
        run_dir=RUN_DIR,
        memory_url=memory_url,
        store_url=store_url,
        python="python",
        learner_address=f"{name}-trainer-0.{group}",
        learner_port=RENDEZVOUS_PORT,
        trainer_writes_run_files=True,
        tracking_uri=os.environ.get("MLFLOW_TRACKING_URI", ""),
    )
    if cfg.learners > 1:
        objects.append(_group_service(ctx))
    gpu = cfg.device.startswith("cuda")
    objects += [_job(ctx, w, gpu=gpu and w.role == "trainer") for w in workloads]
    objects = json.loads(json.dumps(objects))  # no dict shared between objects: callers may edit one freely
    return for_server(objects, kube_version)


def has_pod_replacement_policy(kube_version: tuple[int, int] | None) -> bool:
    """Whether an API server of this (major, minor) version knows a Job's ``podReplacementPolicy``; an unknown
    version (None) is taken for a current one."""
    return kube_version is None or tuple(kube_version) >= POD_REPLACEMENT_SINCE


def for_server(objects: list[dict], kube_version: tuple[int, int] | None) -> list[dict]:
    """The objects as an API server of ``kube_version`` takes them: for one older than 1.29 (1.28 has
    ``podReplacementPolicy`` only as an alpha feature, off by default) the Jobs go without it, so a replacement
    pod may start beside the one it replaces and only the memory server's fencing keeps one writer per identity.
    None (unknown) keeps every field. The objects are edited in place and returned."""
    if not has_pod_replacement_policy(kube_version):
        for obj in objects:
            if obj.get("kind") == "Job":
                obj["spec"].pop("podReplacementPolicy", None)
    return objects


def group_name(name: str) -> str:
    """The headless Service (and NetworkPolicy) of a group of learners: the trainer pods' DNS subdomain, so
    that rank r is ``<name>-trainer-<r>.<name>-trainer-group`` (an Indexed Job's pod hostname is
    ``<job>-<index>``)."""
    return f"{name}-trainer-group"


@dataclass(frozen=True)
class _Context:
    run: str
    name: str
    namespace: str
    image: str
    s3_endpoint: str
    builtin_store: bool
    resources: dict[str, dict]
    pull_policy: str = PULL_POLICY


def _meta(api_version: str, kind: str, name: str, ctx: _Context, component: str, **body) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": ctx.namespace, "labels": labels(ctx.run, component)},
        **body,
    }


def _secret_ref(ctx: _Context, key: str) -> dict:
    return {"secretKeyRef": {"name": f"{ctx.name}-credentials", "key": key}}


def _container_env(ctx: _Context, workload: Workload) -> list[dict]:
    """The plan's variables (the configuration and the worker index by reference) with the contract's own
    inserted where docs/kubernetes.md lists them, so the order matches the chart's."""
    storage: list[dict] = [{"name": "DRL_S3_ENDPOINT", "value": ctx.s3_endpoint}] if ctx.s3_endpoint else []
    storage += [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": _secret_ref(ctx, "s3-access-key")},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": _secret_ref(ctx, "s3-secret-key")},
    ]
    if workload.role == "trainer" and ctx.builtin_store:
        storage.append({"name": "DRL_S3_CREATE_BUCKET", "value": "1"})
    index = (
        [{"name": workload.per_replica_env, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}}]
        if workload.per_replica_env
        else []
    )
    after: dict[str, list[dict]] = {
        "DRL_MEMORY_URL": [{"name": "DRL_MEMORY_PASSWORD", "valueFrom": _secret_ref(ctx, "redis-password")}],
        "DRL_STORE": storage,
        "DRL_STEPS_DONE": index,
    }
    out: list[dict] = []
    for key, value in workload.env.items():
        if key == "DRL_CONFIG":
            out.append(
                {"name": key, "valueFrom": {"configMapKeyRef": {"name": f"{ctx.name}-config", "key": "config.json"}}}
            )
        else:
            out.append({"name": key, "value": value})
        out += after.pop(key, [])
    for rest in after.values():
        out += rest
    out += [
        {"name": "DRL_HEARTBEAT_FILE", "value": HEARTBEAT_FILE},
        {"name": "DRL_CACHE_DIR", "value": CACHE_DIR},
        {"name": "HOME", "value": "/tmp"},
        {"name": "DRL_CONTROL_HOST", "value": "0.0.0.0"},
        {"name": "DRL_CONTROL_PORT", "value": str(CONTROL_PORT)},
        {"name": "DRL_METRICS_HOST", "value": "0.0.0.0"},
        {"name": "DRL_METRICS_PORT", "value": str(METRICS_PORT)},
    ]
    return out


def _security(uid: int = UID, gid: int = UID) -> tuple[dict, dict]:
    pod = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "fsGroup": gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return pod, container


def _pod_spec(
    ctx: _Context, containers: list[dict], volumes: dict[str, dict], restart: str | None, pod_security: dict, **extra
) -> dict:
    spec = {"restartPolicy": restart} if restart else {}
    return {
        **spec,
        **extra,
        "serviceAccountName": ctx.name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security,
        "containers": containers,
        "volumes": [{"name": v, "emptyDir": source} for v, source in volumes.items()],
    }


def _mounts(paths: dict[str, str]) -> list[dict]:
    return [{"name": v, "mountPath": path} for v, path in paths.items()]


def _job(ctx: _Context, workload: Workload, gpu: bool = False) -> dict:
    """One Job per role; the rollout Job is Indexed so that its completion index is the worker index, and so
    is the trainer Job of a group of learners (its completion index is the rank; its pods take the group's
    Service as subdomain). An Indexed Job replaces a pod only once it has failed (``podReplacementPolicy``:
    one process per index at a time); no ``podFailurePolicy``, which ``restartPolicy: OnFailure`` forbids.
    ``gpu``: one GPU per pod (each learner trains on the one GPU it sees)."""
    paths = {"tmp": "/tmp", "heartbeat": HEARTBEAT_FILE.rsplit("/", 1)[0], "run": RUN_DIR, "cache": CACHE_DIR}
    volumes = {"tmp": {}, "heartbeat": {"medium": "Memory", "sizeLimit": "1Mi"}, "run": {}, "cache": {}}
    pod_security, container_security = _security()
    probe = {"grpc": {"port": CONTROL_PORT}, "timeoutSeconds": 5}
    resources = json.loads(json.dumps(ctx.resources[workload.role]))
    if gpu:
        resources["limits"][GPU_RESOURCE] = 1
    container = {
        "name": workload.role,
        "image": ctx.image,
        "imagePullPolicy": ctx.pull_policy,
        "command": list(workload.command),
        "env": _container_env(ctx, workload),
        "resources": resources,
        "securityContext": container_security,
        "ports": [{"name": "grpc", "containerPort": CONTROL_PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
        "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 60},
        "livenessProbe": {**probe, "periodSeconds": 30, "failureThreshold": 3},
        "readinessProbe": {**probe, "periodSeconds": 15, "failureThreshold": 2},
        "volumeMounts": _mounts(paths),
    }
    spec: dict = {"completions": 1, "parallelism": 1, "backoffLimit": BACKOFF_LIMIT}
    if workload.per_replica_env:
        spec = {
            "completionMode": "Indexed",
            "completions": workload.replicas,
            "parallelism": workload.replicas,
            "backoffLimit": BACKOFF_LIMIT * workload.replicas,
            "podReplacementPolicy": POD_REPLACEMENT_POLICY,
        }
    extra: dict[str, Any] = {"terminationGracePeriodSeconds": 60} if workload.role == "trainer" else {}
    if workload.role == "trainer" and workload.replicas > 1:
        extra["subdomain"] = group_name(ctx.name)
    template = {
        "metadata": {"labels": labels(ctx.run, workload.role)},
        "spec": _pod_spec(ctx, [container], volumes, "OnFailure", pod_security, **extra),
    }
    return _meta(
        "batch/v1", "Job", f"{ctx.name}-{workload.role}", ctx, workload.role, spec={**spec, "template": template}
    )


def _selector(ctx: _Context, component: str) -> dict[str, str]:
    return {
        k: v
        for k, v in labels(ctx.run, component).items()
        if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
    }


def _group_service(ctx: _Context) -> dict:
    """The headless Service of a group of learners: DNS records for every trainer pod, ready or not (so the
    rendezvous never waits for a readiness probe), of which rank 0's name is ``MASTER_ADDR``."""
    return _meta(
        "v1",
        "Service",
        group_name(ctx.name),
        ctx,
        "trainer",
        spec={
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": _selector(ctx, "trainer"),
            "ports": [
                {"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT, "protocol": "TCP"}
            ],
        },
    )


def _stateful_set(
    ctx: _Context,
    component: str,
    container: dict,
    port: int,
    uid: int,
    gid: int,
    storage: str = "",
    storage_class: str = "",
) -> list[dict]:
    """A single-replica StatefulSet and its Service, with ``/data`` on an emptyDir (the pod's lifetime) or, with
    ``storage``, on a PVC of that size (of ``storage_class``, else the cluster's default class) that goes with
    the StatefulSet (the run's lifetime), as the chart's ``persistence`` does."""
    name = f"{ctx.name}-{component}"
    port_name = container["ports"][0]["name"]
    pod_security, container_security = _security(uid, gid)
    if component == "s3":
        pod_security["fsGroupChangePolicy"] = "OnRootMismatch"
    selector = _selector(ctx, component)
    container = {
        **container,
        "imagePullPolicy": ctx.pull_policy,
        "resources": ctx.resources[component],
        "securityContext": container_security,
        "volumeMounts": _mounts({"data": "/data", "tmp": "/tmp"}),
    }
    service = _meta(
        "v1",
        "Service",
        name,
        ctx,
        component,
        spec={
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}],
        },
    )
    volumes: dict[str, dict] = {"tmp": {}} if storage else {"data": {}, "tmp": {}}
    spec: dict = {"replicas": 1, "serviceName": name, "selector": {"matchLabels": selector}}
    if storage:
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Delete", "whenScaled": "Retain"}
    spec["template"] = {
        "metadata": {"labels": labels(ctx.run, component)},
        "spec": _pod_spec(ctx, [container], volumes, None, pod_security),
    }
    if storage:
        spec["volumeClaimTemplates"] = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "labels": labels(ctx.run, component)},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    **({"storageClassName": storage_class} if storage_class else {}),
                    "resources": {"requests": {"storage": storage}},
                },
            }
        ]
    return [service, _meta("apps/v1", "StatefulSet", name, ctx, component, spec=spec)]


def _redis(ctx: _Context, image: str) -> list[dict]:
    """Valkey without persistence; the password reaches it on stdin, never in its arguments."""
    container = {
        "name": "redis",
        "image": image,
        "command": [
            "sh",
            "-c",
            f"exec valkey-server --port {REDIS_PORT} --dir /data --save '' --appendonly no - "
            ' <<EOF\nrequirepass "$VALKEY_PASSWORD"\nEOF\n',
        ],
        "env": [{"name": "VALKEY_PASSWORD", "valueFrom": _secret_ref(ctx, "redis-password")}],
        "ports": [{"name": "redis", "containerPort": REDIS_PORT, "protocol": "TCP"}],
        "livenessProbe": {
            "tcpSocket": {"port": "redis"},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 5,
        },
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", f"valkey-cli -h 127.0.0.1 -p {REDIS_PORT} ping | grep -qE 'PONG|NOAUTH'"]},
            "initialDelaySeconds": 2,
            "periodSeconds": 5,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }
    return _stateful_set(ctx, "redis", container, REDIS_PORT, REDIS_UID, 1000)


S3_IDENTITY = (
    '{"identities":[{"name":"drl","credentials":[{"accessKey":"%s","secretKey":"%s"}],'
    '"actions":["Admin","Read","Write","List","Tagging"]}]}'
)


def _s3(ctx: _Context, image: str, storage: str = S3_STORAGE, storage_class: str = "") -> list[dict]:
    """The run's own S3 server: SeaweedFS in one process (``weed mini``) on port 9000, its one identity written
    from the Secret to a file at start (the keys are in no argument), checkpoints on a PVC of ``storage`` (of
    ``storage_class``), or on an emptyDir when ``storage`` is empty."""
    script = (
        f'umask 077\nprintf \'{S3_IDENTITY}\' "$S3_ACCESS_KEY" "$S3_SECRET_KEY" > /tmp/s3.json\n'
        f"exec weed mini -dir=/data -ip.bind=0.0.0.0 -s3.port={S3_PORT} -s3.config=/tmp/s3.json -webdav=false "
        "-admin.ui=false\n"
    )
    container = {
        "name": "s3",
        "image": image,
        "command": ["sh", "-c", script],
        "env": [
            {"name": "S3_ACCESS_KEY", "valueFrom": _secret_ref(ctx, "s3-access-key")},
            {"name": "S3_SECRET_KEY", "valueFrom": _secret_ref(ctx, "s3-secret-key")},
            {"name": "HOME", "value": "/tmp"},
        ],
        "ports": [{"name": "s3", "containerPort": S3_PORT, "protocol": "TCP"}],
        "livenessProbe": {
            "tcpSocket": {"port": "s3"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": "s3"},
            "initialDelaySeconds": 5,
            "periodSeconds": 5,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }
    return _stateful_set(ctx, "s3", container, S3_PORT, S3_UID, 1000, storage=storage, storage_class=storage_class)


# An in-cluster drl-orchestrate's pods, by the labels docs/security.md asks them to carry: they may reach the
# drl roles' control port.
ORCHESTRATOR_PODS = {
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "drl", "app.kubernetes.io/component": "orchestrator"}}
}


def _network_policies(ctx: _Context, builtin_memory: bool, builtin_store: bool, group: bool = False) -> list[dict]:
    """The chart's default NetworkPolicies (docs/security.md), made before any pod so none runs unprotected.

    Redis and the S3 server admit only the run's pods. The drl roles' control port (its Stop needs no
    credential) admits only the run's own pods and an in-cluster drl-orchestrate (pods labelled
    ``app.kubernetes.io/name: drl``, ``app.kubernetes.io/component: orchestrator``); their metrics port admits
    nobody (the chart's ``networkPolicy.metricsFrom`` and ``apiServerCIDRs`` open it to Prometheus and to the
    API server's pod proxy, through which ``status`` reads it). Their egress is limited to DNS and the run's
    own servers when both are built in; an external server has an address a NetworkPolicy cannot name from a
    URL, so egress then stays open.

    A group of learners (``group``) adds ``<name>-trainer-group``: the trainer pods admit one another on every
    port (and may reach one another where egress is limited), since gloo and NCCL connect their ranks on ports
    they pick at run time besides the rendezvous port.
    """
    run_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "drl", RUN_LABEL: ctx.run}}}

    def server(component: str) -> dict:
        return {"matchLabels": _selector(ctx, component)}

    def policy(suffix: str, spec: dict) -> dict:
        return _meta("networking.k8s.io/v1", "NetworkPolicy", f"{ctx.name}-{suffix}", ctx, "network", spec=spec)

    servers = [
        (c, port)
        for c, port, builtin in (("redis", REDIS_PORT, builtin_memory), ("s3", S3_PORT, builtin_store))
        if builtin
    ]
    out = [
        policy(
            c,
            {
                "podSelector": server(c),
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [run_pods], "ports": [{"protocol": "TCP", "port": port}]}],
            },
        )
        for c, port in servers
    ]
    roles: dict[str, Any] = {
        "podSelector": {
            "matchLabels": run_pods["podSelector"]["matchLabels"],
            "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In", "values": list(ROLES)}],
        },
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [run_pods, ORCHESTRATOR_PODS], "ports": [{"protocol": "TCP", "port": CONTROL_PORT}]}],
    }
    if builtin_memory and builtin_store:
        roles["policyTypes"].append("Egress")
        roles["egress"] = [{"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]
        roles["egress"] += [
            {"to": [{"podSelector": server(c)}], "ports": [{"protocol": "TCP", "port": port}]} for c, port in servers
        ]
    out.append(policy("roles", roles))
    if group:
        trainers = {"podSelector": {"matchLabels": _selector(ctx, "trainer")}}
        spec: dict[str, Any] = {**trainers, "policyTypes": ["Ingress"], "ingress": [{"from": [trainers]}]}
        if "egress" in roles:
            spec["policyTypes"].append("Egress")
            spec["egress"] = [{"to": [trainers]}]
        out.append(policy("trainer-group", spec))
    return out


def expected_pods(objects: list[dict]) -> dict[str, int]:
    """Pods per component once the run is up: each StatefulSet's replicas and each Job's parallelism."""
    out = {}
    for obj in objects:
        if obj["kind"] in ("Job", "StatefulSet"):
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            out[component] = obj["spec"].get("parallelism", obj["spec"].get("replicas", 1))
    return out


def to_yaml(objects: list[dict]) -> str:
    """A YAML stream (multi-line strings as blocks); without PyYAML each document is JSON, which YAML parsers
    read just the same."""
    try:
        import yaml
    except ImportError:
        return "".join(f"---\n{json.dumps(obj, indent=2)}\n" for obj in objects)

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return "".join(
        "---\n" + yaml.dump(obj, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1 << 16)
        for obj in objects
    )


# -- the scaler Job (drl-orchestrate scale --backend kubernetes) -------------------------------------------

SCALER_COMPONENT = "scaler"
SCALER_TTL_S = 3600
SCALER_BACKOFF_LIMIT = 2
_CONTROLLER_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)


def scaler_job_name(trainer_job: dict, token: str) -> str:
    """``<name>-scaler-<token>`` beside the run's ``<name>-trainer`` (at most 40 + 18 characters: Job names
    become label values)."""
    base = trainer_job["metadata"]["name"].removesuffix("-trainer")
    return f"{base}-scaler-{token}"


def scaler_job(trainer_job: dict, name: str, args: list[str], deadline_s: int) -> dict:
    """A one-off Job running ``python -m orchestrator.backends.kubernetes.scaler ARGS`` like the trainer pod: the trainer Job's
    image, environment (the ConfigMap and Secret references, the memory URL), security contexts, service
    account and writable volumes, taken from the trainer Job as the cluster holds it, so that a chart's run and
    an orchestrator's run are scaled alike.

    What the controller added to the trainer (selector labels) and what does not fit a short task (probes,
    ports, the trainer's resources such as a GPU, scheduling constraints, a group of learners' rank and
    rendezvous) is left out; the scaler has small resources of its own, so a namespace with a ResourceQuota
    admits it. ``restartPolicy: Never`` with a pod failure policy: exit code 2 (bad input, the run has ended) fails the
    Job at once, anything else (the memory server briefly away) is tried again; the scaler is idempotent.
    """
    meta = trainer_job["metadata"]
    template = trainer_job["spec"]["template"]
    pod = template["spec"]
    trainer = next((c for c in pod["containers"] if c["name"] == "trainer"), pod["containers"][0])
    component = {"app.kubernetes.io/component": SCALER_COMPONENT}
    pod_labels = {
        k: v for k, v in ((template.get("metadata") or {}).get("labels") or {}).items() if k not in _CONTROLLER_LABELS
    }
    container = {
        "name": SCALER_COMPONENT,
        "image": trainer["image"],
        "imagePullPolicy": trainer.get("imagePullPolicy", "IfNotPresent"),
        "command": ["python", "-m", "orchestrator.backends.kubernetes.scaler", *args],
        "resources": json.loads(json.dumps(RESOURCES[SCALER_COMPONENT])),
    }
    for key in ("env", "envFrom", "securityContext", "volumeMounts"):
        if trainer.get(key):
            container[key] = trainer[key]
    if "env" in container:
        container["env"] = [e for e in container["env"] if e.get("name") not in GROUP_ENV]
    spec = {"restartPolicy": "Never", "containers": [container]}
    for key in (
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "securityContext",
        "volumes",
        "imagePullSecrets",
    ):
        if key in pod:
            spec[key] = pod[key]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": {**meta["labels"], **component}},
        "spec": {
            "backoffLimit": SCALER_BACKOFF_LIMIT,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": SCALER_TTL_S,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": SCALER_COMPONENT, "operator": "In", "values": [EXIT_USAGE]},
                    }
                ]
            },
            "template": {"metadata": {"labels": {**pod_labels, **component}}, "spec": spec},
        },
    }
