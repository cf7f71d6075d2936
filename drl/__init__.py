"""drl: distributed reinforcement learning over a Redis memory backend and a policy data store."""

__version__ = "0.1.0"
