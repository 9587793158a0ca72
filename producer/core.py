"""The SDK's calls, written once: the sync ``Client`` and the asyncio ``AsyncClient`` are two faces of this.

Like httpx's shared base under ``Client`` and ``AsyncClient``, everything a call decides lives here:
argument checks (``producer.checks``), building the records (``producer.submit``), reading the replies
(``producer.reader``; a job's status is the wire's ``JobStatus``), error mapping and the retry policy. What it asks of the farm's
store goes through the broker's client steps (``wire.broker.JobBroker``; ``wire.connect`` builds it from the
settings unless one is handed in), which are sans-IO. A call is a generator that yields the steps it needs done and is sent each
step's reply (or has its error thrown in at the ``yield``):

- the broker's IO steps (for Redis a command or a Lua script), from ``yield from broker.admit(...)`` and
  the like: the face hands each to ``broker.send``;
- ``Pause``: a sleep between polls or retries;
- ``Compute``: CPU work (the text frontend of a submit);
- a ``Chunk`` (streams only): handed to the caller.

The faces (``producer.client``, ``producer.aio``) only perform steps: the sync one sends them on redis-py's
blocking connection and calls ``time.sleep``, the async one awaits them on ``redis.asyncio`` and
``asyncio.sleep`` and runs ``Compute`` on a thread so the event loop keeps serving. Neither has a branch of
its own, so neither can learn a behaviour the other lacks (``tests/test_client_parity.py`` runs the same
scenarios through both).

Errors, the same on both faces:
- a bad argument raises ``InputError`` at the call, before any Redis command; a ``job_id`` that another
  request holds raises ``InputError`` JOB_ID_CONFLICT from the admission, which then writes nothing;
- the broker's store refusing the credentials is ``BrokerRefused`` (BACKEND_AUTH_FAILED) from any call, never
  retried;
- a lost connection (Redis restarting or failing over: ``BrokerUnavailable``, a ``TransientError``) is retried where
  the call can wait: ``stream`` backs off up to 20 times, then ``TransientError``; ``wait`` keeps polling until its
  deadline, then raises the connection error. ``submit`` retries the same job (same id and request: admission is idempotent,
  so a try whose reply was lost is not queued twice) for about 3 s, then raises ``TransientError`` whose
  ``detail["job_id"]`` names the job: it may have been queued (``client.job(id)`` tells); ``job``,
  ``status`` and ``cancel`` raise the connection error.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from pipeline.errors import EMPTY_TEXT, InputError
from producer.checks import job_id_arg
from producer.reader import READ_COUNT, ResultsReader
from producer.submit import Terms, job_status, plan_segments, prepare_submission, request_terms
from producer.appending import OpenedJob, check_open_terms
from wire.broker import JobBroker, advance  # noqa: F401 (advance: the faces drive their calls with it)
from wire.connect import connect
from wire.errors import BrokerUnavailable, JOB_CLOSED, JobError, JobNotFoundError, JobTimeoutError, TransientError
from wire.keys import STATES_FINAL, Keys, bucket_of, new_job_id
from wire.records import Chunk, JobResult, SegmentJob, Submission
from wire.status import JobStatus
from wire.settings import Settings, settings_from_environment

log = logging.getLogger(__name__)

STREAM_RETRIES = 20  # reads a stream retries in a row before TransientError
SUBMIT_RETRIES = 5  # a submit's retries of the same job after a lost connection (0.1 s doubling: 3.1 s in all)
WAIT_RETRY_S = 0.5  # wait's pause after a failed status read


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Compute:
    """CPU work: inline on the sync face, on a worker thread on the async one."""

    fn: Callable[[], Any]


Step = Pause | Compute | Any  # Any: an IO step of the broker, for ``broker.send``
T = TypeVar("T")
Call = Generator[Step, Any, T]  # a call that returns a value
Stream = Generator[Step | Chunk, Any, None]  # a call that hands out chunks


class ClientCore:
    """What both faces hold (``broker``: the wire's client steps, built by ``wire.connect`` from the settings, on
    ``connection`` when one is given, or handed in) and the client-level calls."""

    asynchronous: bool  # the face awaits its steps: its broker answers awaitables

    def __init__(self, connection: Any, settings: Settings, *, broker: JobBroker | None = None) -> None:
        self.settings = settings
        self.keys = Keys(settings.redis.key_prefix)
        self.broker: JobBroker = broker if broker is not None else connect(
            settings.redis, asyncio=self.asynchronous, connection=connection)
        self._groups_ready = False

    @classmethod
    def from_url(cls, url: str | None = None, *, settings: Settings | None = None, **options: Any) -> Self:
        """A client of ``url`` (default: the settings'; a ``sentinel://`` one follows its group's master through a
        failover); settings default to the CLI's (configs/ plus ``TTSFARM_*``); ``options`` go to the broker's client
        library (redis-py) and win over the defaults below."""
        settings = settings or settings_from_environment()
        if url:
            settings = settings.replace(redis={"url": url})
        return cls(None, settings, broker=connect(settings.redis, asyncio=cls.asynchronous,
                                                  **{"health_check_interval": 30, **options}))

    @property
    def redis(self) -> Any:
        """The connection of the broker's first store (redis-py's client), for tools and tests that look at the
        store themselves; None for a broker that holds none."""
        return getattr(self.broker, "r", None)

    def _ensure_groups(self) -> Call[None]:
        if self._groups_ready:
            return
        yield from self.broker.ensure_groups(self.keys.queues(self.settings.queue.n_buckets))
        self._groups_ready = True

    def _retried(self, make: Callable[[], Call[None]], job_id: str, what: str) -> Call[None]:
        """Run the idempotent step ``make()`` makes, with the consumer groups ensured, again after a lost connection
        (0.1 s doubling, ``SUBMIT_RETRIES`` times), then ``TransientError`` naming the job."""
        for attempt in range(SUBMIT_RETRIES + 1):
            try:
                yield from self._ensure_groups()
                yield from make()
                return
            except BrokerUnavailable as exc:
                if attempt == SUBMIT_RETRIES:
                    raise TransientError(f"cannot reach Redis to {what} job {job_id}: {exc}", job_id=job_id) from exc
                yield Pause(0.1 * 2**attempt)

    def _submit(self, text: Any, request: dict[str, Any]) -> Call[Submission]:
        """Segment ``text`` and queue its segments (see ``Client.submit``)."""
        sub: Submission = yield Compute(functools.partial(prepare_submission, self.settings, text, **request))
        # idempotent per request: a retry never doubles it
        yield from self._retried(lambda: self.broker.admit(sub, self.settings.queue), sub.job_id, "submit")
        log.debug("job %s: %d segment(s) queued", sub.job_id, sub.total)
        return sub

    def _open(self, request: dict[str, Any]) -> Call[OpenedJob]:
        """Open a job whose text is appended (see ``producer.appending``): its request checked, its status written."""
        terms: Terms = yield Compute(functools.partial(request_terms, self.settings, request))
        check_open_terms(terms)
        now = time.time()
        opened = OpenedJob(terms.job_id or new_job_id(), terms, now, now + terms.deadline_s if terms.deadline_s else 0.0)
        status = job_status(terms, opened.created, opened.deadline, [])
        yield from self._retried(lambda: self.broker.open_job(opened.job_id, status, self.settings.queue),
                                 opened.job_id, "open")
        return opened

    def _workers(self) -> Call[dict[str, dict[str, Any]]]:
        """The workers' heartbeat records by ``host:pid`` (``wire.heartbeats``)."""
        return (yield from self.broker.read_heartbeats())

    def _total(self, job_id: Any) -> Call[int]:
        """The segment count of an existing job."""
        st = yield from self.broker.job_status(job_id_arg(job_id))
        if st is None:
            raise JobNotFoundError(f"no job {job_id!r} (unknown or expired)")
        return st.total


