"""``POST /v1/audio/speech`` in the shape of OpenAI's API, so its clients work unchanged.

``pcm`` and ``wav`` stream as the farm makes them (chunked transfer; a WAV header with an unknown
length first); ``mp3``, ``opus`` (Ogg Opus) and ``aac`` (ADTS) are encoded here chunk by chunk as they
come (``pipeline.encoders``), one container per response ending with the encoder's flush (Ogg's last
page carries the exact end). The status line waits for the first chunk, so a job that fails early still
gets its proper 4xx/5xx. ``flac`` is sent once the stored output is ready. The job itself is stored in
the asked format too (``GET /v1/jobs/{id}/audio``). A client that goes away cancels its job.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from pipeline.audio import content_type, output_rate
from pipeline.errors import BAD_OPTION, TEXT_TOO_LONG, UNSUPPORTED_FORMAT, InputError, TTSFarmError
from producer.aio import AsyncJob
from producer.encoded import aencode_chunks
import gateway.streams as streams
from gateway.auth import require_key
from gateway.formats import STREAMED, request_format
from gateway.jobs import stored_output
from gateway.request_ids import mark_job
from gateway.openai_compat import INSTRUCTIONS_NOTE, check_model
from gateway.schemas import SpeechRequest, VoiceRef, error_responses
from gateway.state import state_of
from wire.errors import BrokerError, JobTimeoutError
from wire.keys import STATES_FINAL
from wire.records import Chunk

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/audio", tags=["openai"], dependencies=[Depends(require_key)])

RAW = ("pcm", "wav")  # the chunks' PCM as it is; the other streamed formats go through an encoder


@router.post("/speech", response_class=Response, responses={
    200: {"content": {"audio/wav": {}, "audio/L16": {}, "audio/mpeg": {}, "audio/ogg": {}, "audio/aac": {},
                      "audio/flac": {}, "text/event-stream": {}},
          "description": "Audio; every format but flac streams with chunked transfer as it is made"},
    **error_responses(400, 401, 429, 503, 504)})
async def create_speech(req: SpeechRequest, request: Request) -> Response:
    """Text to speech, OpenAI-compatible. `model` is tts-1, tts-1-hd or gpt-4o-mini-tts (the same voices);
    `voice` is a catalogue voice or an alias (OpenAI's names read with the default voice). `pcm` is 24 kHz
    mono s16le, as OpenAI's. `instructions` is accepted and ignored (header X-TTSFarm-Note)."""
    state = state_of(request)
    gw = state.gateway
    check_model(req.model)
    fmt = request_format(req.response_format)
    sse = (req.stream_format or "audio").strip().lower()
    if sse not in ("audio", "sse"):
        raise InputError(f"stream_format must be 'audio' or 'sse', not {req.stream_format!r}", code=BAD_OPTION)
    if sse == "sse" and fmt not in RAW:
        raise InputError("stream_format 'sse' is available for wav and pcm only", code=UNSUPPORTED_FORMAT)
    if len(req.input) > gw.max_input_chars:
        raise InputError(f"input is {len(req.input)} characters; at most {gw.max_input_chars} per request "
                         "(use POST /v1/jobs for long texts)", code=TEXT_TOO_LONG)
    voice = state.resolve_voice(req.voice.id if isinstance(req.voice, VoiceRef) else req.voice)
    rate = req.sample_rate or (gw.pcm_sample_rate if fmt == "pcm" else None)
    await state.require_workers()
    job = await state.client.submit(req.input, voice=voice, format=fmt, sample_rate=rate, lane="interactive",
                                   options={"speed": req.speed}, bitrate=req.bitrate, lexicon=req.lexicon)
    mark_job(request, job.id)
    headers = {"X-Job-Id": job.id, "Cache-Control": "no-cache"}
    if req.instructions:
        headers["X-TTSFarm-Note"] = INSTRUCTIONS_NOTE
    if fmt not in STREAMED:
        try:
            await job.wait(timeout=gw.job_timeout_s)
        except JobTimeoutError:
            await job.cancel()
            raise
        st = await job.status()
        response = await stored_output(state, st, f"speech.{fmt}")
        response.headers.update(headers)
        return response
    chunks = job.stream(timeout=gw.job_timeout_s)
    first = await _first_chunk(job, chunks, gw.first_chunk_timeout_s)
    headers["X-Sample-Rate"] = str(output_rate(fmt, first.sample_rate))
    if sse == "sse":
        return streams.ClosingStreamingResponse(_sse_body(job, first, chunks, fmt), media_type="text/event-stream",
                                                headers=headers)
    media = content_type(fmt, first.sample_rate)
    if fmt in RAW:
        return streams.ClosingStreamingResponse(_audio_body(job, first, chunks, fmt), media_type=media, headers=headers)
    return streams.ClosingStreamingResponse(_encoded_body(job, first, chunks, fmt, req.bitrate), media_type=media,
                                            headers=headers)


async def _first_chunk(job: AsyncJob, chunks: AsyncIterator[Chunk], timeout_s: float) -> Chunk:
    """The first chunk, or the job's error (raised, so it is answered with its status)."""
    try:
        return await asyncio.wait_for(anext(chunks), timeout_s)
    except TimeoutError:
        await job.cancel()
        raise JobTimeoutError(f"no audio within {timeout_s:g} s; the job was cancelled") from None
    except StopAsyncIteration:
        raise JobTimeoutError("the job ended without audio") from None
    except BaseException:
        await _cancel_unfinished(job)
        raise


async def _audio_body(job: AsyncJob, first: Chunk, chunks: AsyncIterator[Chunk], fmt: str) -> AsyncIterator[bytes]:
    try:
        if fmt == "wav":
            yield streams.wav_header(first.sample_rate)
        yield first.pcm
        async for chunk in chunks:
            yield chunk.pcm
    except Exception as exc:
        # The status line is out: the only way left to say "incomplete" is to drop the connection
        # before the last chunk of the chunked body, which re-raising does.
        log.warning("speech job %s ended early: %s", job.id, exc)
        raise
    finally:
        await _cancel_unfinished(job)


async def _encoded_body(job: AsyncJob, first: Chunk, chunks: AsyncIterator[Chunk], fmt: str,
                        bitrate: int | None) -> AsyncIterator[bytes]:
    """The chunks through one streaming encoder, then its flush: one whole container."""
    async def all_chunks() -> AsyncIterator[Chunk]:
        yield first
        async for chunk in chunks:
            yield chunk

    try:
        async for data in aencode_chunks(all_chunks(), fmt, bitrate=bitrate):
            yield data
    except Exception as exc:  # as in _audio_body: dropping the connection is how "incomplete" is said
        log.warning("speech job %s ended early: %s", job.id, exc)
        raise
    finally:
        await _cancel_unfinished(job)


async def _sse_body(job: AsyncJob, first: Chunk, chunks: AsyncIterator[Chunk], fmt: str) -> AsyncIterator[bytes]:
    """OpenAI's ``stream_format=sse``: ``speech.audio.delta`` events, then ``speech.audio.done``."""
    def delta(data: bytes) -> bytes:
        return streams.sse("speech.audio.delta", {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})

    try:
        yield delta((streams.wav_header(first.sample_rate) if fmt == "wav" else b"") + first.pcm)
        async for chunk in chunks:
            yield delta(chunk.pcm)
        st = await job.status()
        yield streams.sse("speech.audio.done", {"type": "speech.audio.done", "id": job.id, "duration_s": st.get("duration")})
    except TTSFarmError as exc:
        yield streams.sse("error", streams.error_message(exc))
    finally:
        await _cancel_unfinished(job)


async def _cancel_unfinished(job: AsyncJob) -> None:
    """Cancel the job unless it ended; shielded, since this runs while the request is being cancelled."""
    with anyio.CancelScope(shield=True):
        try:
            st = await job.status()
            if st["state"] not in STATES_FINAL:
                await job.cancel()
                log.info("speech job %s cancelled: its client went away", job.id)
        except (TTSFarmError, BrokerError) as exc:
            log.debug("could not cancel job %s: %s", job.id, exc)
