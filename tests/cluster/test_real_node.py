"""One real node (``scripts/local-cluster.sh up NAME --node real``: containerd, kubelet, kube-proxy, CoreDNS) on
the tier's control plane: it becomes Ready, pods from images imported without a registry run and log, a pod
finds a Service by its DNS name and reaches it through the Service's IP (and the API server through 10.96.0.1),
nothing in the cluster's namespace or a pod has a route off the machine, and ``down`` leaves no process, mount,
namespace, cgroup, iptables rule or file of the cluster behind.

The ``real_node`` fixture (module scope) starts the cluster ``n<pid>`` once for this file, in its own network
namespace, and stops it after the last test (which stops it itself and checks what is left). The images are
``scripts/node-images.sh``'s: ``drl.local/testbox:1`` (docker/node/testbox.c: echo, fail, serve, get).
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import KUBERNETES_VERSION, RESTRICTED, SCRIPT, TOOLS_SCRIPT, Cluster, _logs_tail
from tests.cluster.test_chart import leftovers
from tests.harness import assert_balanced, held
from tests.hosts.netns import why_no_namespaces

TESTBOX = "drl.local/testbox:1"
NODE_ADDR = "10.250.0.2"
NODE_BRIDGE = "drl-node"
POD_BRIDGE = "cni0"
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
SHIM_SOCKETS = Path("/run/containerd/s")
POD_LOG_LINKS = Path("/var/log/containers")
CNI_RESULTS = Path("/var/lib/cni/results")
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
OFF_THE_MACHINE = "192.0.2.1"  # TEST-NET-1


class RealNode(Cluster):
    """A :class:`Cluster` with one real node: ``node`` (its name), ``cgroup`` (the kubelet's cgroupRoot, a folder
    name in every cgroup hierarchy), ``sysctls_before`` (the kernel settings the kubelet changes, as they were),
    ``shim_sockets`` (the containerd shims' sockets seen while pods ran), ``sandboxes`` (the pods' sandbox ids
    seen), ``startup_s``."""

    def __init__(self, name: str, state: Path, tools: Path, env: dict):
        super().__init__(name, state, tools)
        self.node = f"{name}-node"
        self.cgroup = f"drl-k8s-{name}"
        self.script_env = env
        self.sysctls_before = _sysctls()
        self.iptables_before = _iptables_lines()
        self.device_plugins_before = sorted(DEVICE_PLUGINS.iterdir()) if DEVICE_PLUGINS.is_dir() else []
        self.shim_sockets: set[str] = set()
        self.sandboxes: set[str] = set()
        self.down_output = ""
        self.uses_image_store = False

    def down(self) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["bash", str(SCRIPT), "down", self.name], env=self.script_env, capture_output=True, text=True, timeout=180
        )
        self.down_output = proc.stderr
        return proc

    def pod_spec(
        self, name: str, args: list[str], restart: str = "Never", labels: dict | None = None, port: int | None = None
    ) -> dict:
        container = {"name": "main", "image": TESTBOX, "imagePullPolicy": "Never", "args": args}
        if port:
            container["ports"] = [{"containerPort": port, "name": "http"}]
            container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 1}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1, "containers": [container]},
        }

    def wait_phase(self, namespace: str, pod: str, phases: tuple[str, ...], timeout: float = 60) -> dict:
        def probe():
            got = self.pod(namespace, pod)
            return got if got and got.get("status", {}).get("phase") in phases else None

        try:
            return self.wait_for(f"pod {namespace}/{pod} in {phases}", probe, timeout=timeout, interval=0.3)
        except AssertionError as e:
            events = self.kubectl("-n", namespace, "get", "events", "-o", "wide", check=False).stdout
            raise AssertionError(f"{e}\nevents:\n{events}\n{_logs_tail(self.state, 8)}") from None

    def record_shim_sockets(self) -> set[str]:
        """The sockets the shims of the pods now on the node have in /run/containerd/s (named by the sha256 of
        "ADDRESS/NAMESPACE/ID"), as ``down`` computes them."""
        tasks = self.state / "containerd" / "state" / "io.containerd.runtime.v2.task"
        address = self.state / "containerd" / "containerd.sock"
        ids = {(ns.name, task.name) for ns in tasks.iterdir() for task in ns.iterdir()} if tasks.is_dir() else set()
        names = {hashlib.sha256(f"{address}/{ns}/{task}".encode()).hexdigest() for ns, task in ids}
        self.shim_sockets |= names
        self.sandboxes |= {task for _, task in ids}
        return names


def _sysctls() -> dict[str, str]:
    return {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS if Path("/proc/sys", k).exists()}


def _iptables_lines() -> set[str]:
    """The machine's own (root namespace) iptables rules that name what a cluster makes: KUBE-/CNI- chains or
    the cluster's ranges."""
    out = set()
    for proc in (
        subprocess.run(["iptables-save"], capture_output=True, text=True),
        subprocess.run(["ip6tables-save"], capture_output=True, text=True),
    ):
        assert proc.returncode == 0, f"{proc.args[0]} failed ({proc.returncode}): {proc.stderr}"
        out |= {
            line for line in proc.stdout.splitlines() if re.search(r"KUBE-|CNI-|10\.244\.|10\.96\.|10\.250\.", line)
        }
    return out


def _links(netns: str) -> list[dict]:
    return json.loads(
        subprocess.run(
            ["ip", "-n", netns, "-d", "-j", "link", "show"], capture_output=True, text=True, check=True
        ).stdout
    )


