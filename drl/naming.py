"""Names and share arithmetic that every part of a run agrees on: rollout worker names, run names, the even split
of steps over workers, and the checks of a worker count.

Services, the orchestrator and the in-cluster scaler all derive the same names from the same rules here, so a
worker called ``rollout-3`` by the orchestrator is ``rollout-3`` in the trainer's membership, in the memory
backend's keys and in a pod's completion index.
"""

from __future__ import annotations

import re
import time

from drl.errors import UserError

ROLLOUT = "rollout"
MAX_KUBERNETES_RUN_LEN = 40
_DNS_FOLD = re.compile(r"[^a-z0-9]+")


def worker_name(index: int) -> str:
    """The rollout worker of replica index ``index``."""
    return f"{ROLLOUT}-{index}"


def worker_index(name: str) -> int:
    """The replica index in a rollout worker's name (``rollout-3`` -> 3)."""
    return int(name.rsplit("-", 1)[1])


def memory_servers(url: str) -> list[str]:
    """The server URLs of a memory URL: one, or several separated by commas (shard s lives on server s mod N)."""
    return [part.strip() for part in url.split(",") if part.strip()]


def worker_names(count: int) -> list[str]:
    """The names of a run's first ``count`` rollout workers."""
    return [worker_name(i) for i in range(count)]


def even_share(total: int, parts: int, index: int) -> int:
    """The ``index``-th of ``parts`` near-equal shares of ``total`` (the first ones get the remainder)."""
    return total // parts + (1 if index < total % parts else 0)


def check_workers(workers: int, flag: str = "--workers") -> int:
    """A worker count given by a user: a positive integer, else one clear line."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UserError(f"{flag} must be a positive integer, got {workers}")
    return workers


def default_run_name(preset: str, env: str, mode: str, now: float | None = None) -> str:
    """``<preset>-<env>-<mode>-<YYYYmmdd-HHMMSS>``, with the env id's other characters folded to ``-``."""
    env_part = re.sub(r"[^A-Za-z0-9.-]+", "-", env).strip("-").lower()
    return f"{preset}-{env_part}-{mode}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


def default_kubernetes_run_name(
    preset: str, env: str, mode: str, now: float | None = None, limit: int = MAX_KUBERNETES_RUN_LEN
) -> str:
    """``default_run_name`` folded into what Kubernetes object names and label values accept (lowercase letters,
    digits and ``-``; at most ``limit`` characters, the env id shortened first)."""

    def fold(text: str) -> str:
        return _DNS_FOLD.sub("-", text.lower()).strip("-")

    head = fold(preset) + "-"
    tail = "-" + fold(mode) + "-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    env_part = fold(env)[: max(0, limit - len(head) - len(tail))].strip("-") or "env"
    return (head + env_part + tail)[-limit:].strip("-")
