"""Presets: named functions returning an ExperimentConfig with defaults per environment family."""

from __future__ import annotations

from typing import Callable

from drl.config import ExperimentConfig
from drl.errors import UserError
from drl.presets.dqn import dqn
from drl.presets.ppo import ppo
from drl.presets.sac import sac
from drl.presets.td3 import td3

PRESETS: dict[str, Callable[[str | None], ExperimentConfig]] = {"sac": sac, "td3": td3, "ppo": ppo, "dqn": dqn}


def get_preset(name: str, env: str | None = None) -> ExperimentConfig:
    try:
        factory = PRESETS[name]
    except KeyError:
        raise UserError(f"unknown preset {name!r}; accepted: {', '.join(sorted(PRESETS))}") from None
    return factory(env)
