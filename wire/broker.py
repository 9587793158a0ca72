"""The broker seam, by role: what each side of the farm asks of the message store.

=================  ==============================================================================================
``JobBroker``      a client's steps: submit a job (whole, or its text appended), cancel it, read its status and its
                   results stream, the workers' heartbeats (the SDK, the front ends)
``WorkBroker``     a worker's steps: its queue reading (``consumer``: a ``Consumer``), a batch's start, the pieces it
                   publishes, failures and dead letters, a job's output and its end, the admission sweep, heartbeats
``AdminBroker``    an operator's steps: the queue snapshot, the dead letters, where the store runs (``ttsfarm status``,
                   ``ttsfarm dlq``, the metrics)
``BookBroker``     the book runner's steps and its assembly tasks' replies (``books``, ``workers.assembly``)
``Broker``         all four: what a backend implements (``wire.redis.RedisBroker``, ``wire.stub.StubBroker``)
=================  ==============================================================================================

Each step is atomic the way its docstring says: two producers must not both slip past a backlog limit; a client's
cancel must not be undone by a worker's finish; a published piece and the admission it allows go together. Nothing
outside ``wire/`` speaks to the store itself, and nothing outside ``wire/`` builds a broker: ``wire.connect`` makes
the farm's broker from its settings (``redis.url``'s scheme picks the backend; ``redis.shards`` spreads the jobs
over several, ``wire.shards``).

A client's steps are sans-IO, so one broker serves the blocking and the asyncio SDK alike (``producer.core``): each
returns an ``Op``, a generator that yields the broker's own IO steps (for Redis a script or a command: what to send)
and is sent each step's reply; it reads the reply and returns the outcome. The caller hands every step to ``send``
and, on an asyncio broker, awaits what ``send`` returns. ``run_blocking`` drives an ``Op`` on a blocking broker. The
other roles' steps are plain blocking calls: workers, the book runner and the CLI are synchronous.

Adding a broker (NATS JetStream, SQS + DynamoDB, Postgres):

1. Write a class with the members of ``Broker`` (``isinstance(x, Broker)`` checks it at run time), keeping each step
   atomic as its docstring says; name your store's objects after ``keys.Keys``. ``wire.stub.StubBroker`` is the
   shortest complete example (every step in plain Python over dicts, one lock for atomicity), ``wire.redis`` the
   production one. Raise ``errors.BrokerUnavailable`` for a lost connection, ``errors.BrokerRefused`` for refused
   credentials and ``errors.BrokerError`` for anything else the store refuses, with your library's error as the cause.
2. Store and return the records of ``wire.records`` unchanged (``SegmentJob.to_fields``, ``chunks_fields``,
   ``final_fields``, ``dead_letter_fields``): readers parse them with the same functions.
3. Give it a ``from_settings(settings, *, asyncio=False, connection=None, **options)`` classmethod and register its
   URL scheme in ``wire.connect.BACKENDS``: every client, worker, front end and tool then reaches it by URL.
4. Run the contract tests (``tests/test_broker_contract.py``) against it: they hold the same assertions against the
   stub and Redis.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from wire.keys import Keys
from wire.queue import Entry, Head

if TYPE_CHECKING:
    from wire.admission import Admission
    from wire.pieces import Piece, PieceReply
    from wire.records import DeadLetter, SegmentJob, Submission
    from wire.settings import QueueSettings
    from wire.snapshot import QueueSnapshot
    from wire.status import JobStatus

T = TypeVar("T")
Op = Generator[Any, Any, T]  # a client's step: yields the broker's IO steps, is sent their replies, returns T


@runtime_checkable
class Consumer(Protocol):
    """One consumer of the workers' group on some queue streams: how a worker reads the queue."""

    name: str
    streams: list[str]
    undelivered: int  # entries no consumer had taken, over these streams, at the last ``heads``

    def ensure_groups(self) -> None:
        """Create the group on these streams unless it is there."""
        ...

    def heads(self, block_ms: int) -> list[Head]:
        """Each stream's oldest undelivered entry, unclaimed; waits up to ``block_ms`` while all are empty."""
        ...

    def claim(self, stream: str, count: int) -> list[Entry]:
        """Claim up to ``count`` undelivered entries of one stream for this consumer."""
        ...

    def ack(self, entries: Sequence[Entry]) -> None:
        """Done with entries: acked, deleted, and off their lane's backlog (each once, even if redelivered)."""
        ...

    def reclaim(self, min_idle_ms: int, count: int = 16, keep: Collection[tuple[str, str]] = ()) -> list[Entry]:
        """Take over entries other consumers left idle that long (a dead worker's), with delivery counts; none of
        ``keep`` ((stream, entry id) the caller's process holds itself)."""
        ...

    def touch(self, entries: Sequence[Entry]) -> None:
        """Reset the idle time of entries this consumer still holds (not taken back if another took them)."""
        ...

    def requeue(self, entries: Sequence[Entry]) -> None:
        """Give claimed entries back to their streams at once (the backlog counts them still)."""
        ...

    def prune(self, min_idle_ms: int) -> int:
        """Remove other consumers with nothing pending, idle that long; how many."""
        ...

    def leave(self) -> None:
        """Leave the group unless something is still pending for this consumer."""
        ...


