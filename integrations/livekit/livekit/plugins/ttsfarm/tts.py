"""``TTS``: LiveKit's streaming TTS over the farm gateway's agents' socket (``WS /v1/agents``).

One socket per ``TTS`` carries every stream: each ``stream()`` (and each ``synthesize()``, a stream of one text) is a
context on it, opened with an ``open`` message, fed ``text`` as LiveKit pushes it; ``flush()`` sends ``flush`` (what
is buffered is spoken now, mid-sentence too) and ``end_input()`` sends ``close``. The farm's ``audio`` messages carry
PCM16 and the words whose audio ends inside them, with their times in the context's audio: they become the frames
and the timed transcript (``aligned_transcript``). Closing a stream before its end (LiveKit's interruption) sends
``clear``: the farm cancels the context's job.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import weakref
from dataclasses import dataclass
from typing import Any

import aiohttp
from livekit.agents import APIConnectionError, APIConnectOptions, APIStatusError, APITimeoutError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, TimedString

from .log import logger

DEFAULT_SAMPLE_RATE = 24000
PING_S = 20.0  # below the gateway's idle timeout (agent_idle_s, 60 s by default)
RETRYABLE = ("NO_WORKERS", "OVERLOADED", "BACKEND_UNAVAILABLE")  # the farm's codes worth a retry
STATUS = {"NO_WORKERS": 503, "OVERLOADED": 429, "UNAUTHORIZED": 401, "JOB_FAILED": 500}
CLOSED = {"type": "_socket_closed"}  # put in every context's inbox when the socket ends


@dataclass
class _Options:
    url: str
    api_key: str | None
    voice: str | None


def agents_url(base_url: str) -> str:
    """The agents' socket of a gateway: ``http://host:8000`` (or ``.../v1``, or ``ws://...``) -> ``ws://host:8000/v1/agents``."""
    url = base_url.rstrip("/").removesuffix("/v1/agents").removesuffix("/v1")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    return url + "/v1/agents"


