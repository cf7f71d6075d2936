"""Experience wire format: round trips for several space kinds, every rejection kind, and fuzzing."""

from __future__ import annotations

import sys
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drl._proto import experience_pb2
from drl.envs import SpaceSpec, space_spec
from drl.memory import codec

RUN = "run-1"

PENDULUM = SpaceSpec((3,), "<f4", (1,), "<f4", 0, (-2.0,), (2.0,))
BOX_ACTIONS = SpaceSpec((5,), "<f8", (2, 3), "<f4", 0, (-1.0,) * 6, (1.0,) * 6)
IMAGES = SpaceSpec((84, 84, 4), "|u1", (6,), "<f4", 0, (-1.0,) * 6, (1.0,) * 6)
DISCRETE = SpaceSpec((4,), "<f4", (), "<i8", 3)


def make_arrays(spec: SpaceSpec, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def sample(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            return rng.standard_normal((n, *shape)).astype(dt)
        if dt.kind == "u":
            return rng.integers(0, 256, size=(n, *shape)).astype(dt)
        return rng.integers(-(2**40), 2**40, size=(n, *shape)).astype(dt)

    if spec.discrete_actions:
        action = rng.integers(0, spec.discrete_actions, size=n).astype(spec.act_dtype)
    else:
        action = sample(spec.act_dtype, spec.act_shape)
    return {
        "obs": sample(spec.obs_dtype, spec.obs_shape),
        "action": action,
        "reward": rng.standard_normal(n).astype("<f4"),
        "next_obs": sample(spec.obs_dtype, spec.obs_shape),
        "terminated": rng.integers(0, 2, size=n).astype("|u1"),
    }


def make_header(**overrides) -> experience_pb2.BatchHeader:
    values = dict(run=RUN, worker_id="rollout-0", seq=1, policy_version=7)
    values.update(overrides)
    return experience_pb2.BatchHeader(**values)


def entry(spec: SpaceSpec = PENDULUM, n: int = 4, header=None, arrays=None) -> dict[bytes, bytes]:
    h, d = codec.encode(
        header if header is not None else make_header(), arrays if arrays is not None else make_arrays(spec, n)
    )
    return {b"h": h, b"d": d}


def reheader(fields: dict[bytes, bytes], **changes) -> dict[bytes, bytes]:
    header = experience_pb2.BatchHeader()
    header.ParseFromString(fields[b"h"])
    for name, value in changes.items():
        setattr(header, name, value)
    return {b"h": header.SerializeToString(), b"d": fields[b"d"]}


def decode_error(fields, spec: SpaceSpec = PENDULUM, run: str = RUN) -> codec.DecodeError:
    with pytest.raises(codec.DecodeError) as info:
        codec.decode(fields, run, codec.expected_layout(spec))
    return info.value


# -- round trips ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", [PENDULUM, BOX_ACTIONS, IMAGES, DISCRETE], ids=["pendulum", "box-actions", "uint8-images", "discrete"]
)
@pytest.mark.parametrize("n", [1, 5])
def test_round_trip(spec, n):
    arrays = make_arrays(spec, n, seed=n)
    header = make_header(seq=3, policy_version=11, iteration_end=True, produced_total=42)
    h, d = codec.encode(header, arrays)

    batch = codec.decode({b"h": h, b"d": d}, RUN, codec.expected_layout(spec))

    assert batch.count == n
    assert batch.header.worker_id == "rollout-0"
    assert batch.header.seq == 3
    assert batch.header.policy_version == 11
    assert batch.header.iteration_end is True
    assert batch.header.produced_total == 42
    assert batch.header.format_version == codec.FORMAT_VERSION
    assert set(batch.arrays) == set(codec.FIELDS)
    for name, original in arrays.items():
        got = batch.arrays[name]
        assert got.dtype == original.dtype, name
        assert got.shape == original.shape, name
        np.testing.assert_array_equal(got, original, err_msg=name)
    assert len(d) == sum(a.nbytes for a in arrays.values())


def test_discrete_action_layout_is_int64_scalar():
    layout = codec.expected_layout(DISCRETE)
    assert layout["action"] == ("<i8", ())
    batch = codec.decode(entry(DISCRETE, n=6), RUN, layout)
    assert batch.arrays["action"].shape == (6,)
    assert batch.arrays["action"].dtype == np.dtype("<i8")


def test_image_layout_is_uint8():
    layout = codec.expected_layout(IMAGES)
    assert layout["obs"] == ("|u1", (84, 84, 4))
    assert layout["next_obs"] == ("|u1", (84, 84, 4))


def test_pendulum_space_spec_matches_wire_layout():
    spec = space_spec("Pendulum-v1")
    layout = codec.expected_layout(spec)
    assert layout["obs"] == ("<f4", (3,))
    assert layout["action"] == ("<f4", (1,))
    assert layout["reward"] == ("<f4", ())
    assert layout["terminated"] == ("|u1", ())
    batch = codec.decode(entry(spec, n=3), RUN, layout)
    assert batch.count == 3


def test_big_endian_input_is_sent_little_endian():
    arrays = make_arrays(PENDULUM, 3)
    big = dict(arrays, obs=arrays["obs"].astype(">f4"))
    batch = codec.decode(entry(arrays=big), RUN, codec.expected_layout(PENDULUM))
    assert batch.arrays["obs"].dtype.str == "<f4"
    np.testing.assert_array_equal(batch.arrays["obs"], arrays["obs"])


def test_encode_rejects_arrays_with_different_row_counts():
    arrays = make_arrays(PENDULUM, 3)
    arrays["reward"] = arrays["reward"][:2]
    with pytest.raises(ValueError, match=r"^array reward has 2 rows, expected 3$"):
        codec.encode(make_header(), arrays)


def test_decoded_arrays_are_views_of_the_blob():
    fields = entry(IMAGES, n=2)
    batch = codec.decode(fields, RUN, codec.expected_layout(IMAGES))
    blob = np.frombuffer(fields[b"d"], dtype=np.uint8)
    for name, arr in batch.arrays.items():
        assert not arr.flags.owndata, name
        assert np.shares_memory(arr, blob), name


# -- rejections -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {b"h": b""},
        {b"d": b""},
        {"h": b"x", "d": b"y"},
        {b"h": "text", b"d": b""},
        {b"h": b"", b"d": None},
    ],
    ids=["empty", "no-d", "no-h", "str-keys", "str-h", "none-d"],
)
def test_missing_fields_are_bad_entry(fields):
    assert decode_error(fields).kind == "bad_entry"


