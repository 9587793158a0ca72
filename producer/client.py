"""The synchronous SDK: submit text, stream its audio as it is made, wait for the stored result.

A thin face over ``producer.core``, where every call is written once (the asyncio face,
``producer.aio``, is the other): this module only performs the steps a call yields, blocking.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, TypeVar

from producer.checks import stream_args, wait_args
from producer.core import Call, ClientCore, Compute, JobCore, OpenJobCore, Pause, PcmJoin, Step, Stream, advance
from wire.status import JobStatus
from wire.records import Chunk, JobResult

T = TypeVar("T")


class Client(ClientCore):
    """``Client.from_url("redis://:password@host:6379/0")``; ``rediss://`` for TLS."""

    asynchronous = False

    def close(self) -> None:
        self.broker.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _perform(self, step: Step) -> tuple[Any, Exception | None]:
        """Do one step, blocking: its reply, or the error to throw into the call."""
        try:
            if isinstance(step, Pause):
                time.sleep(step.seconds)
                return None, None
            if isinstance(step, Compute):
                return step.fn(), None
            return self.broker.send(step), None
        except Exception as exc:
            return None, exc

    def _run(self, call: Call[T]) -> T:
        outcome: tuple[Any, Exception | None] = (None, None)
        while True:
            finished, step = advance(call, *outcome)
            if finished:
                return step  # type: ignore[no-any-return]
            outcome = self._perform(step)

    def _iterate(self, call: Stream) -> Iterator[Chunk]:
        outcome: tuple[Any, Exception | None] = (None, None)
        try:
            while True:
                finished, step = advance(call, *outcome)
                if finished:
                    return
                if isinstance(step, Chunk):
                    yield step
                    outcome = (None, None)
                else:
                    outcome = self._perform(step)
        finally:
            call.close()

    def ensure_groups(self) -> None:
        self._run(self._ensure_groups())

    def submit(self, text: Any, **request: Any) -> Job:
        """Segment ``text`` and queue its segments. Keywords: voice, format, sample_rate, lane,
        options ({"speed", "noise_scale", "noise_w"}), deadline_s, chunk_ms. Bad input of any type or value
        raises ``InputError`` with a stable code (checked in ``prepare_submission``); a full
        lane raises ``OverloadedError`` (code OVERLOADED, retryable). ``job_id`` (optional, your own) makes a
        resubmit safe: the same request under an id that exists is that job, not queued again; other text or
        options under it raise ``InputError`` JOB_ID_CONFLICT (``detail["job_id"]``) and queue nothing. Redis
        out of reach for ~3 s raises ``TransientError`` with ``detail["job_id"]`` (the job may have been queued)."""
        sub = self._run(self._submit(text, request))
        return Job(self, sub.job_id, sub.total)

    def open(self, **request: Any) -> OpenJob:
        """A job whose text you append while it plays (``producer.appending``): ``append(text)`` as it is written,
        ``close()`` at its end; ``with client.open(...) as job`` closes it (cancels it on an error). Keywords as
        ``submit``'s (not ``ssml``); each is checked here, before anything is written."""
        return OpenJob(self, self._run(self._open(request)))

    def job(self, job_id: str) -> Job:
        """A handle on an existing job (to stream or wait from another process)."""
        return Job(self, job_id, self._run(self._total(job_id)))

    def workers(self) -> dict[str, dict[str, Any]]:
        """The workers' heartbeat records by ``host:pid``: state (``serving``, ...), ``ts``, voices and their
        versions, batches, the last reload (``wire.heartbeats``)."""
        return self._run(self._workers())


class Job(JobCore):
    client: Client

    def status(self) -> JobStatus:
        return self.client._run(self._status())

    def cancel(self) -> bool:
        """Stop the job: segments not yet started are skipped. False if it had already ended."""
        return self.client._run(self._cancel())

    def stream(self, *, after_seq: int = -1, timeout: float | None = None, block_ms: int = 500) -> Iterator[Chunk]:
        """Yield the job's chunks in order as they are published; ``after_seq`` resumes a stream.

        Survives a dropped connection (it resumes from the last entry read). Raises ``JobError`` with
        the worker's code if the job fails, with STREAM_TRIMMED if the chunks it needs were trimmed or
        expired (``producer.reader``), ``JobTimeoutError`` after ``timeout`` seconds. Bad arguments
        raise here, at the call.
        """
        return self.client._iterate(self._stream(*stream_args(after_seq, timeout, block_ms)))

    def wait(self, timeout: float | None = None, *, poll_s: float = 0.02) -> JobResult:
        """Block until the job ends; return where its full output is stored. Survives Redis restarting
        or failing over until ``timeout``."""
        return self.client._run(self._wait(*wait_args(timeout, poll_s)))

    def audio(self, timeout: float | None = None) -> tuple[bytes, int]:
        """The whole job as PCM16 bytes and its sample rate, read from the live stream."""
        joined = PcmJoin()
        for chunk in self.stream(timeout=timeout):
            joined.add(chunk)
        return joined.result()


class OpenJob(OpenJobCore, Job):
    """A ``Job`` whose text is appended: ``append``, ``flush``, ``close``; the rest (``stream``, ``cancel``, ``wait``) as any job's."""

    client: Client

    def append(self, text: str) -> int:
        """Add text; the sentences it finishes are queued at once (one round trip). How many segments were queued."""
        return self.client._run(self._append(text, False))

    def close(self, text: str = "") -> int:
        """Add the last text (if any) and end the job's text: the rest is queued and the job's total set."""
        return self.client._run(self._append(text, True))

    def flush(self, text: str = "") -> int:
        """Add text (if any) and queue everything buffered now, even a sentence not finished (a voice agent's turn
        that ends without punctuation). How many segments were queued."""
        return self.client._run(self._append(text, False, flush=True))

    def __enter__(self) -> OpenJob:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            self.close()
        elif not self.opened.closed:
            self.cancel()