def _assert_no_route_off(netns: str) -> None:
    """The cluster's namespace has lo, the node's bridge with no ports, the pods' bridge whose ports are only
    veths leading into pods' namespaces on this machine, no route that leaves through anything else, and no
    default route in any table."""
    links = _links(netns)
    by_name = {link["ifname"]: link for link in links}
    assert "lo" in by_name and NODE_BRIDGE in by_name, f"{netns} lacks lo or {NODE_BRIDGE}: {sorted(by_name)}"
    for link in links:
        name, kind = link["ifname"], link.get("linkinfo", {}).get("info_kind")
        if name == "lo":
            continue
        if name in (NODE_BRIDGE, POD_BRIDGE):
            assert kind == "bridge", f"{netns}: {name} is a {kind}, not a bridge"
            continue
        assert kind == "veth" and link.get("master") == POD_BRIDGE and "link_netnsid" in link, (
            f"{netns} has a link that is not a pod's veth on {POD_BRIDGE}: {name} ({kind}, {link.get('master')})"
        )
    ports = [link["ifname"] for link in links if link.get("master") == NODE_BRIDGE]
    assert not ports, f"the node's bridge {NODE_BRIDGE} has ports: {ports}"
    # a pod's veth carries only its link-local (IPv6) routes: it leads into that pod's namespace
    devices = {"lo", NODE_BRIDGE, POD_BRIDGE} | {link["ifname"] for link in links if link.get("master") == POD_BRIDGE}
    for family in ("-4", "-6"):
        routes = subprocess.run(
            ["ip", "-n", netns, family, "route", "show", "table", "all"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        for route in filter(str.strip, routes):
            words = route.split()
            assert "default" not in words[:3], f"{netns} has a default route: {route}"
            assert "dev" in words and words[words.index("dev") + 1] in devices, (
                f"{netns} routes through something else than lo, its bridges and pods' veths: {route}"
            )


def _processes_mentioning(*needles: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if any(n in cmdline or n in cgroups for n in needles):
            found.append(f"{proc.name}: {cmdline[:160]}")
    return found


def _live_kubelets() -> list[str]:
    """The pids of the kubelets that run on the machine (not zombies)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text() if proc.name.isdigit() else ""
        except OSError:
            continue
        if stat and stat[stat.index("(") + 1 : stat.rindex(")")] == "kubelet" and stat[stat.rindex(")") + 2] != "Z":
            found.append(proc.name)
    return found


@pytest.fixture(scope="module")
def real_node(tmp_path_factory):
    """The real-node cluster ``n<pid>``: made once for this file, stopped after its last test (also on Ctrl-C)."""
    reason = why_no_namespaces("the real node", ("ip", "nsenter"))
    if reason:
        pytest.skip(f"real node: {reason}")
    tools = subprocess.run(
        ["bash", str(TOOLS_SCRIPT), "--dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    check = subprocess.run(["bash", str(TOOLS_SCRIPT), "--check", "all"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.fail(
            f"real node: {check.stderr.strip()} (bash scripts/k8s-tools.sh: about 20 minutes for the "
            f"control plane and 10 for the node's tools on a fresh machine; later runs reuse them)",
            pytrace=False,
        )
    _sweep_stale_real(tmp_path_factory.getbasetemp().parent)
    name = f"n{os.getpid()}"
    state = tmp_path_factory.mktemp("real-node")
    env = {**os.environ, "DRL_CLUSTER_DIR": str(state)}
    node = RealNode(name, state, Path(tools), env)
    atexit.register(node.down)
    try:
        made = subprocess.run(
            ["bash", str(SCRIPT), "net", name, "--node", "real"], env=env, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, f"local-cluster.sh net --node real failed:\n{made.stderr}"
        _assert_no_route_off(node.netns)
        t0 = time.monotonic()
        up = subprocess.run(
            ["bash", str(SCRIPT), "up", name, "--node", "real"], env=env, capture_output=True, text=True, timeout=300
        )
        if up.returncode != 0:
            pytest.fail(
                f"real node: local-cluster.sh up --node real failed:\n{up.stderr}\n{_logs_tail(state)}", pytrace=False
            )
        node.startup_s = time.monotonic() - t0
        node.up_output = up.stderr
        node.uses_image_store = (state / "containerd" / "root").is_symlink()
        yield node
        node.cleanup()
    finally:
        node.down()
        atexit.unregister(node.down)


def _sweep_stale_real(tmp_root: Path) -> None:
    """Stops the real-node clusters of earlier sessions (``n<pid>``) whose pytest process is gone (killed before
    its teardown ran), with their state folder where it is still among pytest's folders under ``tmp_root``, so
    that their mounts and kernel settings go too."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        m = re.fullmatch(r"drl-k8s-(n(\d+))", line.split()[0]) if line.strip() else None
        if not m or int(m.group(2)) == os.getpid() or Path(f"/proc/{m.group(2)}").exists():
            continue
        states = [
            config.parent
            for config in tmp_root.glob("pytest-*/real-node*/kubelet-config.yaml")
            if f"cgroupRoot: /drl-k8s-{m.group(1)}\n" in config.read_text()
        ]
        state = states[0] if states else Path(f"/nonexistent/drl-cluster-{m.group(1)}")
        subprocess.run(
            ["bash", str(SCRIPT), "down", m.group(1), "--node", "real"],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "DRL_CLUSTER_DIR": str(state)},
        )


@pytest.fixture
def ns(real_node, request):
    name = real_node.namespace(re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-"))
    yield name
    real_node.delete_namespace(name)


def test_node_is_ready_and_real(real_node):
    node = real_node.kubectl_json("get", "node", real_node.node)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", node["status"]["conditions"]
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == KUBERNETES_VERSION
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert {"type": "InternalIP", "address": NODE_ADDR} in node["status"]["addresses"]
    assert not node["spec"].get("taints"), node["spec"].get("taints")
    # the kubelet's pods live under its own cgroupRoot, in every v1 hierarchy it uses
    for controller in ("memory", "cpu", "pids"):
        folder = Path("/sys/fs/cgroup", controller, real_node.cgroup)
        if Path("/sys/fs/cgroup", controller).is_dir():
            assert (folder / "kubepods").is_dir(), f"no {folder}/kubepods"


def test_pod_from_an_imported_image_runs_and_logs(real_node, ns):
    real_node.apply(
        [
            real_node.pod_spec("hello", ["echo", "hello from the real node"]),
            real_node.pod_spec("fails", ["fail", "3", "exit three"]),
        ],
        namespace=ns,
    )
    hello = real_node.wait_phase(ns, "hello", ("Succeeded", "Failed"))
    assert hello["status"]["phase"] == "Succeeded", hello["status"]
    assert hello["status"]["podIP"].startswith("10.244.0."), hello["status"]
    assert real_node.kubectl("-n", ns, "logs", "hello").stdout == "hello from the real node\n"
    fails = real_node.wait_phase(ns, "fails", ("Succeeded", "Failed"))
    terminated = fails["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (fails["status"]["phase"], terminated["exitCode"]) == ("Failed", 3), fails["status"]
    assert real_node.kubectl("-n", ns, "logs", "fails").stdout == "exit three\n"


def test_pod_reaches_a_service_by_its_dns_name(real_node, ns):
    real_node.apply(
        [
            real_node.pod_spec(
                "server", ["serve", "8080", f"hello from {ns}"], restart="Always", labels={"app": "echo"}, port=8080
            ),
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "echo"},
                "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": "http"}]},
            },
        ],
        namespace=ns,
    )
    real_node.wait_for(
        "the server Ready",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (real_node.pod(ns, "server") or {}).get("status", {}).get("conditions", [])
        ),
        timeout=60,
    )
    cluster_ip = real_node.kubectl_json("-n", ns, "get", "service", "echo")["spec"]["clusterIP"]
    fqdn = f"echo.{ns}.svc.cluster.local"
    real_node.apply(
        [
            real_node.pod_spec("client", ["get", fqdn, "80", "/", "30"]),
            real_node.pod_spec("short", ["get", "echo", "80", "/", "30"]),
            real_node.pod_spec("api", ["get", "kubernetes.default.svc.cluster.local", "443", "/", "30"]),
        ],
        namespace=ns,
    )
    for pod in ("client", "short", "api"):
        done = real_node.wait_phase(ns, pod, ("Succeeded", "Failed"), timeout=90)
        log = real_node.kubectl("-n", ns, "logs", pod, check=False)
        assert done["status"]["phase"] == "Succeeded", f"{pod}: {log.stdout}{log.stderr}"
    assert real_node.kubectl("-n", ns, "logs", "client").stdout == (f"resolved {fqdn} {cluster_ip}\nhello from {ns}\n")
    assert real_node.kubectl("-n", ns, "logs", "short").stdout == f"resolved echo {cluster_ip}\nhello from {ns}\n"
    # the API server through the Service kubernetes (10.96.0.1 -> the node's address): a plain HTTP request to
    # its TLS port gets Go's plain answer
    api = real_node.kubectl("-n", ns, "logs", "api").stdout
    assert api.startswith("resolved kubernetes.default.svc.cluster.local 10.96.0.1\n"), api
    assert "Client sent an HTTP request to an HTTPS server" in api, api
    # the server saw the requests, through the Service, from the pods' own addresses (no masquerade)
    served = real_node.kubectl("-n", ns, "logs", "server").stdout
    assert served.count("request: GET / HTTP/1.0") >= 2, served
    assert real_node.record_shim_sockets(), "no shim state in containerd's state folder"
    found = [s for s in real_node.shim_sockets if (SHIM_SOCKETS / s).is_socket()]
    assert found, f"none of the shims' sockets {sorted(real_node.shim_sockets)} is in {SHIM_SOCKETS}"


