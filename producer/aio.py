"""The asyncio SDK: the same calls as ``producer.client``, as coroutines and async iterators."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aredis

from producer.checks import job_id_arg, stream_args, wait_args
from producer.client import _raise_if_failed
from producer.reader import ResultsReader
from producer.status import decode_status, result_from_status
from producer.submit import prepare_submission
from producer.wire.backlog import admit_args, check_admitted
from producer.wire.errors import JobNotFoundError, JobTimeoutError, TransientError
from producer.wire.keys import GROUP, STATES_FINAL, Keys
from producer.wire.lua import ADMIT, CANCEL, ENSURE_GROUPS, READ_RESULTS
from producer.wire.records import Chunk, JobResult
from producer.wire.settings import Settings, settings_from_environment


class AsyncClient:
    def __init__(self, connection: aredis.Redis, settings: Settings) -> None:
        self.redis = connection
        self.settings = settings
        self.keys = Keys(settings.redis.key_prefix)
        self._groups_ready = False
        self._admit = connection.register_script(ADMIT)
        self._read_results = connection.register_script(READ_RESULTS)

    @classmethod
    def from_url(cls, url: str | None = None, *, settings: Settings | None = None, **redis_kwargs: Any) -> AsyncClient:
        settings = settings or settings_from_environment()  # the CLI's TTSFARM_* overrides
        redis_kwargs.setdefault("socket_timeout", settings.redis.socket_timeout_s)
        return cls(aredis.Redis.from_url(url or settings.redis.url, **redis_kwargs), settings)

    async def close(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def ensure_groups(self) -> None:
        if self._groups_ready:
            return
        streams = self.keys.queues(self.settings.queue.n_buckets)
        await self.redis.eval(ENSURE_GROUPS, len(streams), *streams, GROUP)
        self._groups_ready = True

    async def submit(self, text: Any, **request: Any) -> AsyncJob:
        """Like ``Client.submit``. The frontend runs in a thread so the event loop keeps serving."""
        sub = await asyncio.to_thread(prepare_submission, self.settings, text, **request)
        try:
            await self.ensure_groups()
            script_keys, argv = admit_args(sub, self.keys, self.settings.queue)
            reply = await self._admit(keys=script_keys, args=argv)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise TransientError(f"cannot reach Redis to submit: {exc}") from exc
        check_admitted(reply, sub, self.settings.queue)
        return AsyncJob(self, sub.job_id, sub.total)

    async def job(self, job_id: str) -> AsyncJob:
        raw = await self.redis.hgetall(self.keys.status(job_id_arg(job_id)))
        if not raw:
            raise JobNotFoundError(f"no job {job_id!r} (unknown or expired)")
        return AsyncJob(self, job_id, int(decode_status(raw)["total"]))


class AsyncJob:
    def __init__(self, client: AsyncClient, job_id: str, total: int) -> None:
        self.client = client
        self.id = job_id
        self.total = total

    async def status(self) -> dict[str, Any]:
        raw = await self.client.redis.hgetall(self.client.keys.status(self.id))
        if not raw:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return decode_status(raw)

    async def cancel(self) -> bool:
        """Like ``Job.cancel``."""
        outcome = int(await self.client.redis.eval(CANCEL, 1, self.client.keys.status(self.id), time.time()))
        if outcome < 0:
            raise JobNotFoundError(f"no job {self.id!r} (unknown or expired)")
        return outcome == 1

    def stream(self, *, after_seq: int = -1, timeout: float | None = None, block_ms: int = 500) -> AsyncIterator[Chunk]:
        """Like ``Job.stream``: ``async for chunk in job.stream()``. Bad arguments raise here, at the call."""
        return self._stream(*stream_args(after_seq, timeout, block_ms))

    async def _stream(self, after_seq: int, timeout: float | None, block_ms: int) -> AsyncIterator[Chunk]:
        reader = ResultsReader(total=self.total, skip_through_seq=after_seq, job_id=self.id)
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.client.keys.results(self.id)
        failures = 0
        while not reader.finished:
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s")
            woke = None
            try:
                entries = reader.take(await self.client._read_results(keys=[key], args=reader.read_args()))
                if not entries:
                    woke = await self.client.redis.xread({key: reader.last_id}, count=1, block=block_ms)
                failures = 0
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failures += 1
                if failures > 20:
                    raise TransientError(f"lost Redis while streaming job {self.id}: {exc}") from exc
                await asyncio.sleep(min(2.0, 0.05 * 2**failures))
                continue
            for entry_id, fields in entries or ():
                for chunk in reader.feed(entry_id, fields):
                    yield chunk
            if not entries and not woke:
                error = reader.idle_error((await self.status())["state"], stream_exists=entries is not None)
                if error:
                    raise error
        _raise_if_failed(self.id, reader.final or {})

    async def wait(self, timeout: float | None = None, *, poll_s: float = 0.02) -> JobResult:
        timeout, poll_s = wait_args(timeout, poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = await self.status()
            if st["state"] in STATES_FINAL:
                return result_from_status(self.id, st)
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s (state {st['state']})")
            await asyncio.sleep(poll_s)
            poll_s = min(poll_s * 1.5, 0.25)
