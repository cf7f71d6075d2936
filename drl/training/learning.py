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
- ``QueueLearning`` (asynchronous on-policy, IMPALA/APPO): each entry is split into per-environment segments that
  join a queue in order of arrival; whenever ``batch_size`` transitions are queued an update is owed, which takes
  the oldest whole segments, drops those collected more than ``--max-policy-lag`` versions ago, and trains on the
  rest once. Like Reverb's ``Queue`` rate limiter, nothing is read while a batch waits (``tolerance`` 0), so
  what the queue holds, and the lag it adds, stays within a read's worth. Each trained transition's policy lag
  (the trainer's newest version minus the one that collected it, ``policy_version``) goes into a histogram
  (``LagHistogram``) that the trainer's status, its metrics page and TensorBoard show.

``state``/``load_state`` give the tensors and meta of the trainer's checkpoint (``learner.*``, ``replay.*``;
``learner``, ``replay_rng``, ``replay``), so checkpoints written before this module existed still load.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from drl import frames
from drl.core import Learner, Learning, LearningBase, ReplayLearner, RolloutLearner
from drl.envs import SpaceSpec
from drl.tensorboard import parse_buckets
from drl.training.collective import all_of
from drl.training.replay import PrioritizedReplay, ReplayBuffer

if TYPE_CHECKING:
    from drl.config import ExperimentConfig

__all__ = ["LagHistogram", "Learning", "LearningBase", "QueueLearning", "ReplayLearning", "RolloutLearning"]


def _prefixed(tensors: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _learner_state(learner: "Learner") -> tuple[dict[str, np.ndarray], dict]:
    tensors, meta = learner.state()
    return {f"learner.{k}": v for k, v in tensors.items()}, {"learner": meta}


class ReplayLearning(LearningBase):
    """A replay learner behind a replay buffer (``cfg`` an ExperimentConfig; ``keep``: the optional wire fields
    the learner's batches need, ``Algorithm.wire_fields``)."""

    def __init__(self, learner: "ReplayLearner", spec: SpaceSpec, cfg: ExperimentConfig, keep: Any = ()):
        self.learner, self.cfg = learner, cfg
        self.metrics: dict[str, float] = {}
        self.tolerance = cfg.updates_per_transition * cfg.ratio_tolerance
        if cfg.prioritized:
            self.replay: ReplayBuffer = PrioritizedReplay(
                spec, cfg.replay_size, seed=cfg.seed + 1, extras=keep, alpha=cfg.priority_alpha, beta=cfg.priority_beta
            )
        else:
            self.replay = ReplayBuffer(spec, cfg.replay_size, seed=cfg.seed + 1, extras=keep)

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray], version: int = 0) -> None:
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


class RolloutLearning(LearningBase):
    """An on-policy learner trained once on each SYNC iteration's rollout (``cfg`` an ExperimentConfig)."""

    def __init__(self, learner: "RolloutLearner", cfg: ExperimentConfig):
        self.learner, self.cfg = learner, cfg
        self.metrics: dict[str, float] = {}
        self.tolerance = 0.0
        self.rollout: list[tuple[str, int, dict[str, np.ndarray]]] = []

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray], version: int = 0) -> None:
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
        if not all_of(self.collective, bool(self.rollout)):
            self.rollout.clear()
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


LAG_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Upper bounds (inclusive) of the policy-lag histogram's buckets, in versions; one more bucket holds the rest."""


class LagHistogram:
    """Transitions by policy lag, in the buckets of ``LAG_BUCKETS`` and one above them, with the exact sum and
    maximum: Sample Factory's policy-lag statistic, kept as a histogram so that the tail shows."""

    def __init__(self) -> None:
        self.counts = np.zeros(len(LAG_BUCKETS) + 1, dtype=np.int64)
        self.total = 0
        self.squares = 0
        self.most = 0

    def add(self, lag: int, count: int) -> None:
        self.counts[int(np.searchsorted(LAG_BUCKETS, lag))] += count
        self.total += lag * count
        self.squares += lag * lag * count
        self.most = max(self.most, lag)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def quantile(self, q: float) -> int:
        """The upper bound of the bucket holding the ``q`` quantile (the maximum for the last bucket)."""
        if not self.count:
            return 0
        bucket = int(np.searchsorted(np.cumsum(self.counts), q * self.count))
        return LAG_BUCKETS[bucket] if bucket < len(LAG_BUCKETS) else self.most

    def text(self) -> str:
        """ "le:count,..." for every bucket (``inf`` the last), non-cumulative: the status field that the metrics
        page turns into a Prometheus histogram and ``status`` prints."""
        bounds = [str(b) for b in LAG_BUCKETS] + ["inf"]
        return ",".join(f"{b}:{int(c)}" for b, c in zip(bounds, self.counts))

    parse = staticmethod(parse_buckets)
    """``text``'s (upper bound, count) pairs; ValueError when it is not one."""

    def state(self) -> dict:
        return {"counts": self.counts.tolist(), "total": self.total, "squares": self.squares, "most": self.most}

    def load(self, state: dict) -> None:
        counts = np.asarray(state["counts"], dtype=np.int64)
        if counts.shape != self.counts.shape:
            raise ValueError(f"the policy-lag histogram has {len(counts)} buckets, expected {len(self.counts)}")
        self.counts, self.total, self.most = counts, int(state["total"]), int(state["most"])
        self.squares = int(state["squares"])


