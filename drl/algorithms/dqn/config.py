"""DQN hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass

from drl.algorithms.encoders import ENCODERS
from drl.fields import opt, problems


@dataclass(frozen=True)
class DQNConfig:
    """Double DQN (van Hasselt et al. 2016) over n-step returns, with an epsilon-greedy acting policy whose
    epsilon falls linearly over the first part of each worker's share of the run."""

    hidden: tuple[int, ...] = opt(
        (256, 256),
        "Hidden layer sizes of the Q-network for vector observations "
        "(image observations: --dqn.encoder and one linear layer).",
    )
    encoder: str = opt(
        "auto",
        "Convolutional encoder for image observations: nature (Mnih et al. 2015), impala "
        "(Espeholt et al. 2018), minatar (Young and Tian 2019), or auto: nature for "
        "images of at least 36x36, minatar for smaller ones.",
        choices=ENCODERS,
    )
    lr: float = opt(1e-4, "Adam learning rate.")
    gamma: float = opt(0.99, "Discount factor.")
    batch_size: int = opt(64, "Transitions per gradient update.")
    n_step: int = opt(3, "Steps summed into each return before bootstrapping (folded by the rollout workers).")
    double: bool = opt(True, "Double DQN: the online network picks the next action, the target network values it.")
    target_update_every: int = opt(500, "Gradient updates between copies of the online network into the target.")
    max_grad_norm: float = opt(10.0, "Gradient norm clipping.")
    eps_start: float = opt(1.0, "Exploration epsilon at the start of a worker's share.")
    eps_end: float = opt(0.05, "Exploration epsilon after the decay.")
    eps_decay_fraction: float = opt(0.1, "Fraction of a worker's share over which epsilon falls linearly.")

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        return problems(
            self,
            prefix,
            sizes=("hidden",),
            positive_int=("batch_size", "n_step", "target_update_every"),
            positive=("lr", "max_grad_norm"),
            unit=("gamma",),
            fraction=("eps_start", "eps_end", "eps_decay_fraction"),
            at_most={"n_step": 255},
        )