@pytest.mark.parametrize("h", [b"\xff", b"\x08", b"\x0a\x05ab", b"\xff\xff\xff\xff"])
def test_unparseable_header_is_bad_header(h):
    assert decode_error({b"h": h, b"d": b""}).kind == "bad_header"


@pytest.mark.parametrize("version", [0, 2, 99])
def test_unknown_format_version_is_bad_header(version):
    assert decode_error(reheader(entry(), format_version=version)).kind == "bad_header"


def test_foreign_run():
    err = decode_error(entry(header=make_header(run="someone-else")))
    assert err.kind == "foreign_run"
    assert decode_error(entry(), run="other-run").kind == "foreign_run"


def test_missing_worker_id_is_bad_header():
    assert decode_error(entry(header=make_header(worker_id=""))).kind == "bad_header"


def test_sequence_zero_is_bad_header():
    assert decode_error(entry(header=make_header(seq=0))).kind == "bad_header"


def test_empty_batch_is_bad_header():
    assert decode_error(reheader(entry(), count=0)).kind == "bad_header"


def test_wrong_dtype():
    arrays = make_arrays(PENDULUM, 4)
    arrays["obs"] = arrays["obs"].astype(np.float64)
    assert decode_error(entry(arrays=arrays)).kind == "wrong_dtype"


def test_float_action_for_discrete_space_is_wrong_dtype():
    arrays = make_arrays(DISCRETE, 4)
    arrays["action"] = arrays["action"].astype(np.float32)
    assert decode_error(entry(arrays=arrays), spec=DISCRETE).kind == "wrong_dtype"


def test_wrong_shape():
    arrays = make_arrays(PENDULUM, 4)
    arrays["obs"] = np.zeros((4, 4), dtype=np.float32)
    assert decode_error(entry(arrays=arrays)).kind == "wrong_shape"


def test_count_disagreeing_with_array_rows_is_wrong_shape():
    assert decode_error(reheader(entry(n=4), count=3)).kind == "wrong_shape"


