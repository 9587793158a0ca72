"""The SDK's calls, written once: the sync ``Client`` and the asyncio ``AsyncClient`` are two faces of this.

Like httpx's shared base under ``Client`` and ``AsyncClient``, everything a call decides lives here:
argument checks (``producer.checks``), building the records (``producer.submit``), the Redis commands
and Lua scripts, reading the replies (``producer.reader``, ``producer.status``), error mapping and the
retry policy. A call is a generator that yields the steps it needs done and is sent each step's reply
(or has its error thrown in at the ``yield``):

- ``Command``: a redis-py method call (``hgetall``, ``xread``);
- ``Script``: one of the wire's Lua scripts, by SHA;
- ``Pause``: a sleep between polls or retries;
- ``Compute``: CPU work (the text frontend of a submit);
- a ``Chunk`` (streams only): handed to the caller.

The faces (``producer.client``, ``producer.aio``) only perform steps: the sync one calls redis-py and
``time.sleep``, the async one awaits ``redis.asyncio`` and ``asyncio.sleep`` and runs ``Compute`` on a
thread so the event loop keeps serving. Neither has a branch of its own, so neither can learn a
behaviour the other lacks (``tests/test_client_parity.py`` runs the same scenarios through both).

Errors, the same on both faces:
- a bad argument raises ``InputError`` at the call, before any Redis command;
- Redis refusing the credentials is ``TTSFarmError`` BACKEND_AUTH_FAILED from any call, never retried;
- a lost connection (Redis restarting or failing over) is retried where the call can wait: ``stream``
  backs off up to 20 times, then ``TransientError``; ``wait`` keeps polling until its deadline, then
  raises the connection error. ``submit`` raises ``TransientError`` at once (the caller decides whether
  to resubmit); ``job``, ``status`` and ``cancel`` raise the connection error.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

import redis

from pipeline.errors import TTSFarmError
from producer.checks import job_id_arg
from producer.reader import ResultsReader
from producer.status import decode_status, result_from_status
from producer.submit import Submission, prepare_submission
from producer.wire.backlog import admit_args, check_admitted
from producer.wire.errors import BACKEND_AUTH_FAILED, JobError, JobNotFoundError, JobTimeoutError, TransientError
from producer.wire.keys import GROUP, STATES_FINAL, Keys
from producer.wire.lua import ADMIT, CANCEL, ENSURE_GROUPS, READ_RESULTS
from producer.wire.records import Chunk, JobResult
from producer.wire.settings import Settings, settings_from_environment

log = logging.getLogger(__name__)

AUTH_FAILED = (redis.AuthenticationError, redis.exceptions.AuthorizationError)
LOST = (redis.ConnectionError, redis.TimeoutError)  # worth retrying: Redis restarting or failing over
STREAM_RETRIES = 20  # reads a stream retries in a row before TransientError
WAIT_RETRY_S = 0.5  # wait's pause after a failed status read


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
class Pause:
    seconds: float


@dataclass(frozen=True)
class Compute:
    """CPU work: inline on the sync face, on a worker thread on the async one."""

    fn: Callable[[], Any]


Step = Command | Script | Pause | Compute
T = TypeVar("T")
Call = Generator[Step, Any, T]  # a call that returns a value
Stream = Generator[Step | Chunk, Any, None]  # a call that hands out chunks


def advance(call: Generator[Any, Any, T], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Hand ``call`` the outcome of its last step: ``(False, next step)``, or ``(True, its return value)``."""
    try:
        return False, call.throw(error) if error is not None else call.send(reply)
    except StopIteration as done:
        return True, done.value


def mapped(exc: Exception) -> Exception:
    """The error a call sees for what a step raised: the farm's code where there is one."""
    if isinstance(exc, AUTH_FAILED):
        err = TTSFarmError(f"Redis refused the credentials: {exc}", code=BACKEND_AUTH_FAILED)
        err.__cause__ = exc
        return err
    return exc