class _Socket:
    """One agents' socket: messages go to each context's inbox by ``context_id``; a ping keeps it from timing out."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._inboxes: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read(), name="ttsfarm-socket-read")
        self._pinger = asyncio.create_task(self._ping(), name="ttsfarm-socket-ping")

    @property
    def closed(self) -> bool:
        return self._ws.closed or self._reader.done()

    def listen(self, context_id: str) -> asyncio.Queue[dict[str, Any]]:
        inbox = self._inboxes[context_id] = asyncio.Queue()
        return inbox

    def forget(self, context_id: str) -> None:
        self._inboxes.pop(context_id, None)

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self._ws.send_str(json.dumps(message))
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            raise APIConnectionError("the farm's agents' socket is closed") from exc

    async def _read(self) -> None:
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                inbox = self._inboxes.get(data.get("context_id") or "")
                if inbox is not None:
                    inbox.put_nowait(data)
                elif data.get("type") == "error":
                    logger.warning("ttsfarm: %s", data.get("error"))
        finally:
            for inbox in self._inboxes.values():
                inbox.put_nowait(CLOSED)

    async def _ping(self) -> None:
        while not self._ws.closed:
            await asyncio.sleep(PING_S)
            with contextlib.suppress(aiohttp.ClientError, ConnectionError, RuntimeError):
                await self._ws.send_str('{"type": "ping"}')

    async def aclose(self) -> None:
        self._pinger.cancel()
        await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class TTS(tts.TTS):
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        voice: str | None = None,
        sample_rate: int | None = None,
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """ttsfarm's streaming TTS.

        Args:
            base_url: The farm gateway, ``http://host:8000`` (``ttsfarm gateway``).
            api_key: A key of the gateway's ``api_keys``, when it has any.
            voice: A catalogue voice or alias (``GET /v1/voices``); default: the farm's default voice.
            sample_rate: The audio's rate; the farm resamples to it (default 24000).
            http_session: An aiohttp session to open the socket on (default: one of its own).
        """
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate or DEFAULT_SAMPLE_RATE,
            num_channels=1,
        )
        self._opts = _Options(url=agents_url(base_url), api_key=api_key, voice=voice)
        self._session = http_session
        self._own_session = http_session is None
        self._socket: _Socket | None = None
        self._connecting = asyncio.Lock()
        self._streams: weakref.WeakSet[SynthesizeStream] = weakref.WeakSet()
        self._prewarm: asyncio.Task[_Socket] | None = None

    @property
    def model(self) -> str:
        return self._opts.voice or "default"

    @property
    def provider(self) -> str:
        return "ttsfarm"

    def update_options(self, *, voice: str | None = None) -> None:
        """The voice of the streams started from now on."""
        if voice is not None:
            self._opts.voice = voice

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    def prewarm(self) -> None:
        self._prewarm = asyncio.create_task(self._connect(timeout=DEFAULT_API_CONNECT_OPTIONS.timeout))

    async def _connect(self, *, timeout: float) -> _Socket:
        async with self._connecting:
            if self._socket is not None and not self._socket.closed:
                return self._socket
            if self._session is None:
                self._session = aiohttp.ClientSession()
            headers = {"Authorization": f"Bearer {self._opts.api_key}"} if self._opts.api_key else {}
            try:
                ws = await asyncio.wait_for(self._session.ws_connect(self._opts.url, headers=headers), timeout)
            except asyncio.TimeoutError as exc:
                raise APITimeoutError(f"no answer from {self._opts.url} within {timeout} s") from exc
            except aiohttp.ClientError as exc:
                raise APIConnectionError(f"cannot open {self._opts.url}") from exc
            self._socket = _Socket(ws)
            return self._socket

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        self._streams.clear()
        if self._socket is not None:
            await self._socket.aclose()
            self._socket = None
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None


def spoken(word: dict[str, Any]) -> str:
    """A word as the transcript shows it: with the punctuation after it, and a space after a word of a script that
    spaces its words (the farm's ``after`` stops at the end of a segment)."""
    piece = word["text"] + word.get("after", "")
    if piece and not piece[-1].isspace() and ord(piece[-1]) < 0x2E80:  # below the CJK blocks
        piece += " "
    return piece


def _api_error(message: dict[str, Any], request_id: str | None) -> APIStatusError:
    error = message.get("error") or {}
    code = str(error.get("code", "ERROR"))
    return APIStatusError(
        f"ttsfarm {code}: {error.get('message', '')}",
        status_code=STATUS.get(code, 400 if code != "ERROR" else -1),
        request_id=request_id,
        body=error,
        retryable=code in RETRYABLE,
    )


class SynthesizeStream(tts.SynthesizeStream):
    """One context on the TTS's socket: LiveKit's pushed text in, its audio and words out."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts
        self._context_ended = False

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        context_id = utils.shortuuid()
        socket = await self._tts._connect(timeout=self._conn_options.timeout)
        inbox = socket.listen(context_id)
        opts, ended, job_id = self._tts._opts, False, None
        try:
            await socket.send({"type": "open", "context_id": context_id, "voice": opts.voice, "format": "pcm",
                               "sample_rate": self._tts.sample_rate})
            opened = await self._next(inbox, timeout=self._conn_options.timeout)
            if opened["type"] != "opened":
                ended = True
                raise _api_error(opened, None)
            job_id = opened["job_id"]  # the request id: GET /v1/jobs/{id} on the gateway finds the job
            output_emitter.initialize(request_id=job_id, sample_rate=self._tts.sample_rate, num_channels=1,
                                      mime_type="audio/pcm", stream=True)
            output_emitter.start_segment(segment_id=context_id)
            sender = asyncio.create_task(self._send_text(socket, context_id))
            try:
                ended = await self._receive(inbox, output_emitter, job_id)
            finally:
                await utils.aio.cancel_and_wait(sender)
            output_emitter.end_segment()
        finally:
            socket.forget(context_id)
            if not ended and not self._context_ended and not socket.closed:  # interrupted (aclose) or failed: the farm stops the job
                with contextlib.suppress(APIConnectionError):
                    await asyncio.shield(socket.send({"type": "clear", "context_id": context_id}))

    async def _send_text(self, socket: _Socket, context_id: str) -> None:
        async for data in self._input_ch:
            if isinstance(data, self._FlushSentinel):
                await socket.send({"type": "flush", "context_id": context_id})
                continue
            self._mark_started()
            await socket.send({"type": "text", "context_id": context_id, "text": data})
        await socket.send({"type": "close", "context_id": context_id})

    async def _receive(self, inbox: asyncio.Queue[dict[str, Any]], emitter: tts.AudioEmitter, job_id: str) -> bool:
        """Audio and words into ``emitter`` until the context's ``done`` (True)."""
        while True:
            message = await inbox.get()
            kind = message["type"]
            if kind == "audio":
                words = [TimedString(spoken(w), start_time=w["start_s"], end_time=w["end_s"]) for w in message["words"]]
                if words:
                    emitter.push_timed_transcript(words)
                emitter.push(base64.b64decode(message["pcm"]))
            elif kind == "done":
                return True
            elif kind == "error":
                self._context_ended = bool(message.get("ended"))  # a failed job ends its context on the farm
                raise _api_error(message, job_id)
            elif message is CLOSED:
                raise APIConnectionError("the farm's agents' socket closed")

    async def _next(self, inbox: asyncio.Queue[dict[str, Any]], *, timeout: float) -> dict[str, Any]:
        try:
            message = await asyncio.wait_for(inbox.get(), timeout)
        except asyncio.TimeoutError as exc:
            raise APITimeoutError(f"the farm did not open a context within {timeout} s") from exc
        if message is CLOSED:
            raise APIConnectionError("the farm's agents' socket closed")
        return message
