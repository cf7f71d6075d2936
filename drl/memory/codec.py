"""Wire format of experience batches: a protobuf header plus one blob of raw little-endian arrays.

A stream entry has two fields, ``h`` (a serialized ``drl.v1.BatchHeader``) and ``d`` (the arrays back to back).
Decoding never trusts the entry: sizes, dtypes, shapes and the run are checked against what the reader
expects, and any mismatch raises ``DecodeError`` so the caller can dead-letter the entry. See docs/wire-format.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError as _ProtoDecodeError

from drl import frames
from drl._proto import experience_pb2
from drl.envs import SpaceSpec

FORMAT_VERSION = 1
FIELDS = ("obs", "action", "reward", "next_obs", "terminated")
MAX_ENTRY_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 1024 * 1024


class DecodeError(ValueError):
    """An entry that cannot be accepted; ``kind`` names the reason for dead-letter accounting."""

    def __init__(self, kind: str, message: str, header: "experience_pb2.BatchHeader | None" = None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.header = header


@dataclass
class Batch:
    header: experience_pb2.BatchHeader
    arrays: dict[str, np.ndarray]

    @property
    def count(self) -> int:
        return self.header.count


def _le(arr: np.ndarray) -> np.ndarray:
    dt = arr.dtype
    if dt.byteorder == ">" or (dt.byteorder == "=" and not np.little_endian):
        arr = arr.astype(dt.newbyteorder("<"))
    return np.ascontiguousarray(arr)


COMPRESSIONS = ("zstd", "lz4")


@functools.lru_cache(maxsize=None)
def _compressor(kind: str):
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=1).compress
    import lz4.frame

    return lz4.frame.compress


def _decompress(kind: str, blob: bytes, size: int) -> bytes:
    """``blob`` decompressed, refusing to produce more than ``size`` bytes (a small entry must not expand into
    gigabytes)."""
    if kind == "zstd":
        import zstandard

        declared = zstandard.frame_content_size(blob)  # -1 when the frame does not say
        if declared > size:  # max_output_size bounds only a frame that does not say its size
            raise ValueError(f"the frame holds {declared} bytes, more than raw_nbytes")
        return zstandard.ZstdDecompressor().decompress(blob, max_output_size=size)
    import lz4.frame

    with lz4.frame.LZ4FrameDecompressor() as lz:
        out = lz.decompress(blob, max_length=size)
        if not lz.eof:
            raise ValueError("more data than raw_nbytes, or a truncated frame")
        return out


def compression_for(option: str, spec: SpaceSpec) -> str:
    """The compression a run's workers use: ``--compression`` itself, or for ``auto`` zstd where it wins
    (image frames, when the zstandard package is installed: frames shrink many times over for a small part of
    an env step's CPU time) and none elsewhere (float observations barely shrink). See bench/README.md."""
    if option != "auto":
        return "" if option == "none" else option
    if not spec.frame_stack:
        return ""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return ""
    return "zstd"


def encode(
    header: experience_pb2.BatchHeader, arrays: dict[str, np.ndarray], compression: str = ""
) -> tuple[bytes, bytes]:
    """Fills header.format_version, count and arrays; returns the (h, d) field values, ``d`` compressed with
    ``compression`` ("zstd", "lz4"; "" for none)."""
    header.format_version = FORMAT_VERSION
    del header.arrays[:]
    parts: list[Any] = []  # arrays, joined through their buffers
    offset = 0
    count = None
    for name, arr in arrays.items():
        arr = _le(np.asarray(arr))
        if name == frames.TABLE:
            pass
        elif count is None:
            count = arr.shape[0]
        elif arr.shape[0] != count:
            raise ValueError(f"array {name} has {arr.shape[0]} rows, expected {count}")
        info = header.arrays.add(
            name=name, dtype=arr.dtype.str, shape=list(arr.shape), offset=offset, nbytes=arr.nbytes
        )
        offset += info.nbytes
        parts.append(arr)  # C-contiguous: join copies its buffer once (tobytes would copy it twice)
    header.count = count or 0
    blob = b"".join(parts)
    if compression:
        header.compression, header.raw_nbytes = compression, len(blob)
        blob = _compressor(compression)(blob)
    return header.SerializeToString(), blob


def entry_size(fields: dict) -> int:
    """Bytes an entry holds, as the backlog counts them: its ``h`` plus its ``d``."""
    return sum(len(v) for k, v in fields.items() if k in (b"h", b"d") and isinstance(v, bytes))


def expected_layout(
    spec: SpaceSpec, extras: Mapping[str, tuple[str, tuple[int, ...]]] | None = None
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """dtype and per-transition shape of each field for an environment's spaces, then the optional fields
    ``extras`` (name: (dtype, shape)) that the run's algorithm and options ask for
    (``drl.algorithms.wire_extras``), in their order. An image environment whose frames travel once
    (``SpaceSpec.frame_stack``) has frame indices for ``obs`` and ``next_obs`` and the frame table last, whose
    shape is one frame's (``drl.frames``)."""
    table = frames.wire_fields(spec.frame_stack, spec.frame_shape) if spec.frame_stack else {}
    layout = {
        "obs": table.get("obs", (spec.obs_dtype, spec.obs_shape)),
        "action": (spec.act_dtype, spec.act_shape),
        "reward": ("<f4", ()),
        "next_obs": table.get("next_obs", (spec.obs_dtype, spec.obs_shape)),
        "terminated": ("|u1", ()),
    }
    clash = sorted(set(extras or {}) & (set(layout) | {frames.TABLE}))
    if clash:
        raise ValueError(f"optional wire fields {clash} would replace fields every transition has")
    layout.update(extras or {})
    if table:
        layout[frames.TABLE] = table[frames.TABLE]
    return layout


def decode(fields: dict, run: str, layout: dict[str, tuple[str, tuple[int, ...]]]) -> Batch:
    """Decodes one stream entry's fields, checking it against the run and the expected layout."""
    h = fields.get(b"h")
    d = fields.get(b"d")
    if not isinstance(h, bytes) or not isinstance(d, bytes):
        raise DecodeError("bad_entry", "entry lacks the h and d fields")
    if len(h) > MAX_HEADER_BYTES:
        raise DecodeError("too_large", f"header of {len(h)} bytes exceeds the limit of {MAX_HEADER_BYTES}")
    header = experience_pb2.BatchHeader()
    try:
        header.ParseFromString(h)
    except (_ProtoDecodeError, RuntimeError, ValueError) as exc:
        raise DecodeError("bad_header", f"header does not parse: {exc}") from None
    if header.format_version != FORMAT_VERSION:
        raise DecodeError("bad_header", f"format version {header.format_version} unknown")
    if header.run != run:
        raise DecodeError("foreign_run", f"entry of run {header.run!r}, expected {run!r}")
    if not header.worker_id or header.seq < 1:
        raise DecodeError("bad_header", "missing worker id or sequence number")
    try:
        if len(d) > MAX_ENTRY_BYTES:
            raise DecodeError("too_large", f"entry of {len(d)} bytes exceeds the limit of {MAX_ENTRY_BYTES}")
        if header.compression:
            d = _decompressed(header, d)
        return _decode_arrays(header, d, layout)
    except DecodeError as exc:
        exc.header = header
        raise


def _decompressed(header: experience_pb2.BatchHeader, d: bytes) -> bytes:
    kind, size = header.compression, header.raw_nbytes
    if kind not in COMPRESSIONS:
        raise DecodeError("bad_header", f"compression {kind!r} unknown (known: {', '.join(COMPRESSIONS)})")
    if size > MAX_ENTRY_BYTES:
        raise DecodeError(
            "too_large", f"entry of {size} bytes once decompressed exceeds the limit of {MAX_ENTRY_BYTES}"
        )
    try:
        raw = _decompress(kind, d, size)
    except ImportError as exc:
        raise DecodeError("bad_entry", f"{kind} entries need a package this trainer lacks: {exc}") from None
    except Exception as exc:
        raise DecodeError("truncated", f"{kind} data does not decompress: {exc}") from None
    if len(raw) != size:
        raise DecodeError("truncated", f"{kind} data decompresses to {len(raw)} bytes, header says {size}")
    return raw


@functools.lru_cache(maxsize=256)
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def _decode_arrays(
    header: experience_pb2.BatchHeader, d: bytes, layout: dict[str, tuple[str, tuple[int, ...]]]
) -> Batch:
    count = header.count
    if count < 1:
        raise DecodeError("bad_header", "empty batch")
    infos = list(header.arrays)
    names = [a.name for a in infos]
    if sorted(names) != sorted(layout):
        raise DecodeError("wrong_shape", f"arrays {names}, expected {sorted(layout)}")
    arrays = {}
    view = memoryview(d)
    size = len(d)
    for name, info in zip(names, infos):
        dtype, shape = layout[name]
        if info.dtype != dtype:
            raise DecodeError("wrong_dtype", f"{name} has dtype {info.dtype}, expected {dtype}")
        got = tuple(info.shape)
        full = (got[0] if name == frames.TABLE and got and got[0] >= 1 else count, *shape)
        if got != full:
            raise DecodeError("wrong_shape", f"{name} has shape {got}, expected {full}")
        nbytes = math.prod(full) * _itemsize(dtype)
        offset = info.offset
        if info.nbytes != nbytes or offset + nbytes > size:
            raise DecodeError("truncated", f"{name} needs {nbytes} bytes at {offset}, blob has {size}")
        arrays[name] = np.frombuffer(view[offset : offset + nbytes], dtype=dtype).reshape(full)
    table = arrays.get(frames.TABLE)
    if table is not None:
        for name in frames.INDEXED:
            if arrays[name].max() >= len(table):
                raise DecodeError(
                    "bad_index", f"{name} refers to frame {int(arrays[name].max())} of a table of {len(table)}"
                )
    return Batch(header, arrays)
