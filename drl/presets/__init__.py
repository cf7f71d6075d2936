"""Presets: named functions returning an ExperimentConfig with defaults per environment family."""

from __future__ import annotations

from typing import Callable

from drl.config import ConfigError, ExperimentConfig, from_dict, import_named_plugins, merge
from drl.errors import UserError
from drl.presets.appo import appo, appo_atari
from drl.presets.atari import dqn_atari, ppo_atari
from drl.presets.dqn import dqn
from drl.presets.lunar import sac_lunar
from drl.presets.ppo import ppo
from drl.presets.sac import sac
from drl.presets.td3 import td3

PRESETS: dict[str, Callable[[str | None], ExperimentConfig]] = {
    "sac": sac,
    "td3": td3,
    "ppo": ppo,
    "dqn": dqn,
    "sac-lunar": sac_lunar,
    "dqn-atari": dqn_atari,
    "ppo-atari": ppo_atari,
    "appo": appo,
    "appo-atari": appo_atari,
}


def get_preset(name: str, env: str | None = None) -> ExperimentConfig:
    try:
        factory = PRESETS[name]
    except KeyError:
        raise UserError(f"unknown preset {name!r}; accepted: {', '.join(sorted(PRESETS))}") from None
    return factory(env)


def resolve(data: dict, where: str = "configuration") -> ExperimentConfig:
    """A configuration from a JSON object that may hold only some values (a helm chart's ConfigMap holds the
    preset, the env and the chosen overrides; a local run's holds every value): the named preset for the named
    env, overridden by the object's values, validated."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a JSON object")
    for key in ("preset", "env"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{where}: {key} expects str, got {data[key]!r}")
    import_named_plugins(data, where)
    base = get_preset(data.get("preset") or "sac", data.get("env"))
    return from_dict(ExperimentConfig, merge(base.to_dict(), data, where)).validate()
