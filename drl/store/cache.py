"""Node-local cache of policy versions: processes on one node share one download per version.

Each version gets a folder under the cache root; a process that wants a version takes an exclusive file lock
on ``vNNNNNNNN.lock``, then either finds the files already there (written by a sibling) or downloads, verifies
and writes them. So 32 rollout workers on a node fetch each version once, not 32 times. Cached files are
re-verified against the manifest on every read; a corrupt cache entry is discarded and fetched again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from drl.store.policy import MANIFEST, WEIGHTS, ManifestError, folder

if TYPE_CHECKING:
    from drl._proto.drl.v1.policy_pb2 import PolicyManifest
    from drl.store.policy import PolicyStore

KEEP_VERSIONS = 8


def default_cache_dir() -> Path:
    return Path(os.environ.get("DRL_CACHE_DIR") or f"/tmp/drl-cache-{os.getuid()}")


class PolicyCache:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.downloads = 0

    def _dir(self, policies: "PolicyStore") -> Path:
        tag = hashlib.sha256(f"{policies.store.describe()}|{policies.run}".encode()).hexdigest()[:16]
        path = self.root / f"{policies.run}-{tag}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def fetch(self, policies: "PolicyStore", version: int) -> tuple["PolicyManifest", bytes, bool]:
        """Returns (manifest, verified weights blob, whether this call downloaded it).

        A process that finds the lock taken (a sibling downloading or reading the version) waits for a shared
        lock and reads the cached files alongside the other waiters, so the workers that wake together on an
        announcement verify their copies in parallel instead of one after another. Downloading, and discarding
        a corrupt entry, happen only under the exclusive lock.
        """
        base = self._dir(policies)
        target = base / folder(version).rstrip("/").rsplit("/", 1)[-1]
        with open(base / f"{target.name}.lock", "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fcntl.flock(lock, fcntl.LOCK_SH)
                try:
                    found = self._read(policies, version, target, discard=False)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
                if found is not None:
                    return (*found, False)
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                found = self._read(policies, version, target)
                if found is not None:
                    return (*found, False)
                manifest_raw = policies.store.get_optional(folder(version) + MANIFEST)
                if manifest_raw is None:
                    raise ManifestError(f"version {version} has no manifest")
                manifest = policies.parse_manifest(version, manifest_raw)
                blob = policies.verified_blob(manifest, policies.store.get_optional(folder(version) + WEIGHTS))
                target.mkdir(exist_ok=True)
                _write(target / WEIGHTS, blob)
                _write(target / MANIFEST, manifest_raw)
                self.downloads += 1
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        self._prune(base, version)
        return manifest, blob, True

    @staticmethod
    def _read(policies: "PolicyStore", version: int, target: Path, discard: bool = True):
        """The cached version after verification, or None; a corrupt entry is deleted when ``discard``
        (only under the exclusive lock)."""
        try:
            manifest_raw = (target / MANIFEST).read_bytes()
            blob = (target / WEIGHTS).read_bytes()
        except FileNotFoundError:
            return None
        try:
            manifest = policies.parse_manifest(version, manifest_raw)
            return manifest, policies.verified_blob(manifest, blob)
        except ManifestError:
            if discard:
                shutil.rmtree(target, ignore_errors=True)
            return None

    @staticmethod
    def _prune(base: Path, newest: int) -> None:
        """Best effort: drops cached versions far older than the newest one."""
        for path in base.glob("v*"):
            try:
                v = int(path.name[1:].split(".")[0])
            except ValueError:
                continue
            if v >= newest - KEEP_VERSIONS:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                continue
            with open(path, "a+b") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                path.unlink(missing_ok=True)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
