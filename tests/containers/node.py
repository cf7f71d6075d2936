"""One Kubernetes node played by podman: the pods of rendered manifests run as containers, each as a kubelet would
run it, everything taken from the manifests themselves.

- A Job's pods (one per completion; an Indexed Job's carry ``batch.kubernetes.io/job-completion-index``), a
  StatefulSet's (one per replica, ``<name>-<ordinal>``) and bare Pods are expanded from the manifests (``pods``).
- command and args (with Kubernetes' ``$(VAR)`` expansion), env and envFrom (values, ConfigMap and Secret
  references resolved from the same manifests, the downward API's fieldRefs), plus what the kubelet adds to every
  container (``KUBERNETES_SERVICE_HOST``/``_PORT``); Secret values reach podman through its environment, never
  its arguments.
- securityContext, pod and container merged: user and group, fsGroup and supplementalGroups as extra groups,
  runAsNonRoot enforced, ``readOnlyRootFilesystem`` (with no tmpfs of podman's own: only the pod's volumes are
  writable), dropped and added capabilities, ``allowPrivilegeEscalation: false`` as no-new-privileges.
- volumes: emptyDir as a tmpfs owned by the pod's user (``U=true``; a fresh emptyDir is writable by the pod),
  a StatefulSet's claim as a podman volume owned the same way, ConfigMap and Secret volumes as read-only files.
- resources: memory limits as they are, CPU limits capped at this machine's CPUs.
- one podman network whose DNS names are the Services' names (on every pod a Service selects; a Service's port
  must be its target port, which a DNS alias cannot remap) and a StatefulSet pod's ``<pod>.<service>``.
- probes run as the kubelet runs them, from the node: gRPC health checks and TCP connects to the pod's address,
  HTTP GETs, exec commands inside the container (``Node.probe``).

What a single node cannot show is left out, and said: scheduling fields, NetworkPolicies (podman does not
enforce them), the API server (the run's pods never call it: ``automountServiceAccountToken: false``), restarts
(a container that fails fails the test instead of being restarted). Any other field of a pod or container that
this module does not know stops it (``Unsupported``), so a chart change cannot pass unseen.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
KUBELET_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
TIER_LABEL = "drl.dev/containers-tier"

# Fields a pod spec / container may carry: modelled here, or meaningless on one node (scheduling, pull secrets).
POD_FIELDS = {
    "containers",
    "volumes",
    "securityContext",
    "restartPolicy",
    "serviceAccountName",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "terminationGracePeriodSeconds",
    "subdomain",
    "hostname",
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "topologySpreadConstraints",
    "imagePullSecrets",
}
CONTAINER_FIELDS = {
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "envFrom",
    "ports",
    "resources",
    "securityContext",
    "volumeMounts",
    "startupProbe",
    "livenessProbe",
    "readinessProbe",
    "workingDir",
}
SECURITY_FIELDS = {
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "fsGroupChangePolicy",
    "supplementalGroups",
    "seccompProfile",
    "readOnlyRootFilesystem",
    "allowPrivilegeEscalation",
    "privileged",
    "capabilities",
}


class Unsupported(Exception):
    """A manifest uses something this node does not model: teach it, rather than run the pod differently."""


@dataclass
class Pod:
    """One pod a workload makes: its name and hostname, its template's metadata (with the labels and annotations
    its controller adds) and spec, and the workload it belongs to."""

    name: str
    hostname: str
    metadata: dict
    spec: dict
    owner: dict
    subdomain: str = ""

    @property
    def component(self) -> str:
        return self.metadata.get("labels", {}).get("app.kubernetes.io/component", "")

    @property
    def index(self) -> int | None:
        value = self.metadata.get("annotations", {}).get(INDEX_ANNOTATION)
        return None if value is None else int(value)


def _suffix() -> str:
    return secrets.token_hex(3)[:5]


def job_pod(job: dict, index: int = 0) -> Pod:
    """A new pod of a Job, as the Job controller makes one: an Indexed Job's carries its completion index and is
    named after it (a pod replacing a failed one gets the same index and a new name)."""
    meta = json.loads(json.dumps(job["spec"]["template"].get("metadata", {})))
    name, spec = job["metadata"]["name"], job["spec"]["template"]["spec"]
    meta.setdefault("labels", {})["job-name"] = name
    if job["spec"].get("completionMode") != "Indexed":
        pod = f"{name}-{_suffix()}"
        return Pod(pod, pod, meta, spec, job, spec.get("subdomain", ""))
    meta.setdefault("annotations", {})[INDEX_ANNOTATION] = str(index)
    meta["labels"][INDEX_ANNOTATION] = str(index)
    return Pod(f"{name}-{index}-{_suffix()}", f"{name}-{index}", meta, spec, job, spec.get("subdomain", ""))


def pods(docs: list[dict]) -> list[Pod]:
    """Every pod the manifests make: each completion of a Job, each replica of a StatefulSet, each bare Pod."""
    out = []
    for doc in docs:
        kind, spec = doc["kind"], doc.get("spec", {})
        if kind == "Job":
            out += [job_pod(doc, i) for i in range(int(spec.get("completions", 1)))]
        elif kind == "StatefulSet":
            for ordinal in range(int(spec.get("replicas", 1))):
                meta = json.loads(json.dumps(spec["template"].get("metadata", {})))
                name = f"{doc['metadata']['name']}-{ordinal}"
                meta.setdefault("labels", {})["statefulset.kubernetes.io/pod-name"] = name
                out.append(Pod(name, name, meta, spec["template"]["spec"], doc, spec.get("serviceName", "")))
        elif kind == "Pod":
            out.append(Pod(doc["metadata"]["name"], doc["metadata"]["name"], doc["metadata"], spec, doc))
        elif kind in ("Deployment", "DaemonSet", "ReplicaSet", "CronJob"):
            raise Unsupported(f"{kind} {doc['metadata']['name']}: workloads of this kind are not expanded yet")
    return out


def quantity(text) -> float:
    """A Kubernetes quantity as a number (bytes, or CPUs)."""
    text = str(text)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}
    for unit, factor in units.items():
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` references in command, args and env values: a defined variable is replaced,
    ``$$`` escapes, anything else is left as written."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


class Manifests:
    """The rendered objects, with what pods read from them: ConfigMaps, Secrets (decoded) and Services."""

    def __init__(self, docs: list[dict]):
        self.docs = docs
        self.config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
        self.secrets = {
            d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()}
            | d.get("stringData", {})
            for d in docs
            if d["kind"] == "Secret"
        }
        self.services = [d for d in docs if d["kind"] == "Service"]

    def _ref(self, source: dict, ref: dict, what: str) -> str | None:
        data = source.get(ref["name"])
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise Unsupported(
                f"{what} {ref['name']}/{ref['key']} is not among the manifests (a Secret of the "
                "user's, e.g. credentials.existingSecret: render it with the chart's own)"
            )
        return data[ref["key"]]

    def env(self, pod: Pod, container: dict) -> tuple[dict[str, str], set[str]]:
        """(the container's environment, the names whose values come from Secrets), in the order Kubernetes
        builds it: envFrom, then env (later entries win, ``$(VAR)`` referring to earlier ones)."""
        env: dict[str, str] = dict(KUBELET_ENV)
        secret_names: set[str] = set()
        for source in container.get("envFrom", []):
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                env.update({prefix + k: v for k, v in self.config_maps[source["configMapRef"]["name"]].items()})
            elif "secretRef" in source:
                data = self.secrets[source["secretRef"]["name"]]
                env.update({prefix + k: v for k, v in data.items()})
                secret_names |= {prefix + k for k in data}
            else:
                raise Unsupported(f"envFrom {source}")
        for var in container.get("env", []):
            name = var["name"]
            if "value" in var:
                env[name] = expand(str(var["value"]), env)
                continue
            source = var.get("valueFrom", {})
            if "configMapKeyRef" in source:
                value = self._ref(self.config_maps, source["configMapKeyRef"], "ConfigMap")
            elif "secretKeyRef" in source:
                value = self._ref(self.secrets, source["secretKeyRef"], "Secret")
                secret_names.add(name)
            elif "fieldRef" in source:
                value = self.field(pod, source["fieldRef"]["fieldPath"])
            else:
                raise Unsupported(f"env {name}: valueFrom {source}")
            if value is not None:
                env[name] = value
        return env, secret_names

    def field(self, pod: Pod, path: str) -> str:
        """A downward-API field of the pod."""
        simple = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.owner["metadata"].get("namespace", "default"),
            "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default"),
            "spec.nodeName": "node",
        }
        if path in simple:
            return simple[path]
        found = re.fullmatch(r"metadata\.(annotations|labels)\['([^']+)'\]", path)
        if found:
            return pod.metadata.get(found.group(1), {}).get(found.group(2), "")
        raise Unsupported(f"fieldRef {path}")

    def aliases(self, pod: Pod, container: dict) -> list[str]:
        """The DNS names a pod answers to: every Service that selects it (whose ports must be the container's,
        since a DNS alias cannot remap them), and ``<hostname>.<subdomain>`` of a StatefulSet's or a group's pod."""
        labels = pod.metadata.get("labels", {})
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        names = []
        for svc in self.services:
            selector = svc["spec"].get("selector") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            for port in svc["spec"].get("ports", []):
                target = port.get("targetPort", port["port"])
                target = ports.get(target, target) if isinstance(target, str) else target
                if target != port["port"]:
                    raise Unsupported(
                        f"Service {svc['metadata']['name']} maps port {port['port']} to {target}: a DNS alias cannot"
                    )
            names.append(svc["metadata"]["name"])
        if pod.subdomain:
            names.append(f"{pod.hostname}.{pod.subdomain}")
        return names


@dataclass
class StandIn:
    """What runs in place of an image this machine cannot pull: the image, and what it needs around the rendered
    command (environment, read-only files), with the reason to say in the tier's output."""

    image: str
    why: str
    env: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, str] = field(default_factory=dict)


