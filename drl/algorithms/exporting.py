"""The acting networks of the built-in algorithms as plain torch modules, for export (``drl-orchestrate export``).

Each module maps a batch of observations, as the environment gives them (its dtype, its shape), to the
deterministic action the evaluator takes, in the environment's units: the argmax of logits or Q-values for
discrete actions, the squashed mean rescaled to the bounds (SAC, TD3) or the Gaussian mean clipped to them (PPO,
APPO) for continuous ones. Everything the action needs is folded in: PPO's observation statistics (mean,
variance, clip), an image encoder's scaling of uint8 pixels, the action bounds. So an exported file needs no drl
code beside it, only the observation the environment returns.

The modules wrap the learners' own networks (``<alg>/networks.py``) loaded from the published weights, so
that they compute what the numpy actors compute (``drl.algorithms.inference``). ``exported`` turns one into the
bytes of an ONNX file (torch's ``torch.export``-based exporter; one input ``obs``, one output ``action``, a
variable batch dimension) or a TorchScript one (traced), and checks the file, run by onnxruntime or
``torch.jit.load``, against the actor's ``act(obs, deterministic=True)`` on random observations first: a file
that acts otherwise is refused, never returned.
"""

from __future__ import annotations

import io
import logging
import math
import sys
import warnings
from typing import cast

import numpy as np
import torch
from torch import nn

from drl.algorithms.common import load_weights
from drl.envs import SpaceSpec
from drl.errors import UserError

FORMATS = ("onnx", "torchscript")
TOLERANCE = 1e-5
"""The largest difference allowed between an exported continuous action and the run's actor's (relative to
the action's scale, at least 1); discrete actions must be equal."""
CHECK_BATCH = 64


class Flat(nn.Module):
    """Vector observations as the MLPs read them: float32, one row per observation."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(obs.shape[0], -1).to(torch.float32)


class Greedy(nn.Module):
    """The index of the largest output (logits or Q-values) as int64."""

    def __init__(self, net: nn.Module, inputs: nn.Module):
        super().__init__()
        self.inputs, self.net = inputs, net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self.net(self.inputs(obs)), dim=1)


class Squashed(nn.Module):
    """A tanh-squashed output in [-1, 1] rescaled to the action bounds (SAC's mean, TD3's action)."""

    offset: torch.Tensor
    scale: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, net: nn.Module, spec: SpaceSpec, first_of_tuple: bool, squash: bool):
        super().__init__()
        self.net, self.first, self.squash = net, first_of_tuple, squash
        low, high = spec.action_bounds()
        self.act_shape = tuple(spec.act_shape)
        self.register_buffer("offset", torch.from_numpy((high + low) / 2).reshape(-1))
        self.register_buffer("scale", torch.from_numpy((high - low) / 2).reshape(-1))
        self.register_buffer("low", torch.from_numpy(low).reshape(-1))
        self.register_buffer("high", torch.from_numpy(high).reshape(-1))
        self.flat = Flat()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(self.flat(obs))
        if self.first:
            out = out[0]
        if self.squash:
            out = torch.tanh(out)
        action = torch.clamp(out * self.scale + self.offset, self.low, self.high)
        return action.reshape(obs.shape[0], *self.act_shape)


class Clipped(nn.Module):
    """A Gaussian policy's mean clipped to the action bounds (PPO, APPO)."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, net: nn.Module, inputs: nn.Module, spec: SpaceSpec):
        super().__init__()
        self.inputs, self.net = inputs, net
        low, high = spec.action_bounds()
        self.act_shape = tuple(spec.act_shape)
        self.register_buffer("low", torch.from_numpy(low).reshape(-1))
        self.register_buffer("high", torch.from_numpy(high).reshape(-1))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        action = torch.clamp(self.net(self.inputs(obs)), self.low, self.high)
        return action.reshape(obs.shape[0], *self.act_shape)


class Normalised(nn.Module):
    """Flat float32 observations standardised by a PPO policy's statistics (its ``norm``, an identity when
    ``--ppo.normalize-obs`` was off)."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.flat, self.norm = Flat(), norm

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.norm(self.flat(obs))


class Images(nn.Module):
    """Image observations pass as they are: the encoder scales uint8 pixels itself."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs


def loaded(net: nn.Module, weights: dict[str, np.ndarray]) -> nn.Module:
    """``net`` with the published weights, in evaluation mode, without gradients."""
    load_weights(net, weights)
    return net.requires_grad_(False).eval()


def sac(spec: SpaceSpec, hidden: tuple[int, ...], weights: dict[str, np.ndarray]) -> nn.Module:
    from drl.algorithms.sac.networks import Actor

    actor = loaded(Actor(math.prod(spec.obs_shape), math.prod(spec.act_shape), tuple(hidden)), weights)
    return Squashed(actor, spec, first_of_tuple=True, squash=True).eval()


def td3(spec: SpaceSpec, hidden: tuple[int, ...], weights: dict[str, np.ndarray]) -> nn.Module:
    from drl.algorithms.td3.networks import Actor

    actor = loaded(Actor(math.prod(spec.obs_shape), math.prod(spec.act_shape), tuple(hidden)), weights)
    return Squashed(actor, spec, first_of_tuple=False, squash=False).eval()


