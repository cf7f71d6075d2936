"""The memory backend's interface: what rollout workers, the trainer, the evaluator and the orchestrator need of the
server that carries a run's experience and control state.

Four small protocols, one per kind of traffic, all bound to one run:

- ``ExperienceWriter``: one rollout worker's side of the experience stream. Appends entries in order, with
  back-pressure (a full backlog holds the writer back; nothing is dropped), keeps what was not yet consumed and
  re-sends it after the server lost its data.
- ``ExperienceReader``: the trainer's side. Reads entries (its own unacknowledged ones first), reclaims entries
  stranded at dead readers, and commits acknowledgements, dead letters and its counters and watermarks in one
  atomic step.
- ``Announcements``: the latest published policy version, and waiting for a newer one.
- ``RunControl``: the run's shared control state: the stop flag, membership and shares, done markers, status
  fields, and the counters a summary is made of.

``MemoryBackend`` hands out these for one run; ``drl.memory.open_memory`` opens one from a URL. The Redis Streams
implementation (``drl.memory.redis``) is the real one; ``tests/memory_inproc.py`` keeps the same state in this
process's memory, for fast tests of the service loops. Callers see only these protocols: a failure to reach the
server, after the backend's own retries, is ``MemoryUnavailable``; any other refusal by the server is
``MemoryBackendError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from drl.naming import worker_index

if TYPE_CHECKING:
    from pathlib import Path

Entry = tuple[bytes, dict]
"""An experience entry as read: its id in the stream, and its fields (``b"h"``: the protobuf header, ``b"d"``: the
arrays; see docs/wire-format.md). Fields are passed on untouched, so a dead letter keeps what was sent."""


def seq_field(worker: str) -> str:
    """The field of the reader's committed state (``ExperienceReader.commit``) that holds a writer's watermark and
    the sequence numbers seen above it, ``"mark[,seq...]"``: backends read the watermark there for
    ``AppendReply.watermark`` and ``ExperienceWriter.position``."""
    return f"seq:{worker}"


def unseen_transitions(headers: Iterable[tuple[str, int, int]], state: dict[str, str]) -> int:
    """Transitions in entries (``(worker, seq, count)`` of each entry still in the stream) that the reader's
    committed ``state`` has not taken (by its ``seq_field`` of the worker), each ``(worker, seq)`` counted once: a
    copy of a consumed entry, re-sent after the server lost its data, is a duplicate, not a transition still owed.
    A ``seq`` field that does not parse counts as nothing taken."""
    taken: dict[str, tuple[int, set[int]]] = {}
    total = 0
    counted: set[tuple[str, int]] = set()
    for worker, seq, count in headers:
        if worker not in taken:
            try:
                mark, *listed = (int(x) for x in state.get(seq_field(worker), "0").split(",") if x)
            except ValueError:
                mark, listed = 0, []
            taken[worker] = (mark, set(listed))
        mark, above = taken[worker]
        if seq <= mark or seq in above or (worker, seq) in counted:
            continue
        counted.add((worker, seq))
        total += count
    return total


ACTIVE, RETIRED = "active", "retired"
"""A member worker's states in ``RunControl.members``: it produces its share, or it was retired and produces no more."""

SUMMED_STATE_FIELDS = ("consumed", "duplicates", "stale", "dead_letters", "lost")
"""Fields of the readers' committed states that count transitions (or entries): over several shards the run's
figure is their sum (``merge_states``); ``updates`` is one learner's count, the same in every shard's state."""


def merge_states(states: Iterable[dict[str, str]]) -> dict[str, str]:
    """One committed state for the whole run from the states of its shards' readers: the counts summed, the
    highest ``updates``, and every worker's fields (each worker appends to one shard, so they never collide)."""
    out: dict[str, str] = {}
    for state in states:
        for key, value in state.items():
            if key in SUMMED_STATE_FIELDS and key in out:
                out[key] = str(int(out[key]) + int(value))
            elif key == "updates" and key in out:
                out[key] = str(max(int(out[key]), int(value)))
            else:
                out[key] = value
    return out


class MemoryBackendError(Exception):
    """The memory server refused a request (a wrong type under a run's key, a script error, ...)."""


class MemoryUnavailable(MemoryBackendError):
    """The memory server could not be reached within the backend's retry time."""


@dataclass(frozen=True)
class AppendReply:
    """What an append tells the writer about the run, without another round trip."""

    appended: bool
    """The entry (and every re-sent one before it) is in the stream; False only when the run is stopping."""
    policy_version: int
    """The latest announced policy version (-1: none yet)."""
    stop: bool
    """The run's stop flag is set."""
    watermark: int
    """Every entry of this writer up to this sequence number was consumed."""
    epoch: bytes
    """The server's data epoch: it changes when the server lost its data (the writer then re-sends)."""
    widening: int
    """The factor (1 or more) by which the trainer widened the backlog's limits for this append."""
    share: int | None
    """The transitions this writer is assigned in all (``RunControl.shares``); None without an assignment."""


