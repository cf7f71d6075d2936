"""Policy version announcements on Redis: a key holding the latest version plus pub/sub for prompt wake-ups."""

from __future__ import annotations

import logging
import time
from typing import Callable

import redis

from drl.memory.base import MemoryUnavailable
from drl.memory.redis.connection import RETRY_S, retrying
from drl.memory.redis.keys import Keys
from drl.memory.redis.repair import Guard, count

log = logging.getLogger(__name__)


def announce_in(pipe, keys: Keys, version: int) -> None:
    """Queues an announcement on a pipeline: the version under ``policy`` first, then on the channel, so that a
    waiter woken by the message reads it (and one that subscribes later finds it in the key)."""
    pipe.set(keys.policy, version)
    pipe.publish(keys.policy_channel, version)


class Announcer:
    """``Announcements`` on Redis: a key holding the latest version plus pub/sub for prompt wake-ups.

    ``wait_for`` keeps one pub/sub connection for the announcer's life: it subscribes when a wait starts and
    unsubscribes when it ends (so nothing piles up while the caller is busy), instead of opening and closing a
    connection per wait: with many workers on a node, reconnecting at every wait would cost CPU between an
    announcement and the last worker acting. After a connection error the connection is replaced; ``close``
    ends it.
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, retry_s: float = RETRY_S, mirrors: tuple[redis.Redis, ...] = ()
    ):
        self.client = client
        self.mirrors = mirrors
        self.keys = keys
        self.retry_s = retry_s
        self.guard = Guard(client, keys, retry_s)
        self._pubsub: redis.client.PubSub | None = None

    def announce(self, version: int) -> None:
        """Announces on the run's server, after the version is on every other server of the run (``mirrors``),
        whose append script hands it to the workers of its shards: a worker woken by the announcement finds it
        in its own shard's replies too."""
        for mirror in self.mirrors:
            retrying(lambda mirror=mirror: mirror.set(self.keys.policy, version), "announce (mirror)", self.retry_s)

        def _do():
            pipe = self.client.pipeline(transaction=False)
            announce_in(pipe, self.keys, version)
            pipe.execute()

        retrying(_do, "announce", self.retry_s)

    def latest(self) -> int:
        """The announced version; one of the wrong type or not a count reads as none (-1), reported, until the
        trainer's next announcement writes over it."""
        value = self.guard.read(lambda: self.client.get(self.keys.policy), "GET policy", self.keys.policy, None)
        version = count(value)
        if value is not None and version is None:
            self.guard.report(self.keys.policy, "is not a policy version", "ignored")
        return -1 if version is None else version

    def wait_for(self, min_version: int, timeout: float, should_stop: Callable[[], bool]) -> int:
        """Blocks until a version >= min_version is announced; returns it, or -1 when stopped or timed out.
        ``should_stop`` is asked also while the server cannot be reached, so that a stop request is never held
        up by a connection that keeps failing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pubsub = self._subscribe()
                try:
                    while time.monotonic() < deadline:
                        latest = self.latest()
                        if latest >= min_version:
                            return latest
                        if should_stop():
                            return -1
                        self._next_announcement(pubsub, 0.5)
                finally:
                    self._unsubscribe()
            except (redis.ConnectionError, redis.TimeoutError, MemoryUnavailable) as exc:
                log.warning("policy announcements interrupted (%s); resubscribing", exc)
                self.close()
                time.sleep(0.2)
                if should_stop():
                    return -1
        return -1

    def _subscribe(self) -> "redis.client.PubSub":
        """Subscribes the kept connection (opened on first use) before ``latest`` is read, so that no
        announcement falls between the two."""
        if self._pubsub is None:
            self._pubsub = self.client.pubsub()
        self._pubsub.subscribe(self.keys.policy_channel)
        return self._pubsub

    def _unsubscribe(self) -> None:
        """Stops announcements reaching the idle connection until the next wait; drops a broken connection."""
        if self._pubsub is None:
            return
        try:
            self._pubsub.unsubscribe(self.keys.policy_channel)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.close()

    @staticmethod
    def _next_announcement(pubsub: "redis.client.PubSub", timeout: float) -> dict | None:
        """Waits up to ``timeout`` for an announcement, reading past (un)subscribe confirmations, which say
        nothing new."""
        end = time.monotonic() + timeout
        while True:
            message = pubsub.get_message(timeout=max(0.0, end - time.monotonic()))
            if message is None or message.get("type") == "message" or time.monotonic() >= end:
                return message

    def close(self) -> None:
        """Closes the kept pub/sub connection (a later ``wait_for`` opens a new one)."""
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            pubsub.close()
