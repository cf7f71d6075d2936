"""Redis Streams memory backend: at-least-once delivery with duplicates dropped, and bounded backlog.

Producers append entries with one Lua script that also refuses the entry while the stream holds
``max_backlog`` entries (back-pressure: the producer keeps its batch and waits, nothing is dropped), records
the producer's running total and returns the latest policy version and the stop flag, so a worker learns
of new policies without an extra round trip. The trainer reads through a consumer group, acknowledges and
deletes an entry only after it is in replay, so the stream length is exactly the backlog.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

import redis

from drl.errors import UserError

log = logging.getLogger(__name__)

GROUP = "trainer"

_ADD_SCRIPT = """
local n = redis.call('XLEN', KEYS[1])
local v = redis.call('GET', KEYS[2]) or '-1'
local s = redis.call('EXISTS', KEYS[3])
if n >= tonumber(ARGV[1]) then return {0, v, s} end
redis.call('XADD', KEYS[1], '*', 'h', ARGV[2], 'd', ARGV[3])
redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
return {1, v, s}
"""


class Keys:
    """Every Redis key of one run, sharing the hash tag {run} so a cluster keeps them on one slot."""

    def __init__(self, run: str):
        p = f"drl:{{{run}}}:"
        self.run = run
        self.stream = p + "exp"
        self.dead_letter = p + "dlq"
        self.dead_letter_counts = p + "dlq:counts"
        self.policy = p + "policy"
        self.policy_channel = p + "policy:announce"
        self.stop = p + "stop"
        self.produced = p + "produced"
        self.workers_done = p + "workers:done"
        self.trainer_done = p + "trainer:done"
        self.started_at = p + "started_at"

    def status(self, role: str) -> str:
        return f"drl:{{{self.run}}}:status:{role}"


def connect(url: str, timeout: float = 5.0) -> redis.Redis:
    """Opens and checks a connection; raises UserError naming the URL (without credentials) when it fails."""
    shown = redact(url)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=max(timeout, 30.0),
                                      health_check_interval=30)
    except ValueError as exc:
        raise UserError(f"memory URL {shown} is not valid: {exc}") from None
    try:
        if client.ping() is not True:
            raise UserError(f"memory URL {shown} did not answer PING like a Redis server")
    except redis.AuthenticationError as exc:
        raise UserError(f"memory server {shown} refused the credentials: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise UserError(f"memory server {shown} is unreachable: {exc}") from None
    except redis.ResponseError as exc:
        raise UserError(f"memory server {shown} answered PING with an error: {exc}") from None
    return client


def redact(url: str) -> str:
    """The URL with any password replaced, for messages and logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0] if ":" in creds else ""
    return f"{scheme}://{user}:***@{host}" if scheme else "***@" + host


def retrying(fn: Callable, what: str, attempts: int = 30, base: float = 0.1, cap: float = 2.0):
    """Calls fn, retrying connection errors with exponential backoff (the server may be restarting)."""
    delay = base
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if attempt == attempts:
                raise
            log.warning("%s failed (%s); retry %d/%d in %.1fs", what, exc, attempt, attempts, delay)
            time.sleep(delay)
            delay = min(cap, delay * 2)


def backlog_transitions(client: redis.Redis, keys: Keys) -> int:
    """Transitions in entries still in the stream (unread or unacknowledged), counted from their headers."""
    from drl._proto import experience_pb2

    total = 0
    for _, fields in retrying(lambda: client.xrange(keys.stream), "XRANGE"):
        header = experience_pb2.BatchHeader()
        try:
            header.ParseFromString(fields.get(b"h", b""))
        except Exception:  # an undecodable entry holds no countable transitions
            continue
        total += header.count
    return total