def test_nothing_has_a_route_off_the_machine(real_node, ns):
    real_node.apply(
        [
            real_node.pod_spec("out", ["get", OFF_THE_MACHINE, "80", "/", "0"]),
            real_node.pod_spec("name", ["get", "example.com", "80", "/", "0"]),
        ],
        namespace=ns,
    )
    out = real_node.wait_phase(ns, "out", ("Succeeded", "Failed"), timeout=60)
    log = real_node.kubectl("-n", ns, "logs", "out", check=False).stdout
    assert out["status"]["phase"] == "Failed", log
    assert "unreachable" in log, log  # refused at once by the namespace (no route), not lost on the way
    # a name outside the cluster does not exist (CoreDNS has no upstream): NXDOMAIN, not a timeout
    name = real_node.wait_phase(ns, "name", ("Succeeded", "Failed"), timeout=60)
    log = real_node.kubectl("-n", ns, "logs", "name", check=False).stdout
    assert name["status"]["phase"] == "Failed" and "Name or service not known" in log, log
    _assert_no_route_off(real_node.netns)
    probe = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(3)\n"
        "try:\n"
        f"    s.connect(('{OFF_THE_MACHINE}', 80)); print('connected')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__, e.errno)\n"
    )
    got = real_node.run([sys.executable, "-c", probe], check=True).stdout
    assert got.startswith("OSError 101"), got  # ENETUNREACH in the cluster's namespace itself


