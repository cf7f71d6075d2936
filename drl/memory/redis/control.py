"""``RunControl`` on Redis: the run's stop flag, membership and shares, done markers, status hashes and counters,
each under its key of ``Keys``."""

from __future__ import annotations

from typing import Callable, Iterable

import redis

from drl.memory.redis.connection import RETRY_S, plain, retrying
from drl.memory.redis.keys import Keys
from drl.memory.redis.stream import backlog_transitions


CLAIM = """
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
"""Takes or extends a claim (KEYS[1]) for a holder (ARGV[1]) for ARGV[2] ms; returns the other holder that has it."""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _text(raw: dict) -> dict[str, str]:
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}


def _counts(raw: dict) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in raw.items()}


class RedisRunControl:
    """Every call retries an unreachable server for ``retry_s`` seconds (then ``MemoryUnavailable``); a request the
    server refuses (a key of the wrong type, say) is ``MemoryBackendError``."""

    def __init__(self, client: redis.Redis, keys: Keys, retry_s: float = RETRY_S):
        self.client, self.keys, self.retry_s = client, keys, retry_s

    def _call(self, fn: Callable, what: str):
        return retrying(fn, what, self.retry_s)

    def _transaction(self, build: Callable, what: str) -> list:
        def _do():
            pipe = self.client.pipeline(transaction=True)
            build(pipe)
            return pipe.execute()

        return self._call(_do, what)

    # -- stop flag
    def stop_reason(self) -> str | None:
        value = self._call(lambda: self.client.get(self.keys.stop), "GET stop")
        return None if value is None else value.decode(errors="replace")

    def request_stop(self, reason: str) -> None:
        self._call(lambda: self.client.set(self.keys.stop, reason), "SET stop")

    # -- membership and shares
    def members(self) -> dict[str, str]:
        return _text(self._call(lambda: self.client.hgetall(self.keys.members), "HGETALL members"))

    def shares(self) -> dict[str, int]:
        return _counts(self._call(lambda: self.client.hgetall(self.keys.shares), "HGETALL shares"))

    def share(self, worker: str) -> int | None:
        value = self._call(lambda: self.client.hget(self.keys.shares, worker), "HGET share")
        return None if value is None else int(value)

    def register(self, members: dict[str, str], shares: dict[str, int], only_new: bool = False) -> None:
        def build(pipe) -> None:
            if only_new:
                for name, state in members.items():
                    pipe.hsetnx(self.keys.members, name, state)
                for name, value in shares.items():
                    pipe.hsetnx(self.keys.shares, name, value)
                return
            if members:
                pipe.hset(self.keys.members, mapping=members)
            if shares:
                pipe.hset(self.keys.shares, mapping=shares)

        if members or shares:
            self._transaction(build, "register members")

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
        def build(pipe) -> None:
            pipe.hgetall(self.keys.produced)
            pipe.hgetall(self.keys.shares)
            pipe.hgetall(self.keys.members)

        produced, shares, members = self._transaction(build, "read membership")
        return _counts(produced), _counts(shares), _text(members)

    # -- done markers
    def mark_worker_done(self, worker: str, produced: int) -> None:
        self._call(lambda: self.client.hset(self.keys.workers_done, worker, produced), "HSET done")

    def workers_done(self) -> dict[str, int]:
        return _counts(self._call(lambda: self.client.hgetall(self.keys.workers_done), "HGETALL done"))

    def forget_workers_done(self, workers: Iterable[str]) -> None:
        names = list(workers)
        if names:
            self._call(lambda: self.client.hdel(self.keys.workers_done, *names), "HDEL done")

    def mark_trainer_done(self, version: int) -> None:
        self._call(lambda: self.client.set(self.keys.trainer_done, version), "SET trainer done")

    def trainer_done(self) -> int | None:
        value = self._call(lambda: self.client.get(self.keys.trainer_done), "GET trainer done")
        return None if value is None else int(value)

    # -- status
    def write_status(self, name: str, fields: dict) -> None:
        mapping = plain({k: ("" if v is None else v) for k, v in fields.items()})
        if mapping:
            self._call(lambda: self.client.hset(self.keys.status(name), mapping=mapping), "HSET status")

    def status(self, name: str) -> dict[str, str]:
        return _text(self._call(lambda: self.client.hgetall(self.keys.status(name)), "HGETALL status"))

    def statuses(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        names = list(names)

        def _do():
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(self.keys.status(name))
            return pipe.execute()

        return {name: _text(raw) for name, raw in zip(names, self._call(_do, "HGETALL status"))}

    def forget_status_field(self, name: str, field: str) -> None:
        self._call(lambda: self.client.hdel(self.keys.status(name), field), "HDEL status")

    # -- summary and start
    def started_at(self) -> float | None:
        value = self._call(lambda: self.client.get(self.keys.started_at), "GET started_at")
        return None if value is None else float(value)

    def set_started_at(self, when: float) -> None:
        self._call(lambda: self.client.set(self.keys.started_at, when), "SET started_at")

    def produced(self) -> dict[str, int]:
        return _counts(self._call(lambda: self.client.hgetall(self.keys.produced), "HGETALL produced"))

    def dead_letters(self) -> dict[str, int]:
        return _counts(self._call(lambda: self.client.hgetall(self.keys.dead_letter_counts), "HGETALL dlq"))

    def unconsumed(self) -> int:
        return backlog_transitions(self.client, self.keys, self.retry_s)

    def has_data(self) -> bool:
        return bool(self._call(lambda: self.client.exists(self.keys.policy, self.keys.stream), "EXISTS run"))

    def clear(self) -> None:
        claims = self.keys.claim("").encode()

        def _do() -> None:
            stale = [k for k in self.client.scan_iter(match=f"{self.keys.prefix}*", count=1000)
                     if not k.startswith(claims)]
            if stale:
                self.client.delete(*stale)

        self._call(_do, "delete the run's keys")

    # -- claims
    def claim(self, name: str, holder: str, ttl_s: float) -> str | None:
        ms = max(1, int(ttl_s * 1000))
        script = self.client.register_script(CLAIM)
        other = self._call(lambda: script(keys=[self.keys.claim(name)], args=[holder, ms]), "claim")
        return None if other is None else other.decode(errors="replace")

    def release(self, name: str, holder: str) -> None:
        script = self.client.register_script(RELEASE)
        self._call(lambda: script(keys=[self.keys.claim(name)], args=[holder]), "release claim")
