"""The nn.Modules of the image encoders; their layer tables, layout rule and parameter counts are in
``drl.algorithms.encoders``."""

from __future__ import annotations

import math
import os
import shutil
from typing import TypeVar

import torch
from torch import nn

from drl.algorithms.encoders import (
    FEATURES,
    IMPALA_STAGES,
    MINATAR_CONVS,
    NATURE_CONVS,
    choose,
    conv_size,
    image_layout,
)


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), both 3x3 with the channels kept (IMPALA)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaStage(nn.Sequential):
    """conv 3x3, max-pool 3x3 stride 2 (padded: the size halves, rounded up), two residual blocks."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            ResidualBlock(c_out),
            ResidualBlock(c_out),
        )


class ImageEncoder(nn.Module):
    """Images (B, *obs_shape), uint8 or float, to ``features`` floats (see the module docstring).

    A learner's batch goes through the convolutions in channels-last memory order (the weights keep theirs):
    oneDNN's and cuDNN's faster kernels for a gradient step; the values are the same up to float rounding. The
    order changes while the pixels are still bytes, a quarter of the floats' memory to move, and the conversion
    to float keeps it.
    Acting, evaluation and export (no gradient, or eval mode) keep the input's order."""

    def __init__(self, obs_shape: tuple[int, ...], kind: str = "auto"):
        super().__init__()
        self.kind = choose(kind, obs_shape)
        channels, height, width, self.channels_last = image_layout(obs_shape)
        self.plane = len(obs_shape) == 2
        layers: list[nn.Module] = []
        if self.kind == "impala":
            for c_out in IMPALA_STAGES:
                layers.append(ImpalaStage(channels, c_out))
                channels = c_out
                height, width = conv_size(height, 3, 2, 1), conv_size(width, 3, 2, 1)
            layers.append(nn.ReLU())
        else:
            for c_out, kernel, stride in NATURE_CONVS if self.kind == "nature" else MINATAR_CONVS:
                layers += [nn.Conv2d(channels, c_out, kernel, stride), nn.ReLU()]
                channels = c_out
                height, width = conv_size(height, kernel, stride), conv_size(width, kernel, stride)
        self.convs = nn.Sequential(*layers)
        self.features = FEATURES[self.kind]
        self.fc = nn.Sequential(nn.Linear(channels * height * width, self.features), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.unsqueeze(1) if self.plane else obs.permute(0, 3, 1, 2) if self.channels_last else obs
        if self.training and torch.is_grad_enabled():
            x = x.contiguous(memory_format=torch.channels_last)
        x = x.float().div_(255) if x.dtype == torch.uint8 else x.float()
        return self.fc(self.convs(x).flatten(1))


COMPILERS = {"cpu": ("CXX", ("g++", "c++", "clang++")), "cuda": ("CC", ("cc", "gcc", "clang"))}
"""What torch.compile's code generators call per device type: inductor's C++ for the CPU, Triton's C launcher
stubs for CUDA (each first takes the environment variable)."""


def compiler(device_type: str) -> str | None:
    """The C/C++ compiler torch.compile would use for ``device_type`` here, or None."""
    variable, names = COMPILERS.get(device_type, COMPILERS["cpu"])
    if os.environ.get(variable):
        return shutil.which(os.environ[variable].split()[0])
    return next((path for path in map(shutil.which, names) if path), None)


def compile_encoders(owner: object, mode: str, device_type: str = "cpu") -> str:
    """Compiles (``nn.Module.compile``, in place: parameter names, state dicts and checkpoints unchanged) every
    ``ImageEncoder`` in the modules ``owner`` holds as attributes (a learner's networks and target networks), as
    ``--compile`` says: ``off`` none, ``on`` all, ``auto`` all when a compiler for ``device_type`` is on the PATH,
    with any later compilation failure falling back to eager (dynamo's ``suppress_errors``). Returns what was done,
    for the log."""
    if mode == "off":
        return "off"
    modules = [value for value in vars(owner).values() if isinstance(value, nn.Module)]
    found = {id(m): m for module in modules for m in module.modules() if isinstance(m, ImageEncoder)}
    if not found:
        return "nothing to compile (no image encoder)"
    if mode == "auto":
        if compiler(device_type) is None:
            return f"eager (--compile auto: no C/C++ compiler for {device_type} on the PATH)"
        import torch._dynamo

        torch._dynamo.config.suppress_errors = True
    for encoder in found.values():
        encoder.compile()
    return f"{len(found)} image encoder(s) compiled for {device_type}"


M = TypeVar("M", bound=nn.Module)


def orthogonal_(module: M, gain: float = math.sqrt(2)) -> M:
    """Orthogonal weights with ``gain`` and zero biases for every conv and linear layer of ``module`` (the
    initialisation of the PPO reference implementations, CleanRL's ``layer_init``)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight, gain)
            assert layer.bias is not None  # every layer of the networks here has one
            nn.init.zeros_(layer.bias)
    return module
