"""Image observations as frames, each sent and stored once.

A frame-stacked observation (k frames along the first axis, ``SpaceSpec.frame_stack``) shares k - 1 frames with
the one before it, and a transition's next observation shares k - 1 with its observation: whole stacks on the
wire or in replay repeat every frame 2k times. Here a frame is the unit instead:

- a rollout worker's ``VecEnv`` keeps its recent frames in a ``FrameRing``, each numbered by a serial, and writes
  k serials per observation into the transitions where other environments write the observation itself;
- ``pack`` turns an entry's serials into the entry's own frame table (wire field ``frames``) and indices into it
  (``obs``, ``next_obs``: k ``<u4`` each). An entry carries every frame its transitions refer to, history
  included, so no entry depends on another: a lost, re-sent or dead-lettered entry leaves no stack incomplete;
- ``expand`` rebuilds whole observations from a table and indices (an on-policy rollout, Ape-X priorities);
  ``segment`` rebuilds one environment's rows of an entry, with next observations only where a learner
  bootstraps from them (the asynchronous on-policy queue);
- the replay (``drl.training.replay``) keeps the tables' frames in a ``FrameRing`` too and each transition's 2k frame references.

A stack never mixes two episodes: after a reset the worker numbers the reset observation's own frames, so the
first stack of an episode refers only to frames of that episode.
"""

from __future__ import annotations

import numpy as np

TABLE = "frames"
"""The wire field holding an entry's frame table: its rows are frames, not transitions."""
INDEXED = ("obs", "next_obs")
"""The fields that hold, per transition, k indices into the frame table instead of an observation."""
INDEX_DTYPE = "<u4"
SERIAL_DTYPE = "<i8"
FRAME_ROOM = 1.1
"""Frames a frame replay keeps per transition of its capacity: an entry's table holds, besides one new frame per
transition, each environment's stack history and its resets (``drl.frames``); when tables run above this, the
oldest transitions leave early and the replay holds fewer than its capacity, never a stack with a lost frame."""


def frame_capacity(capacity: int) -> int:
    """Frames a frame replay of ``capacity`` transitions keeps."""
    return int(np.ceil(capacity * FRAME_ROOM))


def wire_fields(frame_stack: int, frame_shape: tuple[int, ...]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The layout entries (dtype, per-row shape) of a frame run's observation fields and its table."""
    return {
        "obs": (INDEX_DTYPE, (frame_stack,)),
        "next_obs": (INDEX_DTYPE, (frame_stack,)),
        TABLE: ("|u1", tuple(frame_shape)),
    }


def serial_layout(layout: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The fields a worker fills while stepping, for a wire layout with a frame table: the frame serials in
    place of the indices, and no table (``pack`` builds it when the entry is sent)."""
    if TABLE not in layout:
        return dict(layout)
    return {
        name: ((SERIAL_DTYPE, shape) if name in INDEXED else (dtype, shape))
        for name, (dtype, shape) in layout.items()
        if name != TABLE
    }


class FrameRing:
    """Frames in a ring, each under a serial (0, 1, 2, ...): a rollout worker's recent frames (one ``put`` per
    new frame) and a frame replay's (``extend`` with an entry's table). A serial below ``oldest`` was
    overwritten.

    A worker's ring must hold every frame an unsent transition can refer to: an entry's worth of steps, plus the
    stack's history and the steps a folder (n-step returns) holds back, for every environment; ``get`` raises
    RuntimeError rather than return a frame that was overwritten."""

    def __init__(self, frame_shape: tuple[int, ...], capacity: int):
        self.frames = np.zeros((capacity, *frame_shape), dtype=np.uint8)
        self.capacity = capacity
        self.next = 0

    @property
    def oldest(self) -> int:
        return max(0, self.next - self.capacity)

    def resize(self, capacity: int) -> None:
        """Holds ``capacity`` frames from now on, keeping the newest ones held (it never shrinks)."""
        if capacity <= self.capacity:
            return
        kept = np.arange(self.oldest, self.next)
        frames = np.zeros((capacity, *self.frames.shape[1:]), dtype=np.uint8)
        frames[kept % capacity] = self.frames[kept % self.capacity]
        self.frames, self.capacity = frames, capacity

    def put(self, frame: np.ndarray) -> int:
        serial = self.next
        self.frames[serial % self.capacity] = frame
        self.next = serial + 1
        return serial

    def extend(self, table: np.ndarray) -> int:
        """Stores a table's frames (at most the newest ``capacity``); returns the first one's serial."""
        start = self.next
        rows = len(table)
        skip = max(0, rows - self.capacity)
        self.frames[(start + skip + np.arange(rows - skip)) % self.capacity] = table[skip:]
        self.next = start + rows
        return start

    def get(self, serials: np.ndarray) -> np.ndarray:
        if len(serials) and (serials.min() < self.oldest or serials.max() >= self.next):
            raise RuntimeError(
                f"frames {serials.min()}..{serials.max()} asked of a ring holding {self.oldest}..{self.next - 1}"
            )
        return self.frames[serials % self.capacity]

    def stacks(self, refs: np.ndarray, obs_shape: tuple[int, ...]) -> np.ndarray:
        """The observations whose frames' serials are the rows of ``refs``."""
        return self.get(refs).reshape(len(refs), *obs_shape)


