"""Convolutional encoders for image observations, beside the MLPs of ``drl.algorithms.common``.

Three published networks, each ending in its fully connected layer (ReLU), so a head of one linear layer per
output makes the paper's network:

- ``nature``: Mnih et al. 2015 (the Nature DQN): conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3
  stride 1, fc 512. Its strides need images of at least ``NATURE_MIN_SIZE`` pixels a side.
- ``impala``: Espeholt et al. 2018 (IMPALA's deep ResNet): three stages of 16, 32 and 32 channels, each a conv
  3x3, a max-pool 3x3 stride 2 and two residual blocks of two 3x3 convs, then fc 256.
- ``minatar``: Young and Tian 2019 (the MinAtar paper's network): conv 16 3x3 stride 1, fc 128, for the small
  images where the Nature strides do not fit.

``auto`` picks ``nature`` for images of at least ``NATURE_MIN_SIZE`` a side and ``minatar`` for smaller ones.

Observations arrive as the environment made them, (B, *obs_shape): uint8 stays uint8 through workers, wire and
replay, and becomes float only here, scaled by 1/255 (float images are taken as they come). The layout of the
observation's axes is decided by ``image_layout`` alone. The layer table of each network is data that both the
modules and ``encoder_parameters`` read, so the memory check counts exactly what the modules build.

The modules (``ImageEncoder``, ``orthogonal_``) live in ``drl.algorithms.convnets`` and load with torch on first
use from here, so that a configuration naming an encoder stays light to read.
"""

from __future__ import annotations

from drl.algorithms import lazy_exports
from drl.errors import UserError

ENCODERS = ("auto", "nature", "impala", "minatar")
NATURE_MIN_SIZE = 36  # 8x8/4 then 4x4/2 then 3x3/1 leaves one pixel at 36

NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride)
MINATAR_CONVS = ((16, 3, 1),)
IMPALA_STAGES = (16, 32, 32)
FEATURES = {"nature": 512, "impala": 256, "minatar": 128}


def image_layout(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """(channels, height, width, channels_last) of an image observation's shape.

    A 2-dim shape is one channel of HxW. A 3-dim shape is CxHxW when its first axis is shorter than its last
    (frame stacks such as 4x84x84), else HxWxC (MinAtar's 10x10xC, RGB 210x160x3).
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) == 2:
        return 1, shape[0], shape[1], False
    if len(shape) == 3:
        if shape[0] < shape[-1]:
            return shape[0], shape[1], shape[2], False
        return shape[2], shape[0], shape[1], True
    raise ValueError(f"an image observation has 2 or 3 dimensions, got shape {shape}")


def choose(kind: str, shape: tuple[int, ...]) -> str:
    """The encoder ``kind`` names for observations of ``shape`` (``auto`` resolved); raises UserError when the
    named one cannot read images of that size."""
    if kind not in ENCODERS:
        raise UserError(f"unknown encoder {kind!r}; accepted: {', '.join(ENCODERS)}")
    _, height, width, _ = image_layout(shape)
    side = min(height, width)
    if kind == "auto":
        return "nature" if side >= NATURE_MIN_SIZE else "minatar"
    if kind == "nature" and side < NATURE_MIN_SIZE:
        raise UserError(
            f"the nature encoder needs images of at least {NATURE_MIN_SIZE}x{NATURE_MIN_SIZE}, "
            f"got {height}x{width}; use encoder minatar or impala (or auto)"
        )
    if kind == "minatar" and side < 3:
        raise UserError(f"the minatar encoder needs images of at least 3x3, got {height}x{width}")
    return kind


def conv_size(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    """Output side of a convolution or pooling over ``size`` pixels."""
    return (size + 2 * padding - kernel) // stride + 1


def _conv_parameters(c_in: int, c_out: int, kernel: int) -> int:
    return c_out * c_in * kernel * kernel + c_out


def encoder_parameters(kind: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """(parameters, features) of ``ImageEncoder(shape, kind)``, counted without building it."""
    kind = choose(kind, shape)
    channels, height, width, _ = image_layout(shape)
    count = 0
    if kind == "impala":
        for c_out in IMPALA_STAGES:
            count += _conv_parameters(channels, c_out, 3) + 4 * _conv_parameters(c_out, c_out, 3)
            channels = c_out
            height, width = conv_size(height, 3, 2, 1), conv_size(width, 3, 2, 1)
    else:
        for c_out, kernel, stride in NATURE_CONVS if kind == "nature" else MINATAR_CONVS:
            count += _conv_parameters(channels, c_out, kernel)
            channels = c_out
            height, width = conv_size(height, kernel, stride), conv_size(width, kernel, stride)
    features = FEATURES[kind]
    return count + channels * height * width * features + features, features


__getattr__ = lazy_exports("drl.algorithms", {"ImageEncoder": "convnets", "orthogonal_": "convnets"})
