"""Exported acting networks (``drl-orchestrate export``, ``orchestrator.export``) act as the run's own actor:
every built-in algorithm, MLP and image encoders, discrete and continuous actions, PPO's observation statistics
folded in. The files are read back by onnxruntime and by ``torch.jit.load`` here, apart from the check the
exporter itself runs, and compared with the numpy actor's deterministic action on random observations."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from drl.algorithms import make_actor, make_learner
from drl.algorithms.exporting import TOLERANCE, exported, sample_observations
from drl.config import ExperimentConfig, replace
from drl.envs import SpaceSpec
from drl.errors import UserError

PENDULUM = SpaceSpec((3,), "<f4", (1,), "<f4", 0, (-2.0,), (2.0,))
BOX_2D = SpaceSpec((5,), "<f4", (2,), "<f4", 0, (-1.0, 0.0), (1.0, 3.0))
CARTPOLE = SpaceSpec((4,), "<f4", (), "<i8", 2)
MINATAR = SpaceSpec((10, 10, 4), "|u1", (), "<i8", 3, frame_stack=1)
ATARI = SpaceSpec((4, 84, 84), "|u1", (), "<i8", 6, frame_stack=4)
PIXELS_BOX = SpaceSpec((10, 10, 3), "|u1", (2,), "<f4", 0, (-1.0, -1.0), (1.0, 1.0), frame_stack=1)

CASES = [
    ("sac", PENDULUM, {}),
    ("sac", BOX_2D, {"sac.hidden": (32, 16)}),
    ("td3", BOX_2D, {}),
    ("dqn", CARTPOLE, {}),
    ("dqn", MINATAR, {}),
    ("dqn", ATARI, {"dqn.encoder": "nature"}),
    ("ppo", CARTPOLE, {}),
    ("ppo", BOX_2D, {}),
    ("ppo", BOX_2D, {"ppo.normalize_obs": False}),
    ("ppo", MINATAR, {}),
    ("ppo", PIXELS_BOX, {}),
    ("appo", PENDULUM, {}),
    ("appo", MINATAR, {"appo.encoder": "impala"}),
]


def trained_like(algorithm: str, spec: SpaceSpec, changes: dict, seed: int = 0):
    """A learner's published weights, moved off their initial values (and, for PPO's vector policies, with
    observation statistics far from 0 and 1, so that folding them in is tested), and the actor holding them."""
    cfg = replace(ExperimentConfig(), algorithm=algorithm, **changes)
    weights = make_learner(algorithm, spec, cfg, seed).policy_weights()
    rng = np.random.default_rng(seed)
    for name, value in weights.items():
        if name == "norm.mean":
            weights[name] = rng.normal(0.0, 2.0, value.shape).astype(value.dtype)
        elif name == "norm.var":
            weights[name] = rng.uniform(0.2, 5.0, value.shape).astype(value.dtype)
        elif value.dtype.kind == "f" and value.ndim:
            weights[name] = (value + rng.normal(0.0, 0.05, value.shape)).astype(value.dtype)
    actor = make_actor(algorithm, spec, cfg, seed)
    actor.load(weights)
    return cfg, weights, actor


def assert_acts_like(actions: np.ndarray, actor, observations: np.ndarray, spec: SpaceSpec) -> None:
    want = actor.act(observations, deterministic=True)
    assert actions.shape == want.shape
    if spec.discrete_actions:
        assert actions.dtype == np.int64
        np.testing.assert_array_equal(actions, want)
    else:
        np.testing.assert_allclose(actions, want, rtol=0, atol=TOLERANCE)
        low, high = spec.action_bounds()
        assert (actions >= low - 1e-6).all() and (actions <= high + 1e-6).all()


@pytest.mark.parametrize(
    "algorithm, spec, changes",
    CASES,
    ids=[f"{a}-{s.obs_shape}-{s.act_shape or s.discrete_actions}" for a, s, _ in CASES],
)
def test_onnx_and_torchscript_files_act_as_the_actor(algorithm, spec, changes):
    cfg, weights, actor = trained_like(algorithm, spec, changes)
    observations = sample_observations(spec, 257, np.random.default_rng(7))

    data, difference = exported(spec, cfg, weights, actor, "onnx")
    assert difference <= TOLERANCE
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["obs"] and [o.name for o in model.graph.output] == ["action"]
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert_acts_like(session.run(["action"], {"obs": observations})[0], actor, observations, spec)
    assert_acts_like(session.run(["action"], {"obs": observations[:1]})[0], actor, observations[:1], spec)

    data, difference = exported(spec, cfg, weights, actor, "torchscript")
    assert difference <= TOLERANCE
    module = torch.jit.load(io.BytesIO(data))
    with torch.no_grad():
        actions = module(torch.from_numpy(observations)).numpy()
    assert_acts_like(actions, actor, observations, spec)


def test_an_export_that_acts_otherwise_than_the_actor_is_refused():
    """The exporter's own check fails when the file and the actor disagree (here: the actor holds other
    weights), so a wrong file is never written."""
    cfg, weights, _ = trained_like("sac", PENDULUM, {})
    _, _, other = trained_like("sac", PENDULUM, {}, seed=1)
    with pytest.raises(UserError, match="differ from the actor's"):
        exported(PENDULUM, cfg, weights, other, "torchscript")
    cfg, weights, _ = trained_like("dqn", CARTPOLE, {})
    _, _, other = trained_like("dqn", CARTPOLE, {}, seed=1)
    with pytest.raises(UserError, match="another action than the actor"):
        exported(CARTPOLE, cfg, weights, other, "onnx")