class QueueLearning(LearningBase):
    """A learner trained once on each batch of segments, in order of arrival (``cfg`` an ExperimentConfig; the
    learner's ``batch_size`` is in transitions, its ``train(segments, progress)`` as an on-policy learner's)."""

    def __init__(self, learner: "RolloutLearner", cfg: ExperimentConfig):
        self.learner, self.cfg = learner, cfg
        self.metrics: dict[str, float] = {}
        self.tolerance = 0.0
        self.queue: deque[tuple[int, dict[str, np.ndarray]]] = deque()
        self.queued = 0
        self.lag = LagHistogram()
        self.lag_dropped = 0

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray], version: int = 0) -> None:
        """Queues the entry's segments, one per environment, with the version that collected them; each with
        its whole observations and, in place of ``next_obs``, the next observations its learner bootstraps
        from (``frames.segment``)."""
        index = arrays["env_index"]
        for env in np.unique(index):
            self.queue.append((version, frames.segment(arrays, np.flatnonzero(index == env))))
        self.queued += len(index)

    def size(self) -> int:
        """Transitions queued."""
        return self.queued

    def owed(self, consumed: int) -> int:
        """One update (a whole batch: ``update`` runs the learner's epochs over it) while a batch is queued."""
        return self.learner.updates + (1 if self.queued >= self.learner.batch_size else 0)

    def update(self, consumed: int) -> None:
        """Trains on the oldest ``batch_size`` transitions' whole segments, less those too old to learn from."""
        batch, taken, limit = [], 0, self.cfg.max_policy_lag
        while self.queue and taken < self.learner.batch_size:
            version, segment = self.queue.popleft()
            rows = len(segment["reward"])
            taken += rows
            lag = max(0, self.policy_version - version)
            if limit and lag > limit:
                self.lag_dropped += rows
                continue
            self.lag.add(lag, rows)
            batch.append(segment)
        self.queued -= taken
        if all_of(self.collective, bool(batch)):
            self.metrics = self.learner.train(batch, progress=min(1.0, consumed / self.cfg.steps))

    def end_iteration(self, consumed: int) -> None:
        """Updates follow the queue (``owed``); an iteration's end changes nothing."""

    def report(self) -> dict[str, Any]:
        lag = self.lag
        return {
            "queued": self.queued,
            "lag_dropped": self.lag_dropped,
            "policy_lag_mean": round(lag.mean(), 3),
            "policy_lag_p95": lag.quantile(0.95),
            "policy_lag_max": lag.most,
            "policy_lag": lag.text(),
            "policy_lag_sum": lag.total,
            "policy_lag_squares": lag.squares,
        }

    def state(self, with_replay: bool) -> tuple[dict[str, np.ndarray], dict]:
        """The learner's state and the lag counters; the queue is never checkpointed (it holds at most a read's
        worth of segments, consumed and committed: a restarted trainer goes on with what it reads next)."""
        tensors, meta = _learner_state(self.learner)
        meta["replay_rng"] = None
        meta["queue"] = {"lag": self.lag.state(), "lag_dropped": self.lag_dropped}
        return tensors, meta

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        self.learner.load_state(_prefixed(tensors, "learner."), meta["learner"])
        kept = meta.get("queue")
        if kept:
            try:
                self.lag.load(kept["lag"])
                self.lag_dropped = int(kept["lag_dropped"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"the policy-lag counters in the checkpoint do not fit: {exc}") from None
