"""The data store against a real S3 HTTP server (moto's server): publication, verification, retention, cache."""

from __future__ import annotations

import multiprocessing as mp
import uuid

import numpy as np
import pytest

from drl.errors import UserError
from drl.store import ManifestError, PolicyStore, open_store, run_store
from drl.store.cache import PolicyCache
from drl.store.checkpoint import CheckpointStore


def _bucket() -> str:
    return f"drl-{uuid.uuid4().hex[:10]}"


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((256, 3)).astype(np.float32), "b": rng.standard_normal(256).astype(np.float32)}


def test_publish_and_load_through_s3_creates_the_bucket(s3_env):
    store = run_store(f"s3://{_bucket()}/experiments", "r1")
    policies = PolicyStore(store, "r1")
    for v in range(3):
        policies.publish(v, _weights(v), algorithm="sac", env_steps=100 * v, updates=10 * v)
    assert policies.versions() == [0, 1, 2]
    manifest, weights = policies.load(1)
    assert manifest.env_steps == 100 and manifest.updates == 10
    np.testing.assert_array_equal(weights["w"], _weights(1)["w"])
    assert "r1/policies/v00000001/manifest.json" in open_store(store.inner.describe().split()[0]).list("")
    with pytest.raises(KeyError):
        store.get("nothing/here")


def test_corrupted_object_is_rejected(s3_env, tmp_path):
    store = run_store(f"s3://{_bucket()}/p", "r")
    policies = PolicyStore(store, "r", cache=PolicyCache(tmp_path / "cache"))
    policies.publish(0, _weights(0), algorithm="sac", env_steps=0, updates=0)
    policies.publish(1, _weights(1), algorithm="sac", env_steps=5, updates=5)
    good = store.get("policies/v00000001/policy.safetensors")
    store.put("policies/v00000001/policy.safetensors", good[:-8] + b"\0" * 8)
    with pytest.raises(ManifestError, match="checksum"):
        policies.load(1)
    store.delete("policies/v00000001/policy.safetensors")
    with pytest.raises(ManifestError, match="missing"):
        policies.load(1)
    assert policies.load(0)[0].version == 0


def test_retention_keeps_the_newest_versions_on_s3(s3_env):
    store = run_store(f"s3://{_bucket()}", "r")
    policies = PolicyStore(store, "r")
    for v in range(6):
        policies.publish(v, _weights(v), algorithm="sac", env_steps=v, updates=v)
        policies.retain(3)
    assert policies.versions() == [3, 4, 5]
    assert not [k for k in store.list("policies/") if "v00000000" in k or "v00000002" in k]
    checkpoints = CheckpointStore(store, "r")
    for i in range(4):
        checkpoints.save(
            {"x": np.full(3, i, dtype=np.float32)}, {"i": i}, algorithm="sac", policy_version=i, env_steps=i, updates=i
        )
        checkpoints.retain(2)
    assert checkpoints.sequences() == [3, 4]
    manifest, tensors, meta = checkpoints.latest()
    assert manifest.sequence == 4 and meta == {"i": 3} and tensors["x"][0] == 3


def _load_through_cache(args) -> bool:
    url, cache_dir, version = args
    policies = PolicyStore(run_store(url, "r"), "r", cache=PolicyCache(cache_dir))
    return policies.cache.fetch(policies, version)[2]


def test_node_cache_downloads_each_version_once(s3_env, tmp_path):
    url = f"s3://{_bucket()}/c"
    PolicyStore(run_store(url, "r"), "r").publish(0, _weights(0), algorithm="sac", env_steps=0, updates=0)
    with mp.get_context("spawn").Pool(8) as pool:
        downloaded = pool.map(_load_through_cache, [(url, str(tmp_path / "cache"), 0)] * 16)
    assert sum(downloaded) == 1, downloaded
    cached = next((tmp_path / "cache").glob("r-*/v00000000/policy.safetensors"))
    cached.write_bytes(b"corrupt")
    assert _load_through_cache((url, str(tmp_path / "cache"), 0)) is True, "a corrupt cache entry was trusted"


def test_store_url_errors_are_user_errors(s3_env, monkeypatch):
    with pytest.raises(UserError, match="must not carry credentials"):
        open_store("s3://key:secret@bucket/x")
    with pytest.raises(UserError, match="unknown"):
        open_store("s3://bucket/x?colour=red")
    monkeypatch.setenv("DRL_S3_CREATE_BUCKET", "0")
    with pytest.raises(UserError, match="does not exist"):
        open_store(f"s3://{_bucket()}/x")
    monkeypatch.setenv("DRL_S3_ENDPOINT", "ftp://nowhere")
    with pytest.raises(UserError, match="endpoint"):
        open_store("s3://bucket/x")
