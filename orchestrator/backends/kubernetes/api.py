"""The few Kubernetes API calls the kubernetes backend makes, behind one small class.

``KubeApi`` wraps the official ``kubernetes`` client (kubeconfig, or the in-cluster service account) and turns
its objects into the plain ``PodState``/``JobState`` records below, and its exceptions into ``KubeError``; the
backend sees nothing else, so its tests run against a fake with the same methods. The client is imported only
when a ``KubeApi`` is made: local runs and ``drl-orchestrate render`` never load it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol

from drl.errors import UserError

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# kind -> (API group attribute, method suffix): create_namespaced_<suffix>, list_..., delete_...
KINDS = {
    "ServiceAccount": ("core", "service_account"),
    "Role": ("rbac", "role"),
    "RoleBinding": ("rbac", "role_binding"),
    "Secret": ("core", "secret"),
    "ConfigMap": ("core", "config_map"),
    "Service": ("core", "service"),
    "StatefulSet": ("apps", "stateful_set"),
    "Job": ("batch", "job"),
    "Pod": ("core", "pod"),
    "NetworkPolicy": ("networking", "network_policy"),
    "Event": ("core", "event"),
}
# The order `delete` removes a run in: what runs first, then what it uses.
RUN_KINDS = (
    "Job",
    "StatefulSet",
    "Service",
    "NetworkPolicy",
    "RoleBinding",
    "Role",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
)


class KubeError(Exception):
    """An API call failed: ``status`` is the HTTP status (0 when the API server could not be reached)."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ContainerState:
    name: str
    ready: bool = False
    restart_count: int = 0
    state: str = "waiting"  # waiting | running | terminated
    reason: str = ""  # of the current state: CrashLoopBackOff, ImagePullBackOff, Completed, Error, ...
    message: str = ""
    exit_code: int | None = None  # the current state's, when terminated
    last_exit_code: int | None = None  # the previous run's, after a restart


# Waiting reasons of a container that do not pass by themselves: a pod showing one for a while fails.
FATAL_WAITING = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


@dataclass(frozen=True)
class PodState:
    name: str
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    ready: bool = False
    deleting: bool = False
    reason: str = ""  # the pod's, or why it is not scheduled (Unschedulable)
    message: str = ""
    containers: tuple[ContainerState, ...] = ()

    @property
    def component(self) -> str:
        return self.labels.get("app.kubernetes.io/component", "")

    def container(self, name: str) -> ContainerState | None:
        return next((c for c in self.containers if c.name == name), None)


@dataclass(frozen=True)
class JobCondition:
    type: str
    status: str = "True"
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class JobState:
    name: str
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    conditions: tuple[JobCondition, ...] = ()

    def condition(self, kind: str) -> JobCondition | None:
        return next((c for c in self.conditions if c.type == kind and c.status == "True"), None)


@dataclass(frozen=True)
class EventState:
    """A Warning event about one object (``involvedObject``): e.g. a Job's ``FailedCreate`` ("Error creating:
    pods ... is forbidden: exceeded quota: ...")."""

    kind: str
    name: str
    uid: str = ""
    reason: str = ""
    message: str = ""
    count: int = 1


DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