@runtime_checkable
class Connected(Protocol):
    """What every role has: the farm's names in the store, its IO, and where the store is."""

    keys: Keys

    def send(self, step: Any) -> Any:
        """Perform one IO step an ``Op`` yielded: its reply, or an awaitable of it on an asyncio broker."""
        ...

    def close(self) -> Any:
        """Close the broker's connections (an awaitable on an asyncio broker)."""
        ...

    def reachable(self) -> bool:
        """Whether the store answers now (one ping): False when it does not, never an error."""
        ...

    def master(self) -> str:
        """Where the store's primary is now (``host:port`` of a failover group's master; '' where there is no
        group), each change seen counted in ``master_changes``. No IO."""
        ...

    @property
    def master_changes(self) -> int: ...


@runtime_checkable
class JobBroker(Connected, Protocol):
    """A client's steps (the SDK, the front ends), each sans-IO: it returns an ``Op``."""

    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        """Create the workers' consumer group on each queue stream unless it is there."""
        ...

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        """Check the lane's backlog limit and write the job's status and every segment at once (its first segments to
        their queue streams, the rest staged: ``wire.admission``), or raise ``OverloadedError`` and write nothing.
        Idempotent per request: the same request under its id answers as admitted (so a retry after a lost reply never
        queues it twice); another request under its id raises ``InputError`` JOB_ID_CONFLICT."""
        ...

    def cancel(self, job_id: str) -> Op[int]:
        """Mark a job cancelled unless it has ended, its staged segments dropped: -1 no such job, 0 it had ended,
        1 cancelled."""
        ...

    def open_job(self, job_id: str, status: Mapping[str, Any], queue: QueueSettings) -> Op[None]:
        """Write the status of a job whose text will be appended (``wire.appends``): no segments, no total yet.
        Idempotent per request like ``admit`` (another request under its id: ``InputError`` JOB_ID_CONFLICT)."""
        ...

    def append(self, job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first_seg: int, *,
               close: bool, last: tuple[SegmentJob, str] | None, queue: QueueSettings) -> Op[None]:
        """Queue an open job's next segments (numbered from ``first_seg``) on their streams against the lane's backlog
        limit (``OverloadedError``: nothing written) and, with ``close``, set its total, at once; a close after every
        segment was done queues a closer made from ``last`` (``wire.appends``). A retry of an append that was written
        answers as written; an ended job raises its ``JobError``."""
        ...

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        """A job's status record; None: no such job (unknown or expired)."""
        ...

    def read_results(self, job_id: str, after_id: Any, count: int, block_ms: int) -> Op[list[tuple[Any, Any]]]:
        """A job's results records after ``after_id`` (at most ``count``; ``(id, fields mapping)`` each), waiting up to
        ``block_ms`` for the first (0: no wait); [] when none came or there is no stream. Each record carries its
        number (``records.ENTRY``): ``producer.reader`` tells trimming by a gap."""
        ...

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        """Every worker's heartbeat record by ``host:pid`` (one read)."""
        ...


