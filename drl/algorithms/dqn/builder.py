"""DQN's builder: replay-based; its workers fold n-step transitions (``drl.acting.nstep``) and, with
``--prioritized --worker-priorities``, compute each transition's initial priority (Ape-X)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from drl import device
from drl.acting.nstep import NSTEP_FIELDS, NStepFolder
from drl.algorithms.base import Actor, Algorithm, FieldSpecs, Folder, Learner, Parameters, mlp_parameters, register
from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.encoders import encoder_parameters
from drl.envs import SpaceSpec

if TYPE_CHECKING:
    import numpy as np

    from drl.config import ExperimentConfig

PRIORITY_FIELD: FieldSpecs = {"priority": ("<f4", ())}
"""The initial replay priority a worker computes (``DQNActor.annotate``), read by ``drl.training.replay.PrioritizedReplay``."""


class DQNBuilder(Algorithm):
    name = "dqn"
    config = DQNConfig
    doc = "DQN hyperparameters."
    discrete = True
    worker_priorities = True

    def parameters(self, spec: SpaceSpec, cfg: ExperimentConfig) -> Parameters:
        """A Q network and its target copy (``drl.algorithms.dqn.networks``); workers act with the Q network.
        Raises UserError when the configured encoder cannot read the observations."""
        hyper = self.hyper(cfg)
        if spec.image:
            encoder, features = encoder_parameters(hyper.encoder, spec.obs_shape)
            q = encoder + mlp_parameters([features, spec.discrete_actions])
        else:
            q = mlp_parameters([math.prod(spec.obs_shape), *hyper.hidden, spec.discrete_actions])
        return Parameters(trained=q, frozen=q, acting=q)

    def wire_fields(self, cfg: ExperimentConfig) -> FieldSpecs:
        fields = dict(NSTEP_FIELDS)
        if self._worker_priorities(cfg):
            fields.update(PRIORITY_FIELD)
        return fields

    @staticmethod
    def _worker_priorities(cfg: ExperimentConfig) -> bool:
        return bool(cfg.prioritized and cfg.worker_priorities)

    def make_actor(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Actor:
        from drl.algorithms.dqn.actor import DQNActor

        return DQNActor(spec, self.hyper(cfg), seed, worker_priorities=self._worker_priorities(cfg))

    def acting_network(self, spec: SpaceSpec, cfg: ExperimentConfig, weights: dict[str, np.ndarray]) -> Any:
        from drl.algorithms import exporting

        return exporting.dqn(spec, self.hyper(cfg), weights)

    def make_learner(self, spec: SpaceSpec, cfg: ExperimentConfig, seed: int) -> Learner:
        from drl.algorithms.dqn.learner import DQNLearner

        return DQNLearner(spec, self.hyper(cfg), seed, device=device.of(cfg))

    def make_folder(self, cfg: ExperimentConfig) -> Folder:
        hyper = self.hyper(cfg)
        return NStepFolder(hyper.n_step, hyper.gamma, cfg.envs_per_worker)


register(DQNBuilder())
