"""The roles every part of drl agrees on, at the bottom of the library: it imports nothing of drl's upper floors.

As in Acme's ``core.py``, the roles are small protocols. An algorithm's builder (``drl.algorithms``) makes the
pieces that play them: the ``Learner`` (gradient updates), the ``Actor`` (the acting policy of rollout workers and
the evaluator), the ``Folder`` (worker-side folding of transitions before they are sent) and the ``Learning``
around a learner (where consumed transitions go and when an update is owed). A learner belongs to a
``Collective``: the group of data-parallel learners it averages gradients with, ``SOLO`` when it is alone; the
group's implementation over torch.distributed is the trainer's (``drl.training.collective``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

FieldSpecs = dict[str, tuple[str, tuple[int, ...]]]
"""Wire fields by name: (numpy dtype string, shape of one transition's value)."""


class Collective(Protocol):
    size: int
    """Learners in the group."""
    rank: int
    """This learner's place in it (0: the one that publishes)."""

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replaces ``tensor`` with its sum over the group, in place; returns it."""

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replaces ``tensor`` with its mean over the group, in place; returns it."""

    def min_int(self, value: int) -> int:
        """The smallest of the group's values."""

    def broadcast_int(self, value: int) -> int:
        """Learner 0's value."""

    def broadcast_(self, tensor: torch.Tensor, source: int = 0) -> torch.Tensor:
        """Replaces ``tensor`` with learner ``source``'s, in place; returns it."""


class Solo:
    """One learner alone: nothing to share."""

    size = 1
    rank = 0

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def min_int(self, value: int) -> int:
        return value

    def broadcast_int(self, value: int) -> int:
        return value

    def broadcast_(self, tensor: torch.Tensor, source: int = 0) -> torch.Tensor:
        return tensor


SOLO = Solo()


class Learner(Protocol):
    """Gradient updates; pure math, no I/O.

    A replay learner takes ``update(batch)`` and leaves the batch's ``td_errors`` for prioritized replay; an
    on-policy learner takes ``train(segments, progress)`` over one iteration's rollout. Which one a learner is
    matters only to the ``Learning`` its builder puts around it.
    """

    updates: int
    batch_size: int
    collective: Collective
    """The learners this one averages its gradients with (``SOLO`` alone)."""

    def policy_weights(self) -> dict[str, np.ndarray]: ...

    def state(self) -> tuple[dict[str, np.ndarray], dict]: ...

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None: ...


class ReplayLearner(Learner, Protocol):
    td_errors: np.ndarray

    def update(self, batch: dict[str, Any]) -> dict[str, float]: ...


class RolloutLearner(Learner, Protocol):
    def train(self, segments: list[dict[str, np.ndarray]], progress: float = 0.0) -> dict[str, float]: ...


class Actor(Protocol):
    """The acting policy that rollout workers and the evaluator run.

    ``set_progress`` tells it how far the worker is through its share (schedules such as DQN's epsilon);
    ``annotate`` returns the extra wire fields it computes for a whole entry before the entry is sent, named in
    ``annotates`` (DQN's Ape-X priorities), so that a worker can keep them out of the rows it steps into.
    ``records`` names the wire fields it computes per step while acting (APPO's behaviour log-probabilities):
    after each sampling call of ``act``, ``recorded`` holds one row per observation, which the worker writes
    beside the step's transitions.
    """

    annotates: tuple[str, ...]
    records: tuple[str, ...]
    recorded: dict[str, np.ndarray]

    def load(self, weights: dict[str, np.ndarray]) -> None: ...

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...

    def set_progress(self, fraction: float) -> None: ...

    def annotate(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class ActorBase:
    """The defaults of ``Actor``: no schedule, nothing to annotate or record."""

    annotates: tuple[str, ...] = ()
    records: tuple[str, ...] = ()
    recorded: dict[str, np.ndarray] = {}

    def set_progress(self, fraction: float) -> None:
        """Where the worker is in its share, 0 to 1; most policies do not care."""

    def annotate(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}


class Folder(Protocol):
    """Worker-side folding of stepped transitions before they are sent (DQN's n-step returns).

    ``push`` takes one vectorised step (the first ``count`` environments' transitions) and returns the folded
    transitions that are complete, or None; ``flush`` returns every transition still held (at the end of a share
    or of a SYNC iteration). Every transition pushed comes out exactly once, so the worker's counts hold.
    """

    def push(self, step: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray] | None: ...

    def flush(self) -> dict[str, np.ndarray] | None: ...


class Learning(Protocol):
    @property
    def learner(self) -> Learner: ...

    metrics: dict[str, float]  # the learner's last metrics
    tolerance: float  # updates the trainer may be behind and still read (``drl.training.pacing.RateLimiter``)
    policy_version: int  # the trainer's newest published version; the trainer keeps it current
    collective: Collective  # the group its passes are agreed with: its learner's (``SOLO`` alone)

    def add(self, worker: str, seq: int, arrays: dict[str, np.ndarray], version: int = 0) -> None:
        """An accepted entry's transitions, collected with policy ``version``."""

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

    def report(self) -> dict[str, Any]:
        """Status fields of its own beyond the learner's metrics."""


class LearningBase:
    """The defaults of ``Learning``: no status fields of its own, the version unused, alone (the trainer's joining
    seats a learning and its learner in their group together, ``drl.training.collective.join_learners``)."""

    policy_version = -1
    collective: Collective = SOLO

    def report(self) -> dict[str, Any]:
        return {}
