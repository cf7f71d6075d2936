"""Redis Streams memory backend: at-least-once delivery with exactly-once effect, and a bounded backlog.

Producers append entries with one Lua script (``_ADD``) that refuses the entry while the backlog holds
``max_entries`` entries or ``max_bytes`` bytes (back-pressure: the producer keeps its batch and waits, nothing is
dropped; it waits blocked on ``Keys.freed``, where every commit that frees entries pushes one token per entry, so
a waiting producer wakes when there is room rather than polling), records the producer's running total, and
returns what the worker needs to know without another round trip: the latest policy version, the stop flag, the
trainer's consumed watermark for this worker, and the data epoch (a token that changes when the server lost its
data, so the worker re-sends what was not consumed; every call offers a fresh random token, which the first call
after a data loss installs).

The trainer reads through a consumer group and commits in one transaction (``_COMMIT``): acknowledge, delete,
release the backlog bytes and record its counters and per-worker sequence watermarks. A trainer restarted
after SIGKILL reloads that state and re-reads its own pending entries first, so every entry counts once.
"""

from __future__ import annotations

import collections
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import redis

from drl.memory.connection import connect, redact  # noqa: F401  (re-exported for callers)

log = logging.getLogger(__name__)

GROUP = "trainer"
RETRY_S = 120.0
BACKPRESSURE_FIRST_WAIT_S = 0.05
BACKPRESSURE_MAX_WAIT_S = 0.5

_ADD = """
local v = redis.call('GET', KEYS[2]) or '-1'
local s = redis.call('EXISTS', KEYS[3])
local m = string.match(redis.call('HGET', KEYS[6], ARGV[7]) or '0', '^%d+') or '0'
redis.call('SET', KEYS[7], ARGV[8], 'NX')
local e = redis.call('GET', KEYS[7])
local size = string.len(ARGV[3]) + string.len(ARGV[4])
local b = tonumber(redis.call('GET', KEYS[5]) or '0')
local r = tonumber(redis.call('GET', KEYS[9]) or '1') or 1
local share = redis.call('HGET', KEYS[10], ARGV[5]) or ''
if redis.call('XLEN', KEYS[1]) >= r * tonumber(ARGV[1]) or (b > 0 and b + size > r * tonumber(ARGV[2])) then
  redis.call('DEL', KEYS[8])
  return {0, v, s, m, e, r, share}
end
redis.call('XADD', KEYS[1], '*', 'h', ARGV[3], 'd', ARGV[4])
redis.call('INCRBY', KEYS[5], size)
if tonumber(ARGV[6]) > tonumber(redis.call('HGET', KEYS[4], ARGV[5]) or '0') then
  redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
end
return {1, v, s, m, e, r, share}
"""

_COMMIT = """
local n = tonumber(ARGV[2])
local freed = 0
local deleted = 0
for i = 0, n - 1 do
  local id = ARGV[3 + 2 * i]
  redis.call('XACK', KEYS[1], ARGV[1], id)
  if redis.call('XDEL', KEYS[1], id) == 1 then
    freed = freed + tonumber(ARGV[4 + 2 * i])
    deleted = deleted + 1
  end
end
if freed > 0 then
  local left = tonumber(redis.call('GET', KEYS[2]) or '0') - freed
  if left > 0 then redis.call('SET', KEYS[2], left) else redis.call('DEL', KEYS[2]) end
  local kept = 64
  for i = 1, math.min(deleted, kept) do redis.call('RPUSH', KEYS[4], '1') end
  redis.call('LTRIM', KEYS[4], -kept, -1)
end
if 3 + 2 * n <= #ARGV then redis.call('HSET', KEYS[3], unpack(ARGV, 3 + 2 * n)) end
return freed
"""


_RAISE = """
for i = 1, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 0
"""