def kubeconfig_path() -> str:
    """``$KUBECONFIG`` (one path or a list) read now, not when the client was imported."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def default_namespace() -> str:
    """The pod's own namespace in a cluster, else the kubeconfig's current context's, else ``default``.

    Reads the files the way kubectl merges them (first current-context and first context of a name win),
    without the kubernetes package and without an API call, so ``render`` can use it.
    """
    try:
        return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    except OSError:
        pass
    try:
        import yaml
    except ImportError:
        return "default"
    current: str | None = None
    contexts: dict[str | None, dict] = {}
    for path in kubeconfig_path().split(os.pathsep):
        try:
            data = yaml.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            continue
        current = current or data.get("current-context")
        for entry in data.get("contexts") or ():
            if isinstance(entry, dict) and isinstance(entry.get("context"), dict):
                contexts.setdefault(entry.get("name"), entry["context"])
    namespace = contexts.get(current, {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def kube_version(major: str | None, minor: str | None, git_version: str | None = "") -> tuple[int, int] | None:
    """(major, minor) of an API server from its ``/version`` fields: ``minor`` may carry a suffix (``"29+"`` on
    EKS and GKE), else ``git_version`` (``v1.29.3-eks-...``) gives both; None when neither reads."""
    major_digits, minor_digits = (re.match(r"\d+", str(v or "")) for v in (major, minor))
    if major_digits and minor_digits:
        return int(major_digits.group()), int(minor_digits.group())
    match = re.match(r"v?(\d+)\.(\d+)", str(git_version or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


class KubeApi:
    """The official client, configured from the in-cluster service account or the kubeconfig."""

    def __init__(self) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise UserError(
                "the kubernetes backend needs the kubernetes client: pip install 'drl[kubernetes]'"
            ) from None
        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config(kubeconfig_path())
            except (config.ConfigException, OSError) as exc:
                raise UserError(
                    f"no Kubernetes configuration: set KUBECONFIG or ~/.kube/config, or run inside a cluster ({exc})"
                ) from None
        self.client = client
        self.groups = {
            "core": client.CoreV1Api(),
            "apps": client.AppsV1Api(),
            "batch": client.BatchV1Api(),
            "rbac": client.RbacAuthorizationV1Api(),
            "networking": client.NetworkingV1Api(),
            "storage": client.StorageV1Api(),
            "version": client.VersionApi(),
        }

    def _call(self, kind: str, verb: str, *args, **kwargs):
        group, suffix = KINDS[kind]
        return self._invoke(group, f"{verb}_namespaced_{suffix}", *args, **kwargs)

    def _invoke(self, group: str, name: str, *args, **kwargs):
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        method = getattr(self.groups[group], name)
        try:
            return method(*args, **kwargs)
        except ApiException as exc:
            raise KubeError(exc.status or 0, exc.reason or "", _api_message(exc)) from None
        except HTTPError as exc:
            host = self.groups["core"].api_client.configuration.host
            raise KubeError(0, "Unreachable", f"the Kubernetes API at {host} cannot be reached: {exc}") from None

    def create(self, obj: dict) -> None:
        self._call(obj["kind"], "create", obj["metadata"]["namespace"], obj)

    def storage_classes(self) -> list[tuple[str, bool]]:
        """(name, is the default) of every StorageClass of the cluster: ``list`` on the cluster-scoped
        ``storageclasses``, which a namespaced Role cannot grant (then ``KubeError`` 403)."""
        items = self._invoke("storage", "list_storage_class").items
        return [
            (
                item.metadata.name,
                any((item.metadata.annotations or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS),
            )
            for item in items
        ]

    def list_events(self, namespace: str, reason: str = "") -> list[EventState]:
        """The namespace's Warning events (of ``reason``, when given): ``list`` on ``events``."""
        selector = "type=Warning" + (f",reason={reason}" if reason else "")
        items = self._call("Event", "list", namespace, field_selector=selector).items
        out = []
        for e in items:
            involved = e.involved_object
            out.append(
                EventState(
                    involved.kind or "",
                    involved.name or "",
                    involved.uid or "",
                    e.reason or "",
                    (e.message or "").strip(),
                    e.count or 1,
                )
            )
        return out

    def server_version(self) -> tuple[int, int] | None:
        """(major, minor) of the API server (``GET /version``, which every account may read: no RBAC rule; the
        version it emulates, where it emulates an older one); None when it cannot be read, which callers take
        for a current server."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            info = self.groups["version"].get_code(_request_timeout=10)
        except (ApiException, HTTPError, ValueError):
            return None
        emulated = kube_version(getattr(info, "emulation_major", None), getattr(info, "emulation_minor", None))
        return emulated or kube_version(info.major, info.minor, info.git_version)

    def list_names(self, kind: str, namespace: str, selector: str) -> list[str]:
        return [item.metadata.name for item in self._call(kind, "list", namespace, label_selector=selector).items]

    def delete(self, kind: str, namespace: str, name: str, propagation: str = "Background") -> bool:
        """False when the object is already gone."""
        try:
            self._call(kind, "delete", name, namespace, propagation_policy=propagation)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str) -> bool:
        return self.delete("Pod", namespace, name)

    def delete_by_label(
        self, namespace: str, selector: str, kinds: tuple[str, ...] = RUN_KINDS, propagation: str = "Background"
    ) -> list[tuple[str, str]]:
        """Deletes every object of ``kinds`` matching ``selector``; returns (kind, name) of those deleted."""
        deleted = []
        for kind in kinds:
            for name in self.list_names(kind, namespace, selector):
                if self.delete(kind, namespace, name, propagation):
                    deleted.append((kind, name))
        return deleted

    def list_pods(self, namespace: str, selector: str) -> list[PodState]:
        return [_pod_state(p) for p in self._call("Pod", "list", namespace, label_selector=selector).items]

    def job_status(self, namespace: str, name: str) -> JobState | None:
        try:
            job = self._call("Job", "read", name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        s = job.status
        return JobState(
            name,
            s.active or 0,
            s.succeeded or 0,
            s.failed or 0,
            tuple(JobCondition(c.type, c.status, c.reason or "", c.message or "") for c in s.conditions or ()),
        )

    def list_jobs(self, namespace: str, selector: str) -> list[dict]:
        """Jobs as the plain dictionaries of their manifests (camelCase keys, as ``kubectl get -o json``)."""
        items = self._call("Job", "list", namespace, label_selector=selector).items
        serialize = self.client.ApiClient().sanitize_for_serialization
        return [serialize(item) for item in items]

    def patch_job(self, namespace: str, name: str, patch: dict) -> None:
        """A JSON merge patch (RFC 7386) of a Job, e.g. ``{"spec": {"completions": 4, "parallelism": 4}}``."""
        self._call("Job", "patch", name, namespace, patch, _content_type="application/merge-patch+json")

    def pod_metrics(self, namespace: str, name: str, port: int, timeout: float = 5.0) -> str:
        """The pod's Prometheus page (``/metrics`` on ``port``) through the API server's pod proxy, so the
        orchestrator needs no route into the cluster (RBAC: ``get`` on ``pods/proxy``).

        The body is read raw (``_preload_content=False``) and decoded here: the client declares the proxy's
        response as ``str`` and, for a body that is not JSON, returns ``str(bytes)``, the repr ``"b'...'"``
        (kubernetes client 36), which no parser reads."""
        from urllib3.exceptions import HTTPError

        core = self.groups["core"]
        try:
            response = core.connect_get_namespaced_pod_proxy_with_path(
                name=f"{name}:{port}",
                namespace=namespace,
                path="metrics",
                _request_timeout=timeout,
                _preload_content=False,
            )
        except self.client.exceptions.ApiException as exc:
            raise KubeError(exc.status or 0, exc.reason or "", _api_message(exc)) from None
        except HTTPError as exc:
            raise KubeError(0, "Unreachable", f"metrics of pod {name} cannot be read: {exc}") from None
        try:
            return decode_body(response.data, response.headers.get("content-type", ""))
        except HTTPError as exc:
            raise KubeError(0, "Unreachable", f"metrics of pod {name} cannot be read: {exc}") from None
        finally:
            response.release_conn()

    def pod_log(self, namespace: str, name: str, container: str, follow: bool = True) -> Iterator[str]:
        """The container's log line by line; with ``follow`` it ends when the container does."""
        from urllib3.exceptions import HTTPError

        core = self.groups["core"]
        try:
            response = core.read_namespaced_pod_log(
                name, namespace, container=container, follow=follow, _preload_content=False
            )
        except self.client.exceptions.ApiException as exc:
            raise KubeError(exc.status or 0, exc.reason or "", _api_message(exc)) from None
        buffer = b""
        try:
            for chunk in response.stream(4096, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
        except HTTPError as exc:
            raise KubeError(0, "Unreachable", f"log stream of pod {name} broke: {exc}") from None
        finally:
            response.release_conn()
        if buffer:
            yield buffer.decode(errors="replace")


class Api(Protocol):
    """What the backend needs of ``KubeApi`` (and what a fake provides)."""

    def create(self, obj: dict) -> None: ...
    def storage_classes(self) -> list[tuple[str, bool]]: ...
    def list_events(self, namespace: str, reason: str = "") -> list[EventState]: ...
    def server_version(self) -> tuple[int, int] | None: ...
    def delete(self, kind: str, namespace: str, name: str, propagation: str = "Background") -> bool: ...
    def delete_pod(self, namespace: str, name: str) -> bool: ...
    def delete_by_label(
        self, namespace: str, selector: str, kinds: tuple[str, ...] = RUN_KINDS, propagation: str = "Background"
    ) -> list[tuple[str, str]]: ...
    def list_pods(self, namespace: str, selector: str) -> list[PodState]: ...
    def job_status(self, namespace: str, name: str) -> JobState | None: ...
    def pod_log(self, namespace: str, name: str, container: str, follow: bool = True) -> Iterator[str]: ...
    def list_jobs(self, namespace: str, selector: str) -> list[dict]: ...
    def list_names(self, kind: str, namespace: str, selector: str) -> list[str]: ...
    def patch_job(self, namespace: str, name: str, patch: dict) -> None: ...
    def pod_metrics(self, namespace: str, name: str, port: int, timeout: float = 5.0) -> str: ...


def default_api() -> Api:
    """A ``KubeApi``, looked up when called (tests replace the class with a fake)."""
    return KubeApi()


def decode_body(data: bytes | str, content_type: str = "") -> str:
    """An HTTP body as text, in the charset its ``Content-Type`` names (UTF-8 when it names none or one Python
    does not know); undecodable bytes are replaced rather than failing the whole page."""
    if isinstance(data, str):
        return data
    charset = "utf-8"
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value.strip('"'):
            charset = value.strip('"')
    try:
        return data.decode(charset, errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")


def _api_message(exc) -> str:
    import json

    try:
        return json.loads(exc.body).get("message") or str(exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or exc.reason)


def _pod_state(pod) -> PodState:
    status = pod.status
    containers = []
    for c in status.container_statuses or ():
        state, reason, message, code = "waiting", "", "", None
        if c.state and c.state.running:
            state = "running"
        elif c.state and c.state.terminated:
            t = c.state.terminated
            state, reason, message, code = "terminated", t.reason or "", t.message or "", t.exit_code
        elif c.state and c.state.waiting:
            reason, message = c.state.waiting.reason or "", c.state.waiting.message or ""
        last = c.last_state.terminated if c.last_state else None
        containers.append(
            ContainerState(
                c.name,
                bool(c.ready),
                c.restart_count or 0,
                state,
                reason,
                message,
                code,
                last.exit_code if last else None,
            )
        )
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())
    reason, message = status.reason or "", status.message or ""
    for c in status.conditions or ():
        if c.type == "PodScheduled" and c.status == "False":
            reason, message = c.reason or reason, c.message or message
    meta = pod.metadata
    return PodState(
        meta.name,
        status.phase or "Unknown",
        dict(meta.labels or {}),
        dict(meta.annotations or {}),
        ready,
        meta.deletion_timestamp is not None,
        reason,
        message,
        tuple(containers),
    )
