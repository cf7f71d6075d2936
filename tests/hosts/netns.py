"""Hosts on one machine: Linux network namespaces, each with its own address, joined by a bridge.

``Hosts(["memory", "store", "learner", "node-a", "node-b"])`` makes one namespace per name, each with a veth pair
whose outer end is enslaved to a bridge in the root namespace. The bridge has the first address of the subnet,
so the test process (in the root namespace) reaches every host, and hosts reach each other through it: real TCP
between real addresses, with what a cable between them can do to it:

- ``cut(name)`` / ``heal(name)``: the host's cable pulled and plugged back (the outer end of its veth down/up).
  Packets in flight are lost and TCP retransmits, as across a failed switch port; the host's own interface
  stays up, so its sockets do not fail at once.
- ``cap(name, mbit)``: a token-bucket filter (``tc tbf``) on both directions of the host's link.

``netem`` is not in this kernel: latency comes from ``tests.hosts.proxy.DelayProxy``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REASON = ""
"""Why namespaces cannot be made here ("" when they can); the tier is skipped with this one reason."""


def why_no_namespaces(who: str, tools: tuple[str, ...] = ("ip", "tc")) -> str:
    """'' where this process can make network namespaces (root, iproute2's ``tools``; one is made and removed to
    be sure), else why ``who`` cannot run."""
    if os.geteuid() != 0:
        return f"{who} needs root (network namespaces: ip netns add)"
    missing = [tool for tool in tools if not shutil.which(tool)]
    if missing:
        return f"iproute2 ({', '.join(missing)}) is not installed"
    probe = f"drl-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


REASON = why_no_namespaces("the hosts tier")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


class Hosts:
    """Namespaces ``<tag>-<name>`` on the bridge ``<tag>br``; host i has address ``<subnet>.<10 + i>``."""

    _made_count = 0

    def __init__(self, names: list[str], tag: str | None = None, subnet: str = "10.231.0"):
        Hosts._made_count += 1
        self.tag = tag or f"d{os.getpid() % 100000}{Hosts._made_count % 100}"
        self.subnet = subnet
        self.bridge = f"{self.tag}br"
        self.gateway = f"{subnet}.1"
        self.names = list(names)
        self.address = {name: f"{subnet}.{10 + i}" for i, name in enumerate(self.names)}
        self._outer = {name: f"{self.tag}v{i}" for i, name in enumerate(self.names)}
        self._made: list[str] = []

    def ns(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def up(self) -> "Hosts":
        try:
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
            for name in self.names:
                ns, outer = self.ns(name), self._outer[name]
                sh("ip", "netns", "add", ns)
                self._made.append(ns)
                sh("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
                sh("ip", "link", "set", outer, "master", self.bridge, "up")
                sh("ip", "-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", "eth0")
                sh("ip", "-n", ns, "link", "set", "eth0", "up")
                sh("ip", "-n", ns, "link", "set", "lo", "up")
                sh("ip", "-n", ns, "route", "add", "default", "via", self.gateway)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        for name in self.names:
            ns = self.ns(name)
            if ns not in self._made:
                continue
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                sh("kill", "-9", pid, check=False)
            sh("ip", "link", "del", self._outer[name], check=False)
            sh("ip", "netns", "del", ns, check=False)
        self._made.clear()
        sh("ip", "link", "del", self.bridge, check=False)

    def command(self, name: str, argv: list[str]) -> list[str]:
        """``argv`` run on host ``name``."""
        return ["ip", "netns", "exec", self.ns(name), *argv]

    def popen(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        cwd: str | None = None,
    ) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.command(name, argv), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
            )

    def cut(self, name: str) -> None:
        sh("ip", "link", "set", self._outer[name], "down")

    def heal(self, name: str) -> None:
        sh("ip", "link", "set", self._outer[name], "up")

    def _ends(self, name: str):
        """The ``tc`` command and device of each end of the host's link: the outer veth, then its own eth0."""
        yield ["tc"], self._outer[name]
        yield ["tc", "-n", self.ns(name)], "eth0"

    def cap(self, name: str, mbit: float) -> None:
        """Both directions of the host's link limited to ``mbit`` Mbit/s (tbf: a 64 KiB bucket, 50 ms of queue)."""
        for tc, dev in self._ends(name):
            sh(
                *tc,
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{mbit}mbit",
                "burst",
                "64kb",
                "latency",
                "50ms",
            )

    def qdisc(self, name: str) -> str:
        """The queueing disciplines on both ends of the host's link, as ``tc`` shows them."""
        return "".join(sh(*tc, "qdisc", "show", "dev", dev).stdout for tc, dev in self._ends(name))

    def uncap(self, name: str) -> None:
        for tc, dev in self._ends(name):
            sh(*tc, "qdisc", "del", "dev", dev, "root", check=False)

    def __enter__(self) -> "Hosts":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()
