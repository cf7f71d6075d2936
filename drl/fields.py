"""The documented-field helper shared by every configuration dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def opt(default: Any, doc: str, **kw: Any) -> Any:
    """A dataclass field with its documentation attached (``drl-orchestrate --help`` shows it). ``choices`` is a
    tuple of the values it accepts, or a function returning them where they are known only when asked (the
    registered algorithms)."""
    return field(default=default, metadata={"doc": doc, **kw})


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    """The values field ``f`` accepts (``opt(..., choices=...)``), None when any value of its type is."""
    choices = f.metadata.get("choices")
    return tuple(choices()) if callable(choices) else choices


def problems(
    cfg: object,
    prefix: str,
    *,
    sizes: tuple[str, ...] = (),
    positive_int: tuple[str, ...] = (),
    positive: tuple[str, ...] = (),
    nonneg: tuple[str, ...] = (),
    unit: tuple[str, ...] = (),
    fraction: tuple[str, ...] = (),
    at_most: dict[str, float] | None = None,
) -> list[str]:
    """Value checks shared by every configuration dataclass: one message per bad value, flags named with
    ``prefix``.

    Every field declared with ``choices`` (``opt(..., choices=...)``) must hold one of them; the command line
    refuses other values itself, and this catches those that come from a config file or ``DRL_CONFIG``.
    ``sizes``: tuples of positive integers; ``positive``: finite and > 0; ``nonneg``: finite and >= 0;
    ``unit``: in (0, 1]; ``fraction``: in [0, 1]; ``at_most``: upper bounds.
    """
    import math

    found = []

    def flag(name: str) -> str:
        return prefix + name.replace("_", "-")

    for f in dataclasses.fields(cfg):  # type: ignore[arg-type]
        choices, value = choices_of(f), getattr(cfg, f.name)
        if choices is not None and value not in choices:
            found.append(f"{flag(f.name)} must be one of {', '.join(choices)}, got {value!r}")

    for name in sizes:
        value = getattr(cfg, name)
        if not value or any(h < 1 for h in value):
            found.append(f"{flag(name)} must be positive sizes, got {value}")
    for name in positive_int:
        if getattr(cfg, name) < 1:
            found.append(f"{flag(name)} must be a positive integer, got {getattr(cfg, name)}")
    for name in positive:
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value > 0):
            found.append(f"{flag(name)} must be a positive number, got {value}")
    for name in nonneg:
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value >= 0):
            found.append(f"{flag(name)} must be zero or more, got {value}")
    for name in unit:
        value = getattr(cfg, name)
        if not (0 < value <= 1):
            found.append(f"{flag(name)} must lie in (0, 1], got {value}")
    for name in fraction:
        value = getattr(cfg, name)
        if not (0 <= value <= 1):
            found.append(f"{flag(name)} must lie in [0, 1], got {value}")
    for name, bound in (at_most or {}).items():
        if getattr(cfg, name) > bound:
            found.append(f"{flag(name)} must be at most {bound}, got {getattr(cfg, name)}")
    return found
