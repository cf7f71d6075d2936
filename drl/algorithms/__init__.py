"""Algorithm registry: each algorithm folder holds config, networks, learner (update math), actor and builder.

Nothing here touches processes, Redis or files; services compose these pieces through each algorithm's builder
(``drl.algorithms.base.Algorithm``). The built-in algorithms register when this package is imported; importing
it reads no environment and imports nothing from outside drl. The plugins, each of which calls
``register`` when imported, come from three places: the run's ``--plugins`` (kept in its configuration and imported
whenever a configuration that names them is read, so the command line, every service, ``evaluate``, a resumed run
and every pod import the same ones), the modules named in ``DRL_PLUGINS`` (comma-separated) and those of the
``drl.algorithms`` entry-point group; the last two are loaded by the entry points (``load_plugins_or_exit``: the
command line, each service, the in-cluster scaler) before they read a configuration.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from drl.algorithms.base import (
    ALGORITHMS,
    Actor,
    ActorBase,
    Algorithm,
    FieldSpecs,
    Folder,
    Learner,
    ReplayLearner,
    RolloutLearner,
    get,
    register,
)
from drl.envs import SpaceSpec
from drl.errors import EXIT_USAGE, UserError
from drl.fields import opt

if TYPE_CHECKING:
    from drl.config import ExperimentConfig

__all__ = [
    "ALGORITHMS",
    "Actor",
    "ActorBase",
    "Algorithm",
    "FieldSpecs",
    "Folder",
    "Learner",
    "ReplayLearner",
    "RolloutLearner",
    "check_spaces",
    "get",
    "import_plugins",
    "load_plugins",
    "load_plugins_or_exit",
    "make_actor",
    "make_learner",
    "opt",
    "register",
    "split_modules",
    "wire_extras",
]

BUILT_IN = ("sac", "td3", "ppo", "dqn", "appo")
PLUGINS_VARIABLE = "DRL_PLUGINS"
ENTRY_POINT_GROUP = "drl.algorithms"


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


def wire_extras(cfg: ExperimentConfig) -> FieldSpecs:
    """The optional wire fields of a run (``cfg`` an ExperimentConfig), for ``codec.expected_layout``."""
    return get(cfg.algorithm).wire_fields(cfg)


def make_learner(algorithm: str, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Learner:
    """The learner of ``algorithm`` with its hyperparameter block (``cfg.<algorithm>``)."""
    return get(algorithm).make_learner(spec, cfg, seed)


def make_actor(algorithm: str, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
    return get(algorithm).make_actor(spec, cfg, seed)


def split_modules(text: str) -> list[str]:
    """The module names of a comma-separated list (``--plugins``, ``DRL_PLUGINS``), in order."""
    return [name.strip() for name in text.split(",") if name.strip()]


def plugin_modules(environ: dict[str, str] | None = None) -> list[str]:
    """The plugin modules named in ``DRL_PLUGINS``, in order."""
    return split_modules((os.environ if environ is None else environ).get(PLUGINS_VARIABLE, ""))


def import_plugins(modules: list[str], named_by: str) -> None:
    """Imports ``modules`` (each registers what it brings when imported; one already imported is not imported
    again); UserError naming the one that cannot be imported and where it was named (``named_by``)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise UserError(
                f"{named_by} names {name!r}, which cannot be imported: {type(exc).__name__}: {exc} (a plugin "
                "must be importable where every process of the run starts: PYTHONPATH, an installed package or "
                "the image)"
            ) from exc


def load_plugins(modules: list[str] | None = None) -> None:
    """Imports the plugin modules (``DRL_PLUGINS`` when None) and the ``drl.algorithms`` entry points; raises
    UserError naming the one that cannot be imported. A configuration's own ``plugins`` are imported when it
    is read (``drl.config``)."""
    import_plugins(plugin_modules() if modules is None else modules, PLUGINS_VARIABLE)
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as exc:
            raise UserError(
                f"the {ENTRY_POINT_GROUP} entry point {point.name!r} ({point.value}) cannot be "
                f"loaded: {type(exc).__name__}: {exc}"
            ) from exc


def load_plugins_or_exit() -> None:
    """``load_plugins`` for an entry point, before it reads a configuration: a plugin that cannot be loaded ends
    the process with one line on stderr and exit code 2, the same for the command line and every service."""
    try:
        load_plugins()
    except UserError as exc:
        print(f"drl: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _register_built_in() -> None:
    for name in BUILT_IN:
        importlib.import_module(f"drl.algorithms.{name}.builder")


_register_built_in()