def test_missing_array_is_wrong_shape():
    arrays = make_arrays(PENDULUM, 4)
    del arrays["terminated"]
    assert decode_error(entry(arrays=arrays)).kind == "wrong_shape"


def test_extra_array_is_wrong_shape():
    arrays = make_arrays(PENDULUM, 4)
    arrays["extra"] = np.zeros(4, dtype=np.float32)
    assert decode_error(entry(arrays=arrays)).kind == "wrong_shape"


def test_truncated_blob():
    fields = entry(n=4)
    assert decode_error({b"h": fields[b"h"], b"d": fields[b"d"][:-1]}).kind == "truncated"
    assert decode_error({b"h": fields[b"h"], b"d": b""}).kind == "truncated"


def test_lying_nbytes_or_offset_is_truncated():
    fields = entry(n=4)
    header = experience_pb2.BatchHeader()
    header.ParseFromString(fields[b"h"])
    header.arrays[0].nbytes += 4
    assert decode_error({b"h": header.SerializeToString(), b"d": fields[b"d"]}).kind == "truncated"
    header.ParseFromString(fields[b"h"])
    header.arrays[-1].offset = 2**64 - 1
    assert decode_error({b"h": header.SerializeToString(), b"d": fields[b"d"]}).kind == "truncated"


def test_decode_error_is_a_value_error_with_kind_in_message():
    err = decode_error(entry(header=make_header(run="x")))
    assert isinstance(err, ValueError)
    assert str(err).startswith("foreign_run:")


# -- property tests -------------------------------------------------------------------------------------

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LAYOUT = codec.expected_layout(PENDULUM)


def _decode_or_reject(fields, layout=LAYOUT):
    """Returns the batch or None on DecodeError; any other exception fails the test."""
    try:
        return codec.decode(fields, RUN, layout)
    except codec.DecodeError as exc:
        assert exc.kind in {"bad_entry", "bad_header", "foreign_run", "wrong_dtype", "wrong_shape", "truncated"}
        return None


@PROPERTY
@given(h=st.binary(max_size=512), d=st.binary(max_size=512))
def test_random_bytes_only_raise_decode_error(h, d):
    started = time.perf_counter()
    _decode_or_reject({b"h": h, b"d": d})
    assert time.perf_counter() - started < 1.0


