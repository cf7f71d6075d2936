"""A run's ``config.json`` and ``summary.json`` in the store, written by the trainer where no orchestrator does.

A local run's orchestrator writes both (the configuration at the start, the summary once every process has
ended). A run in Kubernetes pods has nobody to do that: ``helm install`` leaves the run to its pods, and
``drl-orchestrate --backend kubernetes`` watches from outside the cluster, where the run's memory server cannot be
reached. So there the backend tells the trainer to write them (``DRL_RUN_FILES=trainer``, set by the
Kubernetes manifests and the chart; the local backend does not set it): its rank 0 writes the resolved configuration when it starts and the summary when it ends, with the same keys as a local
run's summary where the trainer can know them: the transition accounts from the memory server's authoritative
counters (produced = consumed + unconsumed + every drop), updates, the policy version and the evaluations the
evaluator had stored by then. A local run keeps its orchestrator's files alone, since ``summary.json`` appearing
in a run folder is how a local run is seen to have ended.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Callable, Mapping

from drl.memory import MemoryBackendError
from drl.training.accounting import count_fields, eval_fields, imbalance, tally

log = logging.getLogger("drl.trainer")

RUN_FILES = "DRL_RUN_FILES"
TRAINER = "trainer"
WORKERS_DONE_WAIT_S = 15.0


def trainer_writes(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the backend that started this trainer made it the writer of the run's files: one writer of
    ``summary.json`` per backend, chosen by the backend."""
    return env.get(RUN_FILES) == TRAINER


def accounts(control) -> dict:
    """Where every transition went, from the run's authoritative counters on the memory server (as a local run's
    summary counts them): every worker's produced total, the ledger the trainer committed with its
    acknowledgements, what is still in the streams, and dead letters by kind. Every counter of
    ``drl.training.ingest.COUNTERS`` but ``consumed`` and ``duplicates`` is a drop."""
    return tally(control.ledger(), control.produced(), control.unconsumed(), control.dead_letters())


def evaluations(store) -> list[dict]:
    """The evaluator's results in the store (``evaluations.jsonl``) so far; unreadable lines are left out."""
    out = []
    for line in (store.get_optional("evaluations.jsonl") or b"").decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("mean_return"), (int, float)):
            out.append(entry)
    return out


def wait_for_workers(
    control,
    timeout_s: float = WORKERS_DONE_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Waits until every registered worker has marked itself done (a run that was stopped ends before its
    workers do, and a worker appending while the counters are read would unbalance them); False after
    ``timeout_s`` (a worker that died never marks itself done)."""
    deadline = clock() + timeout_s
    while True:
        members = set(control.snapshot()[2])
        if members <= set(control.workers_done()):
            return True
        if clock() >= deadline:
            return False
        sleep(0.2)


def summary(
    cfg, run: str, acc: dict, trainer: dict, evals: list[dict], wall_seconds: float, steps_done: int, exit_reason: str
) -> dict:
    """The summary's fields that a trainer can know, named as a local run's (``drl-orchestrate`` summary); its
    counts are the memory server's, which cover the whole run, a restarted trainer pod's earlier sessions too."""
    return {
        "run": run,
        "preset": cfg.preset,
        "algorithm": cfg.algorithm,
        "env": cfg.env,
        "mode": cfg.mode,
        "workers": cfg.workers,
        "envs_per_worker": cfg.envs_per_worker,
        "seed": cfg.seed,
        "steps_requested": cfg.steps,
        "resumed_from_env_steps": steps_done,
        "updates": acc["updates"] if acc["updates"] >= 0 else int(trainer.get("updates", 0)),
        "policy_version": int(trainer.get("policy_version", -1)),
        **count_fields(acc),
        **eval_fields(evals),
        "wall_seconds": round(wall_seconds, 2),
        "exit_reason": exit_reason,
        "written_by": "trainer",
    }


def write_config(store, cfg) -> None:
    """The resolved configuration, as a local run's orchestrator writes it (``config.json``)."""
    store.put("config.json", cfg.to_json().encode())


def write_summary(
    store, control, cfg, run: str, trainer: dict, wall_seconds: float, steps_done: int, exit_reason: str
) -> dict | None:
    """Writes ``summary.json`` to the store and returns it; None (said in the log) when the memory server cannot
    be read: a summary whose counts were guessed would be worse than none."""
    if exit_reason != "steps_done" and not wait_for_workers(control):
        log.warning(
            "not every rollout worker marked itself done within %.0f s; the summary counts what the memory "
            "server holds now",
            WORKERS_DONE_WAIT_S,
        )
    try:
        acc = accounts(control)
    except MemoryBackendError as exc:
        log.warning("summary.json not written: the run's counters cannot be read from the memory server (%s)", exc)
        return None
    problem = imbalance(acc)
    if problem:
        log.warning("the run's accounts do not balance: %s", problem)
    written = summary(cfg, run, acc, trainer, evaluations(store), wall_seconds, steps_done, exit_reason)
    store.put("summary.json", (json.dumps(written, indent=2) + "\n").encode())
    log.info(
        "summary.json written to the store: %d transitions produced, %d consumed, %d unconsumed",
        written["transitions_produced"],
        written["transitions_consumed"],
        written["transitions_unconsumed"],
    )
    return written
