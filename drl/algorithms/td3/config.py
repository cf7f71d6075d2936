"""TD3 hyperparameters."""

from __future__ import annotations

import math
from dataclasses import dataclass

from drl.fields import opt


@dataclass(frozen=True)
class TD3Config:
    """TD3 hyperparameters (Fujimoto et al. 2018: twin critics, target policy smoothing, delayed actor updates).

    Noise scales are fractions of the action half-range: the networks act in [-1, 1]^d, and 0.1 means a tenth
    of the way from the centre of the environment's Box to its edge.
    """

    hidden: tuple[int, ...] = opt((256, 256), "Hidden layer sizes of actor and critics.")
    actor_lr: float = opt(3e-4, "Adam learning rate of the actor.")
    critic_lr: float = opt(3e-4, "Adam learning rate of the twin critics.")
    gamma: float = opt(0.99, "Discount factor.")
    tau: float = opt(0.005, "Polyak coefficient of the target actor and target critics.")
    batch_size: int = opt(256, "Transitions per gradient update.")
    policy_delay: int = opt(2, "Critic updates per actor update; the target networks move with the actor.")
    exploration_noise: float = opt(0.1, "Std of the Gaussian noise rollout workers add to the policy's actions "
                                        "(fraction of the action half-range).")
    target_noise: float = opt(0.2, "Std of the smoothing noise added to target actions (fraction of the action "
                                   "half-range).")
    noise_clip: float = opt(0.5, "Target smoothing noise is clipped to [-noise-clip, noise-clip] (fraction of the "
                                 "action half-range).")

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        found = []
        if not self.hidden or any(h < 1 for h in self.hidden):
            found.append(f"{prefix}hidden must be positive sizes, got {self.hidden}")
        for name in ("batch_size", "policy_delay"):
            if getattr(self, name) < 1:
                found.append(f"{prefix}{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)}")
        for name in ("actor_lr", "critic_lr"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                found.append(f"{prefix}{name.replace('_', '-')} must be a positive number, got {value}")
        for name in ("exploration_noise", "target_noise", "noise_clip"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                found.append(f"{prefix}{name.replace('_', '-')} must be zero or more, got {value}")
        for name in ("gamma", "tau"):
            value = getattr(self, name)
            if not (0 < value <= 1):
                found.append(f"{prefix}{name} must lie in (0, 1], got {value}")
        return found
