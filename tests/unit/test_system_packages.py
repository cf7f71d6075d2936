"""Every tier installs what it needs on a fresh machine (``tests/system_packages.py``): a tier that calls a program
no install list brings fails here, on every machine, not only on the next fresh one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests import system_packages as sp
from tests.containers import conftest as containers


def test_each_program_a_tier_calls_is_among_its_needs():
    missing = []
    for tier, (needs, _, code) in sp.TIERS.items():
        declared = {n.tool for n in needs}
        missing += [
            f"{tier}: {tool} ({where})" for tool, where in sp.called_tools(code).items() if tool not in declared
        ]
    assert not missing, f"programs called but not declared in tests/system_packages.py: {missing}"


def test_each_need_is_on_a_fresh_machine_or_in_the_tiers_install_list():
    lacking = [
        f"{tier}: {n.tool} needs Debian's {n.package}"
        for tier, (needs, installs, _) in sp.TIERS.items()
        for n in needs
        if n.package not in sp.FRESH_MACHINE and n.package not in installs
    ]
    assert not lacking, f"no install list brings these on a fresh machine: {lacking}"


def test_the_check_catches_a_tier_that_lacks_a_package(monkeypatch):
    """The case that slipped through once: the containers tier installing podman without iptables."""
    needs, installs, code = sp.TIERS["containers"]
    monkeypatch.setitem(sp.TIERS, "containers", (needs, tuple(p for p in installs if p != "iptables"), code))
    with pytest.raises(AssertionError, match="iptables needs Debian's iptables"):
        test_each_need_is_on_a_fresh_machine_or_in_the_tiers_install_list()


def test_the_install_lists_are_the_ones_the_tiers_and_setup_use():
    assert containers.INSTALL == sp.CONTAINERS_INSTALLS
    setup = (sp.ROOT / "scripts" / "setup.sh").read_text()
    installed = re.findall(r"apt-get install [^\n]*--no-install-recommends ([\w .+-]+?)(?: >|$)", setup, re.M)
    assert installed and set(" ".join(installed).split()) == set(sp.SETUP_TEST_INSTALLS)


def _packages_of(tools: set[str]) -> dict[str, str]:
    """{program: the Debian package its file on PATH came from}, in one ``dpkg -S`` call (each call reads the
    whole package database); a program not on PATH or from no package is left out."""
    paths: dict[str, str] = {}
    for tool in tools:
        path = (tool if os.path.exists(tool) else None) if os.path.isabs(tool) else shutil.which(tool)
        if path is None:
            continue
        for p in (path, os.path.realpath(path)):
            for candidate in [p, p.removeprefix("/usr")] if p.startswith("/usr/") else [p]:
                paths.setdefault(candidate, tool)
    done = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True)
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        package, _, path = line.partition(": ")
        if path in paths and "," not in package:
            found.setdefault(paths[path], package.split(":")[0])
    return found


@pytest.mark.skipif(not shutil.which("dpkg"), reason="the package of a program is read with dpkg (Debian)")
def test_each_needs_package_is_the_one_that_provides_the_program_here():
    """Where a program is on this machine, the package the table names is the one it came from (so the table
    cannot name a package that would not bring the program)."""
    wrong, checked = [], 0
    packages = _packages_of({n.tool for needs, _, _ in sp.TIERS.values() for n in needs})
    for tier, (needs, _, _) in sp.TIERS.items():
        for n in needs:
            if n.tool in sp.TOOLCHAINS:
                assert n.package == sp.TOOLCHAINS[n.tool]
                continue
            package = packages.get(n.tool)
            if package is None:
                continue
            checked += 1
            if package != n.package:
                wrong.append(f"{tier}: {n.tool} comes from {package}, not {n.package}")
    assert checked >= 5, "too few of the needed programs are on this machine to check the table"
    assert not wrong, wrong


def test_the_environment_holds_its_libraries_bytecode():
    """scripts/setup.sh installs with ``--compile-bytecode``: without bytecode on disk, every process where Python
    may not write it (PYTHONDONTWRITEBYTECODE, as on CI machines) compiles torch anew when it imports it, and the
    suite's hundreds of processes pay that each time."""
    import importlib.util

    import numpy
    import torch

    missing = [
        module.__name__
        for module in (torch, numpy)
        if not os.path.exists(importlib.util.cache_from_source(module.__file__))
    ]
    assert not missing, (
        f"no compiled bytecode for {missing} in {os.path.dirname(os.path.dirname(torch.__file__))}: "
        "bash scripts/setup.sh --test installs with it (uv pip install --compile-bytecode)"
    )
