"""Experience transport between rollout workers and the trainer (Redis Streams)."""

from drl.memory.redis_backend import Keys, Producer, Consumer, connect

__all__ = ["Keys", "Producer", "Consumer", "connect"]
