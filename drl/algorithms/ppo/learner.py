"""PPO updates over one on-policy rollout: GAE advantages, then epochs of clipped-surrogate minibatch steps.

The trainer hands over the rollout as segments: each one the consecutive transitions of one environment of one
worker in this iteration, oldest first. Every transition carries its ``next_obs``, so advantages need no
ordering across segments:

    delta_t = r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t)
    A_t     = delta_t + gamma lambda (1 - cut_t) A_{t+1},      cut_t = terminated, truncated or segment end

A truncated episode or a segment cut off by the end of the iteration bootstraps from V(s'_t); a terminated one
does not. V(s'_t) is the next row's V(s_{t+1}) wherever s'_t is that row's observation (``next_is_next_row``), so
the network's extra pass covers only the other rows. The behaviour policy's log-probabilities are recomputed
here: in SYNC mode the rollout was collected with exactly the policy the learner holds before this iteration
(older versions are dropped by the trainer).
Observation statistics are frozen during the iteration (they are the ones the workers used) and merged with the
iteration's observations afterwards, for the next version. The policy's and value's parameters are views of one
flat tensor (``drl.algorithms.common.FlatParams``): with networks this small a minibatch step's cost is mostly
per-tensor operations, and Adam, clipping and zeroing then run once per step rather than once per tensor. Image
observations are not standardised: they stay uint8 up to the encoder, which scales them
(``drl.algorithms.encoders``).

Pure math: no I/O.
"""

from __future__ import annotations

import numpy as np
import torch

from drl.algorithms.common import (
    FlatParams,
    ObsNorm,
    flat_adam,
    flatten_optimizer_state,
    group_moments,
    load_training_state,
    training_state,
)
from drl.algorithms.ppo.advantages import gae
from drl.algorithms.ppo.config import PPOConfig
from drl.algorithms.ppo.networks import Policy, PPOHyper, networks
from drl.core import SOLO, Collective
from drl.envs import SpaceSpec

EVAL_CHUNK = 1024
"""Rows per forward pass when a whole image rollout is evaluated without gradients on a GPU: bounds the encoder's
activations of a long rollout."""
CPU_EVAL_CHUNK = 256
"""The same on a CPU, smaller: there a pass over more rows runs slower per row (its activations leave the
caches; ``bench/pixel_learner.py``'s batches, bench/README.md)."""