@dataclass
class Container:
    name: str
    pod: Pod
    spec: dict
    image: str
    env: dict[str, str]


AS_A_POD = ("--rm", "--pull", "never", "--network", "none", "--read-only", "--user", "10001:10001")
"""``podman run`` options of a container run as the pods run (their user, a read-only root) with no network."""


class Podman:
    """The podman command, with the containers.conf this machine needs (``CONTAINERS_CONF``)."""

    def __init__(self, conf: str | None):
        self.env = dict(os.environ)
        if conf:
            self.env["CONTAINERS_CONF"] = conf

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} ...: exit {done.returncode}: {done.stderr.strip()}")
        return done


class Node:
    """Runs pods of ``manifests`` as containers on one podman network; ``close`` removes everything it made."""

    def __init__(self, podman: Podman, manifests: Manifests, prefix: str, stand_ins: dict[str, StandIn], workdir: Path):
        self.podman, self.manifests, self.prefix, self.stand_ins = podman, manifests, prefix, stand_ins
        self.workdir = workdir
        self.network = f"{prefix}-net"
        self.containers: list[Container] = []
        self.volumes: set[str] = set()
        podman("network", "create", "--label", f"{TIER_LABEL}={prefix}", self.network)

    # -- what a pod becomes --------------------------------------------------------------------------------------
    def image_of(self, container: dict) -> tuple[str, StandIn | None]:
        image = container["image"]
        repository = image.rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image
        stand_in = self.stand_ins.get(repository)
        return (stand_in.image, stand_in) if stand_in else (image, None)

    def security(self, pod: Pod, container: dict) -> list[str]:
        pod_sc, sc = pod.spec.get("securityContext", {}), container.get("securityContext", {})
        unknown = (set(pod_sc) | set(sc)) - SECURITY_FIELDS
        if unknown:
            raise Unsupported(f"securityContext fields {sorted(unknown)}")
        merged = {**pod_sc, **sc}
        args = []
        user, group = merged.get("runAsUser"), merged.get("runAsGroup")
        if merged.get("runAsNonRoot") and user in (None, 0):
            raise Unsupported(f"{pod.name}: runAsNonRoot with user {user}: the kubelet would refuse to start it")
        if user is not None:
            args += ["--user", f"{user}:{group if group is not None else user}"]
        for extra in [pod_sc.get("fsGroup"), *pod_sc.get("supplementalGroups", [])]:
            if extra is not None:
                args += ["--group-add", str(extra)]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("privileged"):
            args.append("--privileged")
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        caps = sc.get("capabilities", {})
        args += [a for cap in caps.get("drop", []) for a in ("--cap-drop", cap)]
        args += [a for cap in caps.get("add", []) for a in ("--cap-add", cap)]
        profile = merged.get("seccompProfile", {}).get("type", "RuntimeDefault")
        if profile == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        elif profile != "RuntimeDefault":
            raise Unsupported(f"seccompProfile {profile}")
        return args

    def volumes_of(self, pod: Pod, container: dict) -> list[str]:
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in pod.owner.get("spec", {}).get("volumeClaimTemplates", [])}
        args = []
        for mount in container.get("volumeMounts", []):
            if set(mount) - {"name", "mountPath", "readOnly"}:
                raise Unsupported(f"volumeMount fields {sorted(set(mount) - {'name', 'mountPath', 'readOnly'})}")
            name, path, ro = mount["name"], mount["mountPath"], ",ro=true" if mount.get("readOnly") else ""
            volume = volumes.get(name)
            if name in claims and volume is None:
                claim = f"{self.prefix}-{name}-{pod.name}"
                self.volumes.add(claim)
                args += ["--mount", f"type=volume,source={claim},destination={path},U=true{ro}"]
            elif volume is not None and "emptyDir" in volume:
                size = (volume["emptyDir"] or {}).get("sizeLimit")
                args += [
                    "--mount",
                    f"type=tmpfs,destination={path},U=true" + (f",tmpfs-size={int(quantity(size))}" if size else ""),
                ]
            elif volume is not None and ("configMap" in volume or "secret" in volume):
                source = volume.get("configMap") or volume["secret"]
                data = (
                    self.manifests.config_maps.get(source.get("name", ""))
                    if "configMap" in volume
                    else self.manifests.secrets.get(source.get("secretName", ""))
                )
                if data is None:
                    raise Unsupported(f"volume {name}: {source} is not among the manifests")
                folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))
                for key, value in data.items():
                    (folder / key).write_text(value)
                folder.chmod(0o755)
                args += ["--mount", f"type=bind,source={folder},destination={path},ro=true"]
            else:
                raise Unsupported(f"volume {name} of {pod.name}: {volume}")
        return args

    def resources(self, container: dict) -> list[str]:
        limits = container.get("resources", {}).get("limits", {})
        args = []
        if "memory" in limits:
            args += ["--memory", str(int(quantity(limits["memory"])))]
        if "cpu" in limits:
            args += ["--cpus", f"{min(quantity(limits['cpu']), os.cpu_count() or 1):g}"]
        return args

    def run_args(self, pod: Pod) -> tuple[list[str], Container, dict[str, str]]:
        """The podman arguments of a pod's (one) container, the container, and the Secret values that reach podman
        through its environment."""
        unknown = set(pod.spec) - POD_FIELDS
        if unknown:
            raise Unsupported(f"pod {pod.name}: fields {sorted(unknown)}")
        if len(pod.spec["containers"]) != 1:
            raise Unsupported(
                f"pod {pod.name}: {len(pod.spec['containers'])} containers (one network namespace "
                "per pod would need a podman pod)"
            )
        [spec] = pod.spec["containers"]
        unknown = set(spec) - CONTAINER_FIELDS
        if unknown:
            raise Unsupported(f"container {spec['name']} of {pod.name}: fields {sorted(unknown)}")
        image, stand_in = self.image_of(spec)
        env, secret_names = self.manifests.env(pod, spec)
        if stand_in:
            env.update(stand_in.env)
        name = f"{self.prefix}-{pod.name}"
        args = [
            "run",
            "--detach",
            "--pull",
            "never",
            "--name",
            name,
            "--hostname",
            pod.hostname,
            "--network",
            self.network,
            "--label",
            f"{TIER_LABEL}={self.prefix}",
        ]
        args += [a for alias in self.manifests.aliases(pod, spec) for a in ("--network-alias", alias)]
        args += self.security(pod, spec) + self.volumes_of(pod, spec) + self.resources(spec)
        if stand_in:
            args += [
                a
                for src, dst in stand_in.mounts.items()
                for a in ("--mount", f"type=bind,source={src},destination={dst},ro=true")
            ]
        if spec.get("workingDir"):
            args += ["--workdir", spec["workingDir"]]
        secret_env = {}
        for key, value in env.items():
            if key in secret_names:
                secret_env[key] = value
                args += ["--env", key]
            else:
                args += ["--env", f"{key}={value}"]
        command = [expand(c, env) for c in spec.get("command", [])]
        rest = [expand(a, env) for a in spec.get("args", [])]
        if command:
            args += ["--entrypoint", json.dumps(command)]
        args += [image, *rest]
        return args, Container(name, pod, spec, image, env), secret_env

    # -- running -------------------------------------------------------------------------------------------------
    def run(self, pod: Pod) -> Container:
        args, container, secret_env = self.run_args(pod)
        self.podman(*args, env=secret_env)
        self.containers.append(container)
        return container

    def inspect(self, c: Container) -> dict:
        return json.loads(self.podman("inspect", c.name).stdout)[0]

    def ip(self, c: Container) -> str:
        return self.inspect(c)["NetworkSettings"]["Networks"][self.network]["IPAddress"]

    def state(self, c: Container) -> dict:
        return self.inspect(c)["State"]

    def logs(self, c: Container) -> str:
        done = self.podman("logs", c.name, check=False)
        return done.stdout + done.stderr

    def exec(self, c: Container, command: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        return self.podman("exec", c.name, *command, check=False, timeout=timeout)

    def kill(self, c: Container) -> None:
        self.podman("kill", "--signal", "KILL", c.name)

    def pause(self, c: Container) -> None:
        """Freezes every process of the container (cgroup freezer): a test's way to hold a run still."""
        self.podman("pause", c.name)

    def unpause(self, c: Container) -> None:
        self.podman("unpause", c.name)

    def wait(self, c: Container, timeout: float) -> int:
        """The container's exit code once it has ended; fails (with its log's tail) after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(c)
            if state["Status"] in ("exited", "stopped"):
                return int(state["ExitCode"])
            time.sleep(0.5)
        raise AssertionError(f"{c.pod.name} still running after {timeout:.0f} s; its log ends:\n{self.logs(c)[-3000:]}")

    def port(self, c: Container, port) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        named = {p.get("name"): p["containerPort"] for p in c.spec.get("ports", [])}
        if port not in named:
            raise Unsupported(f"{c.pod.name}: probe port {port!r} names no container port")
        return named[port]

    def probe(self, c: Container, probe: dict) -> tuple[bool, str]:
        """One probe, as the kubelet calls it: (passed, what it answered)."""
        timeout = float(probe.get("timeoutSeconds", 1))
        if "grpc" in probe:
            import grpc
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            address = f"{self.ip(c)}:{self.port(c, probe['grpc']['port'])}"
            with grpc.insecure_channel(address) as channel:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", "")), timeout=timeout
                    )
                except grpc.RpcError as exc:
                    return False, f"gRPC {address}: {exc.code().name}"
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            return reply.status == health_pb2.HealthCheckResponse.SERVING, f"gRPC {address}: {status}"
        if "tcpSocket" in probe:
            address = (self.ip(c), self.port(c, probe["tcpSocket"]["port"]))
            try:
                socket.create_connection(address, timeout=timeout).close()
                return True, f"TCP {address}: connected"
            except OSError as exc:
                return False, f"TCP {address}: {exc}"
        if "httpGet" in probe:
            get = probe["httpGet"]
            url = f"http://{self.ip(c)}:{self.port(c, get['port'])}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as reply:
                    return 200 <= reply.status < 400, f"GET {url}: {reply.status}"
            except urllib.error.HTTPError as exc:
                return False, f"GET {url}: {exc.code}"
            except OSError as exc:
                return False, f"GET {url}: {exc}"
        if "exec" in probe:
            done = self.exec(c, probe["exec"]["command"], timeout=timeout + 5)
            return done.returncode == 0, f"exec {probe['exec']['command']}: exit {done.returncode}"
        raise Unsupported(f"probe {probe}")

    def wait_probe(self, c: Container, probe: dict) -> str:
        """Calls a probe until it passes (sooner than the kubelet's period, never longer than the kubelet would
        wait: initialDelaySeconds + failureThreshold x periodSeconds); fails with its last answer and the log."""
        budget = probe.get("initialDelaySeconds", 0) + probe.get("failureThreshold", 3) * probe.get("periodSeconds", 10)
        deadline = time.monotonic() + budget
        while True:
            passed, said = self.probe(c, probe)
            if passed:
                return said
            if time.monotonic() > deadline or self.state(c)["Status"] not in ("running", "created", "configured"):
                raise AssertionError(f"{c.pod.name}: probe failed ({said}); its log ends:\n{self.logs(c)[-3000:]}")
            time.sleep(0.5)

    def close(self) -> None:
        """Removes the containers, claims and network this node made (by the tier's label)."""
        self.podman("rm", "--force", "--time", "0", *[c.name for c in self.containers], check=False, timeout=120)
        if self.volumes:
            self.podman("volume", "rm", "--force", *sorted(self.volumes), check=False)
        self.podman("network", "rm", "--force", self.network, check=False)
