"""Property-based fuzzing of every decoder of bytes or text from outside the process (the experience codec is
fuzzed in tests/unit/test_codec.py): policy and checkpoint manifests and safetensors files from the store,
--config files and DRL_CONFIG, trainer watermarks read back from Redis, control-service requests, the run's
state.json, status hashes and evaluations.jsonl. Random bytes and valid-looking messages give a correct result
or the decoder's documented error, never another exception, never a hang (deadlines), and never an allocation
much larger than the input (a lying length or shape must not make a decoder allocate)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import tracemalloc
from pathlib import Path
from unittest import mock

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drl._proto.drl.v1 import control_pb2
from drl.config import ConfigError, ExperimentConfig
from drl.errors import UserError
from drl.presets import resolve
from drl.store.base import run_store
from drl.store.checkpoint import MANIFEST, TENSORS, CheckpointStore, folder
from drl.store.policy import ManifestError, PolicyStore, parse_weights
from drl.training.ingest import SeqTracker
from orchestrator.backends.local.common import read_evaluations
from orchestrator.backends.local.control import newest_run
from orchestrator.cli import _read_config_file
from orchestrator.plot import read_curve
from orchestrator.state import STATE_FILE, RunState, read_state
from services.common import ServiceContext
from services.control import serve, status_message
from services.telemetry import Telemetry

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
DEEP = st.integers(1, 200_000).map(lambda n: "[" * n)  # nesting that blows Python's recursion limit

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


# -- policy manifests and weights ------------------------------------------------------------------------------


def _manifest_dicts():
    int_ish = st.one_of(
        st.integers(-(2**65), 2**65),
        st.integers(0, 2**64).map(str),
        st.text(max_size=5),
        st.none(),
        st.floats(allow_nan=True),
    )
    obj = st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["policy.safetensors", "x", ""]),
            "sha256": st.text(max_size=64),
            "size": int_ish,
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "run": st.sampled_from(["r", "other", ""]) | st.integers(),
            "version": int_ish,
            "algorithm": json_leaf,
            "env_steps": int_ish,
            "updates": int_ish,
            "created_at": int_ish,
            "objects": st.lists(obj, max_size=3) | json_value,
            "observation_space": json_leaf,
            "colour": json_value,
        },
    )


def _check_manifest(raw: bytes) -> None:
    try:
        manifest = PolicyStore(None, "r").parse_manifest(3, raw)
    except ManifestError:
        return
    assert manifest.version == 3 and manifest.run == "r"


@FUZZ
@given(st.binary(max_size=400) | DEEP.map(str.encode))
def test_policy_manifest_random_bytes(raw):
    _check_manifest(raw)


@FUZZ
@given(_manifest_dicts())
def test_policy_manifest_valid_looking(data):
    _check_manifest(json.dumps(data).encode())
    _check_manifest(json.dumps({**data, "run": "r", "version": "3"}).encode())


DTYPES = ["F32", "F16", "F64", "BF16", "I8", "U8", "I16", "I32", "I64", "BOOL", "F8_E4M3", "C64", "XX"]


def safetensors_blob(header: dict, data: bytes, length: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


@st.composite
def lying_safetensors(draw):
    """Headers whose lengths, offsets, shapes and dtypes may disagree with each other and with the data."""
    tensors = {}
    for i in range(draw(st.integers(0, 3))):
        shape = draw(st.lists(st.one_of(st.integers(0, 8), st.integers(0, 2**62), st.integers(-5, -1)), max_size=4))
        start = draw(st.integers(0, 64) | st.integers(0, 2**63))
        end = draw(st.integers(0, 64) | st.integers(0, 2**64 - 1) | st.just(start + 4 * int(np.prod(shape[:2] or [1]))))
        tensors[f"t{i}"] = {"dtype": draw(st.sampled_from(DTYPES)), "shape": shape, "data_offsets": [start, end]}
    if draw(st.booleans()):
        tensors["__metadata__"] = draw(
            st.dictionaries(st.text(max_size=5), st.text(max_size=5) | st.integers(), max_size=2)
        )
    data = draw(st.binary(max_size=64))
    length = draw(st.none() | st.integers(0, 2**64 - 1))
    return safetensors_blob(tensors, data, length)


def _check_weights(blob: bytes) -> None:
    tracemalloc.start()
    try:
        try:
            arrays = parse_weights(1, blob)
        except ManifestError:
            arrays = {}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(a.nbytes for a in arrays.values()) <= len(blob)
    assert peak < 10 * len(blob) + 256 * 1024, f"allocated {peak} bytes for a {len(blob)}-byte file"


@FUZZ
@given(st.binary(max_size=300))
def test_weights_random_bytes(blob):
    _check_weights(blob)


@FUZZ
@given(lying_safetensors())
def test_weights_lying_headers_never_allocate_beyond_the_input(blob):
    _check_weights(blob)


def test_weights_round_trip_still_parses():
    from safetensors.numpy import save

    blob = save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    np.testing.assert_array_equal(parse_weights(0, blob)["w"], np.arange(6, dtype=np.float32).reshape(2, 3))


# -- checkpoints ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch():
    path = Path(tempfile.mkdtemp(prefix="drl-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@FUZZ
@given(
    blob=st.binary(max_size=100) | lying_safetensors(),
    meta=st.none() | st.text(max_size=30) | json_value.map(json.dumps) | DEEP,
    manifest=st.none() | st.binary(max_size=100) | _manifest_dicts().map(lambda d: json.dumps(d).encode()),
)
def test_checkpoint_with_consistent_checksum_but_bad_content_is_skipped(scratch, blob, meta, manifest):
    """A checkpoint whose checksum matches but whose tensors, meta or manifest do not parse is skipped
    (``latest`` falls back), never raised to the trainer."""
    shutil.rmtree(scratch / "r", ignore_errors=True)
    store = run_store(str(scratch), "r")
    if manifest is None:
        data = {
            "run": "r",
            "sequence": "1",
            "objects": [{"name": TENSORS, "sha256": hashlib.sha256(blob).hexdigest(), "size": str(len(blob))}],
        }
        if meta is not None:
            data["meta_json"] = meta
        manifest = json.dumps(data).encode()
    store.put(folder(1) + TENSORS, blob)
    store.put(folder(1) + MANIFEST, manifest)
    found = CheckpointStore(store, "r").latest()
    if found is not None:
        loaded, tensors, meta_obj = found
        assert loaded.sequence == 1 and isinstance(meta_obj, dict)
        assert sum(a.nbytes for a in tensors.values()) <= len(blob)


# -- configuration -------------------------------------------------------------------------------------------

CONFIG_KEYS = sorted(json.loads(ExperimentConfig().to_json()))


def _config_dicts():
    block = st.dictionaries(
        st.sampled_from(["lr", "gamma", "hidden", "tau", "batch_size", "x"]), json_value, max_size=3
    )
    return st.dictionaries(st.sampled_from(CONFIG_KEYS + ["colour"]), json_value | block, max_size=5)


@FUZZ
@given(st.text(max_size=200) | DEEP | _config_dicts().map(json.dumps))
@example('{"plugins": "0"}')
def test_config_json_from_store_or_run_dir(text):
    try:
        ExperimentConfig.from_json(text).validate()
    except ConfigError:
        pass


@FUZZ
@given(st.binary(max_size=200) | DEEP.map(str.encode) | _config_dicts().map(lambda d: json.dumps(d).encode()))
def test_config_file(scratch, raw):
    path = scratch / "config.json"
    path.write_bytes(raw)
    try:
        data = _read_config_file(path)
    except ConfigError:
        return
    assert isinstance(data, dict)
    try:
        resolve(data, f"config file {path}")
    except UserError:
        pass


@FUZZ
@given(
    st.text(max_size=200).filter(lambda t: "\0" not in t)
    | DEEP
    | _config_dicts().map(lambda d: json.dumps({"preset": "sac", "env": "Pendulum-v1", **d}))
)
def test_drl_config_variable(text):
    env = {
        "DRL_CONFIG": text or "x",
        "DRL_RUN": "r",
        "DRL_RUN_DIR": "/nonexistent",
        "DRL_MEMORY_URL": "redis://x",
        "DRL_STORE": "/nonexistent",
    }
    with mock.patch.dict(os.environ, env):
        try:
            ctx = ServiceContext.from_env("trainer")
        except UserError:
            return
    assert isinstance(ctx.config, ExperimentConfig)


# -- trainer state read back from Redis ------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=60) | st.lists(st.integers(-(2**70), 2**70), max_size=6).map(lambda xs: ",".join(map(str, xs))))
def test_watermark_field(text):
    tracker = SeqTracker()
    try:
        tracker.load("rollout-0", text)
    except ValueError:
        return
    again = SeqTracker()
    again.load("rollout-0", tracker.dump("rollout-0"))
    assert again.dump("rollout-0") == tracker.dump("rollout-0")


# -- control service: requests off the wire, status hashes -----------------------------------------------------


@pytest.fixture(scope="module")
def control_server():
    telemetry = Telemetry()
    server, port = serve(telemetry, "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel, telemetry
    channel.close()
    server.stop(0)


@settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["GetStatus", "Stop"]), raw=st.binary(max_size=200))
def test_control_requests_of_random_bytes(control_server, method, raw):
    """Raw bytes sent to the real gRPC server: a reply or a clean gRPC error status, and the server lives on."""
    channel, _ = control_server
    call = channel.unary_unary(f"/drl.v1.Control/{method}", request_serializer=None, response_deserializer=None)
    try:
        reply = call(raw, timeout=5)
        (control_pb2.ServiceStatus if method == "GetStatus" else control_pb2.StopReply).FromString(reply)
    except grpc.RpcError as exc:
        assert exc.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT), exc
    status = channel.unary_unary(
        "/drl.v1.Control/GetStatus", request_serializer=None, response_deserializer=control_pb2.ServiceStatus.FromString
    )(b"", timeout=5)
    assert status.state in ("running", "stopping")


@FUZZ
@given(
    st.dictionaries(
        st.text(max_size=15)
        | st.sampled_from(
            ["role", "policy_version", "env_steps", "produced", "uptime_s", "transitions_per_s", "restarts", "state"]
        ),
        st.text(max_size=30) | st.sampled_from(["1e400", "nan", "-inf", "9" * 40, "rollout"]),
        max_size=8,
    )
)
def test_status_hash_fields(fields):
    """A status hash as read from Redis (any text) becomes a ServiceStatus without raising."""
    message = status_message({"id": "rollout-0", **fields})
    assert message.id == "rollout-0" or "id" in fields
    control_pb2.ServiceStatus.FromString(message.SerializeToString())


# -- files of a run: state.json, evaluations.jsonl -------------------------------------------------------------


def _state_dicts():
    process = st.dictionaries(
        st.sampled_from(["name", "role", "pid", "control_port", "log", "exit_code", "last_status", "restarts", "x"]),
        json_value,
        max_size=6,
    )
    valid_process = st.fixed_dictionaries(
        {"name": st.just("trainer"), "role": st.just("trainer"), "pid": st.integers(0, 2**31 - 1)}
    )
    return st.fixed_dictionaries(
        {
            "run": st.just("r"),
            "orchestrator_pid": st.integers(0, 2**40),
            "memory_url": st.just("redis://127.0.0.1:1/0"),
        },
        optional={
            "processes": st.lists(valid_process | process, max_size=3) | json_value,
            "started_at": json_leaf,
            "state": json_leaf,
        },
    )


@FUZZ
@given(
    st.binary(max_size=200)
    | DEEP.map(str.encode)
    | _state_dicts().map(lambda d: json.dumps(d).encode())
    | json_value.map(lambda v: json.dumps(v).encode())
)
def test_state_file(scratch, raw):
    run_dir = scratch / "runs" / "r"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / STATE_FILE).write_bytes(raw)
    try:
        state = read_state(run_dir)
    except UserError as exc:
        assert str(run_dir / STATE_FILE) in str(exc)
    else:
        assert isinstance(state, RunState)
        assert all(isinstance(p.pid, int) and 0 <= p.pid < 2**31 for p in state.processes)
    try:
        assert newest_run(scratch / "runs") == "r"
    except UserError:
        pass


@FUZZ
@given(
    st.lists(
        st.binary(max_size=80)
        | json_value.map(json.dumps).map(str.encode)
        | st.fixed_dictionaries(
            {"env_steps": json_leaf | st.just(10**400), "wall_seconds": json_leaf, "mean_return": json_leaf}
        ).map(lambda d: json.dumps(d).encode()),
        max_size=5,
    )
)
def test_evaluations_jsonl(scratch, lines):
    run_dir = scratch / "plot" / "r"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "evaluations.jsonl").write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines))
    (run_dir / "config.json").write_bytes(lines[0] if lines else b"{}")
    try:
        curve = read_curve(scratch / "plot", "r")
    except UserError:
        return
    assert len(curve.env_steps) == len(curve.mean) >= 1


@FUZZ
@given(st.lists(st.binary(max_size=80) | json_value.map(json.dumps).map(str.encode), max_size=5))
def test_evaluations_jsonl_for_the_summary(scratch, lines):
    path = scratch / "summary-evaluations.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines))
    evaluations = read_evaluations(path)
    assert all(isinstance(e["mean_return"], (int, float)) for e in evaluations)
