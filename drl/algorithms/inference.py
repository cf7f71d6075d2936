"""Acting without torch: the published weights run as numpy matrix products in rollout workers and the evaluator.

An acting policy only evaluates small MLPs on a few observations at a time. Numpy does that in microseconds,
where a torch call costs tens of microseconds of dispatch, and a process that does not import torch starts about
a second sooner (torch's import is most of a service's start-up on a small machine). The names and shapes are
those of the learners' ``nn.Module`` state dicts (``nn.Sequential`` numbers its layers, activations included),
so the same safetensors file serves both; the unit tests hold each actor to its learner's torch forward pass.

Image policies are the exception: their convolutions run in torch (``TorchNet``).
"""

from __future__ import annotations

import numpy as np


def mlp_shapes(prefix: str, sizes: list[int]) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of ``drl.algorithms.common.mlp(sizes)`` under ``prefix``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(len(sizes) - 1):
        shapes[f"{prefix}{2 * i}.weight"] = (sizes[i + 1], sizes[i])
        shapes[f"{prefix}{2 * i}.bias"] = (sizes[i + 1],)
    return shapes


def checked(weights: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The weights as C-contiguous float arrays; raises ValueError when names or shapes differ from ``shapes``."""
    missing = sorted(set(shapes) - set(weights))
    unexpected = sorted(set(weights) - set(shapes))
    if missing or unexpected:
        raise ValueError(f"policy weights do not fit the network: missing {missing}, unexpected {unexpected}")
    out = {}
    for name, shape in shapes.items():
        value = np.asarray(weights[name])
        if value.shape != shape:
            raise ValueError(f"policy weights do not fit the network: {name} has shape {value.shape}, expected {shape}")
        dtype = np.float64 if value.dtype == np.float64 else np.float32
        out[name] = np.ascontiguousarray(value, dtype=dtype)
    return out


def zeros(shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Placeholder weights until the first policy version is loaded."""
    return {name: np.zeros(shape, dtype=np.float32) for name, shape in shapes.items()}


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def mlp(
    weights: dict[str, np.ndarray],
    prefix: str,
    layers: int,
    x: np.ndarray,
    activation=relu,
    activate_last: bool = False,
) -> np.ndarray:
    """Forward pass of ``layers`` linear layers named like ``mlp_shapes``, ``activation`` between them."""
    for i in range(layers):
        x = x @ weights[f"{prefix}{2 * i}.weight"].T + weights[f"{prefix}{2 * i}.bias"]
        if i < layers - 1 or activate_last:
            x = activation(x)
    return x


def flat(obs: np.ndarray) -> np.ndarray:
    obs = np.asarray(obs, dtype=np.float32)
    return obs.reshape(len(obs), -1)


class TorchNet:
    """A torch module run as a numpy function for acting (image policies): the same class the learner trains,
    loaded from the published weights, evaluated without autograd (inference mode). How many threads torch uses
    is the process's business, not the policy's.

    Image policies act through torch rather than numpy: the learner's module is then the only implementation of
    each encoder (IMPALA's pooling and residual blocks included), and at Atari's sizes torch's convolutions are as
    fast as a numpy one for a single observation and faster for several (bench/README.md, "Measurements behind
    the code"; on MinAtar's tiny images numpy would win at small batches).
    """

    def __init__(self, module):
        import torch

        self.torch = torch
        self.module = module.requires_grad_(False).eval()
        self.shapes = {name: tuple(value.shape) for name, value in module.state_dict().items()}
        with torch.no_grad():
            for value in module.state_dict().values():
                value.zero_()

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit the module."""
        checked(weights, self.shapes)
        from drl.algorithms.common import load_weights

        load_weights(self.module, weights)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        with self.torch.inference_mode():
            return self.module(self.torch.from_numpy(np.ascontiguousarray(obs))).numpy()
