"""What an algorithm's builder hands the trainer (``Algorithm.make_learning``): its learner with the place its
consumed transitions go, and the rule by which updates follow them.

The trainer's loops stay the same for every algorithm: accepted entries go to ``add``; ASYNC and SYNC run
``update`` while the learner has done fewer than ``owed`` updates; a SYNC iteration ends with
``end_iteration``. Two kinds exist:

- ``ReplayLearning`` (off-policy): a replay buffer, uniform or prioritized (``--prioritized``). Updates follow
  the replay ratio: none while the replay holds fewer than ``max(--learning-starts, batch size)`` transitions,
  then ``--updates-per-transition`` per transition consumed past ``--learning-starts``. Under prioritized
  replay the importance-sampling exponent rises linearly from ``--priority-beta`` to 1 over the run's steps,
  and each update's TD errors become the sampled transitions' new priorities.
- ``RolloutLearning`` (on-policy): the iteration's entries are kept as they come; at the end of the iteration
  they are sorted by (worker, seq), split by ``env_index`` into per-environment segments, trained on once and
  dropped. It never owes an update in between.

``state``/``load_state`` give the tensors and meta of the trainer's checkpoint (``learner.*``, ``replay.*``;
``learner``, ``replay_rng``, ``replay``), so checkpoints written before this module existed still load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from drl import frames
from drl.envs import SpaceSpec
from drl.replay import PrioritizedReplay, ReplayBuffer

if TYPE_CHECKING:
    from drl.algorithms.base import Learner, ReplayLearner, RolloutLearner


class Learning(Protocol):
    learner: "Learner"
    metrics: dict[str, float]  # the learner's last metrics

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray]) -> None:
        """An accepted entry's transitions."""

    def size(self) -> int:
        """Transitions held (the trainer's ``replay_size``; 0 for a rollout)."""

    def owed(self, consumed: int) -> int:
        """Updates the data asks for, given the transitions consumed so far."""

    def update(self, consumed: int) -> None:
        """One gradient update."""

    def end_iteration(self, consumed: int) -> None:
        """A SYNC iteration's data is in."""

    def state(self, with_replay: bool) -> tuple[dict[str, np.ndarray], dict]:
        """Checkpoint tensors and meta; the replay's transitions only ``with_replay``."""

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        """Restores ``state``'s output; raises ValueError when it does not fit."""


def _prefixed(tensors: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _learner_state(learner: "Learner") -> tuple[dict[str, np.ndarray], dict]:
    tensors, meta = learner.state()
    return {f"learner.{k}": v for k, v in tensors.items()}, {"learner": meta}


class ReplayLearning:
    """A replay learner behind a replay buffer (``cfg`` an ExperimentConfig; ``keep``: the optional wire fields
    the learner's batches need, ``Algorithm.wire_fields``)."""

    def __init__(self, learner: "ReplayLearner", spec: SpaceSpec, cfg: Any, keep: Any = ()):
        self.learner, self.cfg = learner, cfg
        self.metrics: dict[str, float] = {}
        if cfg.prioritized:
            self.replay: ReplayBuffer = PrioritizedReplay(spec, cfg.replay_size, seed=cfg.seed + 1, extras=keep,
                                                          alpha=cfg.priority_alpha, beta=cfg.priority_beta)
        else:
            self.replay = ReplayBuffer(spec, cfg.replay_size, seed=cfg.seed + 1, extras=keep)

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray]) -> None:
        self.replay.add(arrays)

    def size(self) -> int:
        return len(self.replay)

    def owed(self, consumed: int) -> int:
        cfg = self.cfg
        if len(self.replay) < max(cfg.learning_starts, self.learner.batch_size):
            return 0
        return int(cfg.updates_per_transition * max(0, consumed - cfg.learning_starts))

    def update(self, consumed: int) -> None:
        replay, learner = self.replay, self.learner
        if isinstance(replay, PrioritizedReplay):
            cfg = self.cfg
            replay.beta = cfg.priority_beta + (1.0 - cfg.priority_beta) * min(1.0, consumed / cfg.steps)
            self.metrics = learner.update(replay.sample(learner.batch_size))
            replay.update_priorities(replay.last_indices, learner.td_errors)
        else:
            self.metrics = learner.update(replay.sample(learner.batch_size))

    def end_iteration(self, consumed: int) -> None:
        """Updates follow the data as it comes (``owed``); an iteration's end changes nothing."""

    def state(self, with_replay: bool) -> tuple[dict[str, np.ndarray], dict]:
        tensors, meta = _learner_state(self.learner)
        meta["replay_rng"] = self.replay.rng.bit_generator.state
        if with_replay:
            arrays, meta["replay"] = self.replay.dump()
            tensors.update({f"replay.{k}": v for k, v in arrays.items()})
        return tensors, meta

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        self.learner.load_state(_prefixed(tensors, "learner."), meta["learner"])
        try:
            if meta.get("replay_rng"):
                self.replay.rng.bit_generator.state = meta["replay_rng"]
            if "replay.reward" in tensors:
                self.replay.load(_prefixed(tensors, "replay."), meta["replay"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the replay in the checkpoint does not fit: {exc}") from None


class RolloutLearning:
    """An on-policy learner trained once on each SYNC iteration's rollout (``cfg`` an ExperimentConfig)."""

    def __init__(self, learner: "RolloutLearner", cfg: Any):
        self.learner, self.cfg = learner, cfg
        self.metrics: dict[str, float] = {}
        self.rollout: list[tuple[str, int, dict[str, np.ndarray]]] = []

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray]) -> None:
        """Keeps an entry for the iteration's end, with whole observations when its frames travelled once."""
        self.rollout.append((worker, seq, frames.expand(arrays)))

    def size(self) -> int:
        return 0

    def owed(self, consumed: int) -> int:
        return self.learner.updates

    def update(self, consumed: int) -> None:
        raise RuntimeError("a rollout is trained at the end of its iteration (end_iteration); it owes no updates")

    def segments(self) -> list[dict[str, np.ndarray]]:
        """The iteration's rollout as per-environment trajectories: each worker's entries in sequence order,
        split by the environment that took each step."""
        by_worker: dict[str, list] = {}
        for worker, seq, arrays in self.rollout:
            by_worker.setdefault(worker, []).append((seq, arrays))
        out = []
        for worker in sorted(by_worker):
            entries = [arrays for _, arrays in sorted(by_worker[worker], key=lambda e: e[0])]
            joined = {k: np.concatenate([e[k] for e in entries]) for k in entries[0]}
            for env in np.unique(joined["env_index"]):
                mask = joined["env_index"] == env
                out.append({k: v[mask] for k, v in joined.items()})
        return out

    def end_iteration(self, consumed: int) -> None:
        """One training pass over the iteration's rollout, which is then dropped; ``progress`` (the learning
        rate's schedule) counts the run's steps before this rollout."""
        if not self.rollout:
            return
        size = sum(len(arrays["reward"]) for _, _, arrays in self.rollout)
        progress = max(0, consumed - size) / self.cfg.steps
        self.metrics = self.learner.train(self.segments(), progress=progress)
        self.rollout.clear()

    def state(self, with_replay: bool) -> tuple[dict[str, np.ndarray], dict]:
        """The learner's state; a rollout is never checkpointed (a restarted trainer trains the iteration on
        what it reads after the restart)."""
        tensors, meta = _learner_state(self.learner)
        meta["replay_rng"] = None
        return tensors, meta

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        self.learner.load_state(_prefixed(tensors, "learner."), meta["learner"])
