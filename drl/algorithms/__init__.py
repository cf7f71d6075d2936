"""Algorithm registry: each algorithm folder holds config, networks, learner (update math), actor and builder.

Nothing here touches processes, Redis or files; services compose these pieces through each algorithm's builder
(``drl.algorithms.base.Algorithm``). The built-in algorithms register when this package is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

from drl.algorithms.base import (ALGORITHMS, Actor, ActorBase, Algorithm, FieldSpecs, Folder, Learner,
                                 ReplayLearner, RolloutLearner, get, register)
from drl.envs import SpaceSpec

__all__ = ["ALGORITHMS", "Actor", "ActorBase", "Algorithm", "FieldSpecs", "Folder", "Learner", "ReplayLearner",
           "RolloutLearner", "check_spaces", "get", "make_actor", "make_learner", "register", "wire_extras"]

BUILT_IN = ("sac", "td3", "ppo", "dqn")


def lazy_exports(package: str, names: dict[str, str]):
    """A module ``__getattr__`` that imports ``names[attr]`` (a submodule of ``package``) on first access."""

    def __getattr__(attr: str):
        if attr in names:
            return getattr(importlib.import_module(f"{package}.{names[attr]}"), attr)
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")

    return __getattr__


def check_spaces(algorithm: str, spec: SpaceSpec, env_id: str) -> None:
    """Raises UserError when the algorithm cannot act in the environment's action space."""
    get(algorithm).check_spaces(spec, env_id)


def wire_extras(cfg: Any) -> FieldSpecs:
    """The optional wire fields of a run (``cfg`` an ExperimentConfig), for ``codec.expected_layout``."""
    return get(cfg.algorithm).wire_fields(cfg)


def make_learner(algorithm: str, spec: SpaceSpec, cfg: Any, seed: int) -> Learner:
    """The learner of ``algorithm`` with its hyperparameter block (``cfg.<algorithm>``)."""
    return get(algorithm).make_learner(spec, cfg, seed)


def make_actor(algorithm: str, spec: SpaceSpec, cfg: Any, seed: int) -> Actor:
    return get(algorithm).make_actor(spec, cfg, seed)


for _name in BUILT_IN:
    importlib.import_module(f"drl.algorithms.{_name}.builder")