class DirectScript:
    """A Lua script run on a connection of its own, outside the client's pool and command layers: for the one
    call a rollout worker makes per entry, those layers (pool checkout and release, retries, event hooks, the
    script wrapper) cost as much CPU as the round trip itself; on this path the append took about 200 us of a
    loaded Pendulum worker's CPU, and 100-130 us without them. The connection comes from the client's pool
    settings (credentials, TLS, timeouts, health checks); a connection error closes it (the next call connects
    again, so ``retrying`` covers it), and a server that lost its scripts (restarted) gets this one loaded again."""

    def __init__(self, client: redis.Redis, script: str):
        self.client = client
        self.script = script
        self.sha = client.register_script(script).sha
        self._conn: redis.connection.AbstractConnection | None = None

    def __call__(self, keys: list, args: list):
        if self._conn is None:
            self._conn = self.client.connection_pool.make_connection()
        try:
            return self._run(keys, args)
        except redis.exceptions.NoScriptError:
            self._conn.send_command("SCRIPT", "LOAD", self.script)
            self._conn.read_response()
            return self._run(keys, args)

    def _run(self, keys: list, args: list):
        self._conn.send_command("EVALSHA", self.sha, len(keys), *keys, *args)
        return self._conn.read_response()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None


class Keys:
    """Every Redis key of one run, sharing the hash tag {run} so a cluster keeps them on one slot."""

    def __init__(self, run: str):
        p = f"drl:{{{run}}}:"
        self.run = run
        self.stream = p + "exp"
        self.backlog_bytes = p + "exp:bytes"
        self.freed = p + "exp:freed"  # one token per entry a commit deleted: wakes producers held back
        self.room = p + "exp:room"  # the trainer's factor on the backlog's limits (absent: 1); see Consumer.set_room
        self.epoch = p + "epoch"
        self.consumer_state = p + "trainer:state"
        self.dead_letter = p + "dlq"
        self.dead_letter_counts = p + "dlq:counts"
        self.policy = p + "policy"
        self.policy_channel = p + "policy:announce"
        self.stop = p + "stop"
        self.produced = p + "produced"
        self.workers_done = p + "workers:done"
        self.trainer_done = p + "trainer:done"
        self.started_at = p + "started_at"
        self.members = p + "workers:members"  # rollout worker -> "active" | "retired" (live scaling)
        self.shares = p + "workers:shares"  # rollout worker -> transitions it is to produce in all

    def status(self, role: str) -> str:
        return f"drl:{{{self.run}}}:status:{role}"


def seq_field(worker_id: str) -> str:
    return f"seq:{worker_id}"


def retrying(fn: Callable, what: str, within: float = RETRY_S, base: float = 0.05, cap: float = 2.0):
    """Calls fn, retrying connection errors with exponential backoff for up to ``within`` seconds."""
    deadline = time.monotonic() + within
    delay = base
    attempt = 0
    while True:
        try:
            return fn()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            attempt += 1
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s failed (%s); retry %d in %.2fs", what, exc, attempt, delay)
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


def producer_position(client: redis.Redis, keys: Keys, worker_id: str) -> tuple[int, int]:
    """(last sequence number, transitions produced) of a worker, from the trainer's watermark, the entries
    still in the stream and the produced hash, so that a restarted worker process continues its numbering
    instead of having every entry dropped as a duplicate."""
    from drl._proto import experience_pb2

    raw = retrying(lambda: client.hget(keys.consumer_state, seq_field(worker_id)), "HGET watermark")
    seq = max((int(x) for x in raw.split(b",") if x), default=0) if raw else 0
    for _, fields in retrying(lambda: client.xrange(keys.stream), "XRANGE"):
        header = experience_pb2.BatchHeader()
        try:
            header.ParseFromString(fields.get(b"h", b""))
        except Exception:  # undecodable entries are the trainer's to dead-letter
            continue
        if header.worker_id == worker_id:
            seq = max(seq, header.seq)
    produced = retrying(lambda: client.hget(keys.produced, worker_id), "HGET produced")
    return seq, int(produced or 0)


@dataclass
class _Outgoing:
    seq: int
    h: bytes
    d: bytes
    produced_total: int


