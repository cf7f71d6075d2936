"""Every Redis key of one run (docs/wire-format.md lists them with their types and writers)."""

from __future__ import annotations



class Keys:
    """Every Redis key of one run, sharing the hash tag {run} so a cluster keeps them on one slot."""

    def __init__(self, run: str):
        p = f"drl:{{{run}}}:"
        self.run = run
        self.prefix = p
        self.stream = p + "exp"
        self.backlog_bytes = p + "exp:bytes"
        self.freed = p + "exp:freed"  # one token per entry a commit deleted: wakes producers held back
        self.room = p + "exp:room"  # the trainer's widening factor on the backlog's limits (absent: 1)
        self.floors = p + "exp:floors"  # writer -> "seq,total": its floor, reported after a data loss
        self.epoch = p + "epoch"
        self.consumer_state = p + "trainer:state"
        self.dead_letter = p + "dlq"
        self.dead_letter_counts = p + "dlq:counts"
        self.policy = p + "policy"
        self.policy_channel = p + "policy:announce"
        self.stop = p + "stop"
        self.produced = p + "produced"
        self.workers_done = p + "workers:done"
        self.trainer_done = p + "trainer:done"
        self.started_at = p + "started_at"
        self.members = p + "workers:members"  # rollout worker -> "active" | "retired" (live scaling)
        self.shares = p + "workers:shares"  # rollout worker -> transitions it is to produce in all

    def status(self, name: str) -> str:
        return f"{self.prefix}status:{name}"

    def claim(self, name: str) -> str:
        """The claim ``name`` (``orchestrator``, ``trainer``): its holder, with an expiry."""
        return f"{self.prefix}claim:{name}"
