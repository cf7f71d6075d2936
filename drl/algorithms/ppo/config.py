"""PPO hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass

from drl.algorithms.encoders import ENCODERS
from drl.fields import opt, problems


def precision_option():
    """The ``precision`` field PPO's and APPO's blocks share (both train with ``PPOLearner.train``)."""
    return opt(
        "float32",
        "Precision of the update's forward and backward passes: bfloat16 runs them under torch.autocast "
        "(convolutions and matrix products in bfloat16 with float32 sums; weights, optimiser, losses and "
        "gradients' updates stay float32): faster on CPUs with bfloat16 instructions and on GPUs, not checked "
        "against float32 for learning (docs/benchmarks.md).",
        choices=("float32", "bfloat16"),
    )


@dataclass(frozen=True)
class PPOConfig:
    """PPO with the clipped surrogate objective (Schulman et al. 2017) and generalised advantage estimation.

    One SYNC iteration (``--sync-steps-per-iteration`` env steps from all workers together) is one rollout:
    ``epochs`` passes over it in ``minibatches`` shuffled minibatches.
    """

    hidden: tuple[int, ...] = opt(
        (64, 64),
        "Hidden layer sizes (tanh) of policy and value networks for vector "
        "observations (image observations: --ppo.encoder).",
    )
    encoder: str = opt(
        "auto",
        "Convolutional encoder shared by policy and value for image observations: nature "
        "(Mnih et al. 2015), impala (Espeholt et al. 2018), minatar (Young and Tian 2019), "
        "or auto: nature for images of at least 36x36, minatar for smaller ones.",
        choices=ENCODERS,
    )
    lr: float = opt(3e-4, "Adam learning rate (falls linearly to 0 over the run with --ppo.anneal-lr).")
    anneal_lr: bool = opt(True, "Decay the learning rate linearly to 0 over the run's env steps.")
    gamma: float = opt(0.99, "Discount factor.")
    gae_lambda: float = opt(0.95, "GAE lambda.")
    clip: float = opt(0.2, "Clipping range of the probability ratio.")
    epochs: int = opt(10, "Passes over each iteration's rollout.")
    minibatches: int = opt(32, "Minibatches per pass.")
    ent_coef: float = opt(0.0, "Entropy bonus coefficient.")
    vf_coef: float = opt(0.5, "Value loss coefficient.")
    max_grad_norm: float = opt(0.5, "Gradient norm clipping.")
    normalize_obs: bool = opt(
        False,
        "Standardise vector observations with running statistics merged at the "
        "trainer and shipped with each policy version (image observations are "
        "scaled by 1/255 in the encoder instead).",
    )
    init_log_std: float = opt(0.0, "Initial log standard deviation of the Gaussian policy (continuous actions).")
    precision: str = precision_option()

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        return problems(
            self,
            prefix,
            sizes=("hidden",),
            positive_int=("epochs", "minibatches"),
            positive=("lr", "clip", "max_grad_norm"),
            nonneg=("ent_coef", "vf_coef"),
            unit=("gamma",),
            fraction=("gae_lambda",),
        )
