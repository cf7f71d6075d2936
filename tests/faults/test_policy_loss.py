"""A SYNC run whose newest policy version disappears from the data store before the workers load it: the trainer
publishes it again and the workers wait for it, instead of failing until their restarts run out."""

from __future__ import annotations

import os
import shutil
import signal

from drl._proto import experience_pb2
from drl.store.policy import folder
from tests.harness import ServiceRun, fast_config


def _waiting_for_next(run: ServiceRun, version: int) -> bool:
    """Every worker has handed in its share of iteration ``version`` (its iteration-end entry is in the stream, or
    the trainer took it), so it waits for the next version."""
    client = run.client()
    ended = {
        k.decode()[len("end:") :]
        for k, v in client.hgetall(run.keys.consumer_state).items()
        if k.startswith(b"end:") and int(v) >= version
    }
    for _, fields in client.xrange(run.keys.stream):
        header = experience_pb2.BatchHeader()
        header.ParseFromString(fields[b"h"])
        if header.iteration_end and header.policy_version == version:
            ended.add(header.worker_id)
    return ended >= {f"rollout-{i}" for i in range(run.cfg.workers)}


def test_sync_workers_wait_out_a_deleted_newest_version_and_the_trainer_republishes_it(tmp_path, redis_server):
    cfg = fast_config(
        mode="sync", workers=2, steps=6000, max_backlog_entries=200, updates_per_transition=0.25, sync_deadline_s=60
    )
    run = ServiceRun(cfg, redis_server.url, tmp_path, run="policy-loss")
    client = run.client()
    try:
        run.start_all()
        run.wait_until(lambda: int(client.get(run.keys.policy) or -1) >= 2, 120, "policy version 2")
        trainer, workers = run.procs["trainer"], [run.procs[f"rollout-{i}"] for i in range(2)]
        os.kill(trainer.pid, signal.SIGSTOP)
        version = int(client.get(run.keys.policy))
        run.wait_until(lambda: _waiting_for_next(run, version), 60, f"both workers done with version {version}")
        for w in workers:
            os.kill(w.pid, signal.SIGSTOP)
        os.kill(trainer.pid, signal.SIGCONT)
        run.wait_until(lambda: int(client.get(run.keys.policy)) > version, 60, "the next version")
        newest = int(client.get(run.keys.policy))
        shutil.rmtree(tmp_path / "store" / run.run / folder(newest))
        for w in workers:
            os.kill(w.pid, signal.SIGCONT)
        run.wait_all(timeout=240)
        acc = run.accounting()
        assert acc["produced"] == 6000 and acc["consumed"] + acc["stale"] == 6000, acc
        assert acc["backlog_entries"] == 0, acc
        assert run.status("trainer")["exit_reason"] == "steps_done"
        assert f"policy version {newest} is missing from the store; publishing it again" in run.log_tail(
            "trainer", 200_000
        )
        assert any(f"waiting for policy version {newest}" in run.log_tail(f"rollout-{i}", 200_000) for i in range(2))
    finally:
        for proc in run.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        run.kill_all()
