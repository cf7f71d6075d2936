"""Policy publication: weights (safetensors) first, manifest last, readers verify checksums.

A manifest is the JSON form of ``drl.v1.PolicyManifest``. Because it is written after every object it names,
and each put is atomic, a reader that finds a manifest finds complete objects; it still checks the sha256 of
each one and refuses the version (``ManifestError``) when anything differs.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

import numpy as np
from google.protobuf import json_format
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from drl._proto import policy_pb2
from drl.store.base import DataStore

if TYPE_CHECKING:
    from drl.store.cache import PolicyCache

WEIGHTS = "policy.safetensors"
MANIFEST = "manifest.json"


class ManifestError(Exception):
    """A published version whose manifest or objects cannot be trusted."""


def contiguous(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """C-contiguous arrays for safetensors, keeping 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)."""
    return {
        k: v if v.flags.c_contiguous else np.ascontiguousarray(v)
        for k, v in ((k, np.asarray(v)) for k, v in arrays.items())
    }


def folder(version: int) -> str:
    return f"policies/v{version:08d}/"


def parse_weights(version: int, blob: bytes) -> dict[str, np.ndarray]:
    try:
        return st_load(blob)
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise ManifestError(f"version {version}: weights do not parse: {exc}") from None


class PolicyStore:
    """Policy versions of one run in a data store; remote stores read through a node-local cache."""

    def __init__(self, store: DataStore, run: str, cache: "PolicyCache | None" = None):
        self.store = store
        self.run = run
        self.cache = cache

    def publish(
        self,
        version: int,
        weights: dict[str, np.ndarray],
        *,
        algorithm: str,
        env_steps: int,
        updates: int,
        observation_space: str = "",
        action_space: str = "",
    ) -> policy_pb2.PolicyManifest:
        blob = st_save(contiguous(weights))
        base = folder(version)
        self.store.put(base + WEIGHTS, blob)
        manifest = policy_pb2.PolicyManifest(
            run=self.run,
            version=version,
            algorithm=algorithm,
            env_steps=env_steps,
            updates=updates,
            created_at=time.time(),
            observation_space=observation_space,
            action_space=action_space,
        )
        manifest.objects.add(name=WEIGHTS, sha256=hashlib.sha256(blob).hexdigest(), size=len(blob))
        self.store.put(
            base + MANIFEST, json_format.MessageToJson(manifest, preserving_proto_field_name=True, indent=1).encode()
        )
        return manifest

    def manifest(self, version: int) -> policy_pb2.PolicyManifest:
        raw = self.store.get_optional(folder(version) + MANIFEST)
        if raw is None:
            raise ManifestError(f"version {version} has no manifest")
        return self.parse_manifest(version, raw)

    def parse_manifest(self, version: int, raw: bytes) -> policy_pb2.PolicyManifest:
        manifest = policy_pb2.PolicyManifest()
        try:
            json_format.Parse(raw.decode("utf-8"), manifest)
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            raise ManifestError(f"version {version}: manifest does not parse: {exc}") from None
        if manifest.version != version or manifest.run != self.run:
            raise ManifestError(f"version {version}: manifest names run {manifest.run!r} version {manifest.version}")
        return manifest

    def fetch(self, version: int) -> tuple[policy_pb2.PolicyManifest, bytes]:
        """The manifest and the verified weights blob of a version (checked for size and sha256)."""
        manifest = self.manifest(version)
        return manifest, self.verified_blob(manifest, self.store.get_optional(folder(version) + WEIGHTS))

    @staticmethod
    def verified_blob(manifest: policy_pb2.PolicyManifest, blob: bytes | None) -> bytes:
        version = manifest.version
        objects = {o.name: o for o in manifest.objects}
        if WEIGHTS not in objects:
            raise ManifestError(f"version {version}: manifest lists no {WEIGHTS}")
        if blob is None:
            raise ManifestError(f"version {version}: {WEIGHTS} is missing")
        meta = objects[WEIGHTS]
        if len(blob) != meta.size or hashlib.sha256(blob).hexdigest() != meta.sha256:
            raise ManifestError(f"version {version}: {WEIGHTS} does not match its manifest checksum")
        return blob

    def load(self, version: int) -> tuple[policy_pb2.PolicyManifest, dict[str, np.ndarray]]:
        """Returns the manifest and weights of a version after checking every object's size and sha256."""
        if self.cache is not None:
            manifest, blob, _ = self.cache.fetch(self, version)
        else:
            manifest, blob = self.fetch(version)
        return manifest, parse_weights(version, blob)

    def present(self, version: int) -> bool:
        """Whether a version's manifest parses and its weights are in the store: a listing, not a download, to
        find a version that vanished (deleted, the store restored from an older copy)."""
        try:
            self.manifest(version)
        except ManifestError:
            return False
        base = folder(version)
        return base + WEIGHTS in self.store.list(base)

    def versions(self) -> list[int]:
        found = set()
        for key in self.store.list("policies/v"):
            parent, _, name = key.rpartition("/")
            if name == MANIFEST:
                try:
                    found.add(int(parent.rsplit("/v", 1)[1]))
                except (IndexError, ValueError):
                    continue
        return sorted(found)

    def retain(self, keep: int) -> None:
        """Deletes all but the newest ``keep`` versions; the manifest goes first so readers never see a torso."""
        versions = self.versions()
        for version in versions[:-keep] if keep > 0 else []:
            base = folder(version)
            self.store.delete(base + MANIFEST)
            for key in self.store.list(base):
                self.store.delete(key)
