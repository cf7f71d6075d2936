"""Twin delayed deep deterministic policy gradient (TD3) for continuous (Box) actions."""

from drl.algorithms.td3.actor import TD3Actor
from drl.algorithms.td3.config import TD3Config
from drl.algorithms.td3.learner import TD3Learner

__all__ = ["TD3Actor", "TD3Config", "TD3Learner"]
