"""Deep Q-learning for discrete actions: double DQN targets over n-step returns, optional prioritized replay."""

from drl.algorithms.dqn.actor import DQNActor
from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.dqn.learner import DQNLearner

__all__ = ["DQNActor", "DQNConfig", "DQNLearner"]
