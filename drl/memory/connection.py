"""Transitional: moved to ``drl.memory.redis.connection``."""

from drl.memory.redis.connection import connect, credentials_from_env, redact, url_has_password  # noqa: F401
