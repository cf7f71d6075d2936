"""Data-parallel learners: what a learner needs of its group, and torch.distributed's implementation of it.

A learner holds a ``Collective`` (``learner.collective``). With one learner it is ``SOLO``, whose operations
return their tensor untouched, so a single learner computes exactly what it always did. With K learners
(``--learners K``) every learner holds the same networks (the same seed, or the same checkpoint), computes its
gradients on its own batch and averages them with the others' before each optimiser step, as
DistributedDataParallel does: K learners with equal batches of B transitions make the update of one learner with
one batch of K x B. What a step needs over the whole batch rather than over each part (PPO's advantage
standardisation, observation statistics) is summed across the group first. The learners then hold equal weights
after every step, so any one of them (rank 0) publishes them.

A collective operation returns only when every learner of the group has called it: the learners must call the
same operations in the same order, so they make the same number of steps on batches of the same shape (the
trainer agrees on that count with ``min_int`` before it steps). Algorithms see only this protocol; the process
group (gloo on the CPU, NCCL on GPUs, rendezvous at ``MASTER_ADDR:MASTER_PORT`` as torchrun sets it) is the
trainer's business (``join``).
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Mapping

import torch

from drl.core import SOLO, Collective, Learning, Solo
from drl.errors import UserError

log = logging.getLogger("drl.trainer")

__all__ = [
    "SOLO",
    "Collective",
    "Solo",
    "TorchGroup",
    "all_of",
    "any_of",
    "broadcast_learner",
    "join",
    "join_learners",
    "newest",
    "start_together",
]


class TorchGroup:
    """torch.distributed's default process group, once ``join`` has initialised it."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.size, self.rank = dist.get_world_size(), dist.get_rank()
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        )

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.SUM)
        return tensor

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.sum_(tensor).div_(self.size)

    def min_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN)
        return int(t.item())

    def broadcast_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self.dist.broadcast(t, src=0)
        return int(t.item())

    def broadcast_(self, tensor: torch.Tensor, source: int = 0) -> torch.Tensor:
        """Replaces ``tensor`` with rank ``source``'s, in place (learners that restored different states agree)."""
        self.dist.broadcast(tensor, src=source)
        return tensor

    def leave(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def join(
    rank: int,
    size: int,
    address: str,
    port: int,
    backend: str = "auto",
    timeout_s: float = 300.0,
    device: torch.device = torch.device("cpu"),
) -> TorchGroup:
    """Joins (and with rank 0, hosts) the group of ``size`` learners at ``address:port``: gloo for learners on
    the CPU, NCCL for learners on GPUs (``backend`` auto picks by ``device``, where the learner's gradients are;
    NCCL takes one GPU per learner)."""
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if device.type == "cuda" and dist.is_nccl_available() else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return TorchGroup()


def broadcast_learner(group: Collective, learner) -> None:
    """Gives every learner of the group learner 0's networks (every parameter and buffer of the learner's
    ``_modules()``) and, when every learner has optimiser state, its optimisers' moments: learners that restored
    different checkpoints, or none, start their first step equal."""
    tensors = [t for module in learner._modules().values() for t in module.state_dict().values()]
    if torch.is_tensor(getattr(learner, "log_alpha", None)):
        tensors.append(learner.log_alpha.data)
    optimizers = learner._optimizers() if hasattr(learner, "_optimizers") else {"opt": learner.opt}
    moments = [
        state[key]
        for opt in optimizers.values()
        for state in opt.state.values()
        for key in sorted(state)
        if torch.is_tensor(state[key])
    ]
    for t in tensors:
        group.broadcast_(t)
    if group.min_int(len(moments)) == group.min_int(-len(moments)) * -1 and moments:
        for t in moments:
            group.broadcast_(t)


GROUP_TIMEOUT_S = 120.0


def join_learners(
    learning: Learning,
    rank: int,
    size: int,
    algorithm: str,
    device: str,
    shards: list[int],
    env: Mapping[str, str] = os.environ,
    timeout_s: float = GROUP_TIMEOUT_S,
) -> Collective:
    """With ``--learners`` K > 1: joins the group of K learners (this one rank ``rank``; rank 0 hosts the
    rendezvous at ``MASTER_ADDR:MASTER_PORT``) and seats ``learning`` and its learner in it, the one place a
    learner gets its group (``Learner.collective``; the learning agrees its passes with the same group); alone,
    ``SOLO``, which both hold from the start. Raises UserError for a learner that cannot average its gradients, a
    rendezvous not named, or one not reached."""
    if size == 1:
        return SOLO
    learner = learning.learner
    if not hasattr(learner, "collective"):
        raise UserError(
            f"--learners {size}: the {algorithm} learner cannot average its gradients with a group "
            "(it has no collective)"
        )
    address, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if not address or not port.isdigit() or int(port) == 0:
        raise UserError(
            f"--learners {size}: MASTER_ADDR and MASTER_PORT must name the group's rendezvous "
            f"(got {address!r}, {port!r}); drl-orchestrate sets them"
        )
    log.info(
        "learner %d of %d: joining the group at %s:%s, reading shards %s",
        rank,
        size,
        address,
        port,
        ", ".join(str(s) for s in shards),
    )
    try:
        group = join(rank, size, address, int(port), timeout_s=timeout_s, device=torch.device(device))
    except Exception as exc:
        raise UserError(
            f"learner {rank} of {size} could not join the group at {address}:{port} within {timeout_s:.0f} s: {exc}"
        ) from None
    learning.collective = learner.collective = group
    return group


def any_of(group: Collective, flag: bool) -> bool:
    """Whether ``flag`` holds for any learner of the group (alone: whether it holds)."""
    return group.min_int(0 if flag else 1) == 0


def all_of(group: Collective, flag: bool) -> bool:
    """Whether ``flag`` holds for every learner of the group: what the learners do together (a training pass
    averages the group's gradients, so all take it or none does)."""
    return group.min_int(1 if flag else 0) == 1


def newest(group: Collective, value: int) -> int:
    """The largest of the group's values (the newest policy version any learner knows)."""
    return -group.min_int(-value)


def start_together(group: Collective, learner) -> None:
    """Learners that restored different checkpoints continue from learner 0's networks and update count."""
    broadcast_learner(group, learner)
    learner.updates = group.broadcast_int(learner.updates)
