"""``RunControl`` on Redis: the run's stop flag, membership and shares, done markers, status hashes and counters,
each under its key of ``Keys``."""

from __future__ import annotations

from typing import Callable, Iterable

import redis

from drl.memory.base import Identity, merge_states
from drl.memory.redis.connection import RETRY_S, plain
from drl.memory.redis.keys import Keys
from drl.memory.redis.repair import STATES, Guard, count, worker
from drl.memory.redis.scripts import CLAIM, DONE, REGISTER, RELEASE, STATUS
from drl.memory.redis.stream import backlog_transitions, committed_state


def _text(raw: dict) -> dict[str, str]:
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}


class RedisRunControl:
    """Every call retries an unreachable server for ``retry_s`` seconds (then ``MemoryUnavailable``); a request the
    server refuses for another reason is ``MemoryBackendError``. What is read is checked (``drl.memory.redis.repair``):
    a key of the wrong type reads as absent, an unsound value is left out; a write to a key of the wrong type
    repairs it first. Each is reported in one log line naming the key.

    With several servers (``servers``, the first being ``client``; ``drl.memory.redis.RedisMemory``), the stop
    flag and the shares are written to every server, produced counts (each worker's highest) and dead letters
    are gathered from all of them, and each shard's ledger and backlog are read on its own server."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        retry_s: float = RETRY_S,
        shards: int = 1,
        servers: tuple[redis.Redis, ...] = (),
        identity: Identity | None = None,
    ):
        self.client, self.keys, self.retry_s = client, keys, retry_s
        self.identity = identity or Identity()
        self.shards = max(1, shards)
        self.guard = Guard(client, keys, retry_s)
        self.servers = tuple(servers) or (client,)
        self.mirrors = [(c, Guard(c, keys, retry_s)) for c in self.servers[1:]]
        self._register = client.register_script(REGISTER)
        self._done = client.register_script(DONE)
        self._status = client.register_script(STATUS)

    def _call(self, fn: Callable, what: str, key: str | None = None):
        return self.guard.call(fn, what, key=key)

    def _read(self, fn: Callable, what: str, key: str, default):
        return self.guard.read(fn, what, key, default)

    def _number(self, key: str, what: str) -> int | None:
        raw = self._read(lambda: self.client.get(key), what, key, None)
        value = count(raw)
        if raw is not None and value is None:
            self.guard.report(key, "is not a count", "ignored")
        return value

    # -- stop flag
    def stop_reason(self) -> str | None:
        """The flag stops the run by existing: one of the wrong type or with unreadable text still stops it."""
        value = self._read(lambda: self.client.get(self.keys.stop), "GET stop", self.keys.stop, b"unreadable")
        return None if value is None else value.decode(errors="replace")

    def request_stop(self, reason: str) -> None:
        self._call(lambda: self.client.set(self.keys.stop, reason), "SET stop")
        for client, guard in self.mirrors:
            guard.call(lambda client=client: client.set(self.keys.stop, reason), "SET stop (mirror)")

    # -- membership and shares
    def _members(self, raw: dict) -> dict[str, str]:
        out = {}
        for name, state in _text(raw).items():
            if worker(name) and state in STATES:
                out[name] = state
            else:
                self.guard.report(self.keys.members, f"field {name!r} = {state!r} is not a worker's state", "ignored")
        return out

    def _shares(self, raw: dict) -> dict[str, int]:
        return {k: v for k, v in self.guard.counts(raw, self.keys.shares).items() if worker(k)}

    def members(self) -> dict[str, str]:
        return self._members(
            self._read(lambda: self.client.hgetall(self.keys.members), "HGETALL members", self.keys.members, {})
        )

    def shares(self) -> dict[str, int]:
        return self._shares(
            self._read(lambda: self.client.hgetall(self.keys.shares), "HGETALL shares", self.keys.shares, {})
        )

    def share(self, worker: str) -> int | None:
        raw = self._read(lambda: self.client.hget(self.keys.shares, worker), "HGET share", self.keys.shares, None)
        value = count(raw)
        if raw is not None and value is None:
            self.guard.report(self.keys.shares, f"field {worker} is not a count", "ignored")
        return value

    def register(
        self,
        members: dict[str, str],
        shares: dict[str, int],
        only_new: bool = False,
        forget_done: Iterable[str] = (),
        started_at: float | None = None,
    ) -> None:
        forget = list(forget_done)
        if not (members or shares or forget or started_at is not None):
            return
        args: list = [1 if only_new else 0, len(members), len(shares), len(forget)]
        for name, state in members.items():
            args += [name, state]
        for name, value in shares.items():
            args += [name, value]
        args += forget
        if started_at is not None:
            args.append(repr(float(started_at)))
        keys = [self.keys.members, self.keys.shares, self.keys.started_at, self.keys.workers_done]
        self._call(lambda: self._register(keys=keys, args=args), "register members")
        if shares and self.mirrors:
            self._mirror_shares()

    def _mirror_shares(self) -> None:
        """Copies the shares from the first server to the others, where appends read them."""
        shares = self.shares()

        def copy(client):
            pipe = client.pipeline(transaction=True)
            pipe.delete(self.keys.shares)
            if shares:
                pipe.hset(self.keys.shares, mapping=shares)
            pipe.execute()

        for client, guard in self.mirrors:
            guard.call(lambda client=client: copy(client), "copy shares (mirror)", key=self.keys.shares)

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
        def _do():
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.keys.produced)
            pipe.hgetall(self.keys.shares)
            pipe.hgetall(self.keys.members)
            return pipe.execute(raise_on_error=False)

        replies = self._call(_do, "read membership")
        for key, reply in zip((self.keys.produced, self.keys.shares, self.keys.members), replies):
            if isinstance(reply, redis.ResponseError):
                self.guard.report(key, "has the wrong type", "ignored")
        produced, shares, members = ({} if isinstance(r, redis.ResponseError) else r for r in replies)
        return self._with_mirrored(self._produced(produced)), self._shares(shares), self._members(members)

    # -- done markers
    def mark_worker_done(self, worker: str, produced: int) -> None:
        """The marker and the worker's produced count (raised, never lowered) in one step."""
        keys = [self.keys.workers_done, self.keys.produced, self.keys.leases]
        epoch = self.identity.of(worker)
        self._call(lambda: self._done(keys=keys, args=[worker, produced, "" if epoch is None else epoch]), "HSET done")

    def workers_done(self) -> dict[str, int]:
        raw = self._read(
            lambda: self.client.hgetall(self.keys.workers_done), "HGETALL done", self.keys.workers_done, {}
        )
        return self.guard.counts(raw, self.keys.workers_done)

    def forget_workers_done(self, workers: Iterable[str]) -> None:
        names = list(workers)
        if names:
            self._call(lambda: self.client.hdel(self.keys.workers_done, *names), "HDEL done", self.keys.workers_done)

    def mark_trainer_done(self, version: int) -> None:
        self._call(lambda: self.client.set(self.keys.trainer_done, version), "SET trainer done")

    def trainer_done(self) -> int | None:
        return self._number(self.keys.trainer_done, "GET trainer done")

    # -- status
    def write_status(self, name: str, fields: dict) -> None:
        mapping = plain({k: ("" if v is None else v) for k, v in fields.items()})
        key = self.keys.status(name)
        epoch = self.identity.of(name)
        if not mapping:
            return
        if epoch is None:
            self._call(lambda: self.client.hset(key, mapping=mapping), "HSET status", key)
            return
        args = [name, epoch, *(x for pair in mapping.items() for x in pair)]
        self._call(lambda: self._status(keys=[key, self.keys.leases], args=args), "HSET status", key)

    def status(self, name: str) -> dict[str, str]:
        key = self.keys.status(name)
        return _text(self._read(lambda: self.client.hgetall(key), "HGETALL status", key, {}))

    def statuses(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        names = list(names)

        def _do():
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(self.keys.status(name))
            return pipe.execute(raise_on_error=False)

        out = {}
        for name, raw in zip(names, self._call(_do, "HGETALL status")):
            if isinstance(raw, redis.ResponseError):
                self.guard.report(self.keys.status(name), "has the wrong type", "ignored")
                raw = {}
            out[name] = _text(raw)
        return out

    def forget_status_field(self, name: str, field: str) -> None:
        key = self.keys.status(name)
        self._call(lambda: self.client.hdel(key, field), "HDEL status", key)

    # -- summary and start
    def started_at(self) -> float | None:
        raw = self._read(lambda: self.client.get(self.keys.started_at), "GET started_at", self.keys.started_at, None)
        try:
            value = None if raw is None else float(raw)
        except ValueError:
            value = None
        if raw is not None and (value is None or not 0 < value < 1e11):
            self.guard.report(self.keys.started_at, "is not a Unix time", "ignored")
            return None
        return value

    def set_started_at(self, when: float) -> None:
        self._call(lambda: self.client.set(self.keys.started_at, when), "SET started_at")

    def _produced(self, raw: dict) -> dict[str, int]:
        return self.guard.counts(raw, self.keys.produced)

    def produced(self) -> dict[str, int]:
        return self._with_mirrored(
            self._produced(
                self._read(lambda: self.client.hgetall(self.keys.produced), "HGETALL produced", self.keys.produced, {})
            )
        )

    def _with_mirrored(self, produced: dict[str, int]) -> dict[str, int]:
        """Each worker's highest count over every server: a worker's appends raise it on its shard's server, its
        done marker on the first."""
        key = self.keys.produced
        for client, guard in self.mirrors:
            for name, value in guard.counts(
                guard.read(lambda client=client: client.hgetall(key), "HGETALL produced", key, {}), key
            ).items():
                produced[name] = max(produced.get(name, 0), value)
        return produced

    def dead_letters(self) -> dict[str, int]:
        """The dead-letter counts by kind, summed over the servers (each counts its own streams')."""
        key = self.keys.dead_letter_counts
        total: dict[str, int] = {}
        for client, guard in ((self.client, self.guard), *self.mirrors):
            for kind, value in guard.counts(
                guard.read(lambda client=client: client.hgetall(key), "HGETALL dlq", key, {}), key
            ).items():
                total[kind] = total.get(kind, 0) + value
        return total

    def _shard_keys(self) -> list[Keys]:
        return [Keys(self.keys.run, s) for s in range(self.shards)]

    def unconsumed(self, ledger: dict[str, str] | None = None) -> int:
        """Transitions still in every shard's stream that its reader has not taken (with ``ledger``: that one
        state, a merged one, for every shard)."""
        return sum(backlog_transitions(self._server(keys), keys, self.retry_s, ledger) for keys in self._shard_keys())

    def _server(self, keys: Keys) -> redis.Redis:
        return self.servers[keys.shard % len(self.servers)]

    def ledger(self) -> dict[str, str]:
        """The readers' committed states of every shard as one (``drl.memory.base.merge_states``)."""
        if self.shards == 1:
            return committed_state(self.client, self.keys, self.retry_s)
        return merge_states(committed_state(self._server(keys), keys, self.retry_s) for keys in self._shard_keys())

    def has_data(self) -> bool:
        return any(
            self._call(lambda client=client: client.exists(self.keys.policy, self.keys.stream), "EXISTS run")
            for client in self.servers
        )

    def clear(self) -> None:
        claims = self.keys.claim("").encode()

        def _do(client) -> None:
            stale = [k for k in client.scan_iter(match=f"{self.keys.prefix}*", count=1000) if not k.startswith(claims)]
            if stale:
                client.delete(*stale)

        for client in self.servers:
            self._call(lambda client=client: _do(client), "delete the run's keys")

    # -- claims
    def claim(self, name: str, holder: str, ttl_s: float) -> str | None:
        ms = max(1, int(ttl_s * 1000))
        script = self.client.register_script(CLAIM)
        other = self._call(
            lambda: script(keys=[self.keys.claim(name)], args=[holder, ms]), "claim", key=self.keys.claim(name)
        )
        return None if other is None else other.decode(errors="replace")

    def release(self, name: str, holder: str) -> None:
        script = self.client.register_script(RELEASE)
        self._call(
            lambda: script(keys=[self.keys.claim(name)], args=[holder]), "release claim", key=self.keys.claim(name)
        )
