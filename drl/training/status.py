"""The trainer's status fields (``drl-orchestrate status``, the metrics page, TensorBoard)."""

from __future__ import annotations

from typing import Any

from drl.training.ingest import Ledgers
from drl.training.shards import Channels


def trainer_fields(ledger: Ledgers, learning, channels: Channels, elapsed_s: float, **head: Any) -> dict[str, Any]:
    """``head`` (role, state, exit reason, version, device) with the counters, rates, backlog and the learning's
    own metrics and fields."""
    elapsed_s = max(1e-9, elapsed_s)
    return {
        **head,
        "env_steps": ledger.consumed,
        "transitions_consumed": ledger.consumed,
        "updates": learning.learner.updates,
        "duplicates_dropped": ledger.duplicates,
        "stale_dropped": ledger.stale,
        "dead_lettered": ledger.dead_letters,
        "lost": ledger.lost,
        "transitions_per_s": round(ledger.consumed / elapsed_s, 1),
        "replay_size": learning.size(),
        "backlog": channels.backlog(),
        "backlog_bytes": channels.backlog_bytes(),
        "memory_resets": channels.resets(),
        **{k: round(v, 5) for k, v in learning.metrics.items()},
        **learning.report(),
    }
