"""The containers tier: the drl image built (or found again by the hash of what it is built from) and every pod the
chart renders run as a podman container (``tests.containers.node``). It runs in every suite: podman is installed
where it is missing (root with apt) and the images are built where missing (about 4-5 minutes on a fresh 2-core
machine, about 11 s after a change to the code), then the tier takes about 25 s. The tier runs last in a one-process
run (pytest-xdist's workers, the suite's default, take the files with the most tests first, so it runs after the
larger files), and that preparation starts in the background as soon as the session's tests are collected, so
that it overlaps the tests before it instead of adding to the session's time. ``DRL_TESTS_CONTAINERS=0`` leaves
the tier out of a quick local run; where podman cannot be installed or cannot run a container, every test here is
skipped with that one reason."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.containers.node import AS_A_POD, TIER_LABEL, Podman

HERE = Path(__file__).resolve().parent
IMAGE_SH = ROOT / "scripts" / "image.sh"
BASE = "localhost/drl-base:bookworm"
INSTALL = (
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
"""What the tier installs with apt where podman is missing (held to ``tests/system_packages.py``)."""
BUILD_TIMEOUT_S = 1200
LOWEST_PRIORITY = ("nice", "-n", "19", *(("ionice", "-c", "3") if shutil.which("ionice") else ()))
PREPARATION_LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "drl-containers-tier.lock"
SWITCH = "DRL_TESTS_CONTAINERS"
"""Set to 0 to leave the tier out (a quick local run); it runs otherwise."""


def left_out() -> bool:
    return os.environ.get(SWITCH) == "0"


def s3_context_hash() -> str:
    """The S3 stand-in's build context as 12 hex digits (its tag: a changed `weed` is a new image, found again
    by that tag; ``scripts/local-cluster.sh images`` computes the same)."""
    digest = hashlib.sha256()
    for name in ("s3.Containerfile", "weed"):
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:12]


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


class Preparation:
    """Installs podman and builds the tier's images once per session, in a thread of its own: started when the
    session's tests are collected (``pytest_collection_finish``), awaited by the tier's fixtures. Its commands run
    in sessions of their own, so that a session that ends first (Ctrl-C, a failure with ``-x``) ends them too."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = False
        self.skip = ""
        self.failure = ""
        self.podman: Podman | None = None
        self.images: Images | None = None
        self.seconds = 0.0
        self.said: list[str] = []

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="containers-tier-images", daemon=True)
                self._thread.start()

    def wait(self) -> "Preparation":
        self.start()
        self._thread.join()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._running:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def run(self, args: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Runs a command at the lowest CPU and I/O priority (what it starts too): it takes what the tests before the
        tier leave idle rather than slowing them."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("the session ended")
            proc = subprocess.Popen(
                [*LOWEST_PRIORITY, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env,
                start_new_session=True,
            )
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n(killed after {timeout:.0f} s)"
        finally:
            with self._lock:
                self._running.discard(proc)
        return subprocess.CompletedProcess(args, proc.returncode, out, err)

    def _run(self) -> None:
        started = time.monotonic()
        try:
            # One preparation at a time on the machine: the session's other pytest-xdist worker (or another
            # session) waits here and then finds everything built.
            with open(PREPARATION_LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                self._prepare()
        except Exception as exc:  # reported by the fixtures, in the tier's own tests
            self.failure = f"{type(exc).__name__}: {exc}"
        self.seconds = time.monotonic() - started

    def _prepare(self) -> None:
        self.skip = _install(self)
        if self.skip:
            return
        conf = self.run(["bash", str(IMAGE_SH), "--containers-conf"], 60).stdout.strip()
        tool = Podman(conf or None)
        info = tool("info", check=False)
        if info.returncode != 0:
            self.skip = f"containers tier: podman cannot run here: {info.stderr.strip()[-300:]}"
            return
        _sweep(tool)
        tag = self.run(["bash", str(IMAGE_SH), "--print-tag"], 60).stdout.strip()
        moto = version("moto")
        s3 = f"localhost/drl-s3-moto:{moto}-{s3_context_hash()}"
        started = time.monotonic()
        self._build(tool, "--tag", tag)
        _forget_older(tool, tag, time.monotonic() - started)
        labels = tool("image", "inspect", "--format", "{{json .Labels}}", tag).stdout
        base = BASE if BASE in labels else "python:3.11-slim"
        self._build(
            tool,
            "--file",
            "tests/containers/s3.Containerfile",
            "--context",
            "tests/containers",
            "--tag",
            s3,
            "--build-arg",
            f"BASE_IMAGE={base}",
            "--build-arg",
            f"MOTO_VERSION={moto}",
        )
        older_s3 = [
            t
            for t in tool(
                "images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/drl-s3-moto", check=False
            ).stdout.split()
            if t != s3
        ]
        if older_s3:
            tool("rmi", *older_s3, check=False)
        # no network: the tests this overlaps make their own namespaces and bridges (tests/hosts)
        ran = tool(
            "run",
            *AS_A_POD,
            tag,
            "true",
            check=False,
        )
        if ran.returncode != 0:
            self.skip = f"containers tier: podman cannot run a container here: {ran.stderr.strip()[-300:]}"
            return
        self.podman, self.images = tool, Images(tag, base, s3)

    def _build(self, podman: Podman, *args: str) -> None:
        done = self.run(
            ["bash", str(IMAGE_SH), "--engine", "podman", "--if-missing", *args], BUILD_TIMEOUT_S, env=podman.env
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/image.sh {' '.join(args)} failed:\n{done.stderr[-4000:]}")
        self.said += [
            line.removeprefix("image.sh: ")
            for line in done.stderr.splitlines()
            if line.startswith("image.sh: ") and (" built " in line or "there already" in line)
        ]


PREPARATION = Preparation()


def _in_tier(item) -> bool:
    return HERE in Path(item.path).parents


def pytest_collection_modifyitems(session, config, items):
    """The tier runs last in a one-process run, after the tests its preparation overlaps (pytest-xdist orders the
    files by their number of tests instead)."""
    ours = [item for item in items if _in_tier(item)]
    if ours and len(ours) < len(items):
        items[:] = [item for item in items if not _in_tier(item)] + ours


def pytest_collection_finish(session):
    if session.config.option.collectonly or left_out():
        return
    if any(_in_tier(item) for item in session.items):
        session.config.add_cleanup(PREPARATION.stop)
        PREPARATION.start()


def pytest_terminal_summary(terminalreporter):
    """One line on what the preparation did and when it was ready, for a CI log."""
    if PREPARATION.seconds:
        outcome = PREPARATION.skip or PREPARATION.failure or "ready"
        built = "; ".join(PREPARATION.said) or "nothing built"
        terminalreporter.write_line(
            f"containers tier: podman and the images {outcome} {PREPARATION.seconds:.0f} s "
            f"after the tests were collected ({built})"
        )


def _install(prep: Preparation) -> str:
    """Installs podman (with runc, debootstrap, and iptables, which podman's network backend calls for every
    container with a network) through apt where it is missing; '' or why it cannot be."""
    if all(shutil.which(tool) for tool in ("podman", "debootstrap", "iptables")):
        return ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "containers tier: podman is not installed, and only root with apt-get can install it here"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *INSTALL]
    for attempt in range(2):
        done = prep.run(install, 600, env=env)
        if done.returncode == 0:
            return ""
        if attempt == 0:
            prep.run(["apt-get", "update", "-qq"], 600, env=env)
    return f"containers tier: podman could not be installed with apt-get: {done.stderr.strip()[-300:]}"


def _sweep(podman: Podman) -> None:
    """Containers and networks an earlier session of the tier left (killed before its teardown), by label; those
    of a live session (its pid in the prefix) are left alone."""
    for kind in ("container", "network"):
        listed = podman(
            kind,
            "ls",
            *(["--all"] if kind == "container" else []),
            "--filter",
            f"label={TIER_LABEL}",
            "--format",
            "{{.Name}}" if kind == "network" else "{{.Names}}",
            check=False,
        ).stdout.split()
        stale = [n for n in listed if not _alive(n)]
        if stale:
            podman(kind, "rm", "--force", *stale, check=False)


def _alive(name: str) -> bool:
    pid = name.removeprefix("drlct").split("-", 1)[0]
    return pid.isdigit() and os.path.exists(f"/proc/{pid}")


def _forget_older(podman: Podman, keep: str, built_s: float) -> None:
    """Earlier content tags of the drl image and the build layers only they used (each CI run after a change
    builds a new image: the machine keeps the newest, not one per change). Layers made before this build that
    nothing uses any more are pruned; this build's own, and the layers it took from the cache (the dependencies')
    and so depends on, are kept for the next build."""
    tags = podman("images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/drl", check=False).stdout.split()
    older = [t for t in tags if t.startswith("localhost/drl:ctx-") and t != keep]
    if older:
        # without --force: an image that another session's containers still run stays
        podman("rmi", *older, check=False)
        podman("image", "prune", "--force", "--filter", f"until={int(built_s) + 1}s", check=False)


@pytest.fixture(scope="session")
def podman() -> Podman:
    if left_out():
        pytest.skip(f"containers tier: left out ({SWITCH}=0)")
    prep = PREPARATION.wait()
    if prep.skip:
        pytest.skip(prep.skip)
    assert not prep.failure, prep.failure
    print(f"containers tier: podman and the images ready {prep.seconds:.0f} s after the session's tests were collected")
    return prep.podman


@pytest.fixture(scope="session")
def images(podman) -> Images:
    """The drl image under its content tag (``scripts/image.sh --print-tag``), built only when that tag is not
    here yet, and the S3 stand-in on the same base (built once per moto release)."""
    return PREPARATION.images
