"""Transitional: the private server moved to ``drl.memory.redis.server`` (``drl.memory.private_server``)."""

from drl.memory.redis.server import RedisServer, find_server_binary  # noqa: F401
from drl.process import die_with_parent, free_port  # noqa: F401