class Producer:
    """Appends encoded batches for one worker, waiting while the backlog is full."""

    def __init__(self, client: redis.Redis, keys: Keys, worker_id: str, max_backlog: int):
        self.client = client
        self.keys = keys
        self.worker_id = worker_id
        self.max_backlog = max_backlog
        self._add = client.register_script(_ADD_SCRIPT)
        self.waited_s = 0.0

    def send(self, h: bytes, d: bytes, produced_total: int) -> tuple[bool, int, bool]:
        """Appends one entry, waiting while the backlog is full.

        Returns (appended, latest announced policy version, stop requested); it gives up without appending
        only when the run is stopping.
        """
        keys = [self.keys.stream, self.keys.policy, self.keys.stop, self.keys.produced]
        args = [self.max_backlog, h, d, self.worker_id, produced_total]
        pause = 0.001
        while True:
            added, version, stop = retrying(lambda: self._add(keys=keys, args=args), "XADD")
            if added:
                return True, int(version), bool(stop)
            if stop:
                return False, int(version), True
            time.sleep(pause)
            self.waited_s += pause
            pause = min(0.05, pause * 2)


class Consumer:
    """The trainer's side: consumer-group reads, acknowledgement after insertion, dead-lettering."""

    def __init__(self, client: redis.Redis, keys: Keys, consumer: str = "trainer-0"):
        self.client = client
        self.keys = keys
        self.consumer = consumer
        self._pending_first = True
        try:
            client.xgroup_create(keys.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, count: int, block_ms: int | None) -> list[tuple[bytes, dict]]:
        """Returns up to count entries: this consumer's own pending ones first (after a restart), then new ones.

        ``block_ms`` None returns at once; a positive value waits that long for new entries (0 would wait
        forever, so it is refused).
        """
        if block_ms is not None and block_ms <= 0:
            raise ValueError("block_ms must be positive or None")
        if self._pending_first:
            got = self._xread("0", count, None)
            if got:
                return got
            self._pending_first = False
        return self._xread(">", count, block_ms)

    def _xread(self, start: str, count: int, block_ms: int | None) -> list[tuple[bytes, dict]]:
        reply = retrying(lambda: self.client.xreadgroup(GROUP, self.consumer, {self.keys.stream: start},
                                                        count=count, block=block_ms), "XREADGROUP")
        if not reply:
            return []
        return [(eid, fields) for eid, fields in reply[0][1] if fields is not None]

    def ack(self, ids: Iterable[bytes]) -> None:
        ids = list(ids)
        if not ids:
            return

        def _do():
            pipe = self.client.pipeline(transaction=False)
            pipe.xack(self.keys.stream, GROUP, *ids)
            pipe.xdel(self.keys.stream, *ids)
            pipe.execute()

        retrying(_do, "XACK")

    def dead_letter(self, entry_id: bytes, fields: dict, kind: str, reason: str) -> None:
        """Moves an entry to the dead-letter stream (capped), counted by kind, and acknowledges it."""
        fields = {k: v for k, v in fields.items() if isinstance(k, bytes)}
        fields[b"reason"] = reason.encode()[:1000]
        fields[b"kind"] = kind.encode()
        fields[b"source_id"] = entry_id

        def _do():
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(self.keys.dead_letter, fields, maxlen=10_000, approximate=True)
            pipe.hincrby(self.keys.dead_letter_counts, kind, 1)
            pipe.execute()

        retrying(_do, "dead-letter")
        self.ack([entry_id])

    def backlog(self) -> int:
        return int(retrying(lambda: self.client.xlen(self.keys.stream), "XLEN"))


class Announcer:
    """Policy version announcements: a key holding the latest version plus pub/sub for prompt wake-ups."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client = client
        self.keys = keys

    def announce(self, version: int) -> None:
        def _do():
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.policy, version)
            pipe.publish(self.keys.policy_channel, version)
            pipe.execute()

        retrying(_do, "announce")

    def latest(self) -> int:
        value = retrying(lambda: self.client.get(self.keys.policy), "GET policy")
        return -1 if value is None else int(value)

    def wait_for(self, min_version: int, timeout: float, should_stop: Callable[[], bool]) -> int:
        """Blocks until a version >= min_version is announced; returns it, or -1 when stopped or timed out."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self.keys.policy_channel)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                latest = self.latest()
                if latest >= min_version:
                    return latest
                if should_stop():
                    return -1
                pubsub.get_message(timeout=0.5)
            return -1
        finally:
            pubsub.close()
