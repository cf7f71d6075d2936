"""Soft actor-critic for continuous (Box) actions.

The learner and actor (and torch with them) load on first use, so that reading a configuration, as the
command line does, stays light.
"""

from drl.algorithms import lazy_exports
from drl.algorithms.sac.config import SACConfig

__all__ = ["SACActor", "SACConfig", "SACLearner"]
__getattr__ = lazy_exports(__name__, {"SACActor": "actor", "SACLearner": "learner"})