def shuffled_slices(rng: np.random.Generator, n: int, parts: int):
    """``parts`` equal slices (the last rows of an uneven split left out) of a random order of ``n`` rows."""
    size = max(1, n // parts)
    order = torch.from_numpy(rng.permutation(n))
    for start in range(0, n - size + 1, size):
        yield order[start : start + size]


def next_is_next_row(obs: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """Rows whose next observation is, byte for byte, the following row's observation: within a segment every
    step but its last and an episode's end. Their next value is that row's value, so the network runs on the
    others' next observations only. Checked rather than assumed from the segments' shape, so a rollout joined
    across a missing entry still bootstraps from the right observation."""
    n = len(obs)
    same = np.zeros(n, dtype=bool)
    if n > 1:
        a = np.ascontiguousarray(next_obs[:-1]).reshape(n - 1, -1).view(np.uint8)
        b = np.ascontiguousarray(obs[1:]).reshape(n - 1, -1).view(np.uint8)
        if a.shape[1] % 8 == 0:
            a, b = a.view(np.uint64), b.view(np.uint64)
        same[:-1] = (a == b).all(axis=1)
    return same


class PPOLearner:
    collective: Collective = SOLO
    """The learners this one averages its gradients with (``drl.core.Collective``; alone by default)."""

    def __init__(self, spec: SpaceSpec, cfg: PPOHyper, seed: int, device: torch.device | str = "cpu"):
        torch.manual_seed(seed)
        self.cfg, self.spec = cfg, spec
        self.image = spec.image
        self.device = torch.device(device)
        self.eval_chunk = CPU_EVAL_CHUNK if self.device.type == "cpu" else EVAL_CHUNK
        policy, value = networks(spec, cfg)
        self.policy, self.value = policy.to(self.device), value.to(self.device)
        self.flat = FlatParams([*self.policy.parameters(), *self.value.parameters()], grads=True, tie_grads=True)
        self.opt = flat_adam(self.flat.param, cfg.lr, eps=1e-5)
        self.rng = np.random.default_rng(seed)
        self.updates = 0
        self.iterations = 0
        self.batch_size = 0

    def prepare(self, segments: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        """One flat rollout with normalised observations, old log-probabilities, advantages and returns."""
        cat = {
            k: np.concatenate([s[k] for s in segments])
            for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")
        }
        cut = np.concatenate([np.eye(1, len(s["reward"]), len(s["reward"]) - 1)[0] for s in segments])
        cut = np.maximum(cut, np.maximum(cat["terminated"], cat["truncated"]).astype(np.float64))
        raw = self.observations(cat["obs"])
        action = torch.as_tensor(cat["action"], device=self.device)
        obs = self.normalised(raw)
        value_t, old_logp = self._values(obs, action)
        assert old_logp is not None  # asked for with the actions
        value = value_t.cpu().numpy().astype(np.float64)
        next_value = np.zeros_like(value)
        same = next_is_next_row(cat["obs"], cat["next_obs"])
        next_value[:-1][same[:-1]] = value[1:][same[:-1]]
        own = np.flatnonzero(~same & (cat["terminated"] == 0))
        if len(own):
            next_obs = self.normalised(self.observations(cat["next_obs"][own]))
            next_value[own] = self._values(next_obs, None)[0].cpu().numpy()
        cfg = self.cfg
        assert isinstance(cfg, PPOConfig)  # GAE's lambda is PPO's own: APPO's learner prepares its batches itself
        adv = gae(
            cat["reward"].astype(np.float64),
            value,
            next_value,
            cat["terminated"].astype(np.float64),
            cut,
            cfg.gamma,
            cfg.gae_lambda,
        )
        return {
            "raw_obs": raw,
            "obs": obs,
            "action": action,
            "old_logp": old_logp,
            "advantage": self.tensor(adv),
            "return": self.tensor(adv + value),
            "old_value": self.tensor(value),
        }

    def normalised(self, raw: torch.Tensor) -> torch.Tensor:
        """Observations as the policy takes them: images as they are, vectors through the running statistics."""
        return raw if self.image else self.obs_norm(raw)

    def _values(self, obs_n: torch.Tensor, action: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Values (and log-probabilities of ``action``) without gradients, in chunks for images."""
        chunk = self.eval_chunk if self.image else max(len(obs_n), 1)
        values, logps = [], []
        with torch.no_grad():
            for rows in (slice(i, i + chunk) for i in range(0, len(obs_n), chunk)):
                if action is None:
                    values.append(self.value(self.policy.trunk(obs_n[rows])))
                    continue
                dist, value = self.evaluate(obs_n[rows])
                values.append(value)
                logps.append(self.policy.log_prob(dist, action[rows]))
        return torch.cat(values), (torch.cat(logps) if action is not None else None)

    @property
    def obs_norm(self) -> ObsNorm:
        """The observation statistics of a vector policy (an image policy has none: its encoder scales pixels)."""
        assert isinstance(self.policy, Policy)
        return self.policy.norm

    def tensor(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A host array as a tensor on the learner's device."""
        return torch.as_tensor(array, dtype=dtype, device=self.device)

    def observations(self, obs: np.ndarray) -> torch.Tensor:
        """Images as they came (uint8 for the encoder), vectors as flat float32."""
        if self.image:
            return torch.as_tensor(obs, device=self.device)
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device).flatten(1)

    def evaluate(self, obs_n: torch.Tensor):
        """The action distribution and the value of (normalised) observations, the policy's trunk run once."""
        features = self.policy.trunk(obs_n)
        return self.policy.distribution(self.policy.head_out(features)), self.value(features)

    @property
    def OLD_LOGP(self) -> str:  # noqa: N802 (a constant for PPO; APPO's depends on its configuration)
        """The minibatch key of the log-probabilities the ratio is taken against."""
        return "old_logp"

    def surrogate(self, adv: torch.Tensor, ratio: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
        """The policy loss: PPO's clipped surrogate."""
        clip = self.cfg.clip
        return torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Policy loss (``surrogate``) + value loss - entropy bonus on one minibatch (advantages standardised in
        it unless the configuration says otherwise)."""
        cfg = self.cfg
        dist, value = self.evaluate(mb["obs"])
        logp = self.policy.log_prob(dist, mb["action"])
        log_ratio = logp - mb[self.OLD_LOGP]
        ratio = log_ratio.exp()
        adv = mb["advantage"]
        if getattr(cfg, "normalize_advantages", True) and len(adv) > 1:
            adv = self.standardised(adv)
        policy_loss = self.surrogate(adv, ratio, logp)
        value_loss = 0.5 * (value - mb["return"]).square().mean()
        entropy = self.policy.entropy(dist).mean()
        total = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        with torch.no_grad():
            stats = {
                "policy_loss": policy_loss.detach(),
                "value_loss": value_loss.detach(),
                "entropy": entropy.detach(),
                "approx_kl": ((ratio - 1) - log_ratio).mean(),
                "clip_fraction": ((ratio - 1).abs() > cfg.clip).float().mean(),
                **self.more_stats(mb),
            }
        return total, stats

    def more_stats(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Statistics of a minibatch beyond the loss's (none for PPO)."""
        return {}

    def standardised(self, adv: torch.Tensor) -> torch.Tensor:
        """Advantages standardised over the minibatch; with several learners over all their minibatches together
        (mean and unbiased standard deviation from the group's sums), as one learner with the whole would."""
        if self.collective.size == 1:
            return (adv - adv.mean()) / (adv.std() + 1e-8)
        with torch.no_grad():
            sums = torch.stack([adv.sum(), adv.square().sum(), adv.new_tensor(float(len(adv)))]).double()
            total, squares, n = self.collective.sum_(sums).tolist()
            mean = total / n
            std = max((squares - n * mean * mean) / max(n - 1.0, 1.0), 0.0) ** 0.5
        return (adv - mean) / (std + 1e-8)

    WHOLE: tuple[str, ...] = ("raw_obs",)
    """Keys of ``prepare``'s output that are not per-row minibatch inputs."""

    def minibatch_rows(self, data: dict[str, torch.Tensor]):
        """One pass's minibatches as row indices: ``minibatches`` shuffled slices of the rollout."""
        n = len(data["advantage"])
        self.batch_size = max(1, n // self.cfg.minibatches)
        yield from shuffled_slices(self.rng, n, self.cfg.minibatches)

    def train(self, segments: list[dict[str, np.ndarray]], progress: float = 0.0) -> dict[str, float]:
        """Trains on one rollout; ``progress`` (0 to 1, the run's env steps done before it) sets the learning
        rate when it is annealed."""
        cfg = self.cfg
        data = self.prepare(segments)
        lr = cfg.lr * max(0.0, 1.0 - progress) if cfg.anneal_lr else cfg.lr
        for group in self.opt.param_groups:
            group["lr"] = lr
        params = [self.flat.param]
        low_precision = cfg.precision == "bfloat16"
        stats_per_step: list[dict[str, torch.Tensor]] = []
        for _ in range(cfg.epochs):
            rows = list(self.minibatch_rows(data))
            for idx in rows[: self.collective.min_int(len(rows))]:
                idx = idx.to(self.device, non_blocking=True)
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=low_precision):
                    total, stats = self.loss({k: v[idx] for k, v in data.items() if k not in self.WHOLE})
                self.flat.zero_grad()
                total.backward()
                self.collective.mean_(self.flat.gradient)
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                self.opt.step()
                stats_per_step.append(stats)
        if not self.image:
            if self.collective.size == 1:
                self.obs_norm.update(data["raw_obs"])
            else:
                self.obs_norm.merge(*group_moments(self.collective, data["raw_obs"]))
        steps = len(stats_per_step)
        self.updates += steps
        self.iterations += 1
        means = {}
        if stats_per_step:
            names = list(stats_per_step[0])
            table = torch.stack([torch.stack([s[k].float() for k in names]) for s in stats_per_step])
            means = dict(zip(names, table.double().mean(0).tolist()))
        returns = data["return"].cpu().numpy()
        residual = returns - data["old_value"].cpu().numpy()
        explained = 1.0 - residual.var() / returns.var() if returns.var() > 0 else 0.0
        return {**means, "explained_variance": float(explained), "lr": lr}

    def _modules(self) -> dict:
        return {"policy": self.policy, "value": self.value}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Everything needed to continue training: tensors (networks, statistics, optimiser moments), meta."""
        tensors, optimizers = training_state(self._modules(), {"opt": self.opt})
        return tensors, {
            "updates": self.updates,
            "iterations": self.iterations,
            "optimizers": optimizers,
            "rng": self.rng.bit_generator.state,
        }

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what ``state`` returned; raises ValueError when it does not fit these networks."""
        try:
            tensors, optimizers = dict(tensors), dict(meta["optimizers"])
            flatten_optimizer_state("opt", self.opt, self.flat, tensors, optimizers)
            load_training_state(self._modules(), {"opt": self.opt}, tensors, optimizers)
            updates, iterations = int(meta["updates"]), int(meta["iterations"])
            self.rng.bit_generator.state = meta["rng"]
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint does not fit the {type(self).__name__[:-7]} networks: {exc}") from None
        self.updates, self.iterations = updates, iterations

    def policy_weights(self) -> dict[str, np.ndarray]:
        """What rollout workers and the evaluator need to act: the policy with its observation statistics."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.policy.state_dict().items()}
