"""Pieces the algorithms share: MLPs, action scaling, loading published weights, networks' parameters in one flat
tensor with its Adam, and checkpoint state of modules and optimisers as (tensors, JSON-able meta)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from drl.core import Collective
from drl.envs import SpaceSpec


def mlp(sizes: list[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers with ``activation`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class ObsNorm(nn.Module):
    """Running mean and variance of observations, kept as buffers so that they travel inside the published
    policy weights: every worker and the evaluator normalise with exactly the statistics the learner used.

    ``update`` merges a batch's moments into the running ones (Chan et al.'s parallel formula), so the trainer
    can fold in every worker's experience; ``forward`` standardises and clips to [-clip, clip]. Disabled, it is
    the identity and its statistics stay at mean 0, variance 1.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] | int, enabled: bool = True, clip: float = 10.0):
        super().__init__()
        self.enabled, self.clip = enabled, clip
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        scaled = (x - self.mean.float()) / torch.sqrt(self.var.float() + 1e-8)
        return scaled.clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        if not self.enabled or len(x) == 0:
            return
        x = x.double()
        self.merge(float(len(x)), x.mean(0), x.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, n: float, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Merges the moments of ``n`` observations (their mean and population variance) into the running ones."""
        if not self.enabled or n <= 0:
            return
        batch_mean = batch_mean.to(self.mean).reshape(self.mean.shape)
        batch_var = batch_var.to(self.var).reshape(self.var.shape)
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.fill_(total)


def fused(spec: SpaceSpec, device: torch.device | None = None) -> dict:
    """Adam's options for the networks of ``spec``: the fused implementation (one pass over all parameters) for
    image networks and on a GPU, where it makes an update measurably faster; vector networks on the CPU keep the
    default, whose exact arithmetic their learning tests and published results were tuned with."""
    return {"fused": True} if spec.image or (device is not None and device.type == "cuda") else {}


def on_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch from host memory on the learner's device (the same tensors when that is the CPU)."""
    if device.type == "cpu":
        return batch
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class FlatParams:
    """Tensors moved into one flat parameter: each original tensor's ``.data`` becomes a view of its slice, so
    modules, ``state_dict`` and ``load_state_dict`` keep working on them while one operation on ``param`` (and on
    ``param.grad``, when ``grads``) covers them all.

    With ``tie_grads`` each tensor's ``.grad`` is also a view of ``param.grad``: autograd's backward adds into
    an existing gradient in place, so ``loss.backward()`` fills the flat gradient, which is then cleared with
    ``zero_grad`` (never set to None, which would cut the views). Adam, gradient clipping and zeroing are then one
    operation each instead of one per tensor: for small networks, where each operation's overhead outweighs its
    arithmetic, that is most of an optimiser step."""

    def __init__(self, tensors: list[torch.Tensor], grads: bool, tie_grads: bool = False):
        self.param = nn.Parameter(torch.cat([t.detach().reshape(-1) for t in tensors]), requires_grad=grads)
        if grads:
            self.param.grad = torch.zeros_like(self.param)
        self.offsets: dict[int, int] = {}
        self.tensors = list(tensors)
        offset = 0
        for t in tensors:
            self.offsets[id(t)] = offset
            t.data = self.param.data[offset : offset + t.numel()].view_as(t)
            offset += t.numel()
        if tie_grads:
            for t in tensors:
                t.grad = self.grad(t, tuple(t.shape))

    @property
    def gradient(self) -> torch.Tensor:
        """``param.grad``, the flat gradient, of flat parameters made with ``grads`` (never set to None)."""
        grad = self.param.grad
        assert grad is not None
        return grad

    def grad(self, first: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """The gradient slice of the given shape that starts where ``first`` starts."""
        offset = self.offsets[id(first)]
        return self.gradient[offset : offset + math.prod(shape)].view(shape)

    def value(self, first: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """The parameter slice of the given shape that starts where ``first`` starts (it may span several)."""
        offset = self.offsets[id(first)]
        return self.param.data[offset : offset + math.prod(shape)].view(shape)

    def zero_grad(self) -> None:
        self.gradient.zero_()


def mean_grads(collective, parameters) -> None:
    """Averages the parameters' gradients over the learners of ``collective`` (``drl.core.Collective``), in place: one
    operation over all of them (``torch.cat``, then back), nothing at all for a learner alone."""
    if collective.size == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = collective.mean_(torch.cat([g.reshape(-1) for g in grads]))
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def flat_adam(param: torch.Tensor, lr: float, **options) -> torch.optim.Adam:
    """Adam over one flat parameter, with PyTorch's fused kernel where this PyTorch has one for the parameter's
    device (CPU: 2.4 and later), else the default one."""
    try:
        return torch.optim.Adam([param], lr=lr, fused=True, **options)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam([param], lr=lr, **options)


def flatten_optimizer_state(
    name: str, opt: torch.optim.Optimizer, flat: FlatParams, tensors: dict[str, np.ndarray], meta: dict
) -> None:
    """Rewrites, in place, a checkpoint's state of optimiser ``name`` (``opt``, over ``flat.param``) written when
    each of ``flat``'s tensors was a parameter of its own (one slot per tensor, in the same order) as the state of
    the one flat parameter, so that checkpoints from before the parameters were flattened still resume; the
    implementation options (fused, foreach) stay ``opt``'s. State already flat is left as it is."""
    saved = meta[name]
    indices = [int(i) for i in saved["indices"]]
    if len(indices) <= 1 or len(saved["param_groups"][0]["params"]) <= 1:
        return
    if len(saved["param_groups"][0]["params"]) != len(flat.tensors):
        raise ValueError(
            f"optimizer {name!r} has {len(saved['param_groups'][0]['params'])} parameters, expected {len(flat.tensors)}"
        )
    slots = sorted({k.rsplit(".", 1)[1] for k in tensors if k.startswith(f"{name}.")})
    for slot in slots:
        parts = [tensors.pop(f"{name}.{i}.{slot}") for i in indices]
        if slot == "step":
            tensors[f"{name}.0.{slot}"] = np.asarray(parts[0])
        else:
            tensors[f"{name}.0.{slot}"] = np.concatenate([np.asarray(p).reshape(-1) for p in parts])
    scalars = {}
    for key, value in saved["scalars"].items():
        index, slot = key.split(".", 1)
        if int(index) == indices[0]:
            scalars[f"0.{slot}"] = value
    current = opt.param_groups[0]
    group = {**saved["param_groups"][0], "params": [0], **{k: current[k] for k in ("fused", "foreach") if k in current}}
    meta[name] = {"param_groups": [group], "scalars": scalars, "indices": [0]}


def action_scale(spec: SpaceSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and half-range mapping [-1, 1] to the environment's Box bounds."""
    low, high = (torch.from_numpy(x) for x in spec.action_bounds())
    return (high + low) / 2, (high - low) / 2


def load_weights(net: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Loads published weights; raises ValueError when their names or shapes do not fit the network."""
    state = {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"policy weights do not fit the network: {exc}") from None


def training_state(
    modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]
) -> tuple[dict[str, np.ndarray], dict]:
    """Modules' parameters and optimisers' moments as tensors; optimiser hyperparameters and scalars as meta."""
    tensors: dict[str, np.ndarray] = {}
    for name, module in modules.items():
        for key, value in module.state_dict().items():
            tensors[f"{name}.{key}"] = value.detach().cpu().numpy().copy()
    meta: dict = {}
    for name, opt in optimizers.items():
        sd = opt.state_dict()
        scalars = {}
        for index, slots in sd["state"].items():
            for slot, value in slots.items():
                if torch.is_tensor(value):
                    tensors[f"{name}.{index}.{slot}"] = value.detach().cpu().numpy().copy()
                else:
                    scalars[f"{index}.{slot}"] = value
        meta[name] = {"param_groups": sd["param_groups"], "scalars": scalars, "indices": sorted(sd["state"])}
    return tensors, meta


def load_training_state(
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    tensors: dict[str, np.ndarray],
    meta: dict,
) -> None:
    """Restores what ``training_state`` returned (raises KeyError, RuntimeError, TypeError or ValueError when
    it does not fit; callers turn those into one ValueError)."""
    for name, module in modules.items():
        prefix = name + "."
        module.load_state_dict(
            {
                k[len(prefix) :]: torch.from_numpy(np.array(v))
                for k, v in tensors.items()
                if k.startswith(prefix) and k[len(prefix) :] in module.state_dict()
            }
        )
    for name, opt in optimizers.items():
        saved = meta[name]
        state: dict = {}
        for index in saved["indices"]:
            slots = {}
            for key, value in tensors.items():
                if key.startswith(f"{name}.{index}."):
                    slots[key.rsplit(".", 1)[1]] = torch.from_numpy(np.array(value))
            for key, value in saved["scalars"].items():
                if key.split(".", 1)[0] == str(index):
                    slots[key.split(".", 1)[1]] = value
            state[int(index)] = slots
        opt.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def group_moments(collective: Collective, x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Count, mean and (population) variance over the rows of every learner's ``x``, in float64."""
    x = x.double().flatten(1) if x.dim() > 1 else x.double().reshape(-1, 1)
    sums = torch.cat([torch.tensor([float(len(x))], dtype=torch.float64, device=x.device), x.sum(0), x.square().sum(0)])
    collective.sum_(sums)
    width = x.shape[1]
    n = float(sums[0])
    mean = sums[1 : 1 + width] / max(n, 1.0)
    var = (sums[1 + width :] / max(n, 1.0) - mean.square()).clamp_min(0.0)
    return n, mean, var
