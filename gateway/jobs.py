"""The job API: submit, look at, cancel, fetch the stored output, and follow the live stream (SSE or
WebSocket, resumable with ``after_seq``)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request, WebSocket
from fastapi.responses import FileResponse, Response, StreamingResponse
from starlette.requests import HTTPConnection
from starlette.websockets import WebSocketDisconnect

from pipeline.audio import content_type
from pipeline.errors import TTSFarmError
from producer.aio import AsyncJob
from producer.checks import MAX_SEQ
import gateway.streams as streams
from gateway.auth import key_ok, require_key
from gateway.errors import GatewayError, status_for, unauthorized
from gateway.formats import request_format
from gateway.request_ids import mark_job
from gateway.schemas import (
    Cancelled,
    JobCreated,
    JobRequest,
    JobStatus,
    error_responses,
)
from gateway.state import GatewayState, state_of
from wire.errors import JOB_NOT_DONE

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[Depends(require_key)])
live = APIRouter(prefix="/v1/jobs", tags=["jobs"])  # WebSocket: checks the key itself (browsers send no headers)


def links(conn: HTTPConnection, job_id: str) -> dict[str, str]:
    base = f"{conn.scope.get('root_path', '')}/v1/jobs/{job_id}"
    return {"self": base, "audio": f"{base}/audio", "events": f"{base}/events", "stream": f"{base}/stream",
            "captions": f"{base}/captions"}


def status_body(conn: HTTPConnection, job_id: str, st: dict[str, Any]) -> dict[str, Any]:
    error = None
    if st.get("error_code") or st.get("state") in ("failed", "cancelled", "expired"):
        state = str(st.get("state"))
        error = {"code": st.get("error_code") or f"JOB_{state.upper()}", "message": st.get("error_message") or f"job {state}"}
    keep = ("state", "voice", "format", "sample_rate", "lane", "created", "started", "first_chunk", "finished", "est_seconds")
    return {"id": job_id, **{k: st.get(k) for k in keep}, "segments": int(st.get("total", 0)), "done": int(st.get("done", 0)),
            "duration_s": st.get("duration"), "error": error, "links": links(conn, job_id)}


@router.post("", status_code=201, response_model=JobCreated, responses=error_responses(400, 401, 429, 503))
async def submit_job(req: JobRequest, request: Request) -> dict[str, Any]:
    """Queue text for synthesis. Follow it with `events` (SSE) or `stream` (WebSocket); fetch `audio` when done."""
    state = state_of(request)
    voice = state.resolve_voice(req.voice)
    options = dict(req.options or {})
    if req.speed is not None:
        options["speed"] = req.speed
    fmt = request_format(req.format)
    await state.require_workers()
    job = await state.client.submit(req.text, voice=voice, format=fmt, sample_rate=req.sample_rate, lane=req.lane,
                                   options=options, deadline_s=req.deadline_s, bitrate=req.bitrate,
                                   lexicon=req.lexicon, ssml=req.ssml)
    mark_job(request, job.id)
    st = await job.status()
    return {"id": job.id, "state": st["state"], "segments": job.total, "voice": st["voice"], "format": st["format"],
            "sample_rate": st["sample_rate"], "links": links(request, job.id)}


@router.get("/{job_id}", response_model=JobStatus, responses=error_responses(401, 404))
async def get_job(job_id: str, request: Request) -> dict[str, Any]:
    job = await state_of(request).job(job_id, request)
    return status_body(request, job_id, await job.status())


@router.delete("/{job_id}", response_model=Cancelled, responses=error_responses(401, 404))
async def cancel_job(job_id: str, request: Request) -> dict[str, Any]:
    """Cancel: segments not yet started are skipped. `cancelled` is false if the job had already ended."""
    job = await state_of(request).job(job_id, request)
    cancelled = await job.cancel()
    return {"id": job_id, "cancelled": cancelled, "state": (await job.status())["state"]}


@router.get("/{job_id}/audio", response_class=Response, responses={
    200: {"content": {"audio/wav": {}, "audio/flac": {}, "audio/ogg": {}, "audio/L16": {}},
          "description": "The stored output in the job's format"},
    **error_responses(401, 404, 409)})
async def job_audio(job_id: str, request: Request) -> Response:
    """The job's full stored output; 409 JOB_NOT_DONE while it runs (or if it failed)."""
    state = state_of(request)
    st = await (await state.job(job_id, request)).status()
    job_state = st.get("state")
    if job_state != "done" or not st.get("key"):
        extra = {"state": job_state}
        if st.get("error_code"):
            extra["job_error"] = st["error_code"]
        raise GatewayError(409, f"job {job_id} is {job_state} ({st.get('done', 0)}/{st.get('total', 0)} segments); "
                           "its audio is there once it is done", code=JOB_NOT_DONE, **extra)
    return await stored_output(state, st, f"{job_id}.{st['format']}")


@router.get("/{job_id}/captions", response_class=Response, responses={
    200: {"content": {"text/vtt": {}, "application/x-subrip": {}}, "description": "The job's word timings as captions"},
    **error_responses(400, 401, 404, 409)})
async def job_captions(job_id: str, request: Request,
                       format: str = Query("vtt", description="vtt (WebVTT) or srt")) -> Response:  # noqa: A002
    """Captions from the job's word timings; 409 JOB_NOT_DONE until it is done. Cues end at sentences and
    clauses (``pipeline.captions``); their text is the submitted text's, punctuation kept (each word's ``after``)."""
    from pipeline.captions import caption_format, render

    fmt = caption_format(format)
    state = state_of(request)
    st = await (await state.job(job_id, request)).status()
    if st.get("state") != "done":
        raise GatewayError(409, f"job {job_id} is {st.get('state')}; its captions are there once it is done",
                           code=JOB_NOT_DONE, state=st.get("state"))
    words = st.result().words
    media = "text/vtt; charset=utf-8" if fmt == "vtt" else "application/x-subrip; charset=utf-8"
    return Response(content=render(words, fmt), media_type=media,
                    headers={"Content-Disposition": f'inline; filename="{job_id}.{fmt}"'})


