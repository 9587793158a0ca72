"""The asyncio SDK: the same calls as ``producer.client``, as coroutines and async iterators.

A thin face over ``producer.core``, where every call is written once: this module only performs the
steps a call yields, awaiting them (the text frontend of a submit runs on a thread, so the event loop
keeps serving). Books are driven by a blocking runner (``books.submit_book`` on the sync ``Client``): from asyncio,
run it on a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from producer.checks import stream_args, wait_args
from producer.core import Call, ClientCore, Compute, JobCore, OpenJobCore, Pause, PcmJoin, Step, Stream, advance
from wire.status import JobStatus
from wire.records import Chunk, JobResult

T = TypeVar("T")


class AsyncClient(ClientCore):
    """``AsyncClient.from_url("redis://:password@host:6379/0")``; ``async with`` closes it."""

    asynchronous = True

    async def close(self) -> None:
        await self.broker.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _perform(self, step: Step) -> tuple[Any, Exception | None]:
        """Do one step, awaiting it: its reply, or the error to throw into the call."""
        try:
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
                return None, None
            if isinstance(step, Compute):
                return await asyncio.to_thread(step.fn), None
            return await self.broker.send(step), None
        except Exception as exc:
            return None, exc

    async def _run(self, call: Call[T]) -> T:
        outcome: tuple[Any, Exception | None] = (None, None)
        while True:
            finished, step = advance(call, *outcome)
            if finished:
                return step  # type: ignore[no-any-return]
            outcome = await self._perform(step)

    async def _iterate(self, call: Stream) -> AsyncIterator[Chunk]:
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
                    outcome = await self._perform(step)
        finally:
            call.close()

    async def ensure_groups(self) -> None:
        await self._run(self._ensure_groups())

    async def submit(self, text: Any, **request: Any) -> AsyncJob:
        """Like ``Client.submit``."""
        sub = await self._run(self._submit(text, request))
        return AsyncJob(self, sub.job_id, sub.total)

    async def open(self, **request: Any) -> AsyncOpenJob:
        """Like ``Client.open``: ``async with await client.open(...) as job``."""
        return AsyncOpenJob(self, await self._run(self._open(request)))

    async def job(self, job_id: str) -> AsyncJob:
        """Like ``Client.job``."""
        return AsyncJob(self, job_id, await self._run(self._total(job_id)))

    async def workers(self) -> dict[str, dict[str, Any]]:
        """Like ``Client.workers``."""
        return await self._run(self._workers())


class AsyncJob(JobCore):
    client: AsyncClient

    async def status(self) -> JobStatus:
        return await self.client._run(self._status())

    async def cancel(self) -> bool:
        """Like ``Job.cancel``."""
        return await self.client._run(self._cancel())

    def stream(self, *, after_seq: int = -1, timeout: float | None = None, block_ms: int = 500) -> AsyncIterator[Chunk]:
        """Like ``Job.stream``: ``async for chunk in job.stream()``. Bad arguments raise here, at the call."""
        return self.client._iterate(self._stream(*stream_args(after_seq, timeout, block_ms)))

    async def wait(self, timeout: float | None = None, *, poll_s: float = 0.02) -> JobResult:
        """Like ``Job.wait``: survives Redis restarting or failing over until ``timeout``."""
        return await self.client._run(self._wait(*wait_args(timeout, poll_s)))

    async def audio(self, timeout: float | None = None) -> tuple[bytes, int]:
        """Like ``Job.audio``."""
        joined = PcmJoin()
        async for chunk in self.stream(timeout=timeout):
            joined.add(chunk)
        return joined.result()


class AsyncOpenJob(OpenJobCore, AsyncJob):
    """Like ``OpenJob``."""

    client: AsyncClient

    async def append(self, text: str) -> int:
        """Like ``OpenJob.append``."""
        return await self.client._run(self._append(text, False))

    async def close(self, text: str = "") -> int:
        """Like ``OpenJob.close``."""
        return await self.client._run(self._append(text, True))

    async def flush(self, text: str = "") -> int:
        """Like ``OpenJob.flush``."""
        return await self.client._run(self._append(text, False, flush=True))

    async def __aenter__(self) -> AsyncOpenJob:
        return self

    async def __aexit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            await self.close()
        elif not self.opened.closed:
            await self.cancel()
