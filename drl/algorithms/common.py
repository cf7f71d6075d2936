"""Pieces the algorithms share: MLPs, action scaling, loading published weights, and checkpoint state of
modules and optimisers as (tensors, JSON-able meta)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from drl.envs import SpaceSpec


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def action_scale(spec: SpaceSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and half-range mapping [-1, 1] to the environment's Box bounds."""
    low = torch.tensor(spec.act_low, dtype=torch.float32).reshape(spec.act_shape)
    high = torch.tensor(spec.act_high, dtype=torch.float32).reshape(spec.act_shape)
    return (high + low) / 2, (high - low) / 2


def load_weights(net: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Loads published weights; raises ValueError when their names or shapes do not fit the network."""
    state = {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"policy weights do not fit the network: {exc}") from None


def training_state(modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]
                   ) -> tuple[dict[str, np.ndarray], dict]:
    """Modules' parameters and optimisers' moments as tensors; optimiser hyperparameters and scalars as meta."""
    tensors: dict[str, np.ndarray] = {}
    for name, module in modules.items():
        for key, value in module.state_dict().items():
            tensors[f"{name}.{key}"] = value.detach().numpy().copy()
    meta: dict = {}
    for name, opt in optimizers.items():
        sd = opt.state_dict()
        scalars = {}
        for index, slots in sd["state"].items():
            for slot, value in slots.items():
                if torch.is_tensor(value):
                    tensors[f"{name}.{index}.{slot}"] = value.detach().numpy().copy()
                else:
                    scalars[f"{index}.{slot}"] = value
        meta[name] = {"param_groups": sd["param_groups"], "scalars": scalars, "indices": sorted(sd["state"])}
    return tensors, meta


def load_training_state(modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                        tensors: dict[str, np.ndarray], meta: dict) -> None:
    """Restores what ``training_state`` returned (raises KeyError, RuntimeError, TypeError or ValueError when
    it does not fit; callers turn those into one ValueError)."""
    for name, module in modules.items():
        prefix = name + "."
        module.load_state_dict({k[len(prefix):]: torch.from_numpy(np.array(v)) for k, v in tensors.items()
                                if k.startswith(prefix) and k[len(prefix):] in module.state_dict()})
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
