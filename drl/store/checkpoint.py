"""Full trainer checkpoints in the data store, written like policies: tensors first, manifest last.

``checkpoints/cNNNNNNNN/checkpoint.safetensors`` holds every tensor (networks, optimiser moments, RNG state,
optionally the replay buffer); the manifest (``drl.v1.CheckpointManifest``) holds its checksum and, as JSON,
the rest (counters, optimiser hyperparameters, numpy RNG state). A reader takes the newest checkpoint whose
checksum matches and falls back to older ones, so a torn or corrupted checkpoint never stops a resume.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time

import numpy as np
from google.protobuf import json_format
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from drl._proto import policy_pb2
from drl.store.base import DataStore
from drl.store.policy import contiguous

log = logging.getLogger(__name__)

TENSORS = "checkpoint.safetensors"
MANIFEST = "manifest.json"


def folder(sequence: int) -> str:
    return f"checkpoints/c{sequence:08d}/"


class CheckpointStore:
    def __init__(self, store: DataStore, run: str):
        self.store = store
        self.run = run

    def sequences(self) -> list[int]:
        found = set()
        for key in self.store.list("checkpoints/c"):
            parent, _, name = key.rpartition("/")
            if name == MANIFEST:
                try:
                    found.add(int(parent.rsplit("/c", 1)[1]))
                except (IndexError, ValueError):
                    continue
        return sorted(found)

    def save(
        self,
        tensors: dict[str, np.ndarray],
        meta: dict,
        *,
        algorithm: str,
        policy_version: int,
        env_steps: int,
        updates: int,
    ) -> policy_pb2.CheckpointManifest:
        sequences = self.sequences()
        sequence = (sequences[-1] if sequences else 0) + 1
        blob = st_save(contiguous(tensors))
        base = folder(sequence)
        self.store.put(base + TENSORS, blob)
        manifest = policy_pb2.CheckpointManifest(
            run=self.run,
            sequence=sequence,
            policy_version=max(policy_version, 0),
            env_steps=env_steps,
            updates=updates,
            created_at=time.time(),
            meta_json=json.dumps(meta),
            algorithm=algorithm,
        )
        manifest.objects.add(name=TENSORS, sha256=hashlib.sha256(blob).hexdigest(), size=len(blob))
        self.store.put(
            base + MANIFEST, json_format.MessageToJson(manifest, preserving_proto_field_name=True, indent=1).encode()
        )
        return manifest

    def load(self, sequence: int) -> tuple[policy_pb2.CheckpointManifest, dict[str, np.ndarray], dict]:
        """A checkpoint's manifest, tensors and meta. ``KeyError``: an object is missing; ``UnicodeDecodeError``
        or protobuf's ``ParseError``: the manifest does not parse; ``ValueError``: anything else does not parse or
        verify (the errors ``latest`` skips a checkpoint for)."""
        base = folder(sequence)
        raw = self.store.get(base + MANIFEST)
        manifest = policy_pb2.CheckpointManifest()
        json_format.Parse(raw.decode("utf-8"), manifest)
        if manifest.run != self.run or manifest.sequence != sequence:
            raise ValueError(f"checkpoint {sequence}: manifest names run {manifest.run!r} #{manifest.sequence}")
        meta_obj = {o.name: o for o in manifest.objects}.get(TENSORS)
        blob = self.store.get(base + TENSORS)
        if meta_obj is None or len(blob) != meta_obj.size or hashlib.sha256(blob).hexdigest() != meta_obj.sha256:
            raise ValueError(f"checkpoint {sequence}: {TENSORS} does not match its manifest checksum")
        try:
            tensors = st_load(blob)
        except Exception as exc:  # safetensors raises its own error types for corrupt headers
            raise ValueError(f"checkpoint {sequence}: {TENSORS} does not parse: {exc}") from None
        try:
            meta = json.loads(manifest.meta_json or "{}")
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"checkpoint {sequence}: meta_json does not parse: {exc}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"checkpoint {sequence}: meta_json must hold a JSON object")
        return manifest, tensors, meta

    def latest(self) -> tuple[policy_pb2.CheckpointManifest, dict[str, np.ndarray], dict] | None:
        """The newest checkpoint that verifies, or None when the run has none."""
        for sequence in reversed(self.sequences()):
            try:
                return self.load(sequence)
            except (KeyError, ValueError, json_format.ParseError, UnicodeDecodeError) as exc:
                log.error("checkpoint %d skipped: %s", sequence, exc)
        return None

    def retain(self, keep: int) -> None:
        """Deletes all but the newest ``keep`` checkpoints (manifest first); the newest always stays."""
        sequences = self.sequences()
        for sequence in sequences[: -max(keep, 1)]:
            base = folder(sequence)
            self.store.delete(base + MANIFEST)
            for key in self.store.list(base):
                self.store.delete(key)
