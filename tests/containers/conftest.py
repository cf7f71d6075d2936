"""The containers tier: the drl image built (or found again by the hash of what it is built from) and every pod the
chart renders run as a podman container (``tests.containers.node``). Opt-in with ``DRL_TESTS_CONTAINERS=1``:
podman is installed where it is missing (root with apt) and the images are built where missing (2-5 minutes),
then the tier takes about 25 s. Without it, or where podman cannot run a container, every test here is skipped
with that one reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib.metadata import version

import pytest

from tests.conftest import ROOT
from tests.containers.node import TIER_LABEL, Podman

IMAGE_SH = ROOT / "scripts" / "image.sh"
BASE = "localhost/drl-base:bookworm"
PACKAGES = ("podman", "runc", "debootstrap")
BUILD_TIMEOUT_S = 1200
OPT_IN = "DRL_TESTS_CONTAINERS"
"""Set to 1 to run the tier: it installs podman and builds the images where they are missing (2-5 minutes on 2
cores, more than the CI budget has room for)."""


def opted_in() -> bool:
    return os.environ.get(OPT_IN) == "1"


@dataclass
class Images:
    """The images the tier runs: the drl image (the chart's image values), its base, and the S3 stand-in."""

    drl: str
    base: str
    s3: str

    @property
    def values(self) -> dict:
        repository, tag = self.drl.rsplit(":", 1)
        return {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}


def _install() -> str:
    """Installs podman (with runc and debootstrap) through apt where it is missing; '' or why it cannot be."""
    if shutil.which("podman") and shutil.which("debootstrap"):
        return ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "podman is not installed, and only root with apt-get can install it here"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES,
               "netavark", "aardvark-dns", "catatonit", "conmon", "fuse-overlayfs"]
    for attempt in range(2):
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
        if done.returncode == 0:
            return ""
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=600)
    return f"podman could not be installed with apt-get: {done.stderr.strip()[-300:]}"


def _sweep(podman: Podman) -> None:
    """Containers and networks an earlier session of the tier left (killed before its teardown), by label; those
    of a live session (its pid in the prefix) are left alone."""
    for kind in ("container", "network"):
        listed = podman(kind, "ls", *(["--all"] if kind == "container" else []), "--filter",
                        f"label={TIER_LABEL}", "--format", "{{.Name}}" if kind == "network" else "{{.Names}}",
                        check=False).stdout.split()
        stale = [n for n in listed if not _alive(n)]
        if stale:
            podman(kind, "rm", "--force", *stale, check=False)


def _alive(name: str) -> bool:
    pid = name.removeprefix("drlct").split("-", 1)[0]
    return pid.isdigit() and os.path.exists(f"/proc/{pid}")


@pytest.fixture(scope="session")
def podman() -> Podman:
    if not opted_in():
        pytest.skip(f"containers tier: opt-in ({OPT_IN}=1): it builds the drl image when this tree's is missing "
                    "(2-5 minutes past the CI budget), and its probe check can race a run that ends in seconds")
    why = _install()
    if why:
        pytest.skip(f"containers tier: {why}")
    conf = subprocess.run(["bash", str(IMAGE_SH), "--containers-conf"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    tool = Podman(conf or None)
    info = tool("info", check=False)
    if info.returncode != 0:
        pytest.skip(f"containers tier: podman cannot run here: {info.stderr.strip()[-300:]}")
    _sweep(tool)
    return tool


def _build(podman: Podman, *args: str) -> None:
    done = subprocess.run(["bash", str(IMAGE_SH), "--engine", "podman", "--if-missing", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=podman.env)
    assert done.returncode == 0, f"scripts/image.sh {' '.join(args)} failed:\n{done.stderr[-4000:]}"


def _forget_older(podman: Podman, keep: str, built_s: float) -> None:
    """Earlier content tags of the drl image and the build layers only they used (each CI run after a change
    builds a new image: the machine keeps the newest, not one per change). Layers made before this build that
    nothing uses any more are pruned; this build's own, and the layers it took from the cache (torch's) and so
    depends on, are kept for the next build."""
    tags = podman("images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/drl", check=False).stdout.split()
    older = [t for t in tags if t.startswith("localhost/drl:ctx-") and t != keep]
    if older:
        # without --force: an image that another session's containers still run stays
        podman("rmi", *older, check=False)
        podman("image", "prune", "--force", "--filter", f"until={int(built_s) + 1}s", check=False)


@pytest.fixture(scope="session")
def images(podman) -> Images:
    """The drl image under its content tag (``scripts/image.sh --print-tag``), built only when that tag is not
    here yet, and the S3 stand-in on the same base (built once per moto release)."""
    tag = subprocess.run(["bash", str(IMAGE_SH), "--print-tag"], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.strip()
    moto = version("moto")
    s3 = f"localhost/drl-s3-moto:{moto}"
    started = time.monotonic()
    _build(podman, "--tag", tag)
    _forget_older(podman, tag, time.monotonic() - started)
    labels = podman("image", "inspect", "--format", "{{json .Labels}}", tag).stdout
    base = BASE if BASE in labels else "python:3.11-slim"
    _build(podman, "--file", "tests/containers/s3.Containerfile", "--context", "tests/containers", "--tag", s3,
           "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"MOTO_VERSION={moto}")
    ran = podman("run", "--rm", "--pull", "never", "--read-only", "--user", "10001:10001", tag, "true", check=False)
    if ran.returncode != 0:
        pytest.skip(f"containers tier: podman cannot run a container here: {ran.stderr.strip()[-300:]}")
    return Images(tag, base, s3)