class JobCore:
    """A handle on one job and its calls; ``client`` is the face that made it."""

    def __init__(self, client: ClientCore, job_id: str, total: int) -> None:
        self.client = client
        self.id = job_id
        self.total = total

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, segments={self.total})"

    def _status(self) -> Call[JobStatus]:
        st = yield from self.client.broker.job_status(self.id)
        if st is None:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return st

    def _cancel(self) -> Call[bool]:
        outcome = yield from self.client.broker.cancel(self.id)
        if outcome < 0:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return outcome == 1

    def _stream(self, after_seq: int, timeout: float | None, block_ms: int) -> Stream:
        """The job's chunks in order (arguments checked by ``checks.stream_args``); see ``Client.stream``."""
        reader = ResultsReader(total=self.total, skip_through_seq=after_seq, job_id=self.id)
        deadline = None if timeout is None else time.monotonic() + timeout
        broker = self.client.broker
        failures = 0
        while not reader.finished:
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s")
            try:  # one blocking read per batch of records: the end comes as the final record
                entries = yield from broker.read_results(self.id, reader.last_id, READ_COUNT, block_ms)
                if not entries:  # nothing within block_ms: has the job ended without this reader seeing its end?
                    state = (yield from self._status()).state
                    # read again: the end may have come between the read and the status
                    entries = (yield from broker.read_results(self.id, reader.last_id, READ_COUNT, 0)) \
                        if state in STATES_FINAL else []
                    error = None if entries else reader.idle_error(state)
                    if error:
                        raise error
                failures = 0
            except BrokerUnavailable as exc:
                failures += 1
                if failures > STREAM_RETRIES:
                    raise TransientError(f"lost Redis while streaming job {self.id}: {exc}") from exc
                yield Pause(min(2.0, 0.05 * 2**failures))
                continue
            for entry_id, fields in entries:
                yield from reader.feed(entry_id, fields)
        raise_if_failed(self.id, reader.final or {})

    def _wait(self, timeout: float | None, poll_s: float) -> Call[JobResult]:
        """Poll the status until the job ends (arguments checked by ``checks.wait_args``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                st = yield from self._status()
            except BrokerUnavailable:
                # Redis restarting or failing over: keep waiting until the deadline.
                if deadline is not None and time.monotonic() > deadline:
                    raise
                yield Pause(WAIT_RETRY_S)
                continue
            if st.ended:
                return st.result()
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s (state {st.state})")
            yield Pause(poll_s)
            poll_s = min(poll_s * 1.5, 0.25)


class OpenJobCore(JobCore):
    """A job whose text is appended (``producer.appending``); ``total`` is 0 until it is closed."""

    def __init__(self, client: ClientCore, opened: OpenedJob) -> None:
        super().__init__(client, opened.job_id, 0)
        self.opened = opened

    def _append(self, text: Any, close: bool, flush: bool = False) -> Call[int]:
        """Buffer ``text``; append the sentences it finished (with ``flush``, all that is buffered, even mid-sentence;
        with ``close``, all the rest, and set the total) in one round trip. How many segments were appended. When it
        raises, the finished text stays buffered (a full lane: append again later; a lost connection: the same append
        again is answered as done if it was written)."""
        opened = self.opened
        if opened.closed:
            raise JobError(f"job {self.id} was closed: no more text can be appended", code=JOB_CLOSED)
        opened.buffer.add(text)
        piece, start = opened.buffer.take(final=close or flush)
        try:
            return (yield from self._append_piece(piece, start, close))
        except BaseException:
            opened.buffer.taken = start
            raise

    def _append_piece(self, piece: str, start: int, close: bool) -> Call[int]:
        opened, settings = self.opened, self.client.settings
        segments: list[SegmentJob] = []
        if piece.strip():
            segments = yield Compute(functools.partial(plan_segments, settings, opened.terms, piece, self.id,
                                                       opened.created, opened.deadline, first_seg=opened.next_seg,
                                                       first_char=start, total=0))
        if not segments and not close:
            return 0
        if close and opened.next_seg + len(segments) == 0:
            yield from self._cancel()
            raise InputError(f"job {self.id} was closed with no text to speak; it was cancelled", code=EMPTY_TEXT)
        keys, edges = self.client.keys, settings.queue.bucket_edges_s
        streams = [keys.queue(s.lane, bucket_of(s.est_s, edges)) for s in segments]
        first, last = opened.next_seg, opened.last
        yield from self.client._retried(
            lambda: self.client.broker.append(self.id, segments, streams, first, close=close, last=last,
                                              queue=settings.queue), self.id, "append to")
        opened.next_seg += len(segments)
        if segments:
            opened.last = (segments[-1], streams[-1])
        if close:
            opened.closed = True
            self.total = opened.next_seg
        return len(segments)


class PcmJoin:
    """``audio()``: a stream's chunks joined into PCM16 bytes and their sample rate."""

    def __init__(self) -> None:
        self.pcm, self.rate = bytearray(), 0

    def add(self, chunk: Chunk) -> None:
        self.pcm += chunk.pcm
        self.rate = chunk.sample_rate

    def result(self) -> tuple[bytes, int]:
        return bytes(self.pcm), self.rate


def raise_if_failed(job_id: str, final: dict[str, Any]) -> None:
    """The job's error, from the final record of its results stream, if it did not end done."""
    state = final.get("state")
    if state and state != "done":
        raise JobError(f"job {job_id} {state}: {final.get('message', '')}", code=str(final.get("code") or f"JOB_{state.upper()}"))
