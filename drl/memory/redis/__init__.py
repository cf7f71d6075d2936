"""The memory backend on Redis Streams (Redis or Valkey): the only code of drl that talks Redis.

``RedisMemory`` implements ``drl.memory.base.MemoryBackend`` for one run over one checked connection:
``Producer`` and ``Consumer`` (``stream``) carry experience, ``Announcer`` (``announce``) policy versions,
``RedisRunControl`` (``control``) the run's control state; ``Keys`` names every key, ``scripts`` holds the Lua
scripts, ``connection`` the URL forms, credentials and retries, ``server`` the private server a local run starts.
"""

from __future__ import annotations

from typing import Callable

import redis

from drl.errors import UserError
from drl.memory.base import Identity, ShardMap, seq_field
from drl.memory.codec import entry_size
from drl.memory.redis.announce import Announcer
from drl.memory.redis.connection import RETRY_S, connect, redact, retrying
from drl.memory.redis.control import RedisRunControl
from drl.memory.redis.keys import Keys
from drl.memory.redis.repair import Guard
from drl.memory.redis.scripts import NEW_EPOCH
from drl.memory.redis.stream import Consumer, Producer
from drl.naming import memory_servers

__all__ = [
    "Announcer",
    "Consumer",
    "Keys",
    "Producer",
    "RedisMemory",
    "RedisRunControl",
    "connect",
    "entry_size",
    "redact",
    "retrying",
    "seq_field",
]


class RedisMemory:
    """``MemoryBackend`` on Redis connections (their pools), bound to one run with ``shards`` experience streams
    (``Keys`` names each shard's keys) on one server or spread over several.

    With N servers, shard s lives on server s mod N, and each server holds everything its shards' scripts touch
    in one step: the streams with their backlog and reader state, the produced counts of the workers appending
    there, the dead letters of those streams, and copies of the three control keys an append reads (announced
    version, stop flag, shares), which ``Announcer`` and ``RedisRunControl`` write to every server. The rest of
    the run's control state (membership, done markers, status, claims) lives on the first server only."""

    def __init__(
        self,
        clients: redis.Redis | list[redis.Redis],
        run: str,
        retry_s: float = RETRY_S,
        url: str = "",
        shards: int = 1,
    ):
        self.clients = list(clients) if isinstance(clients, (list, tuple)) else [clients]
        self.client, self.run, self.retry_s, self.url = self.clients[0], run, retry_s, url
        self.shards = max(1, shards)
        self.shard_map = ShardMap(self.shards)
        self.keys = Keys(run)
        self.identity = Identity()
        if len(self.clients) > self.shards:
            raise UserError(
                f"{len(self.clients)} memory servers for {self.shards} experience shard(s): each server "
                "holds whole shards (--memory-shards must be at least the number of memory URLs)"
            )

    @classmethod
    def open(
        cls,
        url: str,
        run: str,
        wait_s: float = 0.0,
        retry_s: float = RETRY_S,
        timeout: float = 5.0,
        env=None,
        shards: int = 1,
    ) -> "RedisMemory":
        """Connects and checks each server of ``url`` (one URL or several separated by commas;
        ``connection.connect``: an unreachable one is waited for ``wait_s``; credentials from ``env``'s
        ``DRL_MEMORY_*`` variables, default this process's environment, the same for every server)."""
        urls = memory_servers(url) or [url]
        clients: list[redis.Redis] = []
        try:
            for one in urls:
                clients.append(connect(one, timeout=timeout, wait_s=wait_s, env=env))
            return cls(clients, run, retry_s, url, shards)
        except BaseException:
            for client in clients:
                client.close()
            raise

    def server_of(self, shard: int) -> redis.Redis:
        return self.clients[shard % len(self.clients)]

    def take_identity(self, name: str) -> int:
        """Takes a new epoch for ``name`` in the run's ``leases`` on the first server (``scripts.NEW_EPOCH``: one
        number orders every process that ever took it) and fences this backend's writes as ``name`` with it."""
        script = self.client.register_script(NEW_EPOCH)
        epoch = int(
            Guard(self.client, self.keys, self.retry_s).call(
                lambda: script(keys=[self.keys.leases], args=[name]), "take identity", key=self.keys.leases
            )
        )
        self.identity.name, self.identity.epoch = name, epoch
        return epoch

    def writer(self, worker: str, max_entries: int, max_bytes: int) -> Producer:
        shard = self.shard_map.of(worker)
        return Producer(
            self.server_of(shard),
            Keys(self.run, shard),
            worker,
            max_entries,
            max_bytes,
            retry_s=self.retry_s,
            epoch=self.identity.of(worker),
        )

    def reader(self, name: str, on_reset: Callable[[], None] | None = None, shard: int = 0) -> Consumer:
        """The reader of ``shard``, fenced as this backend's identity when one was taken (a trainer or learner
        reads its shards as itself)."""
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} of a run with {self.shards} shard(s)")
        taken = self.identity.epoch
        return Consumer(
            self.server_of(shard),
            Keys(self.run, shard),
            consumer=name,
            on_reset=on_reset,
            retry_s=self.retry_s,
            identity=None if taken is None else (self.identity.name, taken),
        )

    def announcements(self) -> Announcer:
        return Announcer(self.client, self.keys, retry_s=self.retry_s, mirrors=tuple(self.clients[1:]))

    def control(self) -> RedisRunControl:
        return RedisRunControl(
            self.client,
            self.keys,
            retry_s=self.retry_s,
            shards=self.shards,
            servers=tuple(self.clients),
            identity=self.identity,
        )

    def describe(self) -> str:
        return redact(self.url) if self.url else repr(self.client)

    def close(self) -> None:
        for client in self.clients:
            client.close()