class Producer:
    """Appends one worker's entries in order; keeps those not yet consumed so it can re-send them.

    The retained entries are bounded by the backlog limit: an entry is dropped from the local buffer as soon
    as the trainer's watermark for this worker covers its sequence number.
    """

    def __init__(self, client: redis.Redis, keys: Keys, worker_id: str, max_entries: int, max_bytes: int,
                 retry_s: float = RETRY_S):
        self.client = client
        self.keys = keys
        self.worker_id = worker_id
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.retry_s = retry_s
        self._add = DirectScript(client, _ADD)
        self.outbox: collections.deque[_Outgoing] = collections.deque()
        self.retained: collections.deque[_Outgoing] = collections.deque()
        self._retained_ordered = True  # retained seqs never decrease: consumed ones can be popped from the left
        self.epoch: bytes | None = None
        self.room = 1
        self.share: int | None = None
        """This worker's assigned share (``Keys.shares``) as the last append read it; None without one."""
        self.waited_s = 0.0
        self.refused = 0
        self.resent = 0

    def send(self, seq: int, h: bytes, d: bytes, produced_total: int) -> tuple[bool, int, bool]:
        """Appends one entry (after any re-sends due before it), waiting while the backlog is full.

        Returns (appended, latest announced policy version, stop requested); it gives up without appending
        only when the run is stopping.
        """
        self.outbox.append(_Outgoing(seq, h, d, produced_total))
        return self._drain()

    def _drain(self) -> tuple[bool, int, bool]:
        version, stop = -1, False
        pause = BACKPRESSURE_FIRST_WAIT_S
        keys = [self.keys.stream, self.keys.policy, self.keys.stop, self.keys.produced, self.keys.backlog_bytes,
                self.keys.consumer_state, self.keys.epoch, self.keys.freed, self.keys.room, self.keys.shares]
        while self.outbox:
            item = self.outbox[0]
            args = [self.max_entries, self.max_bytes, item.h, item.d, self.worker_id, item.produced_total,
                    seq_field(self.worker_id), secrets.token_hex(8)]
            added, v, s, mark, epoch, room, share = retrying(lambda: self._add(keys, args), "XADD", self.retry_s)
            version, stop, self.room, self.share = int(v), bool(s), int(room), int(share) if share else None
            self._observe(int(mark), epoch)
            if added:
                self.outbox.remove(item)
                if self.retained and item.seq < self.retained[-1].seq:
                    self._retained_ordered = False
                self.retained.append(item)
                pause = BACKPRESSURE_FIRST_WAIT_S
                continue
            if stop:
                self.outbox.clear()
                return False, version, True
            self.refused += 1
            self._wait_for_room(pause)
            pause = min(BACKPRESSURE_MAX_WAIT_S, pause * 2)
        return True, version, stop

    def _wait_for_room(self, timeout: float) -> None:
        """Blocks until a commit frees an entry (a token on ``Keys.freed``) or ``timeout`` passes. The refusal
        cleared the tokens nobody waited for, so a token means room freed since; the timeout, which doubles
        with each refusal, covers a trainer that commits nothing (paused, dead) and the server's restarts."""
        started = time.perf_counter()
        try:
            self.client.blpop([self.keys.freed], timeout=timeout)
        except redis.RedisError:
            time.sleep(timeout)
        self.waited_s += time.perf_counter() - started

    def _observe(self, mark: int, epoch: bytes) -> None:
        """Drops consumed entries from the local buffer; after a data loss on the server, re-queues the rest."""
        if self.epoch is not None and epoch != self.epoch:
            lost = [r for r in self.retained if r.seq > mark]
            log.warning("memory server lost its data (epoch %s -> %s); re-sending %d unconsumed entries",
                        self.epoch.decode(), epoch.decode(), len(lost))
            self.resent += len(lost)
            self.outbox.extendleft(reversed(lost))
            self.retained.clear()
        self.epoch = epoch
        retained = self.retained
        if not retained:
            self._retained_ordered = True
        elif self._retained_ordered:
            while retained and retained[0].seq <= mark:
                retained.popleft()
        else:
            self.retained = collections.deque(r for r in retained if r.seq > mark)

    def wait_consumed(self, last_seq: int, timeout: float, should_stop: Callable[[], bool]) -> bool:
        """Blocks until the trainer has consumed every entry up to last_seq, re-sending after a data loss."""
        deadline = time.monotonic() + timeout

        def fetch():
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.epoch, secrets.token_hex(8), nx=True)
            pipe.get(self.keys.epoch)
            pipe.hget(self.keys.consumer_state, seq_field(self.worker_id))
            return pipe.execute()

        while time.monotonic() < deadline:
            _, epoch, raw = retrying(fetch, "HGET watermark", self.retry_s)
            mark = int((raw or b"0").split(b",")[0])
            self._observe(mark, epoch)
            if self.outbox and not self._drain()[0]:
                return False
            if mark >= last_seq:
                return True
            if should_stop():
                return False
            time.sleep(0.05)
        return False


