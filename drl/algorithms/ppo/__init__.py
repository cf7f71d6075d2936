"""Proximal policy optimisation (clipped surrogate, GAE) for discrete and continuous actions; on-policy, SYNC."""

from drl.algorithms.ppo.actor import PPOActor
from drl.algorithms.ppo.config import PPOConfig
from drl.algorithms.ppo.learner import PPOLearner

__all__ = ["PPOActor", "PPOConfig", "PPOLearner"]
