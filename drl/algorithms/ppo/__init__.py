"""Proximal policy optimisation (clipped surrogate, GAE) for discrete and continuous actions; on-policy, SYNC.

The learner and actor (and torch with them) load on first use, so that reading a configuration, as the
command line does, stays light.
"""

from drl.algorithms import lazy_exports
from drl.algorithms.ppo.config import PPOConfig

__all__ = ["PPOActor", "PPOConfig", "PPOLearner"]
__getattr__ = lazy_exports(__name__, {"PPOActor": "actor", "PPOLearner": "learner"})
