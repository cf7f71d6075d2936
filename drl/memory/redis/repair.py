"""The run's keys are shared state that anything with access to the server can overwrite; this module keeps what
drl reads from them sound (docs/internals.md, "Shared state on the memory server").

Every key has a type and a rule for its values (``SCHEMA``). The Lua scripts check every key they write or rely
on before writing anything and fail with ``UNSOUNDKEY <key> <why>``; plain commands on a key of the wrong type fail
with ``WRONGTYPE``. ``Guard.call`` then reports the key in one log line, repairs it (``scripts.REPAIR``) and calls
again, a bounded number of times. Values read with plain commands go through the ``Guard.count``-style parsers: an
unsound one is reported and read as absent (ignored), never raised as a crash. Counts are decimal integers of at
most 15 digits (below 10^15); what is well-formed and in range but untrue cannot be told from the truth here.
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Callable

import redis

from drl.memory.base import MemoryBackendError
from drl.memory.redis.connection import retrying
from drl.memory.redis.keys import Keys
from drl.memory.redis.scripts import REPAIR

log = logging.getLogger("drl.memory")

ATTEMPTS = 4
"""Repairs one call may make before its error stands: enough for every key a script touches to be found unsound
once, not a loop against a writer that keeps corrupting."""
REPORT_EVERY_S = 60.0
"""The same unsound key is reported at most this often per process (a writer that keeps corrupting it)."""
_COUNT = re.compile(rb"\d{1,15}")
_SEQS = re.compile(rb"\d{1,15}(,\d{1,15})*")
_TOTALS = re.compile(rb"\d{1,15}(,\d{1,15}:\d{1,15}:\d{1,15})*")
_WORKER = re.compile(r"rollout-\d{1,9}")
STATES = ("active", "retired")


def schema(keys: Keys) -> dict[str, tuple[str, str, list[str]]]:
    """Key -> (type, value rule, keys that go with it when it is deleted for its type; for ``bytes``: the
    stream it is recounted from). Keys of ``status:<name>`` are hashes of free text."""
    return {
        keys.stream: ("stream", "", [keys.backlog_bytes, keys.epoch]),
        keys.backlog_bytes: ("string", "bytes", [keys.stream]),
        keys.freed: ("list", "", []),
        keys.room: ("string", "factor", []),
        keys.epoch: ("string", "", []),
        keys.consumer_state: ("hash", "state", []),
        keys.dead_letter: ("stream", "", []),
        keys.dead_letter_counts: ("hash", "count", []),
        keys.policy: ("string", "count", []),
        keys.stop: ("string", "", []),
        keys.produced: ("hash", "count", []),
        keys.workers_done: ("hash", "count", []),
        keys.trainer_done: ("string", "count", []),
        keys.started_at: ("string", "", []),
        keys.members: ("hash", "", []),
        keys.shares: ("hash", "count", []),
        keys.floors: ("hash", "floor", []),
        keys.leases: ("hash", "count", []),
    }


def count(raw: bytes | None) -> int | None:
    """A sound count (decimal, at most 15 digits), or None."""
    return int(raw) if raw is not None and _COUNT.fullmatch(raw) else None


def watermark(raw: bytes | None) -> int | None:
    """The watermark of a ``seq:<worker>`` field (``"mark[,seq...]"``), or None when the field is unsound."""
    return int(raw.split(b",", 1)[0]) if raw is not None and _SEQS.fullmatch(raw) else None


READ_BACK = (
    "seq",
    "produced",
    "end",
    "final",
    "consumed",
    "duplicates",
    "stale",
    "dead_letters",
    "updates",
    "lost",
    "totals",
)
"""The fields of ``trainer:state`` that drl reads back (by name, or by the part before ``:``)."""


def sound_state_field(field: str, raw: bytes) -> bool:
    """A field of ``trainer:state`` that drl reads back is a count or, for ``seq:<worker>``, counts joined by
    commas, or for ``totals:<worker>`` a count and ``,seq:count:total`` triples; other fields are the trainer's own business."""
    kind = field.split(":", 1)[0]
    if kind == "totals":
        return bool(_TOTALS.fullmatch(raw))
    return kind not in READ_BACK or bool(_SEQS.fullmatch(raw))


