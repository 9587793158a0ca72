"""``WS /v1/jobs/text``: a job whose text the client sends while it plays (``producer.appending``), an LLM's output as
it is generated, and its audio back on the same socket.

The client's messages are JSON text frames: first ``{"type": "open", ...}`` with a job request's fields but the text
(voice, format, sample_rate, bitrate, lexicon, lane, speed, options, deadline_s), answered ``{"type": "opened", "id",
"links"}``; then any number of ``{"type": "text", "text": "..."}``, each finished sentence queued at once; then
``{"type": "close"}`` (the end of the text; ``text`` may ride on it). ``{"type": "cancel"}`` cancels the job. The
server sends the job stream's messages (``chunk``, then ``done`` or ``error``; ``?binary=1`` as on
``/v1/jobs/{id}/stream``). A message the server cannot take is answered with an ``error`` message and closes the
socket (code 4400; the job is cancelled). The key: ``Authorization: Bearer`` or ``?api_key=``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.websockets import WebSocketDisconnect

from pipeline.errors import BAD_INPUT, InputError, TTSFarmError
from producer.aio import AsyncOpenJob
import gateway.streams as streams
from gateway.auth import key_ok
from gateway.errors import status_for, unauthorized
from gateway.formats import request_format
from gateway.jobs import client_messages, links, send_stream
from gateway.schemas import JobRequest
from gateway.state import GatewayState, state_of
from wire.errors import BrokerError

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])  # WebSocket: checks the key itself (browsers send no headers)


class OpenRequest(JobRequest):
    """A job request without its text (it follows in ``text`` messages)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: str = "open"
    text: str = ""


class TextMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: str
    text: str = ""


def _message(raw: str | None, model: type[BaseModel]) -> Any:
    """A client message as ``model``, or ``InputError`` BAD_INPUT saying what is wrong with it."""
    try:
        return model.model_validate(json.loads(raw or ""))
    except (ValueError, ValidationError) as exc:
        reason = exc.errors()[0].get("msg", "invalid") if isinstance(exc, ValidationError) else "not JSON"
        raise InputError(f"message {str(raw)[:80]!r} is not a {model.__name__}: {reason}", code=BAD_INPUT) from None


@router.websocket("/text")
async def text_job(websocket: WebSocket, binary: bool = False) -> None:
    """Send text while the job plays: open, text..., close (see the module's docstring)."""
    await websocket.accept()
    try:
        if not key_ok(websocket):
            raise unauthorized()
        state = state_of(websocket)
        req = _message(await websocket.receive_text(), OpenRequest)
        if req.type != "open" or req.text or req.ssml:
            raise InputError("the first message is {\"type\": \"open\", ...} with no text and no ssml", code=BAD_INPUT)
        job = await open_job(state, req)
        await websocket.send_text(streams.dumps({"type": "opened", "id": job.id, "links": links(websocket, job.id)}))
    except (TTSFarmError, WebSocketDisconnect) as exc:
        if isinstance(exc, TTSFarmError):
            await websocket.send_text(streams.dumps(streams.error_message(exc)))
            await websocket.close(code=4000 + status_for(exc))
        return
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_take_text, websocket, job, tg.cancel_scope)
            await send_stream(websocket, state, job, -1, binary)
            tg.cancel_scope.cancel()
        await websocket.close(code=1000)
    except* (WebSocketDisconnect, OSError, RuntimeError) as group:
        log.debug("text websocket for job %s ended early: %r", job.id, group.exceptions)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                if not job.opened.closed and not (await job.status()).ended:
                    await job.cancel()  # the client went away before its text ended
            except (TTSFarmError, BrokerError) as exc:
                log.debug("could not cancel job %s: %s", job.id, exc)


async def open_job(state: GatewayState, req: JobRequest) -> AsyncOpenJob:
    """A job whose text follows, opened with ``req``'s fields but its text (this socket's, and the agents' socket's
    contexts): the voice resolved, the format checked, a serving worker required."""
    options = dict(req.options or {})
    if req.speed is not None:
        options["speed"] = req.speed
    voice, fmt = state.resolve_voice(req.voice), request_format(req.format)
    await state.require_workers()
    return await state.client.open(voice=voice, format=fmt, sample_rate=req.sample_rate, lane=req.lane,
                                   options=options, deadline_s=req.deadline_s, bitrate=req.bitrate, lexicon=req.lexicon)


async def _take_text(ws: WebSocket, job: AsyncOpenJob, scope: anyio.CancelScope) -> None:
    """The client's messages: text appended, the close, a cancel; anything else ends the job with an error."""
    async for text in client_messages(ws, scope):
        try:
            msg = _message(text, TextMessage)
            if msg.type == "text":
                await job.append(msg.text)
            elif msg.type == "close":
                await job.close(msg.text)
            elif msg.type == "cancel":
                with anyio.CancelScope(shield=True):
                    await job.cancel()
            else:
                raise InputError(f"unknown message type {msg.type[:32]!r}: text, close or cancel", code=BAD_INPUT)
        except TTSFarmError as exc:
            with anyio.CancelScope(shield=True):  # the job is cancelled before the client reads why
                if not (await job.status()).ended:
                    await job.cancel()
                await ws.send_text(streams.dumps(streams.error_message(exc)))
                await ws.close(code=4000 + status_for(exc))
            scope.cancel()
            return
