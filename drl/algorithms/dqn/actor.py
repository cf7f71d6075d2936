"""DQN acting policy: epsilon-greedy for collection, greedy for evaluation; also the Ape-X initial priorities.

Vector observations go through numpy (``drl.algorithms.inference``), image observations through the learner's
own torch module (``inference.TorchNet``, which says why)."""

from __future__ import annotations

import numpy as np

from drl.algorithms import inference as nx
from drl.algorithms.base import ActorBase
from drl.algorithms.dqn.config import DQNConfig
from drl.envs import SpaceSpec


class DQNActor(ActorBase):
    """``worker_priorities``: ``annotate`` adds each entry's initial replay priorities (``priority``)."""

    def __init__(self, spec: SpaceSpec, cfg: DQNConfig, seed: int = 0, worker_priorities: bool = False):
        self.spec, self.cfg = spec, cfg
        self.annotates = ("priority",) if worker_priorities else ()
        self.net: nx.TorchNet | None = None
        if spec.image:
            from drl.algorithms.dqn.networks import q_network

            self.net = nx.TorchNet(q_network(spec, cfg))
            self.shapes = self.net.shapes
        else:
            self.layers = len(cfg.hidden) + 1
            self.shapes = nx.mlp_shapes("net.", [int(np.prod(spec.obs_shape)), *cfg.hidden, spec.discrete_actions])
            self.weights = nx.zeros(self.shapes)
        self.rng = np.random.default_rng(seed)
        self.epsilon = cfg.eps_start

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Loads published weights; raises ValueError when their names or shapes do not fit this network."""
        if self.net is not None:
            self.net.load(weights)
        else:
            self.weights = nx.checked(weights, self.shapes)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        if self.net is not None:
            return self.net(obs)
        return nx.mlp(self.weights, "net.", self.layers, nx.flat(obs))

    def set_progress(self, fraction: float) -> None:
        """Where the worker is in its share (0 to 1): epsilon falls linearly over ``eps_decay_fraction`` of it."""
        cfg = self.cfg
        ramp = min(1.0, fraction / cfg.eps_decay_fraction) if cfg.eps_decay_fraction > 0 else 1.0
        self.epsilon = cfg.eps_start + ramp * (cfg.eps_end - cfg.eps_start)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        greedy = self.q_values(obs).argmax(1)
        if deterministic:
            return greedy.astype(np.int64)
        explore = self.rng.random(len(greedy)) < self.epsilon
        random = self.rng.integers(0, self.spec.discrete_actions, size=len(greedy))
        return np.where(explore, random, greedy).astype(np.int64)

    def priorities(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """|TD error| of each transition under this worker's copy of the online network (Ape-X's initial
        priorities: the trainer's target network is not needed for a first estimate)."""
        q = np.take_along_axis(
            self.q_values(arrays["obs"]), np.asarray(arrays["action"]).astype(np.int64).reshape(-1, 1), 1
        )[:, 0]
        nsteps = np.asarray(arrays["nsteps"], np.float32) if "nsteps" in arrays else 1.0
        done = np.asarray(arrays["terminated"], np.float32)
        target = np.asarray(arrays["reward"], np.float32) + self.cfg.gamma**nsteps * (1 - done) * self.q_values(
            arrays["next_obs"]
        ).max(1)
        return np.abs(q - target).astype(np.float32)

    def annotate(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"priority": self.priorities(arrays)} if self.annotates else {}
