"""``WS /v1/agents``: the voice agents' socket. Several contexts on one socket, each a job whose text arrives in pieces
(``producer.appending``); its audio comes back on the same socket with the words in it. docs/AGENTS.md is every
message; in short:

    client: open {context_id, voice, ...}, text {context_id, text}, flush {context_id}, close {context_id},
            clear {context_id}, ping
    server: opened, audio {context_id, seq, sample_rate, words, pcm}, flushed, done, cleared {audio_sent_s, ...},
            error {context_id, error: {code, message}}, pong

A message the server cannot take is answered with an ``error`` naming its context (when it named one) and changes
nothing: the socket and every context go on. A context ends with ``done`` (its text closed and spoken), ``cleared``
(the client's ``clear``: its job cancelled, so its worker stops at its next window) or an ``error`` with ``ended``
(its job failed). The socket closes with IDLE_TIMEOUT after ``agent_idle_s`` with no client message and no audio
sent; a client that leaves cancels the jobs of the contexts it left open.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup
from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.websockets import WebSocketDisconnect

from pipeline.errors import BAD_INPUT, MALFORMED_JOB, InputError, TTSFarmError
from producer.aio import AsyncOpenJob
import gateway.streams as streams
from gateway.auth import key_ok
from gateway.errors import GatewayError, status_for, unauthorized
from gateway.schemas import JobRequest
from gateway.state import GatewayState, state_of
from gateway.text_socket import open_job
from wire.errors import CONTEXT_EXISTS, IDLE_TIMEOUT, TOO_MANY_CONTEXTS, UNKNOWN_CONTEXT, BrokerError
from wire.records import Chunk

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["agents"])  # WebSocket: checks the key itself (browsers send no headers)

CONTEXT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
IDLE_CLOSE = 4408  # the close code of an idle socket (4000 + HTTP's 408)


class OpenContext(JobRequest):
    """``open``: a job request's fields (its text optional: the first piece), and the context's id."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: str
    context_id: str
    text: str = ""


