"""SAC hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass

from drl.fields import opt, problems

MATMUL_CHOICES = ("float32", "bfloat16")


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
    matmul: str = opt(
        "float32",
        "Precision of the update's wide matrix products (hidden-to-hidden layers): "
        "bfloat16 inputs and results with float32 sums are about twice as fast on "
        "CPUs with bfloat16 instructions (AVX512-BF16, AMX); weights, optimiser and every "
        "other operation stay float32.",
        choices=MATMUL_CHOICES,
    )

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        return problems(
            self,
            prefix,
            sizes=("hidden",),
            positive_int=("batch_size",),
            positive=("lr", "init_alpha"),
            unit=("gamma", "tau"),
        )
