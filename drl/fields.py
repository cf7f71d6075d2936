"""The documented-field helper shared by every configuration dataclass."""

from dataclasses import field
from typing import Any


def opt(default: Any, doc: str, **kw: Any) -> Any:
    """A dataclass field with its documentation attached (``drl-orchestrate --help`` shows it)."""
    return field(default=default, metadata={"doc": doc, **kw})