U32 = st.one_of(st.integers(0, 8), st.sampled_from([2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
U64 = st.one_of(st.integers(0, 256), st.sampled_from([2**32, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
DTYPES = st.sampled_from(["<f4", "<f8", "|u1", "<i8", ">f4", "float32", "", "<f4\x00", "O"])


@st.composite
def headers(draw):
    """Headers that mostly look valid (so decoding goes deep) with random counts, shapes, offsets, sizes."""
    count = draw(st.one_of(st.integers(1, 6), U32))
    header = experience_pb2.BatchHeader(
        format_version=draw(st.sampled_from([1] * 6 + [0, 2])),
        run=draw(st.sampled_from([RUN] * 6 + ["other"])),
        worker_id=draw(st.sampled_from(["rollout-0"] * 6 + [""])),
        seq=draw(st.one_of(st.integers(1, 5), U64)),
        count=count,
    )
    names = list(LAYOUT)
    offset = 0
    if draw(st.integers(0, 3)) == 0:
        names = draw(st.lists(st.sampled_from([*LAYOUT, "junk"]), max_size=7))
    for name in names:
        dtype, shape = LAYOUT.get(name, ("<f4", ()))
        full = [count, *shape]
        if draw(st.integers(0, 15)) == 0:
            dtype = draw(DTYPES)
        if draw(st.integers(0, 15)) == 0:
            full = draw(st.lists(U32, max_size=4))
        itemsize = np.dtype(LAYOUT.get(name, ("<f4", ()))[0]).itemsize
        honest = int(np.prod(full, dtype=object)) * itemsize if full else 0
        nbytes = honest % 2**64 if draw(st.integers(0, 7)) else draw(U64)
        at = offset % 2**64 if draw(st.integers(0, 7)) else draw(U64)
        header.arrays.add(name=name, dtype=dtype, shape=full, offset=at, nbytes=nbytes)
        offset += honest
    return header


@PROPERTY
@given(header=headers(), d=st.one_of(st.binary(max_size=4096), st.binary(min_size=200, max_size=400)))
def test_random_headers_only_raise_decode_error_and_never_allocate_beyond_the_blob(header, d):
    fields = {b"h": header.SerializeToString(), b"d": d}
    tracemalloc.start()
    try:
        started = time.perf_counter()
        batch = _decode_or_reject(fields)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 1024 * 1024, f"decode allocated {peak} bytes for a {len(d)}-byte blob"
    if batch is not None:
        blob = np.frombuffer(d, dtype=np.uint8)
        for name, arr in batch.arrays.items():
            dtype, shape = LAYOUT[name]
            assert arr.shape == (batch.count, *shape)
            assert arr.dtype == np.dtype(dtype)
            assert not arr.flags.owndata
            assert np.shares_memory(arr, blob)


@PROPERTY
@given(n=st.integers(1, 8), seed=st.integers(0, 2**32 - 1), cut=st.integers(1, 64))
def test_any_truncation_of_a_valid_entry_is_rejected(n, seed, cut):
    fields = entry(n=n, arrays=make_arrays(PENDULUM, n, seed))
    d = fields[b"d"]
    short = d[: max(0, len(d) - cut)]
    with pytest.raises(codec.DecodeError) as info:
        codec.decode({b"h": fields[b"h"], b"d": short}, RUN, LAYOUT)
    assert info.value.kind == "truncated"


# -- what a dead letter says: its kind (counted) and its reason (kept with it) ----------------------------------


def test_each_refusal_names_its_kind_and_reason_exactly():
    cases = [
        ({b"h": b"x"}, "bad_entry", "entry lacks the h and d fields"),
        (reheader(entry(), format_version=2), "bad_header", "format version 2 unknown"),
        (entry(header=make_header(run="someone-else")), "foreign_run", "entry of run 'someone-else', expected 'run-1'"),
        (entry(header=make_header(worker_id="")), "bad_header", "missing worker id or sequence number"),
        (entry(header=make_header(seq=0)), "bad_header", "missing worker id or sequence number"),
    ]
    for fields, kind, reason in cases:
        err = decode_error(fields)
        assert (err.kind, str(err).split(": ", 1)[-1]) == (kind, reason), (kind, str(err))
    assert decode_error(reheader(entry(), format_version=2)).header is None, "no header kept before it is checked"
    late = decode_error(reheader(entry(), count=0))
    assert late.header is not None and late.header.worker_id, "a refusal after the header keeps it for accounting"


def test_the_size_limits_admit_their_bound_and_refuse_one_byte_more(monkeypatch):
    fields = entry()
    h, d = len(fields[b"h"]), len(fields[b"d"])
    monkeypatch.setattr(codec, "MAX_HEADER_BYTES", h)
    monkeypatch.setattr(codec, "MAX_ENTRY_BYTES", d)
    codec.decode(fields, RUN, codec.expected_layout(PENDULUM))
    monkeypatch.setattr(codec, "MAX_HEADER_BYTES", h - 1)
    err = decode_error(fields)
    assert (err.kind, str(err).split(": ", 1)[-1]) == ("too_large", f"header of {h} bytes exceeds the limit of {h - 1}")
    monkeypatch.setattr(codec, "MAX_HEADER_BYTES", h)
    monkeypatch.setattr(codec, "MAX_ENTRY_BYTES", d - 1)
    err = decode_error(fields)
    assert (err.kind, str(err).split(": ", 1)[-1]) == ("too_large", f"entry of {d} bytes exceeds the limit of {d - 1}")


def test_an_entry_counts_its_header_and_data_bytes_only():
    assert codec.entry_size({b"h": b"abc", b"d": b"12345", b"x": b"ignored", "h": b"str-key"}) == 8
    assert codec.entry_size({b"h": b"abc", b"d": None}) == 3


def test_each_refusal_of_the_arrays_names_its_kind_and_reason_exactly():
    fields = entry(n=4)
    wide = make_arrays(PENDULUM, 4)
    wide["obs"] = np.zeros((4, 4), dtype=np.float32)
    doubles = make_arrays(PENDULUM, 4)
    doubles["obs"] = doubles["obs"].astype(np.float64)
    missing = make_arrays(PENDULUM, 4)
    del missing["terminated"]
    cases = [
        (reheader(fields, count=0), "bad_header", "empty batch"),
        (
            entry(arrays=missing),
            "wrong_shape",
            "arrays ['obs', 'action', 'reward', 'next_obs'], expected ['action', 'next_obs', 'obs', 'reward', "
            "'terminated']",
        ),
        (entry(arrays=doubles), "wrong_dtype", "obs has dtype <f8, expected <f4"),
        (entry(arrays=wide), "wrong_shape", "obs has shape (4, 4), expected (4, 3)"),
        ({b"h": fields[b"h"], b"d": fields[b"d"][:-1]}, "truncated", "terminated needs 4 bytes at 128, blob has 131"),
    ]
    for bad, kind, reason in cases:
        err = decode_error(bad)
        assert (err.kind, str(err).split(": ", 1)[-1]) == (kind, reason), (kind, str(err))
    unparsed = decode_error({b"h": b"\xff", b"d": b""})
    assert str(unparsed).startswith("bad_header: header does not parse: ")


def test_a_decode_error_keeps_the_header_it_is_given():
    header = make_header()
    assert codec.DecodeError("truncated", "x", header).header is header
    assert codec.DecodeError("truncated", "x").header is None


def test_an_entry_without_arrays_says_it_holds_no_transitions():
    h, d = codec.encode(make_header(), {})
    assert experience_pb2.BatchHeader.FromString(h).count == 0 and d == b""


def test_optional_wire_fields_follow_the_fixed_ones_and_may_not_replace_them():
    layout = codec.expected_layout(PENDULUM, {"logp": ("<f4", ())})
    assert list(layout) == [*codec.FIELDS, "logp"]
    with pytest.raises(
        ValueError,
        match=r"^optional wire fields \['obs'\] would replace fields every transition "
        r"has$",
    ):
        codec.expected_layout(PENDULUM, {"obs": ("<f4", ()), "logp": ("<f4", ())})
    with pytest.raises(ValueError, match=r"\['frames'\]"):
        codec.expected_layout(PENDULUM, {"frames": ("|u1", ())})


# -- frame tables: their rows are frames, and every index must point into them ----------------------------------

FRAMES = SpaceSpec((4, 6, 5), "|u1", (), "<i8", 3, frame_stack=4)


def frame_entry(n: int, table_rows: int, top: int) -> dict[bytes, bytes]:
    """``n`` transitions whose stacks index frames 0 to ``top`` of a table of ``table_rows`` frames."""
    index = (np.arange(n * 4).reshape(n, 4) % (top + 1)).astype("<u4")
    arrays = {
        "obs": index,
        "action": np.zeros(n, dtype="<i8"),
        "reward": np.zeros(n, dtype="<f4"),
        "next_obs": index,
        "terminated": np.zeros(n, dtype="|u1"),
        "frames": np.zeros((table_rows, 6, 5), dtype="|u1"),
    }
    return entry(header=make_header(), arrays=arrays)


def test_a_frame_table_may_hold_fewer_or_more_frames_than_transitions_but_not_none():
    layout = codec.expected_layout(FRAMES)
    assert codec.decode(frame_entry(3, 1, 0), RUN, layout).arrays["frames"].shape == (1, 6, 5)
    assert codec.decode(frame_entry(2, 5, 4), RUN, layout).arrays["frames"].shape == (5, 6, 5)
    err = decode_error(frame_entry(3, 0, 0), spec=FRAMES)
    assert (err.kind, str(err)) == ("wrong_shape", "wrong_shape: frames has shape (0, 6, 5), expected (3, 6, 5)")


def test_an_index_past_the_frame_table_is_bad_index():
    err = decode_error(frame_entry(3, 2, 2), spec=FRAMES)
    assert (err.kind, str(err)) == ("bad_index", "bad_index: obs refers to frame 2 of a table of 2")


# -- compressed entries: every way their data can be wrong, and the bound on what they expand into -----------------


def compressed(kind: str, n: int = 16, **changes) -> tuple[dict[bytes, bytes], int]:
    """A compressed entry of zeros, smaller than its raw size (header fields changed by ``changes``), and its raw
    size."""
    arrays = {name: np.zeros_like(a) for name, a in make_arrays(PENDULUM, n).items()}
    h, d = codec.encode(make_header(), arrays, kind)
    assert len(d) < experience_pb2.BatchHeader.FromString(h).raw_nbytes
    raw = experience_pb2.BatchHeader.FromString(h).raw_nbytes
    return reheader({b"h": h, b"d": d}, **changes), raw


@pytest.mark.parametrize("kind", codec.COMPRESSIONS)
def test_compressed_refusals_name_their_kind_and_reason_exactly(kind, monkeypatch):
    fields, raw = compressed(kind)
    assert codec.decode(fields, RUN, LAYOUT).count == 16
    cases = [
        (reheader(fields, compression="brotli"), "bad_header", "compression 'brotli' unknown (known: zstd, lz4)"),
        (
            reheader(fields, raw_nbytes=raw + 1),
            "truncated",
            f"{kind} data decompresses to {raw} bytes, header says {raw + 1}",
        ),
    ]
    for bad, error, reason in cases:
        err = decode_error(bad)
        assert (err.kind, str(err).split(": ", 1)[-1]) == (error, reason), str(err)
    garbage = decode_error({b"h": fields[b"h"], b"d": b"\x00" * 64})
    assert garbage.kind == "truncated" and str(garbage).startswith(f"truncated: {kind} data does not decompress: ")
    monkeypatch.setattr(codec, "MAX_ENTRY_BYTES", raw)
    assert codec.decode(fields, RUN, LAYOUT).count == 16, "an entry of exactly the limit once decompressed is taken"
    monkeypatch.setattr(codec, "MAX_ENTRY_BYTES", raw - 1)
    err = decode_error(fields)
    assert (err.kind, str(err)) == (
        "too_large",
        f"too_large: entry of {raw} bytes once decompressed exceeds the limit of {raw - 1}",
    )


@pytest.mark.parametrize("kind, module", [("zstd", "zstandard"), ("lz4", "lz4.frame")])
def test_a_compressed_entry_is_dead_lettered_where_its_package_is_missing(kind, module, monkeypatch):
    fields, _ = compressed(kind)
    monkeypatch.setitem(sys.modules, module, None)
    err = decode_error(fields)
    assert err.kind == "bad_entry"
    assert str(err).startswith(f"bad_entry: {kind} entries need a package this trainer lacks: ")


def test_auto_compression_is_none_where_zstandard_is_missing(monkeypatch):
    assert codec.compression_for("auto", FRAMES) == "zstd"
    monkeypatch.setitem(sys.modules, "zstandard", None)
    assert codec.compression_for("auto", FRAMES) == ""


@pytest.mark.parametrize("kind", codec.COMPRESSIONS)
def test_a_small_entry_that_expands_beyond_its_raw_size_is_refused_without_expanding(kind):
    """An entry of a few kilobytes whose data expands to 32 MiB while its header says 1,000 bytes: refused as
    truncated, with no more than a megabyte allocated (zstd bounds its output only for a frame that does not
    state its size, so the stated size is checked first)."""
    import lz4.frame
    import zstandard

    bomb = bytes(32 << 20)
    blob = zstandard.ZstdCompressor(level=1).compress(bomb) if kind == "zstd" else lz4.frame.compress(bomb)
    fields, _ = compressed(kind, raw_nbytes=1000)
    tracemalloc.start()
    try:
        err = decode_error({b"h": fields[b"h"], b"d": blob})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.kind == "truncated" and peak < 1 << 20, peak
    if kind == "lz4":
        assert str(err) == "truncated: lz4 data does not decompress: more data than raw_nbytes, or a truncated frame"
    else:
        assert (
            str(err) == f"truncated: zstd data does not decompress: the frame holds {len(bomb)} bytes, more than "
            f"raw_nbytes"
        )


def test_a_zstd_frame_that_does_not_state_its_size_decodes_within_its_raw_size():
    import zstandard

    plain_h, plain_d = codec.encode(make_header(), make_arrays(PENDULUM, 4))
    blob = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(plain_d)
    assert zstandard.frame_content_size(blob) == -1
    fields = reheader({b"h": plain_h, b"d": blob}, compression="zstd", raw_nbytes=len(plain_d))
    assert codec.decode(fields, RUN, LAYOUT).count == 4
    err = decode_error(reheader(fields, raw_nbytes=len(plain_d) - 1))
    assert err.kind == "truncated"
