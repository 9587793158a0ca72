"""The broker seam: the farm's atomic wire steps, as one small interface, and its Redis implementation.

Everything the farm keeps in its message store goes through names (``keys``), records (``records``) and a
handful of steps that must each happen at once (two producers must not both slip past a backlog limit; a
client's cancel must not be undone by a worker's finish). ``Broker`` names those steps; ``RedisBroker`` runs
each as one Lua script (``lua``) or one command. The SDK and front ends use the producing steps, workers the
consuming ones.

The producing steps are sans-IO, so one broker serves the blocking and the asyncio SDK alike
(``producer.core``): each returns an ``Op``, a generator that yields the broker's own IO steps (for Redis a
``Script`` or a ``Command``: what to send, with which keys and arguments) and is sent each step's reply; it
reads the reply and returns the outcome. The caller hands every step to ``send`` and, on an asyncio
connection, awaits what ``send`` returns. ``run_blocking`` drives an ``Op`` on a blocking connection (workers
create the consumer groups with it). The consuming steps are plain blocking calls: workers are synchronous.

Adding another broker (NATS JetStream, SQS + DynamoDB, an in-memory stub for tests):

1. Write a class with the members of ``Broker`` below (``isinstance(x, Broker)`` checks it at run time),
   keeping each step atomic the way its docstring says; map ``Keys``' names onto your store's objects.
   ``send`` performs one of your IO steps (any objects you like: the SDK only passes them through), returning
   the reply, or an awaitable of it when the broker holds an asyncio connection; ``lost`` and ``refused`` name
   your client library's errors for a lost connection (retried where a call can wait) and refused credentials.
2. Store and return the records of ``producer.wire.records`` unchanged (``SegmentJob.to_fields``,
   ``chunk_fields``, ``final_fields``, ``dead_letter_fields``): readers parse them with the same functions.
3. Hand it to what builds the farm's connections (``Publisher``, ``StreamQueue``, and the SDK client:
   ``Client(connection, settings, broker=...)``) in place of ``RedisBroker``; the queue reading itself
   (consumer groups, claiming, reclaiming) is Redis Streams' today and lives in ``workers.queue``.

``tests/test_broker_seam.py`` drives the SDK through a recording broker: a starting point for a stub.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from producer.wire.keys import Keys

if TYPE_CHECKING:
    from producer.submit import Submission
    from producer.wire.records import DeadLetter
    from producer.wire.settings import QueueSettings
    from producer.wire.snapshot import QueueSnapshot

T = TypeVar("T")
Op = Generator[Any, Any, T]  # a producing step: yields the broker's IO steps, is sent their replies, returns T


@runtime_checkable
class Broker(Protocol):
    """The farm's atomic wire steps. ``keys`` names every object of the farm in the store."""

    keys: Keys
    lost: tuple[type[Exception], ...]  # a lost connection (the store restarting, failing over): worth retrying
    refused: tuple[type[Exception], ...]  # the store refused the credentials: never retried

    def send(self, step: Any) -> Any:
        """Perform one IO step an ``Op`` yielded: its reply, or an awaitable of it on an asyncio connection."""
        ...

    # -- producing side: the SDK, front ends (sans-IO: each returns an Op) -----------------------------------
    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        """Create the workers' consumer group on each queue stream unless it is there."""
        ...

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        """Check the lane's backlog limit and write the job's status and every segment at once, or raise
        ``OverloadedError`` and write nothing. Idempotent per job id: a job that exists is left as it is (so a
        retry after a lost reply never queues it twice)."""
        ...

    def cancel(self, job_id: str) -> Op[int]:
        """Mark a job cancelled unless it has ended: -1 no such job, 0 it had ended, 1 cancelled."""
        ...

    def job_status(self, job_id: str) -> Op[Mapping[Any, Any]]:
        """A job's status record as stored (``producer.status.decode_status`` reads it); empty: no such job."""
        ...

    def read_results(self, job_id: str, args: Sequence[Any]) -> Op[Any]:
        """A job's results records after a reader's position (``JobReader.read_args``), with how many the
        stream has lost at its head (``JobReader.take`` reads the reply); None when there is no stream."""
        ...

    def await_results(self, job_id: str, after_id: Any, block_ms: int) -> Op[bool]:
        """Block up to ``block_ms`` for a results record after ``after_id``: True if one came (it is read with
        ``read_results``)."""
        ...

    # -- consuming side: workers (blocking) ------------------------------------------------------------------
    def release(self, lane: str, segments: int, seconds: float) -> None:
        """Take acked segments off a lane's backlog counters (never below zero)."""
        ...

    def mark_started(self, job_id: str, worker: str) -> bool:
        """Mark a job started by ``worker``; True for its first start, never over a state written meanwhile."""
        ...

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 **status: Any) -> int:
        """Write a job's end state and its one final record: 1 as asked, 2 if a client's cancel won the race
        (the job ends cancelled), 0 if it had ended already. ``status``: fields for the job's status record
        (any names: ``info`` too)."""
        ...

    # -- results: the workers' writes to a job's results stream and status (blocking) --------------------------
    # (steps added here: publish a piece, claim frames, playback clocks, failure counts, dead-letter, ...)

    # -- admin: dead letters, queue snapshot, heartbeats, books, control (blocking) ----------------------------
    # (steps added here, one per verb)
    def queue_snapshot(self, n_buckets: int, *, dead_letters: int = 0) -> QueueSnapshot:
        """Every lane's backlog counters, each of its ``n_buckets`` streams' length, lag, pending count and
        consumers, the dead-letter count and its newest ``dead_letters`` entries: one consistent read, taken at
        one moment (a transaction)."""
        ...

    def dead_letters(self, count: int) -> list[DeadLetter]:
        """The newest ``count`` dead letters, the newest first (one read)."""
        ...

    def dead_letter(self, entry_id: str) -> DeadLetter | None:
        """One dead letter by its entry id; None if there is none (one read)."""
        ...

    def requeue_dead_letter(self, entry_id: str) -> str:
        """Put a dead letter's segment back on its queue and reopen its job (state queued, its end and final
        record gone) at once, returning the new queue entry's id. ``KeyError`` if there is no such dead letter
        (or it went while this ran: two requeues never both queue it); a malformed one raises ``InputError``
        MALFORMED_JOB and stays (it would only fail again)."""
        ...

    def purge_dead_letters(self) -> int:
        """Remove every dead letter, returning how many went (count and removal at once)."""
        ...

    def write_heartbeat(self, hostname: str, pid: int, info: Mapping[str, Any]) -> None:
        """Store one worker process's heartbeat record (``heartbeats.encode``) over its last one (one write)."""
        ...

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        """Every worker's heartbeat record by ``host:pid`` (one read; sans-IO like the producing steps, so the
        asyncio SDK reads them too)."""
        ...

    def reachable(self) -> bool:
        """Whether the store answers now (one ping): False when it does not, never an error."""
        ...


def run_blocking(broker: Broker, op: Op[T]) -> T:
    """Drive ``op`` on a broker with a blocking connection: each step sent, its reply (or error) handed back."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.throw(error) if error is not None else op.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = broker.send(step), None
        except Exception as exc:
            reply, error = None, exc


# -- IO steps a broker may yield (the Redis broker's; another broker may use its own) -----------------------


@dataclass(frozen=True)
class Command:
    """A redis-py call: ``getattr(connection, name)(*args, **kwargs)``."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Script:
    """A Lua script of the wire, run by its SHA (loaded on first use)."""

    source: str
    keys: Sequence[Any]
    args: Sequence[Any]
