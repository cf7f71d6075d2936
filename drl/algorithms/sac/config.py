"""SAC hyperparameters."""

from __future__ import annotations

import math
from dataclasses import dataclass

from drl.fields import opt


@dataclass(frozen=True)
class SACConfig:
    """Soft actor-critic hyperparameters (twin critics, learned temperature)."""

    hidden: tuple[int, ...] = opt((256, 256), "Hidden layer sizes of actor and critics.")
    lr: float = opt(3e-4, "Adam learning rate of actor, critics and temperature.")
    gamma: float = opt(0.99, "Discount factor.")
    tau: float = opt(0.005, "Polyak coefficient of the target critics.")
    batch_size: int = opt(256, "Transitions per gradient update.")
    init_alpha: float = opt(1.0, "Initial entropy temperature.")
    target_entropy: float | None = opt(None, "Entropy target; default is -(action dimensions).")

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        found = []
        if not self.hidden or any(h < 1 for h in self.hidden):
            found.append(f"{prefix}hidden must be positive sizes, got {self.hidden}")
        if self.batch_size < 1:
            found.append(f"{prefix}batch-size must be positive, got {self.batch_size}")
        for name in ("lr", "init_alpha"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                found.append(f"{prefix}{name.replace('_', '-')} must be a positive number, got {value}")
        for name in ("gamma", "tau"):
            value = getattr(self, name)
            if not (0 < value <= 1):
                found.append(f"{prefix}{name} must lie in (0, 1], got {value}")
        return found
