"""The memory backend on Redis Streams (Redis or Valkey): the only code of drl that talks Redis.

``RedisMemory`` implements ``drl.memory.base.MemoryBackend`` for one run over one checked connection:
``Producer`` and ``Consumer`` (``stream``) carry experience, ``Announcer`` (``announce``) policy versions,
``RedisRunControl`` (``control``) the run's control state; ``Keys`` names every key, ``scripts`` holds the Lua
scripts, ``connection`` the URL forms, credentials and retries, ``server`` the private server a local run starts.
"""

from __future__ import annotations

from typing import Callable

import redis

from drl.memory.redis.announce import Announcer
from drl.memory.redis.connection import RETRY_S, connect, redact, retrying
from drl.memory.redis.control import RedisRunControl
from drl.memory.base import seq_field
from drl.naming import shard_of
from drl.memory.codec import entry_size
from drl.memory.redis.keys import Keys
from drl.memory.redis.stream import Consumer, Producer

__all__ = ["Announcer", "Consumer", "Keys", "Producer", "RedisMemory", "RedisRunControl", "connect", "entry_size",
           "redact", "retrying", "seq_field"]


class RedisMemory:
    """``MemoryBackend`` on one Redis connection (its pool), bound to one run with ``shards`` experience streams
    on this server (``Keys`` names each shard's keys)."""

    def __init__(self, client: redis.Redis, run: str, retry_s: float = RETRY_S, url: str = "", shards: int = 1):
        self.client, self.run, self.retry_s, self.url = client, run, retry_s, url
        self.shards = max(1, shards)
        self.keys = Keys(run)

    @classmethod
    def open(cls, url: str, run: str, wait_s: float = 0.0, retry_s: float = RETRY_S,
             timeout: float = 5.0, env=None, shards: int = 1) -> "RedisMemory":
        """Connects and checks the server (``connection.connect``: an unreachable one is waited for ``wait_s``;
        credentials from ``env``'s ``DRL_MEMORY_*`` variables, default this process's environment)."""
        return cls(connect(url, timeout=timeout, wait_s=wait_s, env=env), run, retry_s, url, shards)

    def writer(self, worker: str, max_entries: int, max_bytes: int) -> Producer:
        keys = Keys(self.run, shard_of(worker, self.shards))
        return Producer(self.client, keys, worker, max_entries, max_bytes, retry_s=self.retry_s)

    def reader(self, name: str, on_reset: Callable[[], None] | None = None, shard: int = 0) -> Consumer:
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} of a run with {self.shards} shard(s)")
        return Consumer(self.client, Keys(self.run, shard), consumer=name, on_reset=on_reset, retry_s=self.retry_s)

    def announcements(self) -> Announcer:
        return Announcer(self.client, self.keys, retry_s=self.retry_s)

    def control(self) -> RedisRunControl:
        return RedisRunControl(self.client, self.keys, retry_s=self.retry_s, shards=self.shards)

    def describe(self) -> str:
        return redact(self.url) if self.url else repr(self.client)

    def close(self) -> None:
        self.client.close()