class ExperienceWriter(Protocol):
    """One rollout worker's side of the experience stream."""

    @property
    def waited_s(self) -> float:
        """Seconds spent held back by a full backlog."""

    @property
    def resent(self) -> int:
        """Entries sent again after the server lost its data."""

    def position(self) -> tuple[int, int]:
        """(last sequence number, transitions produced) this writer already has in the run: a restarted worker
        continues its numbering instead of having every entry dropped as a duplicate. It counts the reader's
        watermark and the seqs seen above it, the entries still in the stream, the produced count and the floor
        the writer reported last."""

    def continue_from(self, seq: int, produced: int) -> None:
        """A new process of this writer continues at ``seq`` (``position``): it holds nothing at or below it,
        its predecessor's kept entries died with it. Takes (seq, produced) as its floor and reports it, so the
        reader declares lost every seq up to it that it never saw and that is not in the stream (an entry still
        there arrives), instead of waiting for it for ever."""

    def send(self, seq: int, h: bytes, d: bytes, produced_total: int) -> AppendReply:
        """Appends one entry after any re-sends due before it, waiting while the backlog is full; gives up
        (``appended`` False) only when the run is stopping."""

    def retained(self) -> int:
        """Entries appended but not yet known to be consumed (kept for re-sending)."""

    def wait_consumed(self, last_seq: int, timeout: float, should_stop: Callable[[], bool]) -> bool:
        """Blocks until every entry up to ``last_seq`` was consumed, re-sending after a data loss; False when
        stopped or timed out."""

    def close(self) -> None: ...


class ReaderRecovery(Protocol):
    """What a reader does beyond reading and committing: settle what a server restart lost (writers' floors,
    entries still in the stream), put its state back on a server that restarted empty, and widen the backlog's
    limits. The trainer's library reaches it through ``ExperienceReader.recovery``."""

    def floors(self) -> dict[str, tuple[int, int]]:
        """Per writer, its floor as it reported it after the server lost its data: (seq, produced total through
        it), the highest watermark a reader ever confirmed to it. The writer keeps nothing at or below it
        (``drl.memory.outbox``), so those of its seqs the reader has not seen can never arrive. Malformed values
        are left out."""

    def in_stream(self, workers: Iterable[str]) -> dict[str, list[tuple[int, int, int]]]:
        """Per writer of ``workers``, (seq, transitions, produced total) of its entries still in the stream (unread
        or unacknowledged): they will still arrive, so a floor does not declare them lost."""

    def settle(self, state: dict[str, str | int], produced: dict[str, int]) -> None:
        """Records ``state`` (watermarks moved past entries declared lost) and raises (never lowers) the
        ``produced`` counts, in one step: the transitions declared lost were produced, whether or not their writer
        still appends. On a server that lost its data it first counts a reset (as ``ExperienceReader.commit``)."""

    def rewrite(self, state: dict[str, str | int], produced: dict[str, int], widening: int, version: int) -> None:
        """After the server lost its data: puts back the reader's state, raises (never lowers) the workers'
        produced counts, restores the widening factor and re-announces ``version`` (if >= 0), in one step."""

    def set_widening(self, factor: int) -> None:
        """Widens the backlog's limits ``factor``-fold for every writer's next append (1 restores them)."""


class ExperienceReader(Protocol):
    """The trainer's side of the experience stream: read, reclaim, commit (with dead letters and the ledger)."""

    @property
    def resets(self) -> int:
        """Times the server was found to have lost its data (the reader's group recreated)."""

    @property
    def recovery(self) -> ReaderRecovery:
        """Its recovery after a server restart and its widening of the backlog's limits."""

    def read(self, count: int, block_ms: int | None) -> list[Entry]:
        """Up to ``count`` entries: this reader's own unacknowledged ones first (after a restart), then new ones.
        ``block_ms`` None returns at once; a positive value waits that long for new entries."""

    def reclaim(self, min_idle_ms: int, count: int = 64) -> list[Entry]:
        """Entries left unacknowledged at other (dead) readers for longer than ``min_idle_ms``."""

    def commit(
        self,
        acks: Iterable[tuple[bytes, int]],
        state: dict[str, str | int],
        dead: Iterable[tuple[bytes, dict, str, str]] = (),
    ) -> None:
        """In one atomic step: dead-letters ``dead`` (entry id, fields, kind, reason), acknowledges and deletes
        ``acks`` (entry id, size in bytes), releases their bytes and records ``state`` (the reader's counters and
        watermarks), so a crash leaves all of it or none. On a server that lost its data (the reader's group is
        gone) it first counts a reset and calls ``on_reset``, whose whole state goes back before these fields:
        a state holding only the fields of one commit would have a new process of another writer read no
        position and number its entries from 1 again, every one of them dropped as a duplicate."""

    def load_state(self) -> dict[str, str]:
        """The state committed last (empty on a fresh run or after the server lost its data)."""

    def backlog(self) -> int:
        """Entries in the stream: unread plus unacknowledged."""

    def backlog_bytes(self) -> int:
        """Bytes of those entries, as the append counted them."""