async def stored_output(state: GatewayState, st: dict[str, Any], filename: str) -> Response:
    fmt, rate = str(st["format"]), int(st["sample_rate"])
    if fmt == "ogg":
        from pipeline.audio import output_rate

        rate = output_rate(fmt, rate)
    media = content_type(fmt, rate)
    headers = {"X-Sample-Rate": str(rate), "Content-Disposition": f'inline; filename="{filename}"'}
    data = await state.output_file(str(st["key"]))
    if isinstance(data, Path):
        return FileResponse(data, media_type=media, headers=headers)
    return Response(content=data, media_type=media, headers=headers)


@router.get("/{job_id}/events", response_class=StreamingResponse, responses={
    200: {"content": {"text/event-stream": {}},
          "description": "SSE: `chunk` events (id = seq), then one `done` or `error` event"},
    **error_responses(401, 404)})
async def job_events(job_id: str, request: Request, after_seq: int = Query(-1, ge=-1, le=MAX_SEQ, description="resume after this seq"),
                     last_event_id: str | None = Header(None, include_in_schema=False)) -> StreamingResponse:
    """Server-sent events: each `chunk` carries seq, seg, sample_rate, last and base64 PCM16 (`pcm`).
    Reconnecting EventSources resume by themselves (Last-Event-ID)."""
    state = state_of(request)
    job = await state.job(job_id, request)
    if last_event_id and last_event_id.strip().lstrip("-").isdigit():
        after_seq = max(after_seq, min(MAX_SEQ, int(last_event_id)))
    return streams.ClosingStreamingResponse(_sse(state, job, after_seq, request), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _sse(state: GatewayState, job: AsyncJob, after_seq: int, conn: HTTPConnection) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    gw = state.gateway
    async for event in streams.follow(job, after_seq=after_seq, timeout_s=gw.job_timeout_s, keepalive_s=gw.keepalive_s):
        if event is None:
            yield streams.SSE_KEEPALIVE
        elif isinstance(event, streams.Finished):
            yield streams.sse("done", streams.done_message(job.id, event, links(conn, job.id)["audio"], links(conn, job.id)["captions"]))
        elif isinstance(event, streams.Failed):
            yield streams.sse("error", streams.error_message(event.error))
        else:
            yield streams.sse("chunk", streams.chunk_message(event), event_id=event.seq)


@live.websocket("/{job_id}/stream")
async def job_stream(websocket: WebSocket, job_id: str, after_seq: int = -1, binary: bool = False) -> None:
    """JSON messages: `chunk` (base64 `pcm`, or with ?binary=1 the PCM in the binary frame right after it),
    then `done` or `error`. Send {"type": "cancel"} to cancel the job. ?api_key= where headers cannot be set."""
    await websocket.accept()
    try:
        if not key_ok(websocket):
            raise unauthorized()
        state = state_of(websocket)
        job = await state.job(job_id, websocket)
    except TTSFarmError as exc:
        await websocket.send_text(streams.dumps(streams.error_message(exc)))
        await websocket.close(code=4000 + status_for(exc))
        return
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_listen, websocket, job, tg.cancel_scope)
            await send_stream(websocket, state, job, max(-1, after_seq), binary)
            tg.cancel_scope.cancel()
        await websocket.close(code=1000)
    except* (WebSocketDisconnect, OSError, RuntimeError) as group:
        log.debug("websocket for job %s ended early: %r", job_id, group.exceptions)


async def send_stream(ws: WebSocket, state: GatewayState, job: AsyncJob, after_seq: int, binary: bool) -> None:
    """The job's stream as WebSocket messages (``job_stream``, and ``gateway.text_socket``'s jobs)."""
    gw = state.gateway
    async for event in streams.follow(job, after_seq=after_seq, timeout_s=gw.job_timeout_s, keepalive_s=gw.keepalive_s):
        if event is None:
            continue  # the server's WebSocket pings keep the connection alive
        if isinstance(event, streams.Finished):
            await ws.send_text(streams.dumps(streams.done_message(job.id, event, links(ws, job.id)["audio"], links(ws, job.id)["captions"])))
        elif isinstance(event, streams.Failed):
            await ws.send_text(streams.dumps(streams.error_message(event.error)))
        elif binary:
            await ws.send_text(streams.dumps(streams.chunk_meta(event)))
            await ws.send_bytes(event.pcm)
        else:
            await ws.send_text(streams.dumps(streams.chunk_message(event)))


async def client_messages(ws: WebSocket, scope: anyio.CancelScope) -> AsyncIterator[str | None]:
    """The client's text frames (None for a binary one) until it disconnects; its disconnect cancels ``scope`` (the
    sender's)."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            scope.cancel()
            return
        yield message.get("text")


async def _listen(ws: WebSocket, job: AsyncJob, scope: anyio.CancelScope) -> None:
    """Client messages: {"type": "cancel"} cancels the job; a disconnect stops the sender."""
    async for text in client_messages(ws, scope):
        try:
            data = json.loads(text or "{}")
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "cancel":
            with anyio.CancelScope(shield=True):  # a close right behind the cancel must not lose it
                await job.cancel()