@runtime_checkable
class WorkBroker(Connected, Protocol):
    """A worker's steps, blocking."""

    def consumer(self, name: str, streams: Sequence[str]) -> Consumer:
        """The consumer ``name`` of the workers' group on these queue streams (one per inference loop)."""
        ...

    def job_states(self, job_ids: Sequence[str]) -> list[str]:
        """Each job's state ('' for none), in one round trip."""
        ...

    def start_segments(self, job_ids: Sequence[str], worker: str, startable: Sequence[bool],
                       claimed: Sequence[float]) -> list[tuple[str, bool]]:
        """A batch's segments about to run, in one round trip: each job's state ('' for none) and whether this marked
        its first start (``started``, and ``worker`` with when it claimed the segment); a job that ended, or a segment
        not ``startable``, is not marked, and a state written meanwhile (a client's cancel) is never overwritten."""
        ...

    def playback_clocks(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """Each job's playback clock as stored: its first chunk's time and the audio seconds delivered (raw values,
        None where unset), in one round trip."""
        ...

    def publish_pieces(self, pieces: Sequence[Piece], *, maxlen: int, ttl_s: int) -> list[PieceReply]:
        """Publish pieces of segments (a window step's) in order, in one round trip: per piece, at once, its chunk
        record on its job's results stream (trimmed near ``maxlen``), its PCM kept for the job's assembly, and the
        job's playback clock moved by its seconds; with its segment's end, also its words and bookkeeping, counted
        done (once, however often the end is sent); and the job's next staged segments admitted if due by
        ``Piece.admission``. A repeated piece (by the segment's windows published) keeps the first copy. A piece with
        no chunks and no end writes nothing; nor does a piece of a job that ended, nor one whose claim
        (``Piece.claim``) finds another attempt's (``PieceReply.claim``). The reply whose end made the job's segments
        all done says so (``done`` reaches ``total``) and, when that piece was the whole job, carries its output as
        sent (``PieceReply.output``); a longer job's parts are read with ``job_output``."""
        ...

    def admit_due(self, admission: Admission, limit: int = 64) -> int:
        """Admit the staged segments that fell due (a listener played on between publishes; on an idle farm, any
        job's next), for at most ``limit`` jobs; how many segments, -1 when no job has staged segments."""
        ...

    def segments_done(self, job_id: str) -> int:
        """How many of a job's segments are done (published whole)."""
        ...

    def count_failure(self, job_id: str, seg: int) -> int:
        """Count one more failed attempt at a segment; the count so far."""
        ...

    def dead_letter(self, record: Mapping[str, Any]) -> None:
        """Append a dead-letter record (``records.dead_letter_fields``) to the farm's dead letters."""
        ...

    def job_output(self, job_id: str) -> tuple[dict[int, bytes], dict[int, Any]]:
        """A job's PCM parts (each segment's pieces joined) and its words (JSON-decoded), each by segment."""
        ...

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        """A job's status record (as ``JobBroker.job_status``; a worker drives it with ``run_blocking``)."""
        ...

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 drop_work: bool = False, ack: Sequence[Entry] = (), **status: Any) -> int:
        """Write a job's end state and its one final record: 1 as asked, 2 if a client's cancel won the race (the job
        ends cancelled), 0 if it had ended already. A job that ends otherwise than done drops its staged segments.
        ``drop_work``: delete what the job keeps only while it runs (its parts, streamed frames) in the same step.
        ``ack``: queue entries of the job acked in the same step, as ``Consumer.ack`` acks them, whatever the answer
        (the entry whose segment ended the job: the end and its ack are one step). ``status``: more fields for the
        job's status record."""
        ...

    def write_heartbeat(self, hostname: str, pid: int, info: Mapping[str, Any]) -> None:
        """Store one worker process's heartbeat record (``heartbeats.encode``) over its last one."""
        ...


