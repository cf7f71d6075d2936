"""Where the trainer's networks live: ``--device auto|cpu|cuda|cuda:N``.

``auto`` is the first CUDA device when this process's torch sees one, else the CPU. A named CUDA device that
does not exist here is refused with a ``UserError`` naming what torch sees, so a trainer asked for a GPU it was
not given exits with the usage code (and is not restarted) instead of training on the CPU beside an idle GPU.

Only the learners run there: replay, queues and rollouts stay in host memory, batches are copied to the device as
they are sampled, and published weights and checkpoints are copied back (the same safetensors whatever the
device). torch is imported only when a device is resolved: the syntax check here is imported by processes that
never load torch (rollout workers acting with numpy).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from drl.errors import UserError

if TYPE_CHECKING:
    import torch

PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def problem(name: str, flag: str = "--device") -> str | None:
    """Why ``name`` is not a device name, or None."""
    if PATTERN.match(name or ""):
        return None
    return f"{flag} must be auto, cpu, cuda or cuda:N, got {name!r}"


def resolve(name: str) -> "torch.device":
    """The torch device for ``name``; raises UserError when it is not a device name or not present here."""
    import torch

    reason = problem(name)
    if reason:
        raise UserError(reason)
    if name == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if name == "auto":
        return torch.device("cuda", 0) if available else torch.device("cpu")
    if not available:
        built = torch.version.cuda
        raise UserError(
            f"--device {name}: no CUDA device is available to this process (torch {torch.__version__}"
            f"{' built with CUDA ' + built if built else ', a CPU-only build'}); use --device cpu or "
            f"auto, or give the trainer a GPU"
        )
    device = torch.device(name)
    index = device.index if device.index is not None else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise UserError(f"--device {name}: this process sees {count} CUDA device(s) (cuda:0 to cuda:{count - 1})")
    return torch.device("cuda", index)


def for_rank(name: str, rank: int, visible: int) -> str:
    """The device learner ``rank`` of a group takes when the configuration names ``name`` and this process sees
    ``visible`` CUDA devices: learner r takes the r-th device after the named one (``cuda`` and ``auto`` name
    cuda:0), wrapping around, because NCCL takes one GPU per learner; with one visible device (a pod given one
    GPU) every learner's is its own cuda:0. The CPU, and ``auto`` without a GPU, stay as they are."""
    if name == "cpu" or visible < 1 or problem(name):
        return name
    base = int(name.split(":", 1)[1]) if ":" in name else 0
    return f"cuda:{(base + rank) % visible}"


def of(cfg) -> "torch.device":
    """The device an experiment configuration asks for (the CPU for configurations without the field)."""
    return resolve(getattr(cfg, "device", "cpu") or "cpu")