def dqn(spec: SpaceSpec, cfg, weights: dict[str, np.ndarray]) -> nn.Module:
    from drl.algorithms.dqn.networks import q_network

    net = loaded(q_network(spec, cfg), weights)
    return Greedy(net, Images() if spec.image else Flat()).eval()


def ppo(spec: SpaceSpec, cfg, weights: dict[str, np.ndarray]) -> nn.Module:
    """PPO's and APPO's policy: the image policy reads pixels itself; the vector policy's observation statistics
    are folded in (``Normalised``)."""
    from drl.algorithms.ppo.networks import networks

    policy = loaded(networks(spec, cfg)[0], weights)
    inputs: nn.Module = Images() if spec.image else Normalised(cast(nn.Module, policy.norm))
    if spec.discrete_actions:
        return Greedy(policy, inputs).eval()
    return Clipped(policy, inputs, spec).eval()


def exported(spec, cfg, weights: dict[str, np.ndarray], actor, fmt: str) -> tuple[bytes, float]:
    """The acting network of ``cfg``'s algorithm holding ``weights`` as ``fmt`` bytes, and the largest difference
    between its actions and ``actor``'s (holding the same weights) on random observations (``check``)."""
    from drl.algorithms import get

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    network = get(cfg.algorithm).acting_network(spec, cfg, weights)
    example = sample_observations(spec, 2, np.random.default_rng(0))
    data = to_onnx(network, example) if fmt == "onnx" else to_torchscript(network, example)
    observations = sample_observations(spec, CHECK_BATCH, np.random.default_rng(1))
    run_file = onnx_runner(data) if fmt == "onnx" else torchscript_runner(data)
    return data, check(run_file, actor, observations, bool(spec.discrete_actions))


def signature(spec: SpaceSpec) -> dict:
    """What an exported file takes and gives, as ``export`` prints it and the tracked artifact's JSON holds it."""
    shape = ["batch", *spec.obs_shape]
    return {"input": {"name": "obs", "shape": shape, "dtype": np.dtype(spec.obs_dtype).name}, "output": "action"}


def sample_observations(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random observations of ``spec``'s shape and dtype: every pixel value for images, a standard normal
    spread (scaled up, so that saturating layers are reached too) for vectors."""
    dtype = np.dtype(spec.obs_dtype)
    shape = (n, *spec.obs_shape)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, 0), min(info.max, 255) + 1, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 3.0).astype(dtype)


def check(run_file, actor, observations: np.ndarray, discrete: bool) -> float:
    """The largest difference between the file's actions and ``actor.act(obs, deterministic=True)``; UserError
    when any discrete action differs or a continuous one differs by more than ``TOLERANCE``."""
    want = np.asarray(actor.act(observations, deterministic=True))
    got = np.asarray(run_file(observations))
    if got.shape != want.shape:
        raise UserError(f"the exported network's actions have shape {got.shape}, the actor's {want.shape}")
    if discrete:
        wrong = int((got != want).sum())
        if wrong:
            raise UserError(f"the exported network chose another action than the actor for {wrong} observations")
        return 0.0
    difference = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    if difference > TOLERANCE * scale:
        raise UserError(f"the exported network's actions differ from the actor's by up to {difference:g}")
    return difference


def to_onnx(network, example: np.ndarray) -> bytes:
    """The network as ONNX bytes through torch's exporter (``torch.export`` based; it needs ``onnxscript``),
    with a variable batch dimension."""
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        raise UserError(
            "--format onnx needs the onnx exporter: pip install 'drl[export]' (onnx and onnxscript)"
        ) from None
    batch = torch.export.Dim("batch", min=1)
    with _quiet():
        program = torch.onnx.export(
            network,
            (torch.from_numpy(example),),
            input_names=["obs"],
            output_names=["action"],
            dynamic_shapes=({0: batch},),
            dynamo=True,
            verbose=False,
        )
    if program is None:
        raise UserError("torch's ONNX exporter returned no model")
    return program.model_proto.SerializeToString()


def to_torchscript(network, example: np.ndarray) -> bytes:
    """The network traced to TorchScript (``torch.jit``), as bytes ``torch.jit.load`` reads."""
    buffer = io.BytesIO()
    with _quiet(), torch.no_grad():
        traced = torch.jit.trace(network, (torch.from_numpy(example),), check_trace=False)
        torch.jit.save(traced, buffer)
    return buffer.getvalue()


def onnx_runner(data: bytes):
    try:
        import onnxruntime
    except ImportError:
        return lambda obs: _unchecked("onnxruntime")
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    return lambda obs: session.run(["action"], {"obs": obs})[0]


def torchscript_runner(data: bytes):
    with _quiet():
        module = torch.jit.load(io.BytesIO(data))

    def run(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(obs)).numpy()

    return run


def _unchecked(package: str):
    raise UserError(f"the exported file cannot be checked without {package}: pip install 'drl[export]'")


class _quiet:
    """Keeps the exporters' progress lines and deprecation notes (torch.jit's) off the command's output."""

    def __enter__(self):
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.simplefilter("ignore")
        self.level = logging.getLogger("torch").level
        logging.getLogger("torch").setLevel(logging.ERROR)
        self.stdout = sys.stdout
        sys.stdout = io.StringIO()
        return self

    def __exit__(self, *exc):
        sys.stdout = self.stdout
        logging.getLogger("torch").setLevel(self.level)
        self.warnings.__exit__(*exc)
        return False