# -- the chart's run on the real node (helm/profiles/local.yaml) ---------------------------------------------------

RELEASE = "drl"
RUN = "local"
# SAC on Pendulum-v1, 2 workers: about 20 s of training on 2 cores, so that the memory server's pod can be deleted
# mid-run.
RUN_VALUES = {
    "workers": 2,
    "mode": "async",
    "steps": 10000,
    "runName": RUN,
    "config": {
        "batch_transitions": 32,
        "random_steps": 300,
        "learning_starts": 300,
        "updates_per_transition": 0.5,
        "eval_episodes": 1,
        "max_backlog_entries": 4,
        "publish_every_updates": 50,
    },
}
MEMORY_FAULT_AT = 3000  # trainer env steps
CHART_RUN_S = 600
READ_SUMMARY = """
import sys
from drl.store.base import PrefixedStore
from drl.store.s3 import S3Store
url, endpoint, run = sys.argv[1:]
store = S3Store(url, env={"DRL_S3_ENDPOINT": endpoint, "DRL_STORE_RETRY_S": "20", "DRL_S3_CREATE_BUCKET": "0",
                          **{k: v for k, v in __import__("os").environ.items() if k.startswith("AWS_")}})
print(PrefixedStore(store, run).get("summary.json").decode())
"""


@dataclass
class ChartRun:
    namespace: str
    import_s: float
    imported: str
    trained_s: float
    jobs: dict
    summary: dict
    memory_deleted_at: int
    trainer_log: str


def _secret(node: RealNode, namespace: str, name: str) -> dict[str, str]:
    data = node.kubectl_json("-n", namespace, "get", "secret", name)["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def _job_states(node: RealNode, namespace: str, run: str = RUN) -> dict[str, str]:
    """{job: Complete | Failed | running (active/succeeded/failed)} of the run's Jobs."""
    out = {}
    for job in node.kubectl_json("-n", namespace, "get", "jobs", "-l", f"drl.dev/run={run}")["items"]:
        done = [
            c["type"]
            for c in job["status"].get("conditions", [])
            if c["status"] == "True" and c["type"] in ("Complete", "Failed")
        ]
        status = job["status"]
        out[job["metadata"]["name"]] = (
            done[0]
            if done
            else (f"running ({status.get('active', 0)}/{status.get('succeeded', 0)}/{status.get('failed', 0)})")
        )
    return out


def _read_summary(node: RealNode, namespace: str, fullname: str, run: str, folder: Path) -> dict:
    """The run's summary.json, read from the cluster's namespace through the S3 server's Service (its cluster IP;
    kube-proxy's rules lead to the pod) with the credentials of the run's Secret, as the pods read the store;
    also written to ``folder``."""
    keys = _secret(node, namespace, f"{fullname}-credentials")
    service = node.kubectl_json("-n", namespace, "get", "service", f"{fullname}-s3")["spec"]["clusterIP"]
    read = node.run(
        [sys.executable, "-c", READ_SUMMARY, "s3://drl/runs", f"http://{service}:9000", run],
        env={"AWS_ACCESS_KEY_ID": keys["s3-access-key"], "AWS_SECRET_ACCESS_KEY": keys["s3-secret-key"]},
        timeout=120,
    )
    assert read.returncode == 0, f"the summary could not be read through the Service {service}:\n{read.stderr}"
    (folder / "summary.json").write_text(read.stdout)
    return json.loads(read.stdout)


def _run_report(node: RealNode, namespace: str) -> str:
    """The pods, the warnings and the tail of each pod's log: what a failed chart run shows."""
    pods = node.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False).stdout
    warnings = node.kubectl("-n", namespace, "get", "events", "--field-selector", "type=Warning", check=False).stdout
    logs = []
    for pod in node.pods(namespace):
        name = pod["metadata"]["name"]
        log = node.kubectl("-n", namespace, "logs", name, "--tail", "15", "--all-containers", check=False)
        logs.append(f"--- {name}\n{log.stdout}{log.stderr}")
    return f"pods:\n{pods}\nwarnings:\n{warnings}\n" + "\n".join(logs)


@pytest.fixture(scope="module")
def local_images(real_node):
    """The local profile's images in the node (``local-cluster.sh images``): the drl image and the S3 server image
    from the containers tier's preparation (built once per session, or found again by their tags), imported
    where their podman ids changed, and drl.local/valkey:local written. Returns (seconds, what it said)."""
    from tests.containers.conftest import PREPARATION, SWITCH, left_out

    if left_out():
        pytest.skip(f"real node: the chart's run needs the containers tier's images ({SWITCH}=0 leaves them out)")
    prep = PREPARATION.wait()
    if prep.skip:
        pytest.skip(f"real node: the chart's run needs the drl image: {prep.skip}")
    assert not prep.failure, f"real node: the drl image could not be made: {prep.failure}"
    t0 = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPT), "images", real_node.name, prep.images.drl, prep.images.s3],
        env=real_node.script_env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, f"local-cluster.sh images failed:\n{done.stderr}"
    seconds = time.monotonic() - t0
    said = " ".join(
        line.removeprefix("node-images: ") for line in done.stderr.splitlines() if line.startswith("node-images: ")
    )
    print(f"real node: the local profile's images in the node in {seconds:.0f} s ({said})")
    return seconds, said


