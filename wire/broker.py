"""The broker seam: every step the farm takes in its message store, as one interface (``Broker``, with the
queue reading of ``Consumer``); ``wire.redis.broker`` implements it on Redis.

Everything the farm keeps in its message store goes through names (``keys``), records (``records``) and these
steps, each happening at once where it must (two producers must not both slip past a backlog limit; a client's
cancel must not be undone by a worker's finish; a published piece and the admission it allows go together).
The SDK and front ends use the producing steps, workers the consuming and results ones, the CLI and front ends
the admin ones. Nothing outside ``wire`` speaks to the store itself.

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
2. Store and return the records of ``wire.records`` unchanged (``SegmentJob.to_fields``,
   ``chunk_fields``, ``final_fields``, ``dead_letter_fields``): readers parse them with the same functions.
3. Implement ``Consumer`` for the queue reading (heads, claim, ack, reclaim, touch, requeue), returned by
   ``consumer``; hand your broker to what builds the farm's connections (the workers' ``FarmWorker`` and the SDK
   client: ``Client(connection, settings, broker=...)``) in place of ``RedisBroker``.

``tests/test_broker_seam.py`` drives the SDK through a recording broker: a starting point for a stub.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from wire.keys import Keys
from wire.queue import Entry, Head

if TYPE_CHECKING:
    from wire.admission import Admission
    from wire.records import DeadLetter, SegmentJob, Submission
    from wire.status import JobStatus
    from wire.settings import QueueSettings
    from wire.snapshot import QueueSnapshot

T = TypeVar("T")
Op = Generator[Any, Any, T]  # a producing step: yields the broker's IO steps, is sent their replies, returns T


@dataclass(frozen=True)
class SegmentEnd:
    """What a segment's last piece writes besides its chunks: the segment's words (JSON), and which batch and worker
    made it. (Its PCM for assembly is its pieces', each stored as it is published: ``Broker.job_output`` joins them.)"""

    words_json: str
    batch_id: str
    worker: str
    open: bool = False  # the segment's job had its text appended (total 0 in its records): read its total too
    frames: bool = False  # the segment's claim stored its frames (``FrameClaim.frames``): the end drops them


@dataclass(frozen=True)
class FrameClaim:
    """A streamed segment's claim on its attempt, sent with the first piece the attempt publishes (``Piece.claim``):
    the attempt's tag, its replay record (text: how its windows are cut and how many frames it has; a redo of a voice
    that makes the same frames again from the same seed needs no more) and, from a voice that cannot, the frames."""

    attempt: str
    replay: str
    frames: bytes = b""


@dataclass(frozen=True)
class ClaimReply:
    """Who holds a streamed segment, as a piece whose claim found another attempt's (``PieceReply.claim``; a claim
    that wins, or an attempt's own sent again, gets none): that attempt's tag, replay record and frames (b"" where it
    stored none), the windows it published so far, and whether it published the segment whole (``ended``: only its
    bookkeeping may be left)."""

    attempt: str
    replay: str
    frames: bytes = b""
    windows: int = 0
    ended: bool = False


@dataclass(frozen=True)
class Piece:
    """One piece of a segment to publish: its chunk record (``records.chunks_fields``, the piece's chunks in one;
    none for a window an earlier attempt published), its index in the segment, its seconds of audio, the segment's
    end with its last piece, and the admission policy when the job may have staged segments (``admission.may_stage``)."""

    job_id: str
    seg: int
    chunks: Sequence[Mapping[str, Any]]
    piece: int
    seconds: float
    end: SegmentEnd | None = None
    admission: Admission | None = None
    total: int = 0  # the job's segments: the piece that ends its last one gets the job's output back
    claim: FrameClaim | None = None  # with an attempt's first piece of a streamed segment: its claim


@dataclass(frozen=True)
class PieceReply:
    """What the store said after a piece: the job's state as read; the job's playback clock (its first chunk's time,
    0.0 before; the audio seconds delivered including this piece); after a segment's end, the segments done. A piece
    is ``written`` unless its job had ended (a client's cancel: its state says which) or its claim lost (``claim``:
    who holds the segment); then nothing of it was written."""

    first_chunk: float = 0.0
    delivered_s: float = 0.0
    done: int = 0
    state: str = ""
    total: int = 0  # the job's total as its status holds it (read for a job whose text is appended: ``SegmentEnd.open``)
    output: tuple[dict[int, bytes], dict[int, Any]] | None = None  # when this piece was the whole job (one segment of
    # one piece): its parts and words, as sent; a longer job's are read by whoever ends it (``job_output``)
    written: bool = True
    claim: ClaimReply | None = None  # the piece carried a claim that another attempt held before it


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

    def reclaim(self, min_idle_ms: int, count: int = 16) -> list[Entry]:
        """Take over entries other consumers left idle that long (a dead worker's), with delivery counts."""
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
        ``OverloadedError`` and write nothing. Idempotent per request: a job that exists is left as it is, and
        the same request under its id answers as admitted (so a retry after a lost reply never queues it twice),
        another request under its id raises ``InputError`` JOB_ID_CONFLICT."""
        ...

    def cancel(self, job_id: str) -> Op[int]:
        """Mark a job cancelled unless it has ended: -1 no such job, 0 it had ended, 1 cancelled."""
        ...

    def open_job(self, job_id: str, status: Mapping[str, Any], queue: QueueSettings) -> Op[None]:
        """Write the status of a job whose text will be appended (``wire.appends``): no segments, no total
        yet. Idempotent per request like ``admit`` (another request under its id: ``InputError`` JOB_ID_CONFLICT)."""
        ...

    def append(self, job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first_seg: int, *,
               close: bool, last: tuple[SegmentJob, str] | None, queue: QueueSettings) -> Op[None]:
        """Queue an open job's next segments (numbered from ``first_seg``) on their streams against the lane's backlog
        limit (``OverloadedError``: nothing written) and, with ``close``, set its total, at once; a close after every
        segment was done queues a closer made from ``last`` (``wire.appends``). A retry of an append that was
        written answers as written; an ended job raises its ``JobError``."""
        ...

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        """A job's status record; None: no such job (unknown or expired)."""
        ...

    def read_results(self, job_id: str, args: Sequence[Any]) -> Op[Any]:
        """A job's results records after a reader's position (``ResultsReader.read_args``): ``[lost, entries]``,
        how many the stream has lost at its head (-1: not known) and ``(id, fields mapping)`` per entry (what redis-py's
        XRANGE gives); None when there is no stream (``ResultsReader.take`` reads the reply)."""
        ...

    def await_results(self, job_id: str, after_id: Any, block_ms: int) -> Op[bool]:
        """Block up to ``block_ms`` for a results record after ``after_id``: True if one came (it is read with
        ``read_results``)."""
        ...

    # -- consuming side: workers (blocking) ------------------------------------------------------------------
    def consumer(self, name: str, streams: Sequence[str]) -> Consumer:
        """The consumer ``name`` of the workers' group on these queue streams (one per inference loop)."""
        ...

    # -- results: the workers' writes to a job's results stream and status (blocking) --------------------------
    def job_states(self, job_ids: Sequence[str]) -> list[str]:
        """Each job's state ('' for none), in one round trip."""
        ...

    def start_segments(self, job_ids: Sequence[str], worker: str, startable: Sequence[bool],
                       claimed: Sequence[float]) -> list[tuple[str, bool]]:
        """A batch's segments about to run, in one round trip: each job's state ('' for none) and whether this marked
        its first start (``started``, and ``worker`` with when it claimed the segment: the wait between claim and start
        is a loop's own); a job that ended, or a segment not ``startable``, is not marked, and a state written meanwhile
        (a client's cancel) is never overwritten."""
        ...

    def playback_clocks(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """Each job's playback clock as stored: its first chunk's time and the audio seconds delivered (raw
        values, None where unset), in one round trip."""
        ...

    def publish_pieces(self, pieces: Sequence[Piece], *, maxlen: int, ttl_s: int) -> list[PieceReply]:
        """Publish pieces of segments (a window step's) in order, all in one round trip: per piece, at once, its chunk
        records on its job's results stream (trimmed near ``maxlen``), its PCM (the chunks' joined) kept for the
        job's assembly, and the job's playback clock moved by its seconds; with its segment's end, also its words
        and bookkeeping, counted done; and the job's next staged segments admitted if due by ``Piece.admission`` (``wire.admission``;
        None: the job has none staged). A piece with no chunks and no end writes nothing; nor does a piece of a job that
        ended (a client's cancel read here stops it), nor one whose claim (``Piece.claim``: the attempt's first piece of a
        streamed segment, which fixes the attempt in the same step) finds another attempt's (``PieceReply.claim``). One
        reply per piece; the one whose end made the job's segments all done says so (``done`` reaches ``total``) and,
        when that piece was the whole job, carries its output as sent (``PieceReply.output``); a longer job's parts are
        read with ``job_output`` (by the finisher, off the loop)."""
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
        """A job's PCM parts (each segment's pieces joined) and its words (as published, JSON-decoded), each by
        segment, in one round trip."""
        ...

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 drop_work: bool = False, **status: Any) -> int:
        """Write a job's end state and its one final record: 1 as asked, 2 if a client's cancel won the race
        (the job ends cancelled), 0 if it had ended already. ``drop_work``: when this ends it, delete what the job
        keeps only while it runs (its parts hash with the words, streamed frames) in the same step. ``status``: fields for
        the job's status record (any names: ``info`` too)."""
        ...

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

    def find_dead_letter(self, entry_id: str) -> DeadLetter | None:
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

    def topology(self) -> dict[str, Any]:
        """Where the store runs, for ``ttsfarm status``: ``master`` (host:port), ``replicas`` connected to it, and
        for a failover group ``group`` (its name), ``guards`` (its watchers) and ``guards_up`` (those answering)."""
        ...

    # books: ``books.handle`` runs a book of one-segment bulk jobs; ``workers.assembly`` answers its tasks
    def cancel_jobs(self, job_ids: Sequence[str]) -> list[int]:
        """``cancel`` for many jobs at once (a book's): each marked cancelled unless it has ended, in one atomic
        step; per job -1 no such job, 0 it had ended, 1 cancelled."""
        ...

    def admit_book_segments(self, subs: Sequence[Submission], queue: QueueSettings, *, force: bool) -> list[str]:
        """Queue each one-segment job unless it is queued or running, or done (unless ``force``), anything else
        reset first; each atomic, against its lane's backlog limit. Per job: 'submitted', 'full' (the lane is full:
        offer it again later) or the state it was left in. One round trip."""
        ...

    def job_fields(self, job_ids: Sequence[str], fields: Sequence[str]) -> list[list[str | None]]:
        """The named fields of each job's status record (None where missing), in one round trip."""
        ...

    def keep_jobs(self, job_ids: Sequence[str], ttl_s: int) -> None:
        """Let each job's status record live ``ttl_s`` more seconds (a long book outlives the job TTL), one round
        trip."""
        ...

    def drop_results(self, job_ids: Sequence[str]) -> None:
        """Delete the jobs' results streams (jobs nobody streams: a book's segments), one command."""
        ...

    def start_book_run(self, book_id: str, run_id: str, ttl_s: int) -> str:
        """Make ``run_id`` the book's current run for ``ttl_s`` seconds (assembly tasks of any other run refuse to
        write); returns the run key that tasks name. One command."""
        ...

    def book_run(self, run_key: str) -> str:
        """The run id a book's run key holds now ('' when none). One command."""
        ...

    def reply_to_book(self, reply_key: str, reply: str, ttl_s: int) -> None:
        """Push an assembly task's JSON reply onto the runner's reply list, which lives ``ttl_s`` seconds. One
        round trip."""
        ...

    def book_replies(self, reply_keys: Sequence[str]) -> list[str | None]:
        """Take the first reply off each reply list (None where none has come), in one round trip."""
        ...


def advance(op: Generator[Any, Any, T], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Hand ``op`` the outcome of its last step: ``(False, next step)``, or ``(True, its return value)``."""
    try:
        return False, op.throw(error) if error is not None else op.send(reply)
    except StopIteration as done:
        return True, done.value


def run_blocking(broker: Broker, op: Op[T]) -> T:
    """Drive ``op`` on a broker with a blocking connection: each step sent, its reply (or error) handed back."""
    finished, step = advance(op, None, None)
    while not finished:
        try:
            outcome: tuple[Any, BaseException | None] = (broker.send(step), None)
        except Exception as exc:
            outcome = (None, exc)
        finished, step = advance(op, *outcome)
    return step  # type: ignore[no-any-return]


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


@dataclass(frozen=True)
class Transaction:
    """Commands run as one step (``MULTI``/``EXEC``) in one round trip: their replies, in order. For reads whose
    parts must agree, where a script would cost more: every value a script reads becomes a Lua string that Redis
    hashes whole (no command here measures what that costs), a plain command's reply is copied out."""

    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Replicated:
    """A script and then ``WAIT replicas timeout_ms`` on the same connection, in one round trip: the reply is the
    script's and the number of replicas that hold its writes (WAIT counts the writes of its own connection only)."""

    script: Script
    replicas: int
    timeout_ms: int
