"""The SDK's calls, written once: the sync ``Client`` and the asyncio ``AsyncClient`` are two faces of this.

Like httpx's shared base under ``Client`` and ``AsyncClient``, everything a call decides lives here:
argument checks (``producer.checks``), building the records (``producer.submit``), reading the replies
(``producer.reader``; a job's status is the wire's ``JobStatus``), error mapping and the retry policy. What it asks of the farm's
store goes through the broker (``producer.wire.broker``; ``RedisBroker`` unless one is handed in), whose
producing steps are sans-IO. A call is a generator that yields the steps it needs done and is sent each
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
- Redis (the broker) refusing the credentials is ``TTSFarmError`` BACKEND_AUTH_FAILED from any call, never retried;
- a lost connection (Redis restarting or failing over) is retried where the call can wait: ``stream``
  backs off up to 20 times, then ``TransientError``; ``wait`` keeps polling until its deadline, then
  raises the connection error. ``submit`` retries the same job (same id and request: admission is idempotent,
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

from pipeline.errors import TTSFarmError
from producer.checks import job_id_arg
from producer.reader import ResultsReader
from producer.submit import prepare_submission
from producer.wire.broker import Broker, advance  # noqa: F401 (advance: the faces drive their calls with it)
from producer.wire.redis_broker import RedisBroker
from producer.wire.sharded import ShardedBroker, broker_from_settings
from producer.wire.errors import BACKEND_AUTH_FAILED, JobError, JobNotFoundError, JobTimeoutError, TransientError
from producer.wire.keys import Keys
from producer.wire.records import Chunk, JobResult, Submission
from producer.wire.status import JobStatus
from producer.wire.settings import Settings, settings_from_environment

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
    """What both faces hold (``redis``: the connection, redis-py's sync or asyncio client; ``broker``: the
    wire's steps on it, ``RedisBroker`` unless one is handed in, or with ``redis.shards`` a ``ShardedBroker`` whose
    first shard is on it) and the client-level calls."""

    asynchronous: bool  # the face awaits its steps: its connection is redis-py's asyncio client

    def __init__(self, connection: Any, settings: Settings, *, broker: Broker | None = None) -> None:
        self.redis = connection
        self.settings = settings
        self.keys = Keys(settings.redis.key_prefix)
        self.broker: Broker = broker if broker is not None else broker_from_settings(
            settings.redis, asyncio=self.asynchronous, first=RedisBroker(
                connection, self.keys, replicas=settings.redis.wait_replicas, wait_ms=settings.redis.wait_timeout_ms))
        self._groups_ready = False

    @classmethod
    def from_url(cls, url: str | None = None, *, settings: Settings | None = None, **redis_kwargs: Any) -> Self:
        """A client of ``url`` (default: the settings'; a ``sentinel://`` one follows its group's master through a
        failover); settings default to the CLI's (configs/ plus ``TTSFARM_*``); ``redis_kwargs`` go to redis-py and
        win over the defaults below."""
        settings = settings or settings_from_environment()
        if url:
            settings = settings.replace(redis={"url": url})
        broker = broker_from_settings(settings.redis, asyncio=cls.asynchronous,
                                      **{"health_check_interval": 30, **redis_kwargs})
        return cls(broker.r, settings, broker=broker)  # type: ignore[attr-defined]

    def _connections(self) -> list[Any]:
        """The connections this client closes: its own, and the other shards' (``redis.shards``)."""
        if isinstance(self.broker, ShardedBroker):
            return [self.redis, *(c for c in self.broker.connections() if c is not self.redis)]
        return [self.redis]

    def _failed(self, exc: Exception) -> Exception:
        """The error a call sees for what a step raised: the farm's code where there is one."""
        if isinstance(exc, self.broker.refused):
            err = TTSFarmError(f"Redis refused the credentials: {exc}", code=BACKEND_AUTH_FAILED)
            err.__cause__ = exc
            return err
        return exc

    def _ensure_groups(self) -> Call[None]:
        if self._groups_ready:
            return
        yield from self.broker.ensure_groups(self.keys.queues(self.settings.queue.n_buckets))
        self._groups_ready = True

    def _submit(self, text: Any, request: dict[str, Any]) -> Call[Submission]:
        """Segment ``text`` and queue its segments (see ``Client.submit``)."""
        sub: Submission = yield Compute(functools.partial(prepare_submission, self.settings, text, **request))
        for attempt in range(SUBMIT_RETRIES + 1):
            try:
                yield from self._ensure_groups()
                yield from self.broker.admit(sub, self.settings.queue)  # idempotent per request: a retry never doubles it
                break
            except self.broker.lost as exc:
                if attempt == SUBMIT_RETRIES:
                    raise TransientError(f"cannot reach Redis to submit job {sub.job_id}: {exc}",
                                         job_id=sub.job_id) from exc
                yield Pause(0.1 * 2**attempt)
        log.debug("job %s: %d segment(s) queued", sub.job_id, sub.total)
        return sub

    def _workers(self) -> Call[dict[str, dict[str, Any]]]:
        """The workers' heartbeat records by ``host:pid`` (``producer.wire.heartbeats``)."""
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
            woke = None
            try:
                entries = reader.take((yield from broker.read_results(self.id, reader.read_args())))
                if not entries:  # wait for the next entry, then read it (and the trim count) above
                    woke = yield from broker.await_results(self.id, reader.last_id, block_ms)
                failures = 0
            except broker.lost as exc:
                failures += 1
                if failures > STREAM_RETRIES:
                    raise TransientError(f"lost Redis while streaming job {self.id}: {exc}") from exc
                yield Pause(min(2.0, 0.05 * 2**failures))
                continue
            for entry_id, fields in entries or ():
                yield from reader.feed(entry_id, fields)
            if not entries and not woke:
                state = (yield from self._status()).state
                error = reader.idle_error(state, stream_exists=entries is not None)
                if error:
                    raise error
        raise_if_failed(self.id, reader.final or {})

    def _wait(self, timeout: float | None, poll_s: float) -> Call[JobResult]:
        """Poll the status until the job ends (arguments checked by ``checks.wait_args``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                st = yield from self._status()
            except self.client.broker.lost:
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