@pytest.fixture(scope="module")
def chart_run(real_node, local_images, tmp_path_factory):
    """``helm install`` of the chart with helm/profiles/local.yaml (and RUN_VALUES) in a PodSecurity
    ``restricted`` namespace, followed until the trainer Job ends; the summary read back through the S3
    server's Service with the release's credentials."""
    namespace = real_node.namespace("chart-run", labels=RESTRICTED)
    values = tmp_path_factory.mktemp("chart-run") / "run.yaml"
    values.write_text(yaml.safe_dump(RUN_VALUES))
    t0 = time.monotonic()
    done = real_node.helm(
        "install",
        RELEASE,
        "./helm",
        "-n",
        namespace,
        "-f",
        "helm/profiles/local.yaml",
        "-f",
        values,
        "--wait",
        "--timeout",
        "3m",
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"helm install failed:\n{done.stderr}\n{_run_report(real_node, namespace)}"
    try:
        deleted_at = _wait_steps(real_node, namespace, RUN, "trainer", MEMORY_FAULT_AT)
        memory = real_node.pods(namespace, f"drl.dev/run={RUN},app.kubernetes.io/component=redis")
        assert len(memory) == 1, memory
        real_node.kubectl("-n", namespace, "delete", "pod", memory[0]["metadata"]["name"], "--wait=false")
        jobs = real_node.wait_for(
            "the trainer Job complete or failed",
            lambda: (lambda states: states if states.get(f"{RELEASE}-trainer") in ("Complete", "Failed") else None)(
                _job_states(real_node, namespace)
            ),
            timeout=CHART_RUN_S,
            interval=1,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_run_report(real_node, namespace)}") from None
    trained_s = time.monotonic() - t0
    assert jobs[f"{RELEASE}-trainer"] == "Complete", f"the trainer Job failed:\n{_run_report(real_node, namespace)}"
    jobs = real_node.wait_for(
        "the rollout and evaluator Jobs complete",
        lambda: (lambda states: states if all(v in ("Complete", "Failed") for v in states.values()) else None)(
            _job_states(real_node, namespace)
        ),
        timeout=120,
        interval=1,
    )
    summary = _read_summary(real_node, namespace, RELEASE, RUN, tmp_path_factory.mktemp("chart-summary"))
    print(
        f"real node: helm install to the trainer's end in {trained_s:.0f} s (the memory server's pod deleted at "
        f"{deleted_at} steps); jobs {jobs}; exit {summary.get('exit_reason')}, "
        f"{summary.get('transitions_produced')} transitions produced"
    )
    trainer_log = real_node.kubectl("-n", namespace, "logs", f"job/{RELEASE}-trainer", check=False).stdout
    yield ChartRun(namespace, *local_images, trained_s, jobs, summary, deleted_at, trainer_log)
    real_node.delete_namespace(namespace)


# The first test of the run may wait for the drl image's build (the containers tier's preparation, about 5 minutes on
# a fresh 2-core machine) and its import (about 4 minutes for 6 GB), in its setup.
@pytest.mark.timeout(2400)
def test_the_chart_trains_sac_pendulum_to_the_end_on_the_real_node(chart_run):
    assert chart_run.jobs == {f"{RELEASE}-{role}": "Complete" for role in ("trainer", "rollout", "evaluator")}, (
        chart_run.jobs
    )
    summary = chart_run.summary
    assert_balanced(summary)
    assert summary["run"] == RUN and summary["transitions_produced"] >= RUN_VALUES["steps"], summary


def test_a_deleted_memory_server_pod_comes_back_empty_and_the_run_recovers(chart_run):
    """The chart's run above lost its memory server's pod mid-run (the local profile keeps no persistence: the
    StatefulSet's new pod starts empty): the trainer writes its state back (docs/reliability.md, "Losing the
    memory server"), the workers continue their numbering, and the run ends with its steps done and a balanced
    summary (entries the server lost with it are counted as drops, not awaited)."""
    summary = chart_run.summary
    assert 0 < chart_run.memory_deleted_at < RUN_VALUES["steps"]
    assert "memory server lost its data" in chart_run.trainer_log, chart_run.trainer_log[-3000:]
    assert summary["exit_reason"] == "steps_done", summary
    assert summary["transitions_produced"] == RUN_VALUES["steps"], summary
    assert_balanced(summary)


def test_helm_test_passes_on_the_real_node(real_node, chart_run):
    done = real_node.helm(
        "test", RELEASE, "-n", chart_run.namespace, "--logs", "--timeout", "2m", check=False, timeout=180
    )
    assert done.returncode == 0, f"helm test failed:\n{done.stdout}\n{done.stderr}"
    assert "healthy: trainer" in done.stdout, done.stdout
    real_node.wait_for(
        "the test pod deleted", lambda: real_node.pod(chart_run.namespace, f"{RELEASE}-test-run") is None, timeout=60
    )


def test_helm_uninstall_leaves_nothing_on_the_real_node(real_node, chart_run):
    ns = chart_run.namespace
    real_node.helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "2m", timeout=180)
    real_node.wait_for("every object of the release gone", lambda: leftovers(real_node, ns) == [], timeout=120)
    UNINSTALLED.append(ns)


UNINSTALLED: list[str] = []


# -- drl-orchestrate --backend kubernetes --profile local on the real node -----------------------------------------

