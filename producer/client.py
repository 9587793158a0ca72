"""The synchronous SDK: submit text, stream its audio as it is made, wait for the stored result."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from producer.checks import job_id_arg, stream_args, wait_args
from producer.reader import ResultsReader
from producer.status import decode_status, result_from_status
from producer.submit import prepare_submission
from producer.wire.backlog import admit_args, check_admitted
from producer.wire.errors import BACKEND_AUTH_FAILED, JobError, JobNotFoundError, JobTimeoutError, TransientError
from producer.wire.keys import GROUP, STATES_FINAL, Keys
from producer.wire.lua import ADMIT, CANCEL, ENSURE_GROUPS, READ_RESULTS
from producer.wire.records import Chunk, JobResult
from producer.wire.settings import Settings, settings_from_environment

if TYPE_CHECKING:
    from producer.book import BookHandle

log = logging.getLogger(__name__)


class Client:
    """``Client.from_url("redis://:password@host:6379/0")``; ``rediss://`` for TLS."""

    def __init__(self, connection: redis.Redis, settings: Settings) -> None:
        self.redis = connection
        self.settings = settings
        self.keys = Keys(settings.redis.key_prefix)
        self._groups_ready = False
        self._admit = connection.register_script(ADMIT)
        self._read_results = connection.register_script(READ_RESULTS)

    @classmethod
    def from_url(cls, url: str | None = None, *, settings: Settings | None = None, **redis_kwargs: Any) -> Client:
        settings = settings or settings_from_environment()  # the CLI's TTSFARM_* overrides
        url = url or settings.redis.url
        redis_kwargs.setdefault("socket_timeout", settings.redis.socket_timeout_s)
        redis_kwargs.setdefault("health_check_interval", 30)
        return cls(redis.Redis.from_url(url, **redis_kwargs), settings)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ensure_groups(self) -> None:
        if self._groups_ready:
            return
        streams = self.keys.queues(self.settings.queue.n_buckets)
        self.redis.eval(ENSURE_GROUPS, len(streams), *streams, GROUP)
        self._groups_ready = True

    def submit(self, text: Any, **request: Any) -> Job:
        """Segment ``text`` and queue its segments. Keywords: voice, format, sample_rate, lane,
        options ({"speed", "noise_scale", "noise_w"}), deadline_s, chunk_ms. Bad input of any type or value
        raises ``InputError`` with a stable code (checked in ``prepare_submission``); a full
        lane raises ``OverloadedError`` (code OVERLOADED, retryable)."""
        sub = prepare_submission(self.settings, text, **request)
        try:
            self.ensure_groups()
            script_keys, argv = admit_args(sub, self.keys, self.settings.queue)
            reply = self._admit(keys=script_keys, args=argv)
        except (redis.AuthenticationError, redis.exceptions.AuthorizationError) as exc:
            raise TTSFarmError(f"Redis refused the credentials: {exc}", code=BACKEND_AUTH_FAILED) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise TransientError(f"cannot reach Redis to submit: {exc}") from exc
        check_admitted(reply, sub, self.settings.queue)
        log.debug("job %s: %d segment(s) queued", sub.job_id, sub.total)
        return Job(self, sub.job_id, sub.total)

    def submit_book(self, path: str | Path, *, out: str, **kwargs: Any) -> BookHandle:
        """Queue a book (.txt, .md, .epub) as per-segment bulk jobs; see ``producer.book.submit_book``."""
        import inspect

        from producer.book import submit_book

        unknown = sorted(set(kwargs) - set(inspect.signature(submit_book).parameters) - {"client", "path", "out"})
        if unknown:
            raise InputError(f"unknown book option(s) {', '.join(map(repr, unknown))}", code=BAD_OPTION)
        return submit_book(self, path, out=out, **kwargs)

    def job(self, job_id: str) -> Job:
        """A handle on an existing job (to stream or wait from another process)."""
        status = self.redis.hgetall(self.keys.status(job_id_arg(job_id)))
        if not status:
            raise JobNotFoundError(f"no job {job_id!r} (unknown or expired)")
        return Job(self, job_id, int(decode_status(status)["total"]))


class Job:
    def __init__(self, client: Client, job_id: str, total: int) -> None:
        self.client = client
        self.id = job_id
        self.total = total

    def __repr__(self) -> str:
        return f"Job({self.id!r}, segments={self.total})"

    def status(self) -> dict[str, Any]:
        raw = self.client.redis.hgetall(self.client.keys.status(self.id))
        if not raw:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return decode_status(raw)

    def cancel(self) -> bool:
        """Stop the job: segments not yet started are skipped. False if it had already ended."""
        outcome = int(self.client.redis.eval(CANCEL, 1, self.client.keys.status(self.id), time.time()))
        if outcome < 0:
            raise JobNotFoundError(f"no job {self.id!r}")
        return outcome == 1

    def stream(self, *, after_seq: int = -1, timeout: float | None = None, block_ms: int = 500) -> Iterator[Chunk]:
        """Yield the job's chunks in order as they are published; ``after_seq`` resumes a stream.

        Survives a dropped connection (it resumes from the last entry read). Raises ``JobError`` with
        the worker's code if the job fails, with STREAM_TRIMMED if the chunks it needs were trimmed or
        expired (``producer.reader``), ``JobTimeoutError`` after ``timeout`` seconds.
        """
        return self._stream(*stream_args(after_seq, timeout, block_ms))

    def _stream(self, after_seq: int, timeout: float | None, block_ms: int) -> Iterator[Chunk]:
        reader = ResultsReader(total=self.total, skip_through_seq=after_seq, job_id=self.id)
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.client.keys.results(self.id)
        failures = 0
        while not reader.finished:
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s")
            woke = None
            try:
                entries = reader.take(self.client._read_results(keys=[key], args=reader.read_args()))
                if not entries:  # wait for the next entry, then read it (and the trim count) above
                    woke = self.client.redis.xread({key: reader.last_id}, count=1, block=block_ms)
                failures = 0
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failures += 1
                if failures > 20:
                    raise TransientError(f"lost Redis while streaming job {self.id}: {exc}") from exc
                time.sleep(min(2.0, 0.05 * 2**failures))
                continue
            for entry_id, fields in entries or ():
                yield from reader.feed(entry_id, fields)
            if not entries and not woke:
                error = reader.idle_error(self.status()["state"], stream_exists=entries is not None)
                if error:
                    raise error
        _raise_if_failed(self.id, reader.final or {})

    def wait(self, timeout: float | None = None, *, poll_s: float = 0.02) -> JobResult:
        """Block until the job ends; return where its full output is stored."""
        timeout, poll_s = wait_args(timeout, poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                st = self.status()
            except (redis.ConnectionError, redis.TimeoutError):
                # Redis restarting or failing over: keep waiting until the deadline.
                if deadline is not None and time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                continue
            if st["state"] in STATES_FINAL:
                return result_from_status(self.id, st)
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s (state {st['state']})")
            time.sleep(poll_s)
            poll_s = min(poll_s * 1.5, 0.25)

    def audio(self, timeout: float | None = None) -> tuple[bytes, int]:
        """The whole job as PCM16 bytes and its sample rate, read from the live stream."""
        pcm, rate = bytearray(), 0
        for chunk in self.stream(timeout=timeout):
            pcm += chunk.pcm
            rate = chunk.sample_rate
        return bytes(pcm), rate


def _raise_if_failed(job_id: str, final: dict[str, Any]) -> None:
    state = final.get("state")
    if state and state != "done":
        raise JobError(f"job {job_id} {state}: {final.get('message', '')}", code=str(final.get("code") or f"JOB_{state.upper()}"))
