"""Transitional: the Redis implementation moved to ``drl.memory.redis``; callers use ``drl.memory``'s protocols."""

from drl.memory.redis import Announcer, Consumer, Keys, Producer, connect, entry_size, redact, retrying, seq_field  # noqa: F401
from drl.memory.redis.stream import backlog_transitions, producer_position  # noqa: F401
