"""``TTSFarmTTSService``: Pipecat's WebSocket TTS over the farm gateway's agents' socket (``WS /v1/agents``).

One socket per service; each Pipecat turn (its audio context) is a context on it: the first text of a turn opens it
(``open``), each aggregated sentence goes as ``text``, the end of the turn (``flush_audio``) sends ``close``, and an
interruption sends ``clear`` (the farm cancels the context's job and stops its worker). The farm's ``audio`` messages
carry PCM16 at the pipeline's rate and the words whose audio ends inside them, with their times in the context's
audio: they become ``TTSAudioRawFrame``s and, as the audio plays, ``TTSTextFrame``s.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator
from typing import Any

from loguru import logger
from websockets.protocol import State

from pipecat.frames.frames import ErrorFrame, Frame, StartFrame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import WebsocketTTSService

KEEPALIVE_S = 20.0  # below the gateway's idle timeout (agent_idle_s, 60 s by default)
# How long a turn's audio may pause before Pipecat takes the turn as ended and drops what comes after (its
# ``stop_frame_timeout_s``, 3 s by default). The farm ends every turn it was given (``done``, or an error), so this only
# bounds a farm that stopped answering; a loaded farm can pause longer than 3 s between a turn's sentences.
QUIET_S = 15.0


def agents_url(base_url: str) -> str:
    """The agents' socket of a gateway: ``http://host:8000`` (or ``.../v1``, or ``ws://...``) -> ``ws://host:8000/v1/agents``.
    The LiveKit plugin has the same rule in its own words: each distribution installs alone."""
    url = base_url.rstrip("/").removesuffix("/v1/agents").removesuffix("/v1")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    return url + "/v1/agents"


def spoken(word: dict[str, Any]) -> str:
    """A word as a TTSTextFrame carries it: with the punctuation after it (the frames are joined with spaces)."""
    return word["text"] + word.get("after", "").strip()


class TTSFarmTTSService(WebsocketTTSService):
    """ttsfarm's streamed TTS with word timestamps.

    Args:
        base_url: The farm gateway, ``http://host:8000`` (``ttsfarm gateway``).
        api_key: A key of the gateway's ``api_keys``, when it has any.
        voice: A catalogue voice or alias (``GET /v1/voices``); default: the farm's default voice.
        sample_rate: The audio's rate (default: the pipeline's); the farm resamples to it.
        stop_frame_timeout_s: How long a turn's audio may pause before the turn is taken as ended (``QUIET_S``).
    """

    Settings = TTSSettings

    def __init__(self, *, base_url: str, api_key: str | None = None, voice: str | None = None,
                 sample_rate: int | None = None, **kwargs: Any) -> None:
        super().__init__(
            push_text_frames=False,  # the words come back timed, as TTSTextFrames
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=TTSSettings(model=None, voice=voice, language=None),
            **{"stop_frame_timeout_s": QUIET_S, **kwargs},
        )
        self._url = agents_url(base_url)
        self._api_key = api_key
        self._receive_task: Any = None
        self._open_contexts: set[str] = set()  # contexts opened on the farm and not yet ended
        self.jobs: dict[str, str] = {}  # the farm's job of each context (GET /v1/jobs/{id} on the gateway)

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._websocket and not self._receive_task:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))
        self._create_keepalive_task(KEEPALIVE_S)

    async def _disconnect(self) -> None:
        await super()._disconnect()
        await self._cancel_keepalive_task()
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        try:
            if self._websocket and self._websocket.state is State.OPEN:
                return
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._websocket = await self._websocket_connect(self._url, additional_headers=headers)
            self._open_contexts.clear()  # contexts live on the socket that opened them
            await self._call_event_handler("on_connected")
        except Exception as e:
            self._websocket = None
            await self.push_error(error_msg=f"cannot connect to the farm at {self._url}: {e}", exception=e)
            await self._call_event_handler("on_connection_error", f"{e}")

    async def _disconnect_websocket(self) -> None:
        try:
            await self.stop_all_metrics()
            if self._websocket:
                await self._websocket.close()
        except Exception as e:
            await self.push_error(error_msg=f"closing the farm's socket failed: {e}", exception=e)
        finally:
            self._websocket = None
            await self._call_event_handler("on_disconnected")

    async def _send(self, message: dict[str, Any]) -> None:
        if not self._websocket:
            raise ConnectionError("the farm's agents' socket is not connected")
        await self._websocket.send(json.dumps(message))

    async def _send_keepalive(self) -> None:
        await self._send({"type": "ping"})

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The end of the turn: the farm speaks what is buffered and ends the context with ``done``."""
        flush_id = context_id or self.get_active_audio_context_id()
        if flush_id in self._open_contexts and self._websocket:
            await self._send({"type": "close", "context_id": flush_id})

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """The caller talked over the bot: the farm cancels the context's job."""
        await self.stop_all_metrics()
        if context_id in self._open_contexts and self._websocket:
            self._open_contexts.discard(context_id)
            await self._send({"type": "clear", "context_id": context_id})
        await super().on_audio_context_interrupted(context_id)

    async def _receive_messages(self) -> None:
        async for raw in self._websocket:
            message = json.loads(raw)
            context_id = message.get("context_id")
            kind = message.get("type")
            if kind == "audio" and self.audio_context_available(context_id):
                await self.stop_ttfb_metrics()
                frame = TTSAudioRawFrame(audio=base64.b64decode(message["pcm"]), sample_rate=message["sample_rate"],
                                         num_channels=1, context_id=context_id)
                await self.append_to_audio_context(context_id, frame)
                words = [(spoken(w), w["start_s"]) for w in message["words"]]
                if words:
                    await self.add_word_timestamps(words, context_id)
            elif kind == "done":
                self._open_contexts.discard(context_id)
                if self.audio_context_available(context_id):
                    await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
                    await self.remove_audio_context(context_id)
            elif kind == "opened":
                self.jobs[context_id] = message["job_id"]
            elif kind == "error":
                await self._farm_error(message)
            elif kind not in ("flushed", "cleared", "pong", "audio"):
                logger.warning(f"{self}: unknown message from the farm: {kind!r}")

    async def _farm_error(self, message: dict[str, Any]) -> None:
        """An error of the farm's ends the turn it names; a context still open on the farm is cleared."""
        error, context_id = message.get("error") or {}, message.get("context_id")
        await self.push_error(error_msg=f"ttsfarm {error.get('code')}: {error.get('message')}")
        if context_id in self._open_contexts:
            self._open_contexts.discard(context_id)
            if context_id in self.jobs and not message.get("ended"):
                await self._send({"type": "clear", "context_id": context_id})
        if context_id and self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send the turn's next text; the first text of a turn opens its context on the farm."""
        try:
            if not self._websocket or self._websocket.state is State.CLOSED:
                await self._connect()
            await self.start_ttfb_metrics()
            if context_id not in self._open_contexts:
                await self._send({"type": "open", "context_id": context_id, "voice": self._settings.voice,
                                  "format": "pcm", "sample_rate": self.sample_rate})
                self._open_contexts.add(context_id)
            await self._send({"type": "text", "context_id": context_id, "text": text})
            await self.start_tts_usage_metrics(text)
            yield None
        except Exception as e:
            yield ErrorFrame(error=f"ttsfarm: {e}")
            yield TTSStoppedFrame(context_id=context_id)