class ClientCore:
    """What both faces hold (``redis``: redis-py's sync or asyncio client) and the client-level calls."""

    connection_type: Any  # redis.Redis or redis.asyncio.Redis: the face's

    def __init__(self, connection: Any, settings: Settings) -> None:
        self.redis = connection
        self.settings = settings
        self.keys = Keys(settings.redis.key_prefix)
        self._groups_ready = False
        self._scripts: dict[str, Any] = {}

    @classmethod
    def from_url(cls, url: str | None = None, *, settings: Settings | None = None, **redis_kwargs: Any) -> Self:
        """A client of ``url`` (default: the settings'); settings default to the CLI's (configs/ plus
        ``TTSFARM_*``); ``redis_kwargs`` go to redis-py and win over the defaults below."""
        settings = settings or settings_from_environment()
        options = {"socket_timeout": settings.redis.socket_timeout_s, "health_check_interval": 30, **redis_kwargs}
        return cls(cls.connection_type.from_url(url or settings.redis.url, **options), settings)

    def _start(self, step: Command | Script) -> Any:
        """Send a Redis step: its reply on the sync face, an awaitable of it on the async one."""
        if isinstance(step, Script):
            script = self._scripts.get(step.source)
            if script is None:
                script = self._scripts[step.source] = self.redis.register_script(step.source)
            return script(keys=list(step.keys), args=list(step.args))
        return getattr(self.redis, step.name)(*step.args, **step.kwargs)

    def _ensure_groups(self) -> Call[None]:
        if self._groups_ready:
            return
        streams = self.keys.queues(self.settings.queue.n_buckets)
        yield Script(ENSURE_GROUPS, streams, [GROUP])
        self._groups_ready = True

    def _submit(self, text: Any, request: dict[str, Any]) -> Call[Submission]:
        """Segment ``text`` and queue its segments (see ``Client.submit``)."""
        sub: Submission = yield Compute(functools.partial(prepare_submission, self.settings, text, **request))
        try:
            yield from self._ensure_groups()
            script_keys, argv = admit_args(sub, self.keys, self.settings.queue)
            reply = yield Script(ADMIT, script_keys, argv)
        except LOST as exc:
            raise TransientError(f"cannot reach Redis to submit: {exc}") from exc
        check_admitted(reply, sub, self.settings.queue)
        log.debug("job %s: %d segment(s) queued", sub.job_id, sub.total)
        return sub

    def _total(self, job_id: Any) -> Call[int]:
        """The segment count of an existing job."""
        raw = yield Command("hgetall", (self.keys.status(job_id_arg(job_id)),))
        if not raw:
            raise JobNotFoundError(f"no job {job_id!r} (unknown or expired)")
        return int(decode_status(raw)["total"])


class JobCore:
    """A handle on one job and its calls; ``client`` is the face that made it."""

    def __init__(self, client: ClientCore, job_id: str, total: int) -> None:
        self.client = client
        self.id = job_id
        self.total = total

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, segments={self.total})"

    def _status(self) -> Call[dict[str, Any]]:
        raw = yield Command("hgetall", (self.client.keys.status(self.id),))
        if not raw:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return decode_status(raw)

    def _cancel(self) -> Call[bool]:
        outcome = int((yield Script(CANCEL, [self.client.keys.status(self.id)], [time.time()])))
        if outcome < 0:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return outcome == 1

    def _stream(self, after_seq: int, timeout: float | None, block_ms: int) -> Stream:
        """The job's chunks in order (arguments checked by ``checks.stream_args``); see ``Client.stream``."""
        reader = ResultsReader(total=self.total, skip_through_seq=after_seq, job_id=self.id)
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.client.keys.results(self.id)
        failures = 0
        while not reader.finished:
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s")
            woke = None
            try:
                entries = reader.take((yield Script(READ_RESULTS, [key], reader.read_args())))
                if not entries:  # wait for the next entry, then read it (and the trim count) above
                    woke = yield Command("xread", ({key: reader.last_id},), {"count": 1, "block": block_ms})
                failures = 0
            except LOST as exc:
                failures += 1
                if failures > STREAM_RETRIES:
                    raise TransientError(f"lost Redis while streaming job {self.id}: {exc}") from exc
                yield Pause(min(2.0, 0.05 * 2**failures))
                continue
            for entry_id, fields in entries or ():
                yield from reader.feed(entry_id, fields)
            if not entries and not woke:
                state = (yield from self._status())["state"]
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
            except LOST:
                # Redis restarting or failing over: keep waiting until the deadline.
                if deadline is not None and time.monotonic() > deadline:
                    raise
                yield Pause(WAIT_RETRY_S)
                continue
            if st["state"] in STATES_FINAL:
                return result_from_status(self.id, st)
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s (state {st['state']})")
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
