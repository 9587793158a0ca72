"""Following one job's results stream for a live client, and the bytes each transport sends.

``follow`` turns ``AsyncJob.stream`` into events that a route can forward as they come: ordered
chunks, then exactly one ``Finished`` or ``Failed``; ``None`` marks an idle interval so a route can
send a keep-alive. The same chunk and final messages go out over SSE and WebSocket.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Send

from pipeline.errors import TTSFarmError
from producer.aio import AsyncJob
from wire.errors import BrokerError, TransientError
from wire.records import Chunk, JobResult

log = logging.getLogger(__name__)

STREAMING_SIZE = 0xFFFFFFFF  # RIFF and data sizes of a WAV whose length is not known yet


@dataclass(frozen=True)
class Finished:
    result: JobResult
    chunks: int  # chunks this follower sent


@dataclass(frozen=True)
class Failed:
    error: TTSFarmError


Event = Chunk | Finished | Failed | None


class ClosingStreamingResponse(StreamingResponse):
    """A ``StreamingResponse`` that closes its body generator however the response ended. Starlette iterates the body
    with ``async for`` and never closes it: a client that goes away while a chunk is being sent (its ``send`` raises,
    or the disconnect cancels it there) leaves the generator suspended, and the ``finally`` that cancels a job or
    stops a reader ran only when the generator was collected."""

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()


async def follow(job: AsyncJob, *, after_seq: int = -1, timeout_s: float, keepalive_s: float) -> AsyncIterator[Event]:
    """Chunks after ``after_seq`` in order, then ``Finished`` or ``Failed``; ``None`` after each idle
    ``keepalive_s``. A reader task fills a small queue, so a slow client holds back at most 64 chunks."""
    queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=64)

    async def read() -> None:
        sent = 0
        try:
            async for chunk in job.stream(after_seq=after_seq, timeout=timeout_s):
                await queue.put(chunk)
                sent += 1
            result = await job.wait(timeout=30)
            await queue.put(Finished(result, sent))
        except TTSFarmError as exc:
            await queue.put(Failed(exc))
        except BrokerError as exc:
            await queue.put(Failed(TransientError(f"lost Redis while following job {job.id}: {exc}")))

    reader = asyncio.create_task(read(), name=f"follow-{job.id}")
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), keepalive_s)
            except TimeoutError:
                if reader.done() and queue.empty():  # ended without a final event: a bug, say so
                    exc = reader.exception() if not reader.cancelled() else None
                    yield Failed(TransientError(f"following job {job.id} stopped: {exc!r}"))
                    return
                yield None
                continue
            yield event
            if isinstance(event, (Finished, Failed)):
                return
    finally:
        reader.cancel()  # it ends at its next await; nothing here needs to wait for that


# -- messages --------------------------------------------------------------------------------------


def chunk_meta(chunk: Chunk) -> dict[str, Any]:
    """A chunk's fields; ``words``: those that end inside it (text, start_s, end_s, char_start, char_end,
    approx, after), times in the job's audio, char offsets into the submitted text (code points)."""
    return {"type": "chunk", "seq": chunk.seq, "seg": chunk.seg, "sample_rate": chunk.sample_rate,
            "last": chunk.last, "bytes": len(chunk.pcm), "words": [w.to_dict() for w in chunk.words]}


def chunk_message(chunk: Chunk) -> dict[str, Any]:
    """A chunk as one JSON message: PCM16 little-endian mono, base64."""
    return {**chunk_meta(chunk), "pcm": base64.b64encode(chunk.pcm).decode("ascii")}


def done_message(job_id: str, done: Finished, audio_url: str, captions_url: str = "") -> dict[str, Any]:
    r = done.result
    return {"type": "done", "id": job_id, "state": r.state, "duration_s": r.duration_s, "timings": dict(r.timings),
            "chunks": done.chunks, "audio_url": audio_url, "captions_url": captions_url, "words": len(r.words)}


def error_message(exc: TTSFarmError) -> dict[str, Any]:
    return {"type": "error", "error": {"code": exc.code, "message": exc.message}}


def dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def sse(event: str, data: dict[str, Any], *, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {dumps(data)}\n\n".encode()


SSE_KEEPALIVE = b": keepalive\n\n"


def wav_header(sample_rate: int, channels: int = 1, bits: int = 16) -> bytes:
    """A PCM WAV header for a stream of unknown length (sizes 0xFFFFFFFF, as streaming servers write).

    libsndfile, ffmpeg and browsers read such a file up to its real end.
    """
    block = channels * bits // 8
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, channels, sample_rate, sample_rate * block, block, bits)
    return b"RIFF" + struct.pack("<I", STREAMING_SIZE) + b"WAVE" + fmt + b"data" + struct.pack("<I", STREAMING_SIZE)
