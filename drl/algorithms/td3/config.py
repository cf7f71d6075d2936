"""TD3 hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass

from drl.fields import opt, problems


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
    exploration_noise: float = opt(
        0.1,
        "Std of the Gaussian noise rollout workers add to the policy's actions (fraction of the action half-range).",
    )
    target_noise: float = opt(
        0.2, "Std of the smoothing noise added to target actions (fraction of the action half-range)."
    )
    noise_clip: float = opt(
        0.5, "Target smoothing noise is clipped to [-noise-clip, noise-clip] (fraction of the action half-range)."
    )

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        return problems(
            self,
            prefix,
            sizes=("hidden",),
            positive_int=("batch_size", "policy_delay"),
            positive=("actor_lr", "critic_lr"),
            nonneg=("exploration_noise", "target_noise", "noise_clip"),
            unit=("gamma", "tau"),
        )
