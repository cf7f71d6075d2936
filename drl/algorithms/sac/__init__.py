"""Soft actor-critic for continuous (Box) actions."""

from drl.algorithms.sac.actor import SACActor
from drl.algorithms.sac.config import SACConfig
from drl.algorithms.sac.learner import SACLearner

__all__ = ["SACActor", "SACConfig", "SACLearner"]
