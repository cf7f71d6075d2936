"""The committed protobuf modules in drl/_proto are exactly what scripts/gen_proto.py generates from proto/."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "drl" / "_proto"
HINT = "generated protobuf code is stale: run `python scripts/gen_proto.py` and commit drl/_proto"


def _load_gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generated_files(root: Path) -> dict[str, bytes]:
    paths = [*root.rglob("*_pb2.py"), *root.rglob("*_pb2.pyi")]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}


def test_committed_proto_code_is_current(tmp_path):
    gen_proto = _load_gen_proto()
    returned = gen_proto.generate(tmp_path)
    fresh = _generated_files(tmp_path)
    committed = _generated_files(COMMITTED)

    assert fresh, "the generator produced no *_pb2.py files"
    assert {p.relative_to(tmp_path).as_posix() for p in returned} == set(fresh)
    assert set(fresh) == set(committed), (
        f"{HINT}; only generated: {sorted(set(fresh) - set(committed))}, "
        f"only committed: {sorted(set(committed) - set(fresh))}"
    )
    differing = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not differing, f"{HINT}; differing files: {differing}"


def test_every_proto_file_has_generated_modules():
    protos = sorted((ROOT / "proto").glob("drl/v1/*.proto"))
    assert protos
    for proto in protos:
        stem = proto.relative_to(ROOT / "proto").with_suffix("").as_posix()
        for suffix in ("_pb2.py", "_pb2.pyi"):
            assert (COMMITTED / f"{stem}{suffix}").is_file(), f"{HINT}; {stem}{suffix} is missing"
