"""The backlog's limits: what a run's configuration and wire layout allow between the workers and the trainer.

Workers and the trainer derive the same figures from the same configuration: a worker to size its entries and
to offer the limits to the append, the trainer to pace its reads so that the backlog never fills while it has
room to read (``drl.training.pacing``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drl.memory.codec import MAX_ENTRY_BYTES

ENTRY_GROWTH_DIVISOR = 4
HEADER_ALLOWANCE_BYTES = 512


def backlog_bytes(cfg, batch_transitions: int, transition_bytes: int) -> int:
    """The backlog's byte limit: ``--max-backlog-bytes``, and at most ``--max-backlog-entries`` entries of
    ``--batch-transitions`` (headers allowed for). Entries grow past ``--batch-transitions`` (``--entry-fill-ms``),
    so a limit in entries alone would let the backlog, and with it the policy lag of ASYNC experience, grow with
    them; this keeps the transitions waiting for the trainer about where fixed-size entries put them."""
    per_entry = batch_transitions * transition_bytes + HEADER_ALLOWANCE_BYTES
    return min(cfg.max_backlog_bytes, cfg.max_backlog_entries * per_entry)


@dataclass(frozen=True)
class BacklogLimits:
    transition_bytes: int
    least: int
    """Transitions an entry holds at least: ``--batch-transitions``, within what one entry and the backlog take."""
    limit_bytes: int
    """Bytes of entries the backlog holds before producers are held back (``backlog_bytes``)."""
    entries: int
    """Entries the backlog holds before producers are held back (``--max-backlog-entries``)."""
    ceiling: int
    """Transitions in the largest entry the codec and ``--max-backlog-bytes`` allow."""

    @property
    def most(self) -> int:
        """Transitions an entry holds at most: a quarter of the backlog (so that a few workers' entries fit),
        within the entry size limit."""
        return self.most_in(1)

    def most_in(self, widening: int) -> int:
        """``most`` while the trainer has widened the backlog's limits ``widening``-fold
        (``ReaderRecovery.set_widening``)."""
        quarter = (
            widening * self.limit_bytes // ENTRY_GROWTH_DIVISOR - HEADER_ALLOWANCE_BYTES
        ) // self.transition_bytes
        return max(self.least, min(self.least * self.entries * widening // ENTRY_GROWTH_DIVISOR, quarter, self.ceiling))


def backlog_limits(cfg, layout: dict[str, tuple[str, tuple[int, ...]]], entry: int = 0) -> BacklogLimits:
    """The limits of a run whose entries hold ``--batch-transitions`` at least, or ``entry`` transitions when the
    algorithm fixes their size (``Algorithm.entry_transitions``)."""
    transition_bytes = sum(np.dtype(dt).itemsize * int(np.prod(shape)) for dt, shape in layout.values())
    ceiling = max(1, min(MAX_ENTRY_BYTES // transition_bytes, cfg.max_backlog_bytes // transition_bytes))
    least = min(entry or cfg.batch_transitions, ceiling)
    return BacklogLimits(
        transition_bytes, least, backlog_bytes(cfg, least, transition_bytes), cfg.max_backlog_entries, ceiling
    )