class Announcements(Protocol):
    """Policy versions: the latest one, announced by the trainer after it is in the data store."""

    def announce(self, version: int) -> None: ...

    def latest(self) -> int:
        """The latest announced version, or -1."""

    def wait_for(self, min_version: int, timeout: float, should_stop: Callable[[], bool]) -> int:
        """Blocks until a version >= ``min_version`` is announced and returns it; -1 when ``should_stop`` says so
        or ``timeout`` passes."""

    def close(self) -> None: ...


class RunStop(Protocol):
    """How the run ends: its stop flag and the trainer's done marker."""

    def stop_reason(self) -> str | None:
        """The stop flag's text (``target_reached:<v>``, ``stopped``, ``orchestrator``), or None while unset."""

    def request_stop(self, reason: str) -> None: ...

    def mark_trainer_done(self, version: int) -> None: ...

    def trainer_done(self) -> int | None:
        """The last version the trainer published before it finished, or None while it runs."""


class RunMembers(Protocol):
    """Who produces: the members (``active`` / ``retired`` workers), the transitions each is to produce in all,
    and the workers' done markers. The orchestrator writes members and shares; workers and the trainer read them."""

    def members(self) -> dict[str, str]: ...

    def shares(self) -> dict[str, int]: ...

    def share(self, worker: str) -> int | None:
        """This worker's assigned share, or None without an assignment."""

    def register(
        self,
        members: dict[str, str],
        shares: dict[str, int],
        only_new: bool = False,
        forget_done: Iterable[str] = (),
        started_at: float | None = None,
    ) -> None:
        """Writes members and shares, forgets the done markers of ``forget_done`` (workers that return) and sets
        the start time, all in one atomic step, so that nobody sees a returning worker active but still done, or
        a restored server with its members but not its start; ``only_new`` leaves workers that are registered
        already as they are."""

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
        """(produced, shares, members) in one consistent read, for the share arithmetic of live scaling."""

    def mark_worker_done(self, worker: str, produced: int) -> None: ...

    def workers_done(self) -> dict[str, int]:
        """Workers that exited after handing everything in, with the transitions each appended."""

    def forget_workers_done(self, workers: Iterable[str]) -> None:
        """A worker that returns after it finished (live scaling) is no longer done."""


class RunStatus(Protocol):
    """One field set per service, as the services last reported."""

    def write_status(self, name: str, fields: dict) -> None: ...

    def status(self, name: str) -> dict[str, str]: ...

    def statuses(self, names: Iterable[str]) -> dict[str, dict[str, str]]: ...

    def forget_status_field(self, name: str, field: str) -> None: ...


class RunAccounts(Protocol):
    """What a run's summary and its start need: the start time, the authoritative counters, the run's data."""

    def started_at(self) -> float | None: ...

    def set_started_at(self, when: float) -> None: ...

    def produced(self) -> dict[str, int]:
        """The highest produced total each worker appended."""

    def dead_letters(self) -> dict[str, int]:
        """Dead-lettered entries by kind."""

    def unconsumed(self, ledger: dict[str, str] | None = None) -> int:
        """Transitions in entries still in the stream (unread or unacknowledged), counted from their headers,
        leaving out those the reader's committed state already took (``unseen_transitions``), or those
        ``ledger`` took when it is given (a committed state kept elsewhere, e.g. in the trainer's final
        checkpoint, when the server lost its own)."""

    def ledger(self) -> dict[str, str]:
        """The state the reader committed last with its acknowledgements (``ExperienceReader.commit``): the
        authoritative counters of what was consumed and dropped, whatever became of the trainer since. Empty on a
        fresh run or after the server lost its data."""

    def has_data(self) -> bool:
        """Whether the run already has a policy or experience on this server (a new run must not reuse it)."""

    def clear(self) -> None:
        """Deletes everything the run keeps on this server (``--resume`` starts from the checkpoint alone), except
        its claims."""