ORCHESTRATED = "orch"
ORCHESTRATED_STEPS = 40000
"""Default SAC on Pendulum, long enough that the scale-up and rollout-0's deletion both come mid-run: with 20,000 a
quick run had rollout-0 finish its share about when its pod was deleted (it then exits 0 at once, and the slow
termination the test needs never happens)."""
STATUS_ROW = re.compile(
    r"^(drl-(?:[a-z0-9-]+-)?(?P<role>rollout|trainer|evaluator)(-(?P<index>\d+))?-\S+)\s+(?P=role)\s+"
    r"running\s+(?P<policy>\d+)\s+(?P<steps>[\d,]+)\s"
)


def _counting(node: RealNode, namespace: str, kubeconfig: Path | None, run: str = ORCHESTRATED) -> dict[str, int]:
    """{rollout-i / trainer / evaluator: env steps} of the running pods whose counters ``status`` read through
    the API server's pod proxy."""
    status = node.orchestrate(
        "status",
        run,
        "--backend",
        "kubernetes",
        "--namespace",
        namespace,
        kubeconfig=kubeconfig,
        check=False,
        timeout=60,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {}
    for line in status.stdout.splitlines():
        m = STATUS_ROW.match(line)
        if m:
            rows[m["role"] + (f"-{m['index']}" if m["index"] else "")] = int(m["steps"].replace(",", ""))
    return rows


def _wait_steps(node: RealNode, namespace: str, run: str, role: str, least: int) -> int:
    """Waits until ``status`` shows ``role`` at ``least`` env steps or more; returns its count."""
    return node.wait_for(
        f"{role} at {least} steps",
        lambda: (lambda n: n if n >= least else None)(_counting(node, namespace, None, run).get(role, 0)),
        timeout=240,
        interval=1,
    )


def _wait_jobs_done(node: RealNode, namespace: str, run: str) -> dict[str, str]:
    """Waits until every Job of the run is Complete or Failed; returns their states."""
    return node.wait_for(
        "the run's Jobs done",
        lambda: (lambda states: states if all(v in ("Complete", "Failed") for v in states.values()) else None)(
            _job_states(node, namespace, run)
        ),
        timeout=CHART_RUN_S,
        interval=2,
    )


def _pod_pids(node: RealNode, pod: dict) -> list[int]:
    """The processes of a pod on the node: those in its cgroup of the pids hierarchy (the kubelet's cgroupfs
    layout: CGROUP_ROOT/kubepods/QOS/pod<uid>/<container>)."""
    uid = pod["metadata"]["uid"]
    pids = set()
    for procs in Path("/sys/fs/cgroup").glob(f"pids/{node.cgroup}/kubepods*/**/pod{uid}/**/cgroup.procs"):
        pids |= {int(p) for p in procs.read_text().split()}
    assert pids, f"no process of pod {pod['metadata']['name']} in the pids hierarchy under {node.cgroup}"
    return sorted(pids)


def _live_pod(node: RealNode, namespace: str, run: str, component: str, index: int | None = None) -> dict | None:
    """The run's pod of a component (and completion index) that is not terminating, if any."""
    selector = f"drl.dev/run={run},app.kubernetes.io/component={component}"
    if index is not None:
        selector += f",batch.kubernetes.io/job-completion-index={index}"
    live = [
        p
        for p in node.pods(namespace, selector)
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") in ("Pending", "Running")
    ]
    return live[0] if live else None


SLOW_TERMINATION_S = 8


def _delete_a_worker_slowly(node: RealNode, namespace: str, run: str, index: int) -> str:
    """Deletes the pod of rollout worker ``index`` while the trainer is held (SIGSTOP), so that its termination
    is slow (it hands in what it collected and waits for the trainer), and checks that no replacement of that
    index exists while it terminates (``podReplacementPolicy: Failed``); then lets the trainer go on and returns
    the name of the replacement pod once it runs."""
    old, trainer = _live_pod(node, namespace, run, "rollout", index), _live_pod(node, namespace, run, "trainer")
    assert old and trainer, "no running worker or trainer pod to delete"
    selector = f"drl.dev/run={run},app.kubernetes.io/component=rollout,batch.kubernetes.io/job-completion-index={index}"
    overlap = set()
    with held(_pod_pids(node, trainer)):
        node.kubectl("-n", namespace, "delete", "pod", old["metadata"]["name"], "--wait=false")
        until = time.monotonic() + SLOW_TERMINATION_S
        while time.monotonic() < until:
            overlap |= {
                p["metadata"]["name"]
                for p in node.pods(namespace, selector)
                if p["metadata"]["uid"] != old["metadata"]["uid"]
            }
            time.sleep(0.5)
        still = node.pod(namespace, old["metadata"]["name"])
        assert still is not None and still["status"].get("phase") == "Running", (
            f"the deleted worker ended while the trainer was held: its termination was not slow ({still})"
        )
    assert not overlap, f"a replacement of rollout-{index} started while its deleted pod terminated: {overlap}"
    new = node.wait_for(
        f"the replacement of rollout-{index} running",
        lambda: (lambda p: p if p and p["status"].get("phase") == "Running" else None)(
            _live_pod(node, namespace, run, "rollout", index)
        ),
        timeout=120,
        interval=1,
    )
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    return new["metadata"]["name"]


def test_the_orchestrator_runs_shows_live_status_scales_2_to_3_and_deletes_on_the_real_node(
    real_node, local_images, tmp_path
):
    """With only the orchestrator's own Role (the chart's rbac.create), in a PodSecurity restricted namespace:
    ``--profile local`` runs on the imported images, ``status`` shows the pods' live counters (their /metrics
    through the pod proxy), ``scale --workers 3`` runs the scaler Job and a third worker steps; then rollout-0's pod
    is deleted while its termination is slow (``_delete_a_worker_slowly``: its replacement never overlaps it),
    the worker exits 143 without ending its part (a pod that exits 0 would complete its index and the run would
    end short), and the replacement continues its numbering and share; the run ends with exactly its steps,
    none counted twice, and ``delete`` leaves nothing."""
    from tests.cluster.test_orchestrator import with_orchestrator_role

    ns = real_node.namespace("orchestrated", labels=RESTRICTED)
    kubeconfig = with_orchestrator_role(real_node, ns)
    t0 = time.monotonic()
    real_node.orchestrate(
        "--backend",
        "kubernetes",
        "--namespace",
        ns,
        "--run-name",
        ORCHESTRATED,
        "--preset",
        "sac",
        "--profile",
        "local",
        "--workers",
        "2",
        "--steps",
        str(ORCHESTRATED_STEPS),
        "--mode",
        "async",
        "--detach",
        kubeconfig=kubeconfig,
        timeout=120,
    )
    try:
        live = real_node.wait_for(
            "status showing both workers' and the trainer's steps",
            lambda: (
                lambda rows: rows if rows.get("rollout-0") and rows.get("rollout-1") and rows.get("trainer") else None
            )(_counting(real_node, ns, kubeconfig)),
            timeout=240,
            interval=3,
        )
        live_s = time.monotonic() - t0
        scale = real_node.orchestrate(
            "scale",
            ORCHESTRATED,
            "--workers",
            "3",
            "--backend",
            "kubernetes",
            "--namespace",
            ns,
            kubeconfig=kubeconfig,
            check=False,
            timeout=240,
        )
        assert scale.returncode == 0, scale.stderr
        assert f"drl: Job drl-{ORCHESTRATED}-rollout scaled to 3" in scale.stderr, scale.stderr
        [scaler] = real_node.kubectl_json("-n", ns, "get", "jobs", "-l", "app.kubernetes.io/component=scaler")["items"]
        assert scaler["status"].get("succeeded") == 1, scaler["status"]
        third = real_node.wait_for(
            "the third worker stepping",
            lambda: _counting(real_node, ns, kubeconfig).get("rollout-2"),
            timeout=180,
            interval=3,
        )
        replaced = _delete_a_worker_slowly(real_node, ns, ORCHESTRATED, index=0)
        states = _wait_jobs_done(real_node, ns, ORCHESTRATED)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_run_report(real_node, ns)}") from None
    assert {k: v for k, v in states.items() if "scaler" not in k} == {
        f"drl-{ORCHESTRATED}-{role}": "Complete" for role in ("trainer", "rollout", "evaluator")
    }, states
    summary = _read_summary(real_node, ns, f"drl-{ORCHESTRATED}", ORCHESTRATED, tmp_path)
    assert summary["exit_reason"] == "steps_done" and summary["transitions_produced"] == ORCHESTRATED_STEPS, summary
    assert_balanced(summary)
    assert summary["duplicates_dropped"] == 0, summary
    rollout = real_node.kubectl_json("-n", ns, "get", "job", f"drl-{ORCHESTRATED}-rollout")["status"]
    assert rollout.get("failed") == 1 and rollout.get("succeeded") == 3, rollout
    log = real_node.kubectl("-n", ns, "logs", replaced, check=False).stdout
    assert "rollout-0 continues after a restart" in log, log
    print(
        f"real node: drl-orchestrate --profile local: live status after {live_s:.0f} s ({live}); the third "
        f"worker stepping ({third} steps); the run done after {time.monotonic() - t0:.0f} s"
    )
    delete = real_node.orchestrate(
        "delete", ORCHESTRATED, "--backend", "kubernetes", "--namespace", ns, kubeconfig=kubeconfig, timeout=120
    )
    assert f"deleted run {ORCHESTRATED}" in delete.stderr, delete.stderr
    real_node.wait_for(
        "nothing of the run left",
        lambda: (
            not real_node.kubectl(
                "-n",
                ns,
                "get",
                "all,secrets,configmaps,networkpolicies,roles,rolebindings,pvc",
                "-l",
                f"drl.dev/run={ORCHESTRATED}",
                "-o",
                "name",
            ).stdout.split()
        ),
        timeout=120,
    )
    real_node.delete_namespace(ns)


