"""The cluster tier: a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler;
Kubernetes v1.34.12) with 3 kwok nodes and Helm 4, started once for the tier by ``scripts/local-cluster.sh`` and
torn down after its last test, in its own network namespace, which has only ``lo`` and no route off the machine
(checked before anything starts).

Where namespaces cannot be made (not root, no ``ip netns``) every test here is skipped with that one reason; where
the tools are missing the tier fails and says to run ``bash scripts/k8s-tools.sh`` (CI builds them).

Fixtures:

- ``cluster`` (package scope): a :class:`Cluster`; its helpers run commands inside the namespace, with
  ``KUBECONFIG`` (the admin's, ``system:masters``) and the tools on ``PATH``.
- ``namespace`` (function): the name of a fresh namespace for this test, deleted after it.
- ``make_namespace`` (function): ``make_namespace(labels=None, hold_scalers=False) -> str``, more fresh namespaces
  (e.g. PodSecurity ``restricted``: ``labels=RESTRICTED``), all deleted after the test.

kwok's nodes run no container. A pod on them becomes Running and Ready at once and stays Running until:

- the test ends it: ``cluster.finish_pod(ns, pod, exit_code)`` (the ``kwok.drl.dev/exit-code`` annotation): with
  ``restartPolicy: Never`` (or ``OnFailure`` and 0) its containers terminate with that code and the pod is
  Succeeded (0) or Failed; with ``OnFailure`` and a non-zero code (or ``Always``) it crash-loops instead, each
  container's ``restartCount`` growing by one every ``delay`` (default 250 ms) with ``lastState.terminated`` carrying
  the code, which the Job controller counts toward ``backoffLimit``; ``cluster.finish_pod(ns, pod, None)`` removes
  the annotation and ends the loop;
- it is a scaler pod (label ``app.kubernetes.io/component: scaler``, drl's one-off scaler Jobs): it completes with
  exit code 0 half a second after it runs, unless it is annotated as above or its namespace was made with
  ``hold_scalers=True`` (the name then ends in ``-hold-scalers``): it then runs until the test ends it;
- it is deleted: it terminates as a kubelet ends a pod (exit code 143, Failed) and is removed, unless a finalizer
  other than the Job controller's holds it: it then stays Running and terminating (as in a long grace period)
  until the test removes that finalizer.

Logs: a pod's container has a log only where the test serves one, ``cluster.serve_logs(ns, text, pod=None,
containers=None)`` (kwok's ClusterLogs for every pod of the namespace, or Logs for one pod, reading a file under the
cluster's state folder that the helper writes; call it again to change the text). Without it ``kubectl logs`` and
the API server's pod log endpoint fail ("no logs found for container ...").
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from tests.hosts.netns import why_no_namespaces

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local-cluster.sh"
TOOLS_SCRIPT = ROOT / "scripts" / "k8s-tools.sh"
ORCHESTRATE = ROOT / ".venv" / "bin" / "drl-orchestrate"
KUBERNETES_VERSION = "v1.34.12"

EXIT_CODE = "kwok.drl.dev/exit-code"
DELAY = "kwok.drl.dev/delay"
HOLD_SCALERS = "-hold-scalers"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: runs against the real control plane of tests/cluster (every suite)")


def pytest_collection_modifyitems(items):
    """Marks the tier's tests; the real node's (test_real_node.py) go to the end of a one-process session, beside
    the containers tier, whose preparation builds the drl image their chart run imports in the background
    meanwhile (and the control plane of kwok's nodes is down by then). pytest-xdist's workers, the suite's
    default, take the files with the most tests first instead, so there the file runs after the larger ones."""
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)
    real = [item for item in items if item.fspath.basename == "test_real_node.py"]
    if real and len(real) < len(items):
        items[:] = [item for item in items if item not in real] + real


def pytest_collection_finish(session):
    """Where the real node's chart run is in the session, the containers tier's preparation (podman and the drl
    image, at the lowest priority) starts now, as that tier's own conftest does, and overlaps the tests before."""
    from tests.containers.conftest import PREPARATION, left_out

    if session.config.option.collectonly or left_out():
        return
    if any("chart_run" in getattr(item, "fixturenames", ()) for item in session.items):
        session.config.add_cleanup(PREPARATION.stop)
        PREPARATION.start()


def _no_route_off(netns: str) -> None:
    """Asserts that ``netns`` has only ``lo`` and that every route in every table, IPv4 and IPv6, goes through
    ``lo``: nothing started in it can send a packet off the machine."""
    links = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], capture_output=True, text=True, check=True)
    names = [line.split(":", 2)[1].strip().split("@")[0] for line in links.stdout.splitlines() if line.strip()]
    assert names == ["lo"], f"namespace {netns} has links {names}; it must have only lo"
    for family in ("-4", "-6"):
        routes = subprocess.run(
            ["ip", "-n", netns, family, "route", "show", "table", "all"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        for route in filter(str.strip, routes):
            words = route.split()
            assert words[0] != "default" and "default" not in words[:2], f"{netns} has a default route: {route}"
            assert "dev" in words and words[words.index("dev") + 1] == "lo", f"{netns} routes off lo: {route}"


def _sweep_stale() -> None:
    """Deletes the namespaces of earlier sessions' clusters (``drl-k8s-t<pid>``) whose pytest process is gone
    (killed before its teardown ran), with everything still running in them."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        m = re.fullmatch(r"drl-k8s-(t(\d+))", line.split()[0]) if line.strip() else None
        if m and int(m.group(2)) != os.getpid() and not Path(f"/proc/{m.group(2)}").exists():
            subprocess.run(
                ["bash", str(SCRIPT), "down", m.group(1)],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "DRL_CLUSTER_DIR": f"/nonexistent/drl-cluster-{m.group(1)}"},
            )


class Cluster:
    """A running local cluster: ``netns`` (the network namespace), ``state`` (its folder: certificates, logs of
    every process under ``logs/``), ``kubeconfig`` (the admin's), ``tools`` (the folder of kubectl, helm, ...)."""

    def __init__(self, name: str, state: Path, tools: Path):
        self.name = name
        self.netns = f"drl-k8s-{name}"
        self.state = state
        self.tools = tools
        self.kubeconfig = state / "admin.kubeconfig"
        self._made: set[str] = set()
        self._count = 0

    # -- running things in the namespace ------------------------------------------------------------------------

    def env(self, env: dict | None = None, kubeconfig: str | os.PathLike | None = None) -> dict:
        base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
        helm = self.state / "helm"
        base.update(
            {
                "KUBECONFIG": str(kubeconfig or self.kubeconfig),
                "PATH": f"{self.tools / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}",
                "DRL_CLUSTER_NETNS": self.netns,
                "KUBECACHEDIR": str(self.state / "kube-cache"),
                "HELM_CACHE_HOME": str(helm / "cache"),
                "HELM_CONFIG_HOME": str(helm / "config"),
                "HELM_DATA_HOME": str(helm / "data"),
            }
        )
        base.update(env or {})
        return base

    def run(
        self,
        argv,
        env: dict | None = None,
        input: str | None = None,
        timeout: float = 120,
        check: bool = False,
        kubeconfig: str | os.PathLike | None = None,
    ) -> subprocess.CompletedProcess:
        """Runs ``argv`` inside the namespace (``ip netns exec``) with ``KUBECONFIG`` (the admin's, or
        ``kubeconfig``) and the tools on ``PATH``, from the repository root; returns the CompletedProcess (text).
        ``check``: an AssertionError with the command's output when it exits non-zero."""
        argv = [str(a) for a in argv]
        proc = subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv],
            env=self.env(env, kubeconfig),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl(
        self,
        *args,
        input: str | None = None,
        timeout: float = 60,
        check: bool = True,
        kubeconfig: str | os.PathLike | None = None,
    ) -> subprocess.CompletedProcess:
        return self.run(
            [self.tools / "bin" / "kubectl", *args], input=input, timeout=timeout, check=check, kubeconfig=kubeconfig
        )

    def kubectl_json(self, *args, kubeconfig: str | os.PathLike | None = None, timeout: float = 60):
        """``kubectl ARGS -o json``, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", kubeconfig=kubeconfig, timeout=timeout).stdout)

    def helm(
        self,
        *args,
        input: str | None = None,
        timeout: float = 300,
        check: bool = True,
        kubeconfig: str | os.PathLike | None = None,
    ) -> subprocess.CompletedProcess:
        return self.run(
            [self.tools / "bin" / "helm", *args], input=input, timeout=timeout, check=check, kubeconfig=kubeconfig
        )

    def orchestrate(
        self,
        *args,
        kubeconfig: str | os.PathLike | None = None,
        env: dict | None = None,
        input: str | None = None,
        timeout: float = 300,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """``drl-orchestrate ARGS`` (the repository's ``.venv``) inside the namespace, as the admin or with
        ``kubeconfig`` (e.g. :meth:`kubeconfig_for`'s)."""
        return self.run([ORCHESTRATE, *args], env=env, input=input, timeout=timeout, check=check, kubeconfig=kubeconfig)

    def apply(
        self,
        manifests,
        namespace: str | None = None,
        server_side: bool = False,
        kubeconfig: str | os.PathLike | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """``kubectl apply -f -`` of a YAML string, one object (dict) or a list of them."""
        if not isinstance(manifests, str):
            objs = manifests if isinstance(manifests, list) else [manifests]
            manifests = yaml.safe_dump_all(objs, sort_keys=False)
        args = (
            ["apply", "-f", "-"] + (["-n", namespace] if namespace else []) + (["--server-side"] if server_side else [])
        )
        return self.kubectl(*args, input=manifests, check=check, kubeconfig=kubeconfig)

    # -- namespaces and credentials -----------------------------------------------------------------------------

    def namespace(self, name: str | None = None, labels: dict | None = None, hold_scalers: bool = False) -> str:
        """Creates a namespace (``name``, or a fresh one) with ``labels`` and waits for its ``default``
        ServiceAccount; returns its name, which ends in ``-hold-scalers`` with ``hold_scalers`` (kwok then leaves
        scaler pods there running). Deleted at the end of the session unless :meth:`delete_namespace` ran."""
        self._count += 1
        name = name or f"ns-{self._count}"
        if hold_scalers and not name.endswith(HOLD_SCALERS):
            name = name[: 63 - len(HOLD_SCALERS)].rstrip("-") + HOLD_SCALERS
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", name), f"not a namespace name: {name!r}"
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}})
        self._made.add(name)
        self.wait_for(
            f"the default ServiceAccount of {name}",
            lambda: self.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
            timeout=30,
        )
        return name

    def delete_namespace(self, name: str, wait: bool = False) -> None:
        """Deletes the namespace (its objects go with it; ``wait``: until it is gone) and the ClusterLogs that
        :meth:`serve_logs` made for it."""
        self.kubectl(
            "delete", "namespace", name, "--ignore-not-found", f"--wait={str(wait).lower()}", timeout=120, check=False
        )
        self.kubectl("delete", "clusterlogs.kwok.x-k8s.io", f"drl-{name}", "--ignore-not-found", check=False)
        self._made.discard(name)

    def kubeconfig_for(self, serviceaccount: str, namespace: str, duration: str = "2h") -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/serviceaccount`` (a token from
        ``kubectl create token``), with the namespace as its default; returns its path."""
        token = self.kubectl("-n", namespace, "create", "token", serviceaccount, "--duration", duration).stdout.strip()
        admin = yaml.safe_load(self.kubeconfig.read_text())
        cluster = admin["clusters"][0]["cluster"]
        user = f"system:serviceaccount:{namespace}:{serviceaccount}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": self.name, "user": user, "namespace": namespace}}],
            "current-context": user,
        }
        path = self.state / "kubeconfigs" / f"{namespace}.{serviceaccount}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # -- pods -----------------------------------------------------------------------------------------------------

    def pods(self, namespace: str, selector: str | None = None) -> list[dict]:
        args = ["-n", namespace, "get", "pods"] + (["-l", selector] if selector else [])
        return self.kubectl_json(*args)["items"]

    def pod(self, namespace: str, name: str) -> dict | None:
        proc = self.kubectl("-n", namespace, "get", "pod", name, "-o", "json", "--ignore-not-found")
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def finish_pod(self, namespace: str, pod: str, exit_code: int | None = 0, delay: str | None = None) -> None:
        """Makes kwok end pod's containers with ``exit_code`` (``kwok.drl.dev/exit-code``): Succeeded or Failed
        with ``restartPolicy: Never`` (or ``OnFailure`` and 0); a crash loop (``restartCount`` + 1 every
        ``delay``, a Go duration, default 250ms) with ``OnFailure`` and non-zero or ``Always``. ``None`` removes
        the annotation (ends a crash loop; the pod stays Running)."""
        if exit_code is None:
            self.kubectl("-n", namespace, "annotate", "pod", pod, f"{EXIT_CODE}-", f"{DELAY}-")
            return
        extra = [f"{DELAY}={delay}"] if delay else []
        self.kubectl("-n", namespace, "annotate", "--overwrite", "pod", pod, f"{EXIT_CODE}={int(exit_code)}", *extra)

    def serve_logs(
        self, namespace: str, text: str, pod: str | None = None, containers: list[str] | None = None
    ) -> Path:
        """Serves ``text`` as the log of the containers (all, or ``containers``) of every pod in ``namespace``
        (kwok's ClusterLogs ``drl-<namespace>``), or of one ``pod`` (kwok's Logs); returns the file kwok reads,
        which this writes again on each call. ``kubectl logs`` of a pod nothing serves fails."""
        folder = self.state / "logfiles" / namespace
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{pod or '_all'}.{'-'.join(containers or ['_all'])}.log"
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        lines = text.splitlines()
        path.write_text("".join(f"{now} stdout F {line}\n" for line in lines))
        spec = {"logs": [{"containers": list(containers or []), "logsFile": str(path), "follow": False}]}
        if pod is None:
            obj = {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": f"drl-{namespace}"},
                "spec": {"selector": {"matchNamespaces": [namespace]}, **spec},
            }
        else:
            obj = {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": spec,
            }
        self.apply(obj)
        return path

    def stop_logs(self, namespace: str, pod: str | None = None) -> None:
        """Stops serving what :meth:`serve_logs` served (the namespace's, or the pod's)."""
        if pod is None:
            self.kubectl("delete", "clusterlogs.kwok.x-k8s.io", f"drl-{namespace}", "--ignore-not-found")
        else:
            self.kubectl("-n", namespace, "delete", "logs.kwok.x-k8s.io", pod, "--ignore-not-found")

    # -- waiting --------------------------------------------------------------------------------------------------

    @staticmethod
    def wait_for(what: str, probe, timeout: float = 30, interval: float = 0.2):
        """Calls ``probe()`` until it returns something true (returned) or ``timeout`` seconds pass (an
        AssertionError naming ``what`` and the last value)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = probe()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g}s (last: {last!r})")
            time.sleep(interval)

    def cleanup(self) -> None:
        for name in sorted(self._made):
            self.delete_namespace(name)


def _logs_tail(state: Path, lines: int = 15) -> str:
    out = []
    for log in sorted((state / "logs").glob("*.log")) if (state / "logs").is_dir() else []:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {log.name}\n" + "\n".join(tail))
    return "\n".join(out)


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    """The tier's control plane: made once, torn down after the tier's last test (also after Ctrl-C), so that it
    takes no CPU from the tiers after it."""
    reason = why_no_namespaces("the cluster tier", ("ip",))
    if reason:
        pytest.skip(f"cluster tier: {reason}")
    tools = subprocess.run(
        ["bash", str(TOOLS_SCRIPT), "--dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if subprocess.run(["bash", str(TOOLS_SCRIPT), "--check", "control-plane"]).returncode != 0:
        pytest.fail(
            f"cluster tier: the Kubernetes tools are not built in {tools}: run bash scripts/k8s-tools.sh "
            f"(about 20 minutes on a fresh machine; later runs reuse them)",
            pytrace=False,
        )
    _sweep_stale()
    name = f"t{os.getpid()}"
    state = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "DRL_CLUSTER_DIR": str(state)}

    def down():
        subprocess.run(["bash", str(SCRIPT), "down", name], env=env, capture_output=True, text=True, timeout=120)

    atexit.register(down)
    try:
        made = subprocess.run(["bash", str(SCRIPT), "net", name], env=env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, f"local-cluster.sh net failed:\n{made.stderr}"
        _no_route_off(f"drl-k8s-{name}")
        t0 = time.monotonic()
        up = subprocess.run(["bash", str(SCRIPT), "up", name], env=env, capture_output=True, text=True, timeout=180)
        if up.returncode != 0:
            pytest.fail(f"cluster tier: local-cluster.sh up failed:\n{up.stderr}\n{_logs_tail(state)}", pytrace=False)
        made = Cluster(name, state, Path(tools))
        made.startup_s = time.monotonic() - t0
        yield made
        made.cleanup()
    finally:
        down()
        atexit.unregister(down)


def _fresh_name(request, cluster: Cluster) -> str:
    cluster._count += 1
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "t"
    return f"{slug}-{cluster._count}"


@pytest.fixture
def namespace(cluster, request):
    """A fresh namespace for this test, deleted after it."""
    name = cluster.namespace(_fresh_name(request, cluster))
    yield name
    cluster.delete_namespace(name)


@pytest.fixture
def make_namespace(cluster, request):
    """``make_namespace(labels=None, hold_scalers=False) -> name``: fresh namespaces, deleted after the test."""
    made = []

    def make(labels: dict | None = None, hold_scalers: bool = False) -> str:
        made.append(cluster.namespace(_fresh_name(request, cluster), labels=labels, hold_scalers=hold_scalers))
        return made[-1]

    yield make
    for name in made:
        cluster.delete_namespace(name)
