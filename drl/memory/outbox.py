"""A writer's entries on their way to the stream, the part of an ``ExperienceWriter`` that does not depend on the
server: entries are appended in order; an entry refused for lack of room waits and is tried again, and nothing is
dropped unless the run is stopping; appended entries are kept until the reader's watermark covers them, and when
the server's data epoch changes (it lost its data), every kept entry above the watermark is queued again, ahead of
new ones, with the same sequence number and bytes, so the reader's deduplication makes the re-sent copies count
once.

The outbox also keeps its floor: the highest watermark any reader confirmed to it, with the produced total
through that seq. It holds nothing at or below the floor, so after a data loss (an epoch change; ``on_new_epoch``
is then called with the floor) the writer tells the reader its floor (``ReaderRecovery.floors``): a reader
that came back with an older watermark (from a checkpoint) knows the seqs below the floor it never saw can never
arrive, instead of waiting for them for ever.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import Callable

from drl.memory.base import AppendReply

log = logging.getLogger("drl.memory")


@dataclass
class Outgoing:
    seq: int
    h: bytes
    d: bytes
    produced_total: int


class Outbox:
    def __init__(self) -> None:
        self.queued: collections.deque[Outgoing] = collections.deque()
        self.kept: collections.deque[Outgoing] = collections.deque()
        self._kept_ordered = True  # kept seqs never decrease: consumed ones can be popped from the left
        self.epoch: bytes | None = None
        self.floor: tuple[int, int] = (0, 0)
        self.on_new_epoch: Callable[[tuple[int, int]], None] | None = None
        self.resent = 0
        self.refused = 0

    def drain(self, append: Callable[[Outgoing], AppendReply], wait: Callable[[int], None]) -> AppendReply:
        """Appends the queued entries in order through ``append``; after a refusal, ``wait(refusals in a row)``
        and try again, until the reply says the run is stopping (the queue is then dropped: nothing more is sent).
        Returns the last reply."""
        reply = None
        refusals = 0
        while self.queued:
            item = self.queued[0]
            reply = append(item)
            self.observe(reply.watermark, reply.epoch)
            if reply.appended:
                self.queued.remove(item)
                if self.kept and item.seq < self.kept[-1].seq:
                    self._kept_ordered = False
                self.kept.append(item)
                refusals = 0
                continue
            if reply.stop:
                self.queued.clear()
                return reply
            self.refused += 1
            wait(refusals)
            refusals += 1
        if reply is None:
            raise ValueError("nothing to send")
        return reply

    def observe(self, mark: int, epoch: bytes) -> None:
        """Drops the kept entries the watermark ``mark`` covers (raising the floor); after a data loss, queues
        the rest again and reports the floor."""
        previous = self.epoch or b""
        changed = self.epoch is not None and epoch != self.epoch
        if changed:
            self._raise_floor(r for r in self.kept if r.seq <= mark)
            lost = [r for r in self.kept if r.seq > mark]
            log.warning(
                "memory server lost its data (epoch %s -> %s); re-sending %d unconsumed entries",
                previous.decode(),
                epoch.decode(),
                len(lost),
            )
            self.resent += len(lost)
            self.queued.extendleft(reversed(lost))
            self.kept.clear()
        self.epoch = epoch
        kept = self.kept
        if not kept:
            self._kept_ordered = True
        elif self._kept_ordered:
            top = None
            while kept and kept[0].seq <= mark:
                top = kept.popleft()
            if top is not None:
                self._raise_floor((top,))
        else:
            self._raise_floor(r for r in kept if r.seq <= mark)
            self.kept = collections.deque(r for r in kept if r.seq > mark)
        if changed and self.on_new_epoch is not None:
            self.on_new_epoch(self.floor)

    def _raise_floor(self, covered) -> None:
        for r in covered:
            if r.seq > self.floor[0]:
                self.floor = (r.seq, r.produced_total)


def parse_floors(raw: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Writers' floors from their ``"seq,total"`` text; a malformed value is left out (and logged)."""
    out = {}
    for worker, text in raw.items():
        seq, _, total = text.partition(",")
        if seq.isdigit() and total.isdigit():
            out[worker] = (int(seq), int(total))
        else:
            log.warning("ignoring the malformed floor %r of %r", text[:40], worker[:40])
    return out


def format_floor(floor: tuple[int, int]) -> str:
    return f"{floor[0]},{floor[1]}"


class OutboxWriter:
    """What an ``ExperienceWriter`` built on an ``Outbox`` reports of it (its implementations set ``outbox``)."""

    outbox: Outbox

    @property
    def resent(self) -> int:
        return self.outbox.resent

    @property
    def refused(self) -> int:
        return self.outbox.refused

    def retained(self) -> int:
        return len(self.outbox.kept)