class RunClaims(Protocol):
    """One owner at a time of a part of the run: its orchestrator, its trainer."""

    def claim(self, name: str, holder: str, ttl_s: float) -> str | None:
        """Takes the claim ``name`` for ``holder`` for ``ttl_s`` seconds, or extends it if ``holder`` has it already
        (in one atomic step, so two claimants never both succeed); returns None when ``holder`` has it now, else the
        holder that has it. A holder that stops renewing loses its claim after ``ttl_s``: a claim never outlives a
        dead holder for longer than that."""

    def release(self, name: str, holder: str) -> None:
        """Gives up the claim ``name`` if ``holder`` has it (a claim taken over by another holder stays theirs)."""


class RunControl(RunStop, RunMembers, RunStatus, RunAccounts, RunClaims, Protocol):
    """The run's shared control state, every concern together (a caller that needs one names its part). Every
    method retries an unreachable server within the backend's retry time."""


@dataclass
class Identity:
    """The identity this process writes run state as (a rollout worker's name, ``trainer``, ``learner-<r>``,
    ``evaluator``) and its fencing epoch, once taken (``MemoryBackend.take_identity``). The writers, readers and
    run control of one backend share it: every append, commit, done marker and status write of that identity
    carries the epoch, and the server refuses it atomically when a newer process took the identity since
    (``drl.errors.Superseded``). ``epoch`` None: not taken, writes are not fenced (tools, tests of one part)."""

    name: str = ""
    epoch: int | None = None

    def of(self, name: str) -> int | None:
        """The epoch to carry on a write as ``name``: this identity's, else None (not fenced)."""
        return self.epoch if self.epoch is not None and name == self.name else None


@dataclass(frozen=True)
class ShardMap:
    """Which experience stream each rollout worker appends to and which streams each learner reads: the one
    place that decides it (the backend's writers, the trainer's readers and ledgers, done markers all ask here).

    A worker appends to shard ``index mod shards`` (its replica index), so it keeps its stream when the run is
    scaled and a learner that consumes whole shards consumes whole workers; a name without an index (not a
    rollout worker's) is shard 0's. Learner ``rank`` of ``size`` reads the shards ``s`` with ``s mod size ==
    rank``: every shard has exactly one consumer."""

    shards: int = 1

    def of(self, worker: str) -> int:
        if self.shards <= 1:
            return 0
        try:
            return worker_index(worker) % self.shards
        except (IndexError, ValueError):
            return 0

    def of_learner(self, rank: int, size: int) -> list[int]:
        """The shards learner ``rank`` of a group of ``size`` reads."""
        return [s for s in range(self.shards) if s % size == rank]

    def in_shard(self, shard: int, by_worker: dict[str, int]) -> dict[str, int]:
        """The entries of ``by_worker`` whose worker appends to ``shard``."""
        return by_worker if self.shards <= 1 else {w: n for w, n in by_worker.items() if self.of(w) == shard}


class MemoryServer(Protocol):
    """A private server a local run starts beside its processes (``private_server``) and starts again on its own
    port and password when it exits."""

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def password(self) -> str | None: ...

    @property
    def log_path(self) -> Path: ...

    @property
    def pid(self) -> int: ...

    def exit_code(self) -> int | None: ...

    def stop(self) -> None: ...


class MemoryBackend(Protocol):
    """A connection to the memory server, bound to one run whose experience travels in ``shards`` streams
    (``shard_map`` assigns each rollout worker its stream). Each shard keeps what the guarantees
    above promise on its own: order, back-pressure, the reader's committed state; the run's control state is
    shared, and ``RunControl.ledger`` and ``unconsumed`` add up every shard."""

    run: str
    shards: int
    shard_map: ShardMap

    def writer(self, worker: str, max_entries: int, max_bytes: int) -> ExperienceWriter:
        """The writer of ``worker``, appending to its shard's stream."""

    def reader(self, name: str, on_reset: Callable[[], None] | None = None, shard: int = 0) -> ExperienceReader:
        """The reader ``name`` of shard ``shard``'s stream."""

    def announcements(self) -> Announcements: ...

    def control(self) -> RunControl: ...

    identity: Identity

    def take_identity(self, name: str) -> int:
        """Takes ``name`` for this process: bumps its fencing epoch on the run's first server and returns it.
        From then on every write as ``name`` through this backend (appends of its writer, commits and settles of
        its readers, its done marker and status) carries the epoch, and the server refuses it once another
        process took ``name`` after this one (a higher epoch): ``drl.errors.Superseded``. A writer or reader
        made afterwards raises its shard's lease to the epoch before it reads its position, so that a newer
        process never reads a position that an older one's appends then overtake."""

    def describe(self) -> str:
        """Where the server is, for messages (credentials removed)."""

    def close(self) -> None: ...
