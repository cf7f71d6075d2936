"""Entry sizes (real Valkey, real trainer and worker processes): a worker fills entries past --batch-transitions
while collection is fast (--entry-fill-ms), never past a quarter of the backlog (of the widened backlog while the
trainer waits for data), and the backlog holds about as many transitions as it would with fixed-size entries, so
growing entries does not add policy lag."""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np

from drl._proto import experience_pb2
from drl.algorithms import wire_extras
from drl.envs import space_spec
from drl.memory import codec
from drl.memory.backlog import HEADER_ALLOWANCE_BYTES, backlog_bytes
from tests.harness import ServiceRun, fast_config

STEPS = 4000
BATCH = 32


def _entries(entry: int) -> int:
    """Entries a worker sends for STEPS when every entry but the last holds ``entry`` (ASYNC chunks do not cut
    entries short)."""
    return math.ceil(STEPS / entry)


def _finished_run(tmp_path, redis_server, fill_ms: float, run: str, **changes) -> ServiceRun:
    cfg = fast_config(
        workers=1, steps=STEPS, random_steps=STEPS, batch_transitions=BATCH, entry_fill_ms=fill_ms, **changes
    )
    sr = ServiceRun(cfg, redis_server.url, tmp_path, run=run)
    sr.start_all()
    sr.wait_all(timeout=180)
    acc = sr.accounting()
    assert acc["produced"] == STEPS and acc["consumed"] == STEPS, acc
    return sr


def test_entries_grow_to_their_limit_while_collection_is_fast(tmp_path, redis_server):
    cfg = fast_config(batch_transitions=BATCH)
    unwidened = backlog_bytes(cfg, BATCH, _layout_bytes())  # --max-backlog-bytes leaves the trainer no room to widen
    sr = _finished_run(tmp_path, redis_server, fill_ms=60_000, run="entries-grow", max_backlog_bytes=unwidened)
    max_entry = BATCH * cfg.max_backlog_entries // 4
    assert max_entry == 2 * BATCH
    assert int(sr.status("rollout-0")["seq"]) == _entries(max_entry)


def test_entries_grow_fourfold_further_while_the_trainer_waits_for_data(tmp_path, redis_server):
    sr = _finished_run(tmp_path, redis_server, fill_ms=60_000, run="entries-widened", learning_starts=10**9)
    max_entry = 4 * BATCH * fast_config().max_backlog_entries // 4
    # the worker learns of the wider limits from an append's reply, so its entries until the trainer widened them
    # and the first one after are of the usual size (64): a handful at most
    entries = int(sr.status("rollout-0")["seq"])
    assert _entries(max_entry) <= entries <= _entries(max_entry) + 4 < _entries(max_entry // 4)


def test_entries_stay_at_batch_transitions_with_fill_zero(tmp_path, redis_server):
    sr = _finished_run(tmp_path, redis_server, fill_ms=0, run="entries-fixed")
    assert int(sr.status("rollout-0")["seq"]) == _entries(BATCH)


def _layout_bytes() -> int:
    layout = codec.expected_layout(space_spec("Pendulum-v1"), wire_extras(fast_config()))
    return sum(np.dtype(dt).itemsize * int(np.prod(shape)) for dt, shape in layout.values())


def _backlog_when_trainer_stops(tmp_path, redis_server, fill_ms: float, run: str) -> tuple[int, int, ServiceRun]:
    """Stops the trainer right after it announced its first policy, lets the worker fill the backlog until
    it is refused, and returns (entries, transitions) waiting; then lets the run finish."""
    cfg = fast_config(workers=1, steps=STEPS, random_steps=STEPS, batch_transitions=BATCH, entry_fill_ms=fill_ms)
    sr = ServiceRun(cfg, redis_server.url, tmp_path, run=run)
    trainer = sr.start("trainer")
    client = sr.client()
    sr.wait_until(lambda: client.get(sr.keys.policy) is not None, 120, "the first policy")
    os.kill(trainer.pid, signal.SIGSTOP)
    try:
        sr.start("rollout", 0)
        last, still = None, 0
        deadline = time.monotonic() + 120
        while still < 10 and time.monotonic() < deadline:
            now = (client.xlen(sr.keys.stream), client.get(sr.keys.backlog_bytes))
            still = still + 1 if now == last and now[0] else 0
            last = now
            time.sleep(0.2)
        entries = client.xrange(sr.keys.stream)
        counts = [experience_pb2.BatchHeader.FromString(fields[b"h"]).count for _, fields in entries]
    finally:
        os.kill(trainer.pid, signal.SIGCONT)
    sr.wait_all(timeout=180)
    acc = sr.accounting()
    assert acc["produced"] == STEPS and acc["consumed"] == STEPS, acc
    return len(counts), sum(counts), sr


def test_the_backlog_holds_about_what_fixed_size_entries_would(tmp_path, redis_server):
    cfg = fast_config(batch_transitions=BATCH)
    fixed_entries, fixed_transitions, _ = _backlog_when_trainer_stops(
        tmp_path / "fixed", redis_server, 0, "backlog-fixed"
    )
    assert (fixed_entries, fixed_transitions) == (cfg.max_backlog_entries, cfg.max_backlog_entries * BATCH)

    grown_entries, grown_transitions, _ = _backlog_when_trainer_stops(
        tmp_path / "grown", redis_server, 60_000, "backlog-grown"
    )
    assert grown_entries < cfg.max_backlog_entries
    slack = cfg.max_backlog_entries * HEADER_ALLOWANCE_BYTES // _layout_bytes()
    assert fixed_transitions <= grown_transitions <= fixed_transitions + slack + 2 * BATCH
    assert backlog_bytes(cfg, BATCH, _layout_bytes()) < cfg.max_backlog_bytes