class ContextMessage(BaseModel):
    """``text``, ``flush``, ``close``, ``clear``: a context's id, and text where it goes with the message."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: str
    context_id: str
    text: str = ""


CONTEXT_TYPES = ("text", "flush", "close", "clear")


class Context:
    """One context: its job, the task that forwards its audio, and what it sent."""

    def __init__(self, context_id: str, job: AsyncOpenJob) -> None:
        self.id, self.job = context_id, job
        self.scope = anyio.CancelScope()  # the forwarder's: a clear cancels it before it answers
        self.ended = anyio.Event()
        self.chunks = self.samples = self.sample_rate = 0

    def sent(self) -> dict[str, Any]:
        seconds = self.samples / self.sample_rate if self.sample_rate else 0.0
        return {"chunks_sent": self.chunks, "samples_sent": self.samples, "audio_sent_s": round(seconds, 3)}


class AgentSocket:
    """One client's socket: its contexts by id, one receive loop, one forwarder per context, the idle watch."""

    def __init__(self, ws: WebSocket, state: GatewayState, binary: bool) -> None:
        self.ws, self.state, self.binary = ws, state, binary
        self.gw = state.gateway
        self.contexts: dict[str, Context] = {}
        self.send_lock = anyio.Lock()  # an audio message and its binary frame go out together
        self.active = time.monotonic()  # the last client message or audio sent
        self.tg: TaskGroup | None = None

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self.tg = tg
                tg.start_soon(self._watch_idle, tg.cancel_scope)
                await self._receive()
                tg.cancel_scope.cancel()
        except* (WebSocketDisconnect, OSError, RuntimeError) as group:
            log.debug("agents socket ended early: %r", group.exceptions)
        finally:
            with anyio.CancelScope(shield=True):
                for ctx in list(self.contexts.values()):  # the client left these open: their jobs go too
                    await self._cancel_job(ctx)

    # -- the client's messages ---------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            self.active = time.monotonic()
            text, context_id = message.get("text"), None
            try:
                data = _json_object(text)
                context_id = data.get("context_id") if isinstance(data.get("context_id"), str) else None
                await self._handle(data)
            except TTSFarmError as exc:
                await self.send({**streams.error_message(exc), "context_id": context_id})

    async def _handle(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "ping":
            await self.send({"type": "pong"})
            return
        if kind == "open":
            await self._open(_parsed(data, OpenContext))
            return
        if kind not in CONTEXT_TYPES:
            raise InputError(f"unknown message type {str(kind)[:32]!r}: open, text, flush, close, clear or ping",
                             code=BAD_INPUT)
        msg = _parsed(data, ContextMessage)
        ctx = self.contexts.get(msg.context_id)
        if ctx is None:
            raise GatewayError(404, f"no context {msg.context_id[:64]!r} is open on this socket", code=UNKNOWN_CONTEXT)
        if msg.type == "text":
            await ctx.job.append(msg.text)
        elif msg.type == "flush":
            segments = await ctx.job.flush(msg.text)
            await self.send({"type": "flushed", "context_id": ctx.id, "segments": segments})
        elif msg.type == "close":
            await ctx.job.close(msg.text)
        else:
            await self._clear(ctx)

    async def _open(self, req: OpenContext) -> None:
        if not CONTEXT_ID.fullmatch(req.context_id):
            raise InputError("context_id is 1 to 64 letters, digits or . _ : -", code=BAD_INPUT)
        if req.context_id in self.contexts:
            raise GatewayError(409, f"context {req.context_id!r} is open already; clear it or use another id",
                               code=CONTEXT_EXISTS)
        if len(self.contexts) >= self.gw.agent_max_contexts:
            raise GatewayError(429, f"{len(self.contexts)} contexts are open on this socket, the most it takes; "
                               "close or clear one first", code=TOO_MANY_CONTEXTS)
        if req.ssml:
            raise InputError("a context takes plain text; SSML goes to POST /v1/jobs whole", code=BAD_INPUT)
        job = await open_job(self.state, req)
        ctx = self.contexts[req.context_id] = Context(req.context_id, job)
        assert self.tg is not None
        self.tg.start_soon(self._forward, ctx)
        await self.send({"type": "opened", "context_id": ctx.id, "job_id": job.id})
        if req.text:
            await job.append(req.text)

    async def _clear(self, ctx: Context) -> None:
        """Stop the context's audio here, then cancel its job; the answer says what had gone out."""
        del self.contexts[ctx.id]
        ctx.scope.cancel()
        await ctx.ended.wait()
        cancelled = await self._cancel_job(ctx)
        await self.send({"type": "cleared", "context_id": ctx.id, "job_id": ctx.job.id, "cancelled": cancelled,
                         **ctx.sent()})

    async def _cancel_job(self, ctx: Context) -> bool:
        try:
            return await ctx.job.cancel()
        except (TTSFarmError, BrokerError) as exc:
            log.debug("could not cancel job %s: %s", ctx.job.id, exc)
            return False

    # -- what the server sends ---------------------------------------------------------------------

    async def _forward(self, ctx: Context) -> None:
        """The context's job stream as ``audio`` messages, then ``done`` or an ``error`` that ends the context."""
        try:
            with ctx.scope:
                async for event in streams.follow(ctx.job, timeout_s=self.gw.job_timeout_s,
                                                  keepalive_s=self.gw.keepalive_s):
                    if event is None:
                        continue
                    if isinstance(event, (streams.Finished, streams.Failed)):
                        self.contexts.pop(ctx.id, None)
                        await self.send(self._ending(ctx, event))
                        return
                    await self._send_audio(ctx, event)
        finally:
            ctx.ended.set()

    def _ending(self, ctx: Context, event: streams.Finished | streams.Failed) -> dict[str, Any]:
        if isinstance(event, streams.Failed):
            return {**streams.error_message(event.error), "context_id": ctx.id, "job_id": ctx.job.id, "ended": True}
        r = event.result
        return {"type": "done", "context_id": ctx.id, "job_id": ctx.job.id, "state": r.state,
                "duration_s": r.duration_s, **ctx.sent()}

    async def _send_audio(self, ctx: Context, chunk: Chunk) -> None:
        meta = {**streams.chunk_meta(chunk), "type": "audio", "context_id": ctx.id}
        async with self.send_lock:
            with anyio.CancelScope(shield=True):  # a clear waits for a chunk half sent, and counts it
                if self.binary:
                    await self.ws.send_text(streams.dumps(meta))
                    await self.ws.send_bytes(chunk.pcm)
                else:
                    await self.ws.send_text(streams.dumps({**meta, "pcm": streams.chunk_message(chunk)["pcm"]}))
                ctx.chunks += 1
                ctx.samples += len(chunk.pcm) // 2
                ctx.sample_rate = chunk.sample_rate
                self.active = time.monotonic()

    async def send(self, message: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(streams.dumps(message))

    async def _watch_idle(self, scope: anyio.CancelScope) -> None:
        idle_s = self.gw.agent_idle_s
        while (left := self.active + idle_s - time.monotonic()) > 0:
            await anyio.sleep(left)
        error = GatewayError(408, f"nothing was sent either way for {idle_s:g} s; send ping to keep a socket open",
                             code=IDLE_TIMEOUT)
        await self.send({**streams.error_message(error), "context_id": None})
        await self.ws.close(code=IDLE_CLOSE)
        scope.cancel()


def _json_object(text: str | None) -> dict[str, Any]:
    if text is None:
        raise InputError("binary frames are not taken: send JSON text messages", code=BAD_INPUT)
    try:
        data = json.loads(text)
    except ValueError:
        raise InputError(f"message {text[:80]!r} is not JSON", code=BAD_INPUT) from None
    if not isinstance(data, dict):
        raise InputError(f"message {text[:80]!r} is not a JSON object with a type", code=BAD_INPUT)
    return data


def _parsed(data: dict[str, Any], model: type[BaseModel]) -> Any:
    """``data`` as ``model``; a wrong field is BAD_INPUT, a text that is not a string MALFORMED_JOB (as on
    POST /v1/jobs)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "message"
        code = MALFORMED_JOB if err.get("loc") == ("text",) and err.get("type") != "missing" else BAD_INPUT
        raise InputError(f"{data.get('type')} message: {where}: {err.get('msg', 'invalid')}", code=code) from None


@router.websocket("/agents")
async def agents_socket(websocket: WebSocket, binary: bool = False) -> None:
    """Voice agents: several contexts on one socket (see the module's docstring and docs/AGENTS.md)."""
    await websocket.accept()
    if not key_ok(websocket):
        exc = unauthorized()
        await websocket.send_text(streams.dumps({**streams.error_message(exc), "context_id": None}))
        await websocket.close(code=4000 + status_for(exc))
        return
    await AgentSocket(websocket, state_of(websocket), binary).run()