@runtime_checkable
class AdminBroker(Connected, Protocol):
    """An operator's steps, blocking."""

    def queue_snapshot(self, n_buckets: int, *, dead_letters: int = 0) -> QueueSnapshot:
        """Every lane's backlog counters, each of its ``n_buckets`` streams' length, lag, pending count and
        consumers, the dead-letter count and its newest ``dead_letters`` entries: one consistent read."""
        ...

    def dead_letters(self, count: int) -> list[DeadLetter]:
        """The newest ``count`` dead letters, the newest first."""
        ...

    def find_dead_letter(self, entry_id: str) -> DeadLetter | None:
        """One dead letter by its entry id; None if there is none."""
        ...

    def requeue_dead_letter(self, entry_id: str) -> str:
        """Put a dead letter's segment back on its queue and reopen its job (state queued, its end and final record
        gone) at once, returning the new queue entry's id. ``KeyError`` if there is no such dead letter (or it went
        while this ran: two requeues never both queue it); a malformed one raises ``InputError`` MALFORMED_JOB and
        stays."""
        ...

    def purge_dead_letters(self) -> int:
        """Remove every dead letter, returning how many went."""
        ...

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        """Every worker's heartbeat record by ``host:pid`` (sans-IO, as ``JobBroker.read_heartbeats``)."""
        ...

    def topology(self) -> dict[str, Any]:
        """Where the store runs, for ``ttsfarm status``: ``master`` (host:port), ``replicas`` connected to it, and
        for a failover group ``group`` (its name), ``guards`` (its watchers) and ``guards_up`` (those answering)."""
        ...


@runtime_checkable
class BookBroker(Connected, Protocol):
    """The book runner's steps (``books.handle``: a book is one-segment bulk jobs) and its assembly tasks' replies
    (``workers.assembly``), blocking."""

    def cancel_jobs(self, job_ids: Sequence[str]) -> list[int]:
        """``cancel`` for many jobs at once, in one atomic step; per job -1 no such job, 0 it had ended, 1 cancelled."""
        ...

    def admit_book_segments(self, subs: Sequence[Submission], queue: QueueSettings, *, force: bool) -> list[str]:
        """Queue each one-segment job unless it is queued or running, or done (unless ``force``), anything else reset
        first; each atomic, against its lane's backlog limit. Per job: 'submitted', 'full' (offer it again later) or
        the state it was left in. One round trip."""
        ...

    def job_fields(self, job_ids: Sequence[str], fields: Sequence[str]) -> list[list[str | None]]:
        """The named fields of each job's status record (None where missing), in one round trip."""
        ...

    def keep_jobs(self, job_ids: Sequence[str], ttl_s: int) -> None:
        """Let each job's status record live ``ttl_s`` more seconds (a long book outlives the job TTL)."""
        ...

    def drop_results(self, job_ids: Sequence[str]) -> None:
        """Delete the jobs' results streams (jobs nobody streams: a book's segments)."""
        ...

    def start_book_run(self, book_id: str, run_id: str, ttl_s: int) -> str:
        """Make ``run_id`` the book's current run for ``ttl_s`` seconds (assembly tasks of any other run refuse to
        write); returns the run key that tasks name."""
        ...

    def book_run(self, run_key: str) -> str:
        """The run id a book's run key holds now ('' when none)."""
        ...

    def reply_to_book(self, reply_key: str, reply: str, ttl_s: int) -> None:
        """Push an assembly task's JSON reply onto the runner's reply list, which lives ``ttl_s`` seconds."""
        ...

    def book_replies(self, reply_keys: Sequence[str]) -> list[str | None]:
        """Take the first reply off each reply list (None where none has come), in one round trip."""
        ...


@runtime_checkable
class Broker(JobBroker, WorkBroker, AdminBroker, BookBroker, Protocol):
    """Every role's steps: what a backend implements."""


def advance(op: Generator[Any, Any, T], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Hand ``op`` the outcome of its last step: ``(False, next step)``, or ``(True, its return value)``."""
    try:
        return False, op.throw(error) if error is not None else op.send(reply)
    except StopIteration as done:
        return True, done.value


def run_blocking(broker: Connected, op: Op[T]) -> T:
    """Drive ``op`` on a blocking broker: each step sent, its reply (or error) handed back."""
    finished, step = advance(op, None, None)
    while not finished:
        try:
            outcome: tuple[Any, BaseException | None] = (broker.send(step), None)
        except Exception as exc:
            outcome = (None, exc)
        finished, step = advance(op, *outcome)
    return step  # type: ignore[no-any-return]
