"""Every Redis key of one run (docs/wire-format.md lists them with their types and writers)."""

from __future__ import annotations


class Keys:
    """Every Redis key of one run, sharing the hash tag {run} so a cluster keeps them on one slot.

    ``shard`` (0 to S - 1 with ``S`` experience streams) names the experience keys of that stream: shard 0's are
    the run's keys of a single stream (``drl:{run}:exp``, ...), shard s > 0's carry ``s<s>:`` after the tag
    (``drl:{run}:s1:exp``, ``drl:{run}:s1:trainer:state``, ...). Each shard is a stream with its own backlog
    bounds, consumer group and committed reader state; the control keys (policy, stop flag, membership and shares,
    done markers, status, produced counts, dead letters, the data epoch) are the run's, shared by every shard."""

    def __init__(self, run: str, shard: int = 0):
        p = f"drl:{{{run}}}:"
        e = p if shard == 0 else f"{p}s{shard}:"
        self.run = run
        self.shard = shard
        self.prefix = p
        self.stream = e + "exp"
        self.backlog_bytes = e + "exp:bytes"
        self.freed = e + "exp:freed"  # one token per entry a commit deleted: wakes producers held back
        self.room = e + "exp:room"  # the trainer's widening factor on the backlog's limits (absent: 1)
        self.floors = e + "exp:floors"  # writer -> "seq,total": its floor, reported after a data loss
        self.leases = e + "leases"  # identity -> its fencing epoch: writes with a lower one are refused
        self.epoch = p + "epoch"
        self.consumer_state = e + "trainer:state"
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