TRAINER_FAULT_STEPS = 20000
TRAINER_FAULT_AT = 5000


def test_a_deleted_trainer_pod_is_replaced_and_the_run_resumes_from_its_checkpoint(real_node, local_images, tmp_path):
    """The trainer's pod is deleted mid-run: the trainer writes its checkpoint and exits 143 without marking the
    run finished (before, it wrote a ``stopped`` summary and its replacement found nothing to do while the workers
    waited), the Job's replacement takes the identity over, continues from that checkpoint and ends the run
    with every step counted once."""
    run = "ft"
    ns = real_node.namespace("trainer-fault", labels=RESTRICTED)
    real_node.orchestrate(
        "--backend",
        "kubernetes",
        "--namespace",
        ns,
        "--run-name",
        run,
        "--preset",
        "sac",
        "--profile",
        "local",
        "--workers",
        "2",
        "--mode",
        "async",
        "--steps",
        str(TRAINER_FAULT_STEPS),
        "--batch-transitions",
        "32",
        "--random-steps",
        "300",
        "--learning-starts",
        "300",
        "--updates-per-transition",
        "0.5",
        "--eval-episodes",
        "1",
        "--max-backlog-entries",
        "4",
        "--publish-every-updates",
        "50",
        "--detach",
        timeout=120,
    )
    try:
        _wait_steps(real_node, ns, run, "trainer", TRAINER_FAULT_AT)
        old = _live_pod(real_node, ns, run, "trainer")
        real_node.kubectl("-n", ns, "delete", "pod", old["metadata"]["name"], "--wait=false")
        new = real_node.wait_for(
            "a new trainer pod",
            lambda: (lambda p: p if p and p["metadata"]["uid"] != old["metadata"]["uid"] else None)(
                _live_pod(real_node, ns, run, "trainer")
            ),
            timeout=120,
            interval=1,
        )
        states = _wait_jobs_done(real_node, ns, run)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_run_report(real_node, ns)}") from None
    assert states == {f"drl-{run}-{role}": "Complete" for role in ("trainer", "rollout", "evaluator")}, states
    summary = _read_summary(real_node, ns, f"drl-{run}", run, tmp_path)
    assert_balanced(summary)
    assert summary["exit_reason"] == "steps_done" and summary["transitions_produced"] == TRAINER_FAULT_STEPS, summary
    assert summary["duplicates_dropped"] == 0, summary
    log = real_node.kubectl("-n", ns, "logs", new["metadata"]["name"], check=False).stdout
    assert "continuing:" in log and "finished (steps_done)" in log, log
    trainer = real_node.kubectl_json("-n", ns, "get", "job", f"drl-{run}-trainer")["status"]
    assert trainer.get("failed") == 1 and trainer.get("succeeded") == 1, trainer
    real_node.delete_namespace(ns)