class Consumer:
    """The trainer's side: consumer-group reads, reclaim, and atomic commit of acknowledgements and state."""

    def __init__(self, client: redis.Redis, keys: Keys, consumer: str = "trainer-0",
                 on_reset: Callable[[], None] | None = None, retry_s: float = RETRY_S):
        self.client = client
        self.keys = keys
        self.consumer = consumer
        self.on_reset = on_reset
        self.retry_s = retry_s
        self._commit = client.register_script(_COMMIT)
        self._raise = client.register_script(_RAISE)
        self._pending_first = True
        self.resets = 0
        self._ensure_group()

    def _ensure_group(self) -> bool:
        try:
            retrying(lambda: self.client.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True),
                     "XGROUP CREATE", self.retry_s)
            return True
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            return False

    def _call(self, fn: Callable, what: str):
        """Runs a group command; when the server lost the group (restarted empty), recreates it and says so."""
        while True:
            try:
                return retrying(fn, what, self.retry_s)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("consumer group gone (memory server restarted without data); recreating it")
                self._ensure_group()
                self.resets += 1
                self._pending_first = False
                if self.on_reset:
                    self.on_reset()

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
        reply = self._call(lambda: self.client.xreadgroup(GROUP, self.consumer, {self.keys.stream: start},
                                                          count=count, block=block_ms), "XREADGROUP")
        if not reply:
            return []
        return [(eid, fields) for eid, fields in reply[0][1] if fields is not None]

    def reclaim(self, min_idle_ms: int, count: int = 64) -> list[tuple[bytes, dict]]:
        """Claims entries left pending at other (dead) consumers for longer than min_idle_ms."""
        claimed: list[tuple[bytes, dict]] = []
        start = "0-0"
        while len(claimed) < count:
            reply = self._call(lambda: self.client.xautoclaim(self.keys.stream, GROUP, self.consumer, min_idle_ms,
                                                              start_id=start, count=count), "XAUTOCLAIM")
            start, entries = reply[0], reply[1]
            claimed += [(eid, fields) for eid, fields in entries if fields is not None]
            if start in (b"0-0", "0-0"):
                break
        return claimed

    def commit(self, acks: Iterable[tuple[bytes, int]], state: dict[str, str | int],
               dead: Iterable[tuple[bytes, dict, str, str]] = ()) -> None:
        """In one transaction: dead-letter entries, acknowledge and delete entries, release their bytes, and
        record the consumer's state (counters and watermarks), so a crash leaves all of it or none."""
        acks = list(acks)
        dead = list(dead)
        if not acks and not state and not dead:
            return
        args: list = [GROUP, len(acks)]
        for entry_id, size in acks:
            args += [entry_id, size]
        for key, value in state.items():
            args += [key, value]

        keys = [self.keys.stream, self.keys.backlog_bytes, self.keys.consumer_state, self.keys.freed]
        if not dead:
            # The script alone is atomic; a MULTI/EXEC pipeline would only add a round trip (the pipeline checks
            # SCRIPT EXISTS before every execute).
            self._call(lambda: self._commit(keys=keys, args=args), "commit")
            return

        def _do():
            pipe = self.client.pipeline(transaction=True)
            for entry_id, fields, kind, reason in dead:
                kept = {k: v for k, v in fields.items() if isinstance(k, bytes)}
                kept.update({b"reason": reason.encode()[:1000], b"kind": kind.encode(), b"source_id": entry_id})
                pipe.xadd(self.keys.dead_letter, kept, maxlen=10_000, approximate=True)
                pipe.hincrby(self.keys.dead_letter_counts, kind, 1)
            self._commit(keys=keys, args=args, client=pipe)
            pipe.execute()

        self._call(_do, "commit")

    def set_room(self, factor: int, client=None) -> None:
        """Widens the backlog's limits ``factor``-fold for every producer's next append (``Keys.room``; 1 restores
        them). The limits bound how much experience waits, and so its policy lag, while the learner is the
        bottleneck; a trainer that waits for data reads everything every few tens of milliseconds, so what waits
        is bounded by its read gap instead, and more room lets it read less often."""
        target = self.client if client is None else client
        if factor > 1:
            target.set(self.keys.room, factor)
        else:
            target.delete(self.keys.room)

    def raise_produced(self, produced: dict[str, int], client=None) -> None:
        """Raises each worker's ``produced`` count to at least the given one, never lowering it (``_RAISE``).
        After the server lost its data, workers re-send and go on appending, each append raising its own count,
        before the trainer notices; writing the trainer's older counts over theirs would lose their newer ones."""
        args = [x for worker, count in produced.items() for x in (worker, count)]
        if args:
            self._raise(keys=[self.keys.produced], args=args, client=client)

    def load_state(self) -> dict[str, str]:
        raw = retrying(lambda: self.client.hgetall(self.keys.consumer_state), "HGETALL state", self.retry_s)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def backlog(self) -> int:
        return int(retrying(lambda: self.client.xlen(self.keys.stream), "XLEN", self.retry_s))

    def backlog_bytes(self) -> int:
        return int(retrying(lambda: self.client.get(self.keys.backlog_bytes), "GET bytes", self.retry_s) or 0)


