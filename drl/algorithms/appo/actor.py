"""APPO's acting policy: PPO's (``drl.algorithms.ppo.actor``), which also records the log-probability of each
action it samples, the behaviour policy's mu(a|x) that V-trace weighs the learner's policy against.

The log-probability is computed from the same outputs the action was sampled from, at acting time, so it is the
behaviour policy's exactly, whatever version the worker loads next; ``recorded`` holds it for the last call of
``act`` and the worker writes it into the entry's rows beside the step's transitions (``records``).
"""

from __future__ import annotations

import numpy as np

from drl.algorithms.appo.config import APPOConfig
from drl.algorithms.ppo.actor import PPOActor
from drl.envs import SpaceSpec

BEHAVIOUR_LOGP = "behaviour_logp"
LOG_2PI = float(np.log(2.0 * np.pi))


class APPOActor(PPOActor):
    records: tuple[str, ...] = (BEHAVIOUR_LOGP,)

    def __init__(self, spec: SpaceSpec, cfg: APPOConfig, seed: int = 0):
        super().__init__(spec, cfg, seed)
        self.recorded: dict[str, np.ndarray] = {}

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        out = np.asarray(self.outputs(obs), dtype=np.float64)
        if self.spec.discrete_actions:
            if deterministic:
                return out.argmax(1).astype(np.int64)
            logits = out - out.max(1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
            u = self.rng.random((len(out), 1))
            action = np.minimum((np.exp(log_probs).cumsum(1) < u).sum(1), out.shape[1] - 1)
            self.recorded = {BEHAVIOUR_LOGP: log_probs[np.arange(len(out)), action].astype(np.float32)}
            return action.astype(np.int64)
        if deterministic:
            return np.clip(out.reshape(-1, *self.spec.act_shape), self.low, self.high).astype(np.float32)
        log_std = np.asarray(self.log_std(), dtype=np.float64).reshape(-1)
        noise = self.rng.standard_normal(out.shape, dtype=np.float32)
        action = (out + np.exp(log_std) * noise).astype(np.float32)
        z = (action.astype(np.float64) - out) / np.exp(log_std)
        logp = -0.5 * (z**2 + LOG_2PI) - log_std
        self.recorded = {BEHAVIOUR_LOGP: logp.sum(1).astype(np.float32)}
        return action.reshape(-1, *self.spec.act_shape)
