"""Deep Q-learning for discrete actions: double DQN targets over n-step returns, optional prioritized replay.

The learner and actor (and torch with them) load on first use, so that reading a configuration, as the
command line does, stays light.
"""

from drl.algorithms import lazy_exports
from drl.algorithms.dqn.config import DQNConfig

__all__ = ["DQNActor", "DQNConfig", "DQNLearner"]
__getattr__ = lazy_exports(__name__, {"DQNActor": "actor", "DQNLearner": "learner"})
