"""LocalStore semantics and the policy publication protocol (objects first, manifest last, verified loads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from drl.errors import UserError
from drl.store import ManifestError, PolicyStore, open_store
from drl.store.base import LocalStore
from drl.store.policy import MANIFEST, WEIGHTS

RUN = "run-a"


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "store")


@pytest.fixture
def policies(store):
    return PolicyStore(store, RUN)


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "trunk.0.weight": rng.standard_normal((8, 3)).astype(np.float32),
        "trunk.0.bias": rng.standard_normal(8).astype(np.float32),
        "mean.weight": rng.standard_normal((1, 8)).astype(np.float32),
        "steps": np.arange(4, dtype=np.int64),
    }


def folder(version: int) -> str:
    return f"policies/v{version:08d}/"


# -- LocalStore -----------------------------------------------------------------------------------------


def test_put_get_list_delete(store):
    store.put("a/b/one.bin", b"1")
    store.put("a/b/two.bin", b"22")
    store.put("a/c.bin", b"333")
    store.put("top.bin", b"")

    assert store.get("a/b/one.bin") == b"1"
    assert store.get("a/c.bin") == b"333"
    assert store.get("top.bin") == b""
    assert store.list("a/") == ["a/b/one.bin", "a/b/two.bin", "a/c.bin"]
    assert store.list("a/b/") == ["a/b/one.bin", "a/b/two.bin"]
    assert store.list("a/b/t") == ["a/b/two.bin"]
    assert store.list("") == ["a/b/one.bin", "a/b/two.bin", "a/c.bin", "top.bin"]
    assert store.list("nothing/") == []

    store.put("a/b/one.bin", b"replaced")
    assert store.get("a/b/one.bin") == b"replaced"

    store.delete("a/b/one.bin")
    store.delete("a/b/two.bin")
    assert store.list("a/") == ["a/c.bin"]
    assert not (store.root / "a" / "b").exists(), "empty folders are removed"
    store.delete("a/b/never-existed.bin")


def test_put_leaves_no_temporary_files(store):
    for i in range(5):
        store.put("k/data.bin", bytes([i]) * 100)
    assert [p.name for p in (store.root / "k").iterdir()] == ["data.bin"]


def test_get_missing_key_raises_key_error(store):
    with pytest.raises(KeyError):
        store.get("missing/key")
    store.put("present", b"x")
    with pytest.raises(KeyError):
        store.get("present2")


@pytest.mark.parametrize("key", ["../escape", "a/../../escape", "a/..", "/etc/passwd", ".."])
def test_keys_escaping_the_root_are_rejected(store, key):
    with pytest.raises(ValueError):
        store.put(key, b"x")
    with pytest.raises(ValueError):
        store.get(key)
    with pytest.raises(ValueError):
        store.delete(key)
    assert not (store.root.parent / "escape").exists()


def test_open_store_accepts_paths_and_file_urls(tmp_path):
    by_path = open_store(str(tmp_path / "p"))
    by_url = open_store(f"file://{tmp_path / 'u'}")
    by_path.put("k", b"v")
    by_url.put("k", b"w")
    assert (tmp_path / "p" / "k").read_bytes() == b"v"
    assert (tmp_path / "u" / "k").read_bytes() == b"w"
    assert by_url.describe() == str(tmp_path / "u")


@pytest.mark.parametrize("url", ["gs://bucket/prefix", "http://minio:9000/bucket"])
def test_open_store_rejects_unsupported_urls(url):
    with pytest.raises(UserError):
        open_store(url)


def test_store_directory_that_cannot_be_created_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(UserError):
        LocalStore(blocker / "store")


# -- PolicyStore ----------------------------------------------------------------------------------------


def test_publish_then_load_returns_identical_weights(policies):
    published = weights(1)
    manifest = policies.publish(
        3, published, algorithm="sac", env_steps=1234, updates=56, observation_space="Box(3)", action_space="Box(1)"
    )

    loaded_manifest, loaded = policies.load(3)

    assert set(loaded) == set(published)
    for name, array in published.items():
        assert loaded[name].dtype == array.dtype, name
        np.testing.assert_array_equal(loaded[name], array, err_msg=name)
    for m in (manifest, loaded_manifest):
        assert m.run == RUN
        assert m.version == 3
        assert m.algorithm == "sac"
        assert m.env_steps == 1234
        assert m.updates == 56
        assert m.observation_space == "Box(3)"
        assert m.action_space == "Box(1)"
        assert m.created_at > 0
        assert [o.name for o in m.objects] == [WEIGHTS]
    assert loaded_manifest == manifest


def test_manifest_is_json_naming_run_and_version(policies, store):
    policies.publish(0, weights(), algorithm="sac", env_steps=0, updates=0)
    data = json.loads(store.get(folder(0) + MANIFEST))
    assert data["run"] == RUN
    assert data["objects"][0]["name"] == WEIGHTS
    assert len(data["objects"][0]["sha256"]) == 64


def test_tampered_weights_are_refused(policies, store):
    policies.publish(1, weights(), algorithm="sac", env_steps=0, updates=0)
    blob = bytearray(store.get(folder(1) + WEIGHTS))
    blob[-1] ^= 0xFF
    store.put(folder(1) + WEIGHTS, bytes(blob))
    with pytest.raises(ManifestError):
        policies.load(1)


def test_weights_replaced_by_another_version_are_refused(policies, store):
    policies.publish(1, weights(1), algorithm="sac", env_steps=0, updates=0)
    policies.publish(2, weights(2), algorithm="sac", env_steps=0, updates=0)
    store.put(folder(1) + WEIGHTS, store.get(folder(2) + WEIGHTS))
    with pytest.raises(ManifestError):
        policies.load(1)


def test_missing_weights_are_refused(policies, store):
    policies.publish(1, weights(), algorithm="sac", env_steps=0, updates=0)
    store.delete(folder(1) + WEIGHTS)
    with pytest.raises(ManifestError, match="missing"):
        policies.load(1)


def test_missing_manifest_is_refused(policies, store):
    store.put(folder(4) + WEIGHTS, b"orphan weights without a manifest")
    with pytest.raises(ManifestError):
        policies.load(4)
    with pytest.raises(ManifestError):
        policies.load(99)
    assert policies.versions() == []


def test_manifest_of_another_run_is_refused(store):
    PolicyStore(store, "other-run").publish(1, weights(), algorithm="sac", env_steps=0, updates=0)
    with pytest.raises(ManifestError):
        PolicyStore(store, RUN).load(1)


def test_manifest_naming_another_version_is_refused(policies, store):
    policies.publish(1, weights(), algorithm="sac", env_steps=0, updates=0)
    store.put(folder(2) + WEIGHTS, store.get(folder(1) + WEIGHTS))
    store.put(folder(2) + MANIFEST, store.get(folder(1) + MANIFEST))
    with pytest.raises(ManifestError):
        policies.load(2)


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b'{"run": "run-a", "version": 1, "bogus": 3}', b"[]"])
def test_unparseable_manifest_is_refused(policies, store, raw):
    policies.publish(1, weights(), algorithm="sac", env_steps=0, updates=0)
    store.put(folder(1) + MANIFEST, raw)
    with pytest.raises(ManifestError):
        policies.load(1)


def test_versions_lists_only_complete_versions(policies, store):
    for v in (5, 1, 3):
        policies.publish(v, weights(v), algorithm="sac", env_steps=v, updates=v)
    store.put(folder(7) + WEIGHTS, b"not yet announced")
    assert policies.versions() == [1, 3, 5]


def test_retain_keeps_the_newest(policies, store):
    for v in range(6):
        policies.publish(v, weights(v), algorithm="sac", env_steps=v, updates=v)
    policies.retain(keep=3)
    assert policies.versions() == [3, 4, 5]
    assert store.list("policies/") == sorted(folder(v) + name for v in (3, 4, 5) for name in (MANIFEST, WEIGHTS))
    for v in (3, 4, 5):
        _, loaded = policies.load(v)
        np.testing.assert_array_equal(loaded["trunk.0.bias"], weights(v)["trunk.0.bias"])
    with pytest.raises(ManifestError):
        policies.load(0)


def test_retain_with_fewer_versions_than_keep_deletes_nothing(policies):
    for v in range(2):
        policies.publish(v, weights(v), algorithm="sac", env_steps=v, updates=v)
    policies.retain(keep=3)
    assert policies.versions() == [0, 1]
    policies.retain(keep=0)
    assert policies.versions() == [0, 1], "keep=0 must never delete the newest version"


# -- edge cases that once slipped through ----


@pytest.mark.parametrize("key", ["", "."])
def test_degenerate_keys_are_rejected_and_nothing_leaks_outside_the_root(tmp_path, key):
    store = LocalStore(tmp_path / "store")
    store.put("a/b", b"x")
    try:
        with pytest.raises(ValueError):
            store.put(key, b"y")
    finally:
        leaked = sorted(p.name for p in tmp_path.iterdir() if p.name != "store")
    assert leaked == [], f"files written outside the store: {leaked}"
