"""Scalars for TensorBoard, written so that they can never hurt the service that writes them.

A service's curves go to ``<run dir>/tensorboard/<role>/`` (``tensorboard --logdir <run dir>/tensorboard``
shows trainer and evaluator side by side; a resumed run adds a new event file to the same folder, which
TensorBoard reads as one continuation). The writer opens lazily on the first scalars, so a service that never
reports creates nothing. TensorBoard output is a convenience: if the folder cannot be written, or tensorboardX
is missing, one warning is logged and every later call is a no-op. The callers decide how often to write (on
their status reports and publications), which keeps the cost to a few small records a second.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Mapping

log = logging.getLogger("drl.tensorboard")

FLUSH_SECS = 10


class ScalarLog:
    def __init__(self, directory: str | Path, flush_secs: int = FLUSH_SECS):
        self.directory = Path(directory)
        self.flush_secs = flush_secs
        self._writer = None
        self._disabled = False

    def _open(self):
        if self._writer is None and not self._disabled:
            try:
                from tensorboardX import SummaryWriter

                self.directory.mkdir(parents=True, exist_ok=True)
                self._writer = SummaryWriter(str(self.directory), flush_secs=self.flush_secs)
            except (ImportError, OSError) as exc:
                self._fail(exc)
        return self._writer

    def _fail(self, exc: BaseException) -> None:
        log.warning("TensorBoard scalars are not written to %s: %s", self.directory, exc)
        self._disabled = True
        self._writer = None

    def scalars(self, values: Mapping[str, float], step: int, walltime: float | None = None) -> None:
        """Adds one point per tag at ``step``; values that are not finite numbers are left out."""
        writer = self._open()
        if writer is None:
            return
        try:
            for tag, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    writer.add_scalar(tag, float(value), int(step), walltime=walltime)
        except OSError as exc:
            self._fail(exc)

    def histogram(
        self,
        tag: str,
        bounds: list[float],
        counts: list[int],
        total: float,
        squares: float,
        most: float,
        step: int,
        walltime: float | None = None,
    ) -> None:
        """Adds one histogram at ``step`` from bucket upper bounds and their (non-cumulative) counts, with the
        exact sum, sum of squares and maximum; nothing while it is empty."""
        writer = self._open()
        if writer is None or not sum(counts):
            return
        try:
            writer.add_histogram_raw(
                tag,
                min=0.0,
                max=float(most),
                num=int(sum(counts)),
                sum=float(total),
                sum_squares=float(squares),
                bucket_limits=[float(min(b, most)) for b in bounds],
                bucket_counts=[int(c) for c in counts],
                global_step=int(step),
                walltime=walltime,
            )
        except OSError as exc:
            self._fail(exc)

    def flush(self) -> None:
        if self._writer is not None:
            try:
                self._writer.flush()
            except OSError as exc:
                self._fail(exc)

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError as exc:
                log.warning("TensorBoard event file in %s was not closed cleanly: %s", self.directory, exc)
            self._writer = None


def parse_buckets(text: str) -> list[tuple[float, int]]:
    """ "le:count,..." as (upper bound, count) pairs (``drl.training.learning.LagHistogram.text``); ValueError when it is
    not one."""
    pairs = []
    for item in text.split(","):
        bound, _, count = item.partition(":")
        pairs.append((float(bound), int(count)))
    return pairs


class TrainerCurves:
    """A trainer's curves against env steps, at most once a second (and always at the end): the learner's last
    metrics, the backlog, and throughput over the interval since the previous point (its status fields have the
    average since start, which hides slowdowns)."""

    def __init__(self, log_: ScalarLog, now: float, consumed: int, updates: int):
        self.log = log_
        self._at = (now, consumed, updates)

    def add(
        self,
        now: float,
        consumed: int,
        updates: int,
        metrics: Mapping[str, float],
        fields: Mapping,
        final: bool = False,
    ) -> None:
        at, consumed_at, updates_at = self._at
        if now - at < 1.0 and not final:
            return
        values = {f"learner/{k}": v for k, v in metrics.items()}
        values.update(
            {
                "memory/backlog": fields["backlog"],
                "memory/backlog_bytes": fields["backlog_bytes"],
                "train/updates": updates,
                "train/policy_version": fields["policy_version"],
                "train/replay_size": fields["replay_size"],
            }
        )
        if "policy_lag" in fields:
            values.update({f"policy_lag/{k}": fields[f"policy_lag_{k}"] for k in ("mean", "p95", "max")})
            values["policy_lag/dropped"] = fields["lag_dropped"]
            pairs = parse_buckets(fields["policy_lag"])
            self.log.histogram(
                "policy_lag/versions",
                [b for b, _ in pairs],
                [c for _, c in pairs],
                fields["policy_lag_sum"],
                fields["policy_lag_squares"],
                fields["policy_lag_max"],
                step=consumed,
            )
        if now > at:
            values["throughput/transitions_per_s"] = (consumed - consumed_at) / (now - at)
            values["throughput/updates_per_s"] = (updates - updates_at) / (now - at)
        self._at = (now, consumed, updates)
        self.log.scalars(values, step=consumed)

    def close(self) -> None:
        self.log.close()