def pack(arrays: dict[str, np.ndarray], log: FrameRing) -> dict[str, np.ndarray]:
    """An entry's transitions with frame serials -> the same transitions with indices into a frame table of
    the frames they refer to (each once, oldest first), the table last."""
    n = len(arrays["reward"])
    serials = np.concatenate([arrays[name].reshape(-1) for name in INDEXED])
    unique, inverse = np.unique(serials, return_inverse=True)
    index = inverse.astype(INDEX_DTYPE)
    out = {}
    for name, arr in arrays.items():
        if name in INDEXED:
            part = INDEXED.index(name)
            width = arr.shape[1]
            out[name] = index[part * n * width : (part + 1) * n * width].reshape(n, width)
        else:
            out[name] = arr
    out[TABLE] = log.get(unique)
    return out


def _whole(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Observations from a frame table and their (n, k) indices: k frames stacked along the first axis, one
    frame as it is when k is 1."""
    stacks = table[index]
    return stacks[:, 0] if stacks.shape[1] == 1 else stacks


def expand(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Whole observations rebuilt from a frame table: each ``obs``/``next_obs`` row becomes its k frames
    stacked along the first axis (one frame as it is when k is 1); the table is left out."""
    table = arrays.get(TABLE)
    if table is None:
        return arrays
    out = {name: arr for name, arr in arrays.items() if name != TABLE}
    for name in INDEXED:
        out[name] = _whole(table, arrays[name])
    return out


END_OBS = "end_obs"
"""A segment's field that holds, in place of ``next_obs``, the next observations of its ``bootstrap_rows`` only,
in order: elsewhere in a segment (consecutive steps of one environment) the next observation is the next row's
observation, or the episode terminated and none is needed."""


def bootstrap_rows(terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
    """Where a segment's learner bootstraps from a next observation of its own: its last row and the rows where
    an episode was cut short (truncated), unless the episode terminated there."""
    rows = np.asarray(truncated).astype(bool)
    if len(rows):
        rows[-1] = True
    return rows & ~np.asarray(terminated).astype(bool)


def segment(arrays: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """An entry's ``rows`` (consecutive steps of one environment, in order) as a segment: whole observations,
    rebuilt from the entry's frame table when it has one, straight into the segment (one copy, not an expanded
    entry split again), every other field's rows, and ``END_OBS`` in place of ``next_obs``: a queue then holds,
    and builds, one observation per transition rather than two."""
    table = arrays.get(TABLE)
    out = {name: arr[rows] for name, arr in arrays.items() if name != TABLE and name not in INDEXED}
    ends = rows[bootstrap_rows(out["terminated"], out["truncated"])]
    if table is None:
        out["obs"], out[END_OBS] = arrays["obs"][rows], arrays["next_obs"][ends]
    else:
        out["obs"], out[END_OBS] = _whole(table, arrays["obs"][rows]), _whole(table, arrays["next_obs"][ends])
    return out
