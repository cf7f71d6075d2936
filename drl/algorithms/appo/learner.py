"""APPO / IMPALA updates on one batch of segments: V-trace targets and advantages computed once with the
learner's policy before the batch (``drl.algorithms.appo.vtrace``), then ``epochs`` passes of minibatch steps.

The trainer hands over a batch as segments in order of arrival: each one the consecutive transitions of one
environment of one worker, collected with one policy version, with the behaviour policy's log-probability of
each action (``behaviour_logp``). Values of next observations are computed only where a segment ends or an
episode was truncated (elsewhere the next observation is the next step's), and not at all where it terminated;
so a segment may carry those next observations alone (``frames.END_OBS``, as the trainer's queue does) in place
of ``next_obs``.

The policy loss is PPO's clipped surrogate with V-trace's advantages (APPO), or with ``clip`` 0 IMPALA's
-A_s log pi_theta(a_s|x_s). The ratio is pi_theta / mu, or with ``proximal`` pi_theta / pi_prox, pi_prox the
learner's policy before the batch, whose log-probabilities V-trace's weights were computed with (Hilton et al.
2021, arXiv:2110.00641, the decoupled PPO objective; A_s already carries min(rho-bar, pi_prox / mu)).
Observation statistics, as in PPO, are frozen during a batch and merged with its observations afterwards, for
the next version.

Pure math: no I/O.
"""

from __future__ import annotations

import numpy as np
import torch

from drl.algorithms.appo.actor import BEHAVIOUR_LOGP
from drl.algorithms.appo.config import APPOConfig
from drl.algorithms.appo.vtrace import vtrace
from drl.algorithms.ppo.learner import PPOLearner, shuffled_slices
from drl.envs import SpaceSpec
from drl.frames import END_OBS, bootstrap_rows

PROXIMAL_LOGP = "proximal_logp"
FIELDS = ("obs", "action", "reward", "terminated", "truncated", BEHAVIOUR_LOGP)


def end_observations(segments: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The next observations of the segments' ``frames.bootstrap_rows``, in order: a segment's ``END_OBS`` as
    the trainer's queue hands it over (``frames.segment``), else those rows of its ``next_obs``."""
    return np.concatenate(
        [
            s[END_OBS] if END_OBS in s else s["next_obs"][bootstrap_rows(s["terminated"], s["truncated"])]
            for s in segments
        ]
    )


class APPOLearner(PPOLearner):
    """PPO's learner with V-trace in place of GAE and minibatches of whole segments (``train``, the networks,
    the checkpoint state and the published weights are PPO's)."""

    WHOLE = ("raw_obs", "column")
    cfg: APPOConfig

    def __init__(self, spec: SpaceSpec, cfg: APPOConfig, seed: int, device: torch.device | str = "cpu"):
        super().__init__(spec, cfg, seed, device)
        self.batch_size = cfg.batch_size

    def prepare(self, segments: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        """The batch as flat rows with V-trace targets and advantages, and each row's segment."""
        cfg = self.cfg
        lengths = np.array([len(s["reward"]) for s in segments])
        cat = {k: np.concatenate([s[k] for s in segments]) for k in FIELDS}
        steps = np.concatenate([np.arange(n) for n in lengths])
        column = np.repeat(np.arange(len(segments)), lengths)
        terminated = cat["terminated"].astype(bool)
        cut = (steps == lengths[column] - 1) | terminated | cat["truncated"].astype(bool)
        raw = self.observations(cat["obs"])
        obs = self.normalised(raw)
        action = torch.as_tensor(cat["action"], device=self.device)
        value_t, logp_t = self._values(obs, action)
        assert logp_t is not None  # asked for with the actions
        value = value_t.cpu().numpy().astype(np.float64)
        next_value = np.zeros_like(value)
        follows = np.flatnonzero(~cut)
        next_value[follows] = value[follows + 1]
        ends = np.flatnonzero(cut & ~terminated)
        if len(ends):
            next_obs = self.normalised(self.observations(end_observations(segments)))
            next_value[ends] = self._values(next_obs, None)[0].cpu().numpy()
        shape = (int(lengths.max()), len(segments))

        def grid(flat: np.ndarray, fill: float = 0.0) -> np.ndarray:
            out = np.full(shape, fill, dtype=np.float64)
            out[steps, column] = flat
            return out

        log_ratio = logp_t.cpu().numpy().astype(np.float64) - cat[BEHAVIOUR_LOGP].astype(np.float64)
        v = vtrace(
            grid(log_ratio),
            grid(cat["reward"]),
            grid(value),
            grid(next_value),
            grid(terminated),
            grid(cut, 1.0),
            cfg.gamma,
            cfg.rho_bar,
            cfg.c_bar,
            cfg.vtrace_lambda,
        )
        proximal = {PROXIMAL_LOGP: logp_t.float()} if cfg.proximal else {}
        return {
            "raw_obs": raw,
            "obs": obs,
            "action": action,
            "behaviour_logp": self.tensor(cat[BEHAVIOUR_LOGP]),
            **proximal,
            "advantage": self.tensor(v.advantages[steps, column]),
            "return": self.tensor(v.targets[steps, column]),
            "old_value": self.tensor(value),
            "rho": self.tensor(v.rho[steps, column]),
            "column": torch.as_tensor(column),
        }

    @property
    def OLD_LOGP(self) -> str:  # noqa: N802 (PPO's constant, chosen per configuration here)
        return PROXIMAL_LOGP if self.cfg.proximal else BEHAVIOUR_LOGP

    def surrogate(self, adv: torch.Tensor, ratio: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
        """APPO's clipped surrogate on pi_theta / mu (or / pi_prox), or with ``clip`` 0 IMPALA's -A log pi_theta."""
        if self.cfg.clip > 0:
            return super().surrogate(adv, ratio, logp)
        return -(adv * logp).mean()

    def more_stats(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """V-trace's mean truncated importance weight: how far off-policy the minibatch was."""
        return {"rho_mean": mb["rho"].mean()}

    def minibatch_rows(self, data: dict[str, torch.Tensor]):
        """One pass's minibatches as row indices: rows shuffled across the batch, as PPO's (every row carries
        its V-trace target and advantage, computed for the whole batch first), or with ``whole_segments`` the
        batch's segments shuffled into ``minibatches`` groups, each segment whole. Rows keep a minibatch from
        being a few consecutive stretches of a few episodes, whose gradients are correlated."""
        if not self.cfg.whole_segments:
            yield from shuffled_slices(self.rng, len(data["advantage"]), self.cfg.minibatches)
            return
        column = data["column"].numpy()
        order = self.rng.permutation(int(column.max()) + 1)
        for part in np.array_split(order, min(self.cfg.minibatches, len(order))):
            yield torch.from_numpy(np.flatnonzero(np.isin(column, part)))
