"""APPO / IMPALA hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass

from drl.algorithms.encoders import ENCODERS
from drl.algorithms.ppo.config import precision_option
from drl.fields import opt, problems


@dataclass(frozen=True)
class APPOConfig:
    """Actor-critic on segments of ``segment`` steps per environment, sent by ASYNC workers with their behaviour
    policy's log-probabilities and consumed once, in batches of ``batch_size`` transitions, with V-trace
    corrections (Espeholt et al. 2018). ``clip`` > 0 is APPO (PPO's clipped surrogate with V-trace's
    advantages); ``clip`` 0 is IMPALA's policy gradient (the ratio enters only through V-trace's truncated
    weights). The clipped ratio is taken to the behaviour policy (the default, as Sample Factory's APPO: the
    trust region is around the policy that collected the data) or, with ``proximal``, to the learner's policy as
    the batch began (the trust region then bounds only the learner's own steps on the batch, and the behaviour
    policy enters once, through the truncated weights rho_s in the advantages). ``epochs`` and ``minibatches``
    reuse a batch as PPO reuses a rollout.

    The trainer's ``--ratio-tolerance`` and ``--updates-per-transition`` (the replay ratio) do not apply: an
    update is owed whenever a batch is queued, and nothing is read while one is.
    """

    hidden: tuple[int, ...] = opt(
        (64, 64),
        "Hidden layer sizes (tanh) of policy and value networks for vector "
        "observations (image observations: --appo.encoder).",
    )
    encoder: str = opt(
        "auto",
        "Convolutional encoder shared by policy and value for image observations: nature, "
        "impala, minatar, or auto (as for --ppo.encoder).",
        choices=ENCODERS,
    )
    segment: int = opt(
        32,
        "Steps per environment in one segment: a worker sends an entry every this many steps "
        "of each of its environments (the last entry of a share may be shorter).",
    )
    batch_size: int = opt(512, "Transitions per learner batch, taken as whole segments in order of arrival.")
    epochs: int = opt(1, "Passes over each batch (1: every transition is used for exactly one gradient step).")
    minibatches: int = opt(1, "Minibatches per pass (of whole segments with --appo.whole-segments).")
    whole_segments: bool = opt(
        False,
        "Make minibatches of whole segments; off: of rows shuffled across the "
        "batch, as PPO (V-trace's targets are computed for the whole batch first).",
    )
    lr: float = opt(5e-4, "Adam learning rate (falls linearly to 0 over the run with --appo.anneal-lr).")
    anneal_lr: bool = opt(False, "Decay the learning rate linearly to 0 over the run's env steps.")
    gamma: float = opt(0.99, "Discount factor.")
    vtrace_lambda: float = opt(
        1.0,
        "V-trace's lambda: c_s = lambda min(c-bar, ratio); 1 is IMPALA's V-trace, "
        "below 1 it mixes toward one-step targets as GAE's lambda does.",
    )
    rho_bar: float = opt(
        1.0,
        "V-trace's rho-bar: truncation of the importance weights in the value targets "
        "and the policy-gradient advantages.",
    )
    c_bar: float = opt(1.0, "V-trace's c-bar: truncation of the traces (how far corrections propagate).")
    clip: float = opt(0.2, "Clipping range of the probability ratio (APPO); 0: IMPALA's unclipped policy gradient.")
    proximal: bool = opt(
        False,
        "Take the clipped ratio to the learner's policy at the start of each batch and "
        "leave the behaviour policy to V-trace's truncated weights in the advantages (the "
        "decoupled objective of Hilton et al. 2021); off: the ratio to the behaviour "
        "policy, as Sample Factory's APPO.",
    )
    normalize_advantages: bool = opt(True, "Standardise the advantages within each minibatch.")
    ent_coef: float = opt(0.0, "Entropy bonus coefficient.")
    vf_coef: float = opt(0.5, "Value loss coefficient.")
    max_grad_norm: float = opt(0.5, "Gradient norm clipping.")
    normalize_obs: bool = opt(
        False,
        "Standardise vector observations with running statistics, shipped with each "
        "policy version (image observations are scaled by 1/255 in the encoder).",
    )
    init_log_std: float = opt(0.0, "Initial log standard deviation of the Gaussian policy (continuous actions).")
    precision: str = precision_option()

    def problems(self, prefix: str) -> list[str]:
        """What is wrong with these values, one message per problem (flags named with ``prefix``)."""
        return problems(
            self,
            prefix,
            sizes=("hidden",),
            positive_int=("segment", "batch_size", "epochs", "minibatches"),
            positive=("lr", "rho_bar", "c_bar", "max_grad_norm"),
            nonneg=("clip", "ent_coef", "vf_coef"),
            unit=("gamma",),
            fraction=("vtrace_lambda",),
        )
