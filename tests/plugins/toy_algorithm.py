"""A toy algorithm registered from outside drl through the public builder API, as a user's plugin would be:
name this module in ``DRL_PLUGINS`` (``tests.plugins.toy_algorithm``) and ``--algorithm toy`` runs.

Its policy takes one constant action, ``--toy.action`` (clipped to a Box's bounds; an action index, modulo their
number, for discrete actions), published as the policy's only weight. Its actor marks every transition it sends
with that value in a wire field of its own (``toy_mark``, through ``annotate``), its learner learns from replay,
counts its updates and reports the action and the mean mark of each batch it samples. So a run shows that the
hyperparameter block reached the learner (metrics, published weights), that the policy reached the workers and
the evaluator, and that an extra wire field travels from the actor through the wire and the replay to the learner,
all with no change to drl's services, orchestrator, configuration or codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from drl.algorithms import ActorBase, Algorithm, FieldSpecs, opt, register
from drl.envs import SpaceSpec

MARK = "toy_mark"


@dataclass(frozen=True)
class ToyConfig:
    """A constant policy and a learner that only counts: the smallest algorithm drl can run."""

    action: float = opt(
        0.0, "The action the policy always takes (clipped to a Box's bounds; an index for discrete actions)."
    )
    batch_size: int = opt(16, "Transitions per (trivial) update.")

    def problems(self, prefix: str) -> list[str]:
        return [] if self.batch_size >= 1 else [f"{prefix}batch-size must be a positive integer, got {self.batch_size}"]


class ToyLearner:
    def __init__(self, spec: SpaceSpec, cfg: ToyConfig, seed: int):
        self.cfg = cfg
        self.updates = 0
        self.batch_size = cfg.batch_size
        self.td_errors = np.zeros(0, dtype=np.float32)

    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        self.updates += 1
        self.td_errors = np.ones(len(batch["reward"]), dtype=np.float32)
        return {"toy_action": self.cfg.action, "toy_mark": float(batch[MARK].mean())}

    def policy_weights(self) -> dict[str, np.ndarray]:
        return {"action": np.array([self.cfg.action], dtype=np.float32)}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        return self.policy_weights(), {"updates": self.updates}

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        try:
            self.updates = int(meta["updates"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a toy checkpoint: {exc}") from None


class ToyActor(ActorBase):
    annotates = (MARK,)

    def __init__(self, spec: SpaceSpec, cfg: ToyConfig, seed: int = 0):
        self.spec = spec
        self.value = float(cfg.action)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        if set(weights) != {"action"} or np.shape(weights["action"]) != (1,):
            raise ValueError(f"policy weights do not fit the toy policy: {sorted(weights)}")
        self.value = float(weights["action"][0])

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        n, spec = len(obs), self.spec
        if spec.discrete_actions:
            return np.full(n, int(self.value) % spec.discrete_actions, dtype=np.int64)
        low, high = spec.action_bounds()
        return np.clip(np.full((n, *spec.act_shape), self.value, dtype=np.float32), low, high)

    def annotate(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {MARK: np.full(len(arrays["reward"]), self.value, dtype=np.float32)}


class ToyBuilder(Algorithm):
    name = "toy"
    config = ToyConfig
    doc = "Toy hyperparameters."
    continuous = True
    discrete = True

    def wire_fields(self, cfg: Any) -> FieldSpecs:
        return {MARK: ("<f4", ())}

    def make_actor(self, spec: SpaceSpec, cfg: Any, seed: int) -> ToyActor:
        return ToyActor(spec, self.hyper(cfg), seed)

    def make_learner(self, spec: SpaceSpec, cfg: Any, seed: int) -> ToyLearner:
        return ToyLearner(spec, self.hyper(cfg), seed)

    def make_learning(self, spec: SpaceSpec, cfg: Any, seed: int):
        from drl.training.learning import ReplayLearning  # the trainer's only: acting processes need not import torch

        return ReplayLearning(self.make_learner(spec, cfg, seed), spec, cfg, keep=self.wire_fields(cfg))

    def problems(self, cfg: Any) -> list[str]:
        found = super().problems(cfg)
        if cfg.prioritized:
            found.append("--prioritized: the toy learner has no TD errors worth sampling by")
        return found


register(ToyBuilder())