def entry_size(fields: dict) -> int:
    """Bytes an entry holds, as counted by the append script (h plus d)."""
    return sum(len(v) for k, v in fields.items() if k in (b"h", b"d") and isinstance(v, bytes))


class Announcer:
    """Policy version announcements: a key holding the latest version plus pub/sub for prompt wake-ups.

    ``wait_for`` keeps one pub/sub connection for the announcer's life: it subscribes when a wait starts and
    unsubscribes when it ends (so nothing piles up while the caller is busy), instead of opening and closing a
    connection per wait; with 32 workers on a node those reconnects were a large part of the CPU spent between an
    announcement and the last worker acting. After a connection error the connection is replaced; ``close``
    ends it.
    """

    def __init__(self, client: redis.Redis, keys: Keys, retry_s: float = RETRY_S):
        self.client = client
        self.keys = keys
        self.retry_s = retry_s
        self._pubsub: redis.client.PubSub | None = None

    def announce(self, version: int) -> None:
        def _do():
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.policy, version)
            pipe.publish(self.keys.policy_channel, version)
            pipe.execute()

        retrying(_do, "announce", self.retry_s)

    def latest(self) -> int:
        value = retrying(lambda: self.client.get(self.keys.policy), "GET policy", self.retry_s)
        return -1 if value is None else int(value)

    def wait_for(self, min_version: int, timeout: float, should_stop: Callable[[], bool]) -> int:
        """Blocks until a version >= min_version is announced; returns it, or -1 when stopped or timed out."""
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
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("policy announcements interrupted (%s); resubscribing", exc)
                self.close()
                time.sleep(0.2)
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
