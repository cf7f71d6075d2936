"""The trainer's checkpoints: what it writes to continue a run later, and how a new trainer takes a run up again.

A checkpoint holds the learning state (networks, optimisers, the replay's RNG and, with ``--checkpoint-replay``,
the replay itself: ``Learning.state``), the torch RNG state and the ledger: its counters and every worker's
progress (seq watermark and seqs above it with their produced totals, produced, final and iteration-end entries,
the fields the memory server's committed state holds); it is written every
``--checkpoint-every-s`` (checked after each publication) and at exit. A trainer that starts takes the newest
checkpoint whose checksum verifies, then the state its predecessor committed to the memory server, which is newer
when there is one (a trainer restarted inside a live run, e.g. after SIGKILL): its counters, updates and
watermarks win, so nothing is counted twice; the gradient steps and replay inserts made since the checkpoint are
lost, and the ``updates`` counter is not rewound. On a fresh memory server (``--resume``) the checkpoint's counters
are used, and so are its watermarks: a trainer and a memory server lost together (in either order, within the
checkpoint interval) come back with the checkpoint's watermarks, not zeros, so re-sent entries above them are
duplicates or fill the gap; the entries taken after the checkpoint exist nowhere any more, and the writers'
floors (``drl.training.ingest.Ingest.settle``) have them counted as lost instead of awaited. The workers' progress is
taken only from a checkpoint written by the same session of the run (``session``: the steps done when the
orchestrator started it, the same for every process it starts): a ``--resume`` starts new workers, numbered from
the beginning again on a cleared memory server, and the old session's watermarks would make their entries
duplicates.

A trainer that reads several experience shards (``--memory-shards``) keeps a ledger per shard (``Ledgers``): the
checkpoint holds their summed counters (``counters``, what a resumed run counts as done before it) and each shard's
counters and fields (``shards``); restoring gives each shard's ledger its own, then the state its shard's reader
committed. A checkpoint of one ledger restores into shard 0 (the run's keys of a single stream).
"""

from __future__ import annotations

import logging
import time
from typing import cast

import torch

from drl.errors import UserError
from drl.store.checkpoint import CheckpointStore
from drl.training.ingest import Ledger, Ledgers

log = logging.getLogger("drl.training.checkpointing")


class TrainerCheckpoints:
    def __init__(
        self, store: CheckpointStore, algorithm: str, every_s: float, keep: int, with_replay: bool, session: int = 0
    ):
        self.store, self.algorithm, self.every_s, self.keep = store, algorithm, every_s, keep
        self.session = session
        self.with_replay = with_replay
        self._written_at = time.monotonic()

    def save(
        self,
        learning,
        ledger: Ledger | Ledgers,
        version: int,
        exit_reason: str | None = None,
        totals: dict[str, int] | None = None,
    ) -> None:
        """Writes a full checkpoint and keeps the newest ``keep``. The one written at exit also names the exit
        reason: with the ledger it is the trainer's record of the run that outlives the memory server.
        ``totals``: the run's counters when this ledger holds only part of them (a learner of a group)."""
        tensors, meta = learning.state(self.with_replay)
        tensors["rng.torch"] = torch.get_rng_state().numpy()
        ledgers = ledger if isinstance(ledger, Ledgers) else Ledgers.single(ledger)
        updates = learning.learner.updates

        def fields(one: Ledger) -> dict[str, str]:
            return {k: str(v) for k, v in one.fields(one.known_workers(), updates).items()}

        meta["counters"] = totals if totals is not None else ledgers.counters()
        if ledgers.shards == 1:
            meta["ledger"] = fields(ledgers.by_shard[0])
        else:
            meta["shards"] = {
                str(s): {"counters": one.counters(), "ledger": fields(one)} for s, one in ledgers.by_shard.items()
            }
        meta["session"] = self.session
        if exit_reason is not None:
            meta["exit"] = {"reason": exit_reason, "policy_version": version}
        self.store.save(
            tensors, meta, algorithm=self.algorithm, policy_version=version, env_steps=ledgers.consumed, updates=updates
        )
        self.store.retain(self.keep)
        self._written_at = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._written_at >= self.every_s

    def restore(self, learning, ledger: Ledger | Ledgers, committed: dict[str, str] | dict[int, dict[str, str]]):
        """Continues a run from the newest checkpoint and then ``committed``, the state the memory server holds
        (see the module docstring): one state, or with ``Ledgers`` one per shard. Returns the checkpoint's
        manifest, None without one."""
        if isinstance(ledger, Ledgers):
            ledgers, per_shard = ledger, cast("dict[int, dict[str, str]]", committed)
        else:
            ledgers, per_shard = Ledgers.single(ledger), {0: cast("dict[str, str]", committed)}
        checkpoint = self.store.latest()
        manifest = None
        if checkpoint is not None:
            manifest, tensors, meta = checkpoint
            try:
                learning.load_state(tensors, meta)
            except ValueError as exc:
                raise UserError(
                    f"checkpoint {manifest.sequence} cannot be restored (were network options changed "
                    f"since it was written?): {exc}"
                ) from None
            torch.set_rng_state(torch.from_numpy(tensors["rng.torch"].copy()))
            same_session = meta.get("session") == self.session
            shards = meta.get("shards")
            if isinstance(shards, dict) and same_session and {int(s) for s in shards} <= set(ledgers.by_shard):
                for s, part in shards.items():
                    one = ledgers.by_shard[int(s)]
                    for name, value in part["counters"].items():
                        setattr(one, name, value)
                    one.load(part.get("ledger", {}))
            else:
                # One ledger, another session, or other shards: the counts go to shard 0 (they are the run's
                # totals), and a one-ledger checkpoint of this session also gives it the workers' progress.
                first = ledgers.by_shard[min(ledgers.by_shard)]
                for name, value in meta["counters"].items():
                    setattr(first, name, value)
                if same_session and "ledger" in meta:
                    first.load(meta.get("ledger", {}))
            log.info(
                "restored checkpoint %d: policy version %d, %d env steps, %d updates",
                manifest.sequence,
                manifest.policy_version,
                manifest.env_steps,
                manifest.updates,
            )
        found = [
            u
            for s, state in per_shard.items()
            if s in ledgers.by_shard and (u := ledgers.by_shard[s].load(state)) is not None
        ]
        if found:
            learning.learner.updates = max(found)
        return manifest