def worker(name: str) -> bool:
    return bool(_WORKER.fullmatch(name))


def bad_key(exc: BaseException) -> tuple[str | None, str] | None:
    """(key or None for the command's own key, why) when ``exc`` is a refusal for an unsound key."""
    cause = exc.__cause__ if isinstance(exc, MemoryBackendError) else exc
    text = str(cause or "")
    if text.startswith("UNSOUNDKEY "):
        _, key, why = text.split(" ", 2)
        return key, why
    if text.startswith("WRONGTYPE"):
        return None, "has the wrong type"
    return None


class Guard:
    """Reports and repairs the unsound keys of one run on one connection."""

    def __init__(self, client: redis.Redis, keys: Keys, retry_s: float):
        self.client, self.keys, self.retry_s = client, keys, retry_s
        self.schema = schema(keys)
        self._repair = client.register_script(REPAIR)
        self._reported: dict[tuple[str, str], float] = {}

    def report(self, key: str, why: str, action: str) -> None:
        """One warning line naming the key (the same one at most every ``REPORT_EVERY_S``)."""
        now = time.monotonic()
        if now - self._reported.get((key, why), -math.inf) >= REPORT_EVERY_S:
            self._reported[(key, why)] = now
            log.warning("memory server: key %s %s (written by something other than drl?); %s", key, why, action)

    def spec(self, key: str) -> tuple[str, str, list[str]]:
        if key.startswith(self.keys.prefix + "status:"):
            return "hash", "", []
        if key.startswith(self.keys.prefix + "claim:"):
            return "string", "", []
        return self.schema.get(key, ("", "", []))

    def repair(self, key: str, why: str) -> str:
        """Repairs ``key`` (re-checked on the server first) and reports what was done, if anything."""
        want, rule, others = self.spec(key)
        if not want:
            raise MemoryBackendError(f"memory server: key {key} {why}, and it is not a key of this run")
        along = 0 if rule == "bytes" else len(others)
        done = retrying(lambda: self._repair(keys=[key, *others], args=[want, rule, along]), "repair", self.retry_s)
        done = done.decode() if isinstance(done, bytes) else str(done)
        if done != "sound":
            gone = f" with {', '.join(others)}" if done == "deleted" and along else ""
            self.report(key, why, f"repaired ({done}{gone})")
        return done

    def call(self, fn: Callable, what: str, key: str | None = None, on_repaired: Callable[[str], None] | None = None):
        """``fn`` through ``retrying``; a refusal for an unsound key (``key``: the one a WRONGTYPE is about) is
        repaired and ``fn`` called again, up to ``ATTEMPTS`` times; ``on_repaired(key)`` runs after each repair."""
        for attempt in range(ATTEMPTS + 1):
            try:
                return retrying(fn, what, self.retry_s)
            except MemoryBackendError as exc:
                found = bad_key(exc)
                bad = None if found is None else found[0] or key
                if found is None or attempt == ATTEMPTS or bad is None:
                    raise
                self.repair(bad, found[1])
                if on_repaired is not None:
                    on_repaired(bad)

    def read(self, fn: Callable, what: str, key: str, default):
        """A plain read of ``key``: a key of the wrong type is reported and read as ``default`` (ignored; its
        writer repairs it)."""
        try:
            return retrying(fn, what, self.retry_s)
        except MemoryBackendError as exc:
            if bad_key(exc) is None:
                raise
            self.report(key, "has the wrong type", "ignored")
            return default

    def counts(self, raw: dict, key: str) -> dict[str, int]:
        """A hash of counts; unsound fields are reported and left out."""
        out = {}
        for field, value in raw.items():
            n = count(value)
            if n is None:
                self.report(key, f"field {field.decode(errors='replace')} is not a count", "ignored")
            else:
                out[field.decode(errors="replace")] = n
        return out
