"""``--compile``: which of a learner's modules torch.compile takes, when ``auto`` declines, and that a compiled
learner keeps its parameter names and its arithmetic (the trainer's real runs with it are
tests/integration/test_compiled_trainer.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from drl.algorithms.appo.config import APPOConfig
from drl.algorithms.appo.learner import APPOLearner
from drl.algorithms.convnets import ImageEncoder, compile_encoders, compiler
from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.dqn.learner import DQNLearner
from drl.config import ConfigError, ExperimentConfig
from drl.envs import space_spec
from drl.presets import get_preset

MINATAR = "MinAtar/Breakout-v1"


def encoders(learner: object) -> list[ImageEncoder]:
    return [
        m
        for v in vars(learner).values()
        if isinstance(v, torch.nn.Module)
        for m in v.modules()
        if isinstance(m, ImageEncoder)
    ]


def compiled(module: torch.nn.Module) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None


def appo_learner(seed: int = 0) -> APPOLearner:
    return APPOLearner(space_spec(MINATAR), APPOConfig(encoder="minatar", batch_size=64, minibatches=2), seed)


def test_off_compiles_nothing():
    learner = appo_learner()
    assert compile_encoders(learner, "off") == "off"
    assert encoders(learner) and not any(compiled(e) for e in encoders(learner))


def test_on_compiles_every_image_encoder_of_the_learner_and_its_targets():
    learner = DQNLearner(space_spec(MINATAR), DQNConfig(encoder="minatar"), 0)
    names = sorted(k for m in vars(learner).values() if isinstance(m, torch.nn.Module) for k in m.state_dict())
    found = encoders(learner)
    assert len(found) >= 2, "the online and the target network each have an encoder"
    assert compile_encoders(learner, "on") == f"{len(found)} image encoder(s) compiled for cpu"
    assert all(compiled(e) for e in found)
    after = sorted(k for m in vars(learner).values() if isinstance(m, torch.nn.Module) for k in m.state_dict())
    assert after == names, "compiling in place keeps every parameter's name (checkpoints load either way)"


def test_a_learner_without_images_has_nothing_to_compile():
    from drl.algorithms.sac.config import SACConfig
    from drl.algorithms.sac.learner import SACLearner

    learner = SACLearner(space_spec("Pendulum-v1"), SACConfig(), 0)
    assert compile_encoders(learner, "on") == "nothing to compile (no image encoder)"


def test_auto_trains_eagerly_without_a_compiler_on_the_path(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    assert compiler("cpu") is None and compiler("cuda") is None
    learner = appo_learner()
    assert compile_encoders(learner, "auto") == "eager (--compile auto: no C/C++ compiler for cpu on the PATH)"
    assert not any(compiled(e) for e in encoders(learner))


def test_the_compiler_variable_is_taken_first(monkeypatch, tmp_path):
    tool = tmp_path / "my-cxx"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CXX", "my-cxx -O2")
    assert compiler("cpu") == str(tool)
    monkeypatch.setenv("CXX", "missing-cxx")
    assert compiler("cpu") is None


@pytest.mark.skipif(compiler("cpu") is None, reason="torch.compile's CPU code generation needs a C++ compiler")
def test_a_compiled_learner_trains_as_the_eager_one():
    eager, fast = appo_learner(seed=3), appo_learner(seed=3)
    assert compile_encoders(fast, "on").endswith("compiled for cpu")
    rng = np.random.default_rng(0)
    spec = space_spec(MINATAR)
    segments = [
        {
            "obs": rng.integers(0, 2, (16, *spec.obs_shape)).astype(spec.obs_dtype),
            "next_obs": rng.integers(0, 2, (16, *spec.obs_shape)).astype(spec.obs_dtype),
            "action": rng.integers(0, 3, 16).astype(np.int64),
            "reward": rng.standard_normal(16).astype(np.float32),
            "terminated": np.zeros(16, np.float32),
            "truncated": np.zeros(16, np.float32),
            "behaviour_logp": np.full(16, -1.1, np.float32),
        }
        for _ in range(4)
    ]
    for _ in range(2):
        a, b = eager.train(segments), fast.train(segments)
        assert a["value_loss"] == pytest.approx(b["value_loss"], rel=1e-3)
    for (name, p), (_, q) in zip(eager.policy.named_parameters(), fast.policy.named_parameters()):
        assert torch.allclose(p, q, atol=1e-4), name


def test_compiling_is_asked_for_and_the_mode_is_checked():
    assert ExperimentConfig().compile == "off"
    for preset in ("ppo", "appo", "dqn"):
        assert get_preset(preset, "ALE/Pong-v5").compile == "off"
    with pytest.raises(ConfigError, match="--compile must be one of off, auto, on"):
        dataclasses.replace(ExperimentConfig(), compile="sometimes").validate()