def test_the_uninstalled_releases_containers_are_gone_from_containerd(real_node):
    """After ``helm uninstall`` (above) the kubelet removes the containers and sandboxes of the deleted pods from
    containerd in its next garbage collection (once a minute): checked here, minutes later, so that no test
    waits for it."""
    assert UNINSTALLED, "helm uninstall did not run"
    for ns in UNINSTALLED:
        in_namespace = f'labels."io.kubernetes.pod.namespace"=={ns}'
        real_node.wait_for(
            f"containerd holding no container of {ns}",
            lambda in_namespace=in_namespace: (
                not real_node.run(
                    [
                        "ctr",
                        "--address",
                        real_node.state / "containerd" / "containerd.sock",
                        "--namespace",
                        "k8s.io",
                        "containers",
                        "ls",
                        "-q",
                        in_namespace,
                    ],
                    check=True,
                ).stdout.split()
            ),
            timeout=240,
            interval=2,
        )


def test_down_leaves_nothing(real_node):
    """Last: stops the cluster and looks for anything of it on the machine."""
    state, netns, cgroup = str(real_node.state), real_node.netns, real_node.cgroup
    real_node.record_shim_sockets()
    down = real_node.down()
    assert down.returncode == 0, down.stderr
    left = []
    netns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    if any(line.split()[0] == netns for line in netns_list.splitlines() if line.strip()):
        left.append(f"network namespace {netns}")
    left += [f"process {p}" for p in _processes_mentioning(state, f"/{cgroup}/", f"/{cgroup}\n", netns)]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    left += [f"mount {m}" for m in mounts if state in m or netns in m]
    left += [f"cgroup {d}" for d in Path("/sys/fs/cgroup").glob(f"*/{cgroup}")]
    left += [f"cgroup {d}" for d in Path("/sys/fs/cgroup").glob(cgroup)]
    left += [f"iptables rule {r}" for r in sorted(_iptables_lines() - real_node.iptables_before)]
    left += [f"shim socket {SHIM_SOCKETS / s}" for s in real_node.shim_sockets if (SHIM_SOCKETS / s).exists()]
    if POD_LOG_LINKS.is_dir():
        left += [
            f"log link {p}" for p in POD_LOG_LINKS.iterdir() if p.is_symlink() and os.readlink(p).startswith(state)
        ]
    if CNI_RESULTS.is_dir():
        left += [f"CNI cache {p}" for p in CNI_RESULTS.glob(f"drl-k8s-{real_node.name}-*")]
        left += [
            f"CNI cache {p}"
            for p in CNI_RESULTS.glob("cni-loopback-*-lo")
            if p.name[len("cni-loopback-") : -len("-lo")] in real_node.sandboxes
        ]
    if not _live_kubelets() and not real_node.device_plugins_before:  # else another cluster's kubelet may own them
        left += [f"kubelet's file {p}" for p in (DEVICE_PLUGINS.iterdir() if DEVICE_PLUGINS.is_dir() else [])]
    changed = {k: v for k, v in _sysctls().items() if real_node.sysctls_before.get(k) != v}
    left += [f"kernel setting {k}={v} (was {real_node.sysctls_before.get(k)})" for k, v in changed.items()]
    if Path(state).exists():
        left.append(f"state folder {state}")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    store = Path(os.environ.get("DRL_NODE_IMAGE_STORE") or cache / "drl" / "node-images")
    if (store / "owner").exists() and (store / "owner").read_text().strip() == state:
        left.append(f"the image store {store} still taken by this node")
    left += [f"mount {m}" for m in mounts if str(store) in m]
    left += [
        f"container folder {p}"
        for p in (store / "root" / "io.containerd.grpc.v1.cri").glob("*/*")
        if real_node.uses_image_store
    ]
    assert not left, "left after down:\n" + "\n".join(left) + f"\n(down said: {real_node.down_output})"
