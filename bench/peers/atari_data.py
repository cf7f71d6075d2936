"""Random but fixed Atari-shaped transitions for ``bench.atari_learner``, the same on both sides: drl's process
and the Stable-Baselines3 child (another environment) build them from the seed with numpy alone and compare
their digests.

The frames are uniform noise: a convolution costs the same whatever the pixel values. Consecutive stacks share
frames as a real trajectory's do: observation i is frames i..i+3 and its next observation frames i+1..i+4, so
only one frame per transition is held and a batch is gathered from views.
"""

from __future__ import annotations

import hashlib

import numpy as np

STACK, SIZE, ACTIONS = 4, 84, 6  # ALE/Pong-v5's minimal action set has 6 actions


def transitions(n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` transitions: obs and next_obs (n, 4, 84, 84) uint8 views, action int64, reward and terminated
    float32 (rewards in {-1, 0, 1} as after clipping, about 1% terminal)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(n + STACK, SIZE, SIZE), dtype=np.uint8)
    stacks = np.lib.stride_tricks.sliding_window_view(frames, STACK, axis=0).transpose(0, 3, 1, 2)
    return {
        "obs": stacks[:n],
        "next_obs": stacks[1 : n + 1],
        "action": rng.integers(0, ACTIONS, size=n, dtype=np.int64),
        "reward": rng.integers(-1, 2, size=n).astype(np.float32),
        "terminated": (rng.random(n) < 0.01).astype(np.float32),
        "frames": frames,
    }


def digest(data: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in ("frames", "action", "reward", "terminated"):
        h.update(np.ascontiguousarray(data[name]).tobytes())
    return h.hexdigest()[:16]
