"""The HTTP gateway: an OpenAI-style speech endpoint, the job API, live streams and a small page,
all over the same Redis streams as the SDK (it is built on ``producer.aio``).

    create_app(load_settings(env=os.environ))   # an ASGI app (the [gateway] section: TTSFARM_GATEWAY_*)
    ttsfarm gateway --port 8000                 # served by uvicorn (main below)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from pipeline.errors import TTSFarmError
import gateway.agents as agents
import gateway.errors as errors
import gateway.jobs as jobs
import gateway.openai_compat as openai_compat
import gateway.speech as speech
import gateway.text_socket as text_socket
from gateway.auth import require_key
from gateway.request_ids import RequestIdMiddleware
from gateway.schemas import Health, VoiceList, error_responses
from gateway.state import GatewayState, state_of
from wire.errors import BrokerError
from wire.settings import GatewaySettings, Settings, load_settings

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"

DESCRIPTION = """
`POST /v1/audio/speech` takes OpenAI's request; `wav` and `pcm` stream with chunked transfer as the farm
makes them. `POST /v1/jobs` queues text; follow a job with `GET /v1/jobs/{id}/events` (server-sent events)
or the WebSocket `/v1/jobs/{id}/stream` (not listed below: OpenAPI has no WebSockets). Both send numbered
chunks `{type: "chunk", seq, seg, sample_rate, last, bytes, words, pcm}` (PCM16 little-endian mono, base64; on
the WebSocket with `?binary=1` the PCM comes as the binary frame after each chunk message; `words`: the words that
end inside the chunk, `{text, start_s, end_s, char_start, char_end, approx, after}`, times in the job's audio, offsets in
code points of the submitted text, `after` the punctuation and space that follow the word there; `GET /v1/jobs/{id}/captions?format=vtt|srt` once it is done), resume with
`?after_seq=N`, and end with `{type: "done", ...}` or `{type: "error", error: {code, message}}` (code
STREAM_TRIMMED when the chunks asked for are no longer in the results stream: fetch `audio` instead).
On the WebSocket, send `{"type": "cancel"}` to cancel the job. The WebSocket `/v1/jobs/text` takes the text while
the job plays: `{"type": "open", voice, format, ...}`, then `{"type": "text", "text": ...}` messages (each finished
sentence is queued at once), then `{"type": "close"}`; the audio comes back on the same socket as on `stream`.
The WebSocket `/v1/agents` is for voice agents: several contexts on one socket, each a job whose text arrives in
pieces, with `flush` (speak what is buffered now), `clear` (cancel; answered with the audio sent) and the words in
each audio message (docs/AGENTS.md).

Every answer carries `X-Request-Id`: the job's id where the request has a job (errors included), else an id of the
request (the client's own `X-Request-Id` when it sent a plain one of at most 64 characters).

Errors are `{"error": {"code", "message"}}` with the farm's stable codes: 400 bad input (a wrong type is
MALFORMED_JOB for the text, BAD_OPTION for an option), 401 missing key, 404 JOB_NOT_FOUND, 409 JOB_NOT_DONE,
429 OVERLOADED, 503 NO_WORKERS. With API keys configured send
`Authorization: Bearer <key>` (or `?api_key=` where headers cannot be set).
"""


def create_app(settings: Settings, gateway: GatewaySettings | None = None) -> FastAPI:
    """The gateway as an ASGI app. Redis is reached through ``settings.redis``; nothing connects
    until the app starts (lifespan) or serves its first request. ``gateway``: default ``settings.gateway``."""
    gateway = gateway or settings.gateway

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.gateway_state = GatewayState.open(settings, gateway)
        # load the text frontend's dictionaries now rather than in the first request
        await asyncio.to_thread(_warm_frontend, settings)
        try:
            yield
        finally:
            state, app.state.gateway_state = app.state.gateway_state, None
            await state.close()

    app = FastAPI(
        title="ttsfarm gateway",
        version="1",
        summary="Batch text-to-speech over Redis Streams: OpenAI-style speech, jobs, live SSE/WebSocket streams.",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.gateway = gateway
    app.state.gateway_state = None
    errors.install(app)
    app.add_middleware(RequestIdMiddleware)
    if gateway.cors:
        app.add_middleware(CORSMiddleware, allow_origins=list(gateway.cors), allow_methods=["*"], allow_headers=["*"],
                           expose_headers=["X-Request-Id", "X-Job-Id", "X-Sample-Rate", "X-TTSFarm-Note"])
    app.include_router(speech.router)
    app.include_router(openai_compat.router)
    app.include_router(jobs.router)
    app.include_router(agents.router)
    app.include_router(text_socket.router)  # before jobs.live: /v1/jobs/text is not a job id
    app.include_router(jobs.live)

    @app.get("/v1/voices", response_model=VoiceList, tags=["voices"], dependencies=[Depends(require_key)],
             responses=error_responses(401))
    async def list_voices(request: Request) -> dict[str, Any]:
        """The voice catalogue, the default voice, and the aliases a request may use."""
        return state_of(request).voice_list()

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def health(request: Request) -> dict[str, Any]:
        """Liveness and readiness: Redis reachable, how many workers serve. Never needs a key."""
        state = state_of(request)
        try:
            return {"ok": True, "redis": True, "workers": await state.fresh_workers()}
        except (BrokerError, TTSFarmError):  # out of reach, or refusing the credentials (BACKEND_AUTH_FAILED)
            return {"ok": False, "redis": False, "workers": 0}

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _warm_frontend(settings: Settings) -> None:
    from producer.submit import prepare_submission

    try:
        prepare_submission(settings, "Hello. 你好。")
    except TTSFarmError as exc:  # a catalogue without these languages: nothing to warm
        log.debug("frontend warm-up skipped: %s", exc)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ttsfarm gateway", description="Serve the HTTP gateway with uvicorn")
    ap.add_argument("--host", default=None, help="default: TTSFARM_GATEWAY_HOST or 127.0.0.1")
    ap.add_argument("--port", type=int, default=None, help="default: TTSFARM_GATEWAY_PORT or 8000")
    ap.add_argument("--redis", default=None, help="Redis URL (default: TTSFARM_REDIS_URL / settings)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--log-level", default="info")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``ttsfarm gateway``: settings from ``configs/`` and ``TTSFARM_*`` (``TTSFARM_GATEWAY_*`` for the gateway)."""
    import uvicorn

    args = build_parser().parse_args(argv)
    env = dict(os.environ)
    if args.redis:
        env["TTSFARM_REDIS_URL"] = args.redis
    settings = load_settings(env=env)
    gateway = settings.gateway
    host, port = args.host or gateway.host, args.port or gateway.port
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.workers > 1:  # uvicorn's worker processes each build the app from their environment: hand it over
        os.execvpe(sys.executable, [sys.executable, "-m", "uvicorn", "gateway.app:app_from_env", "--factory",
                                    "--host", host, "--port", str(port), "--workers", str(args.workers),
                                    "--log-level", args.log_level], env)
    uvicorn.run(create_app(settings, gateway), host=host, port=port, log_level=args.log_level)
    return 0


def app_from_env() -> FastAPI:
    """An app from ``os.environ``: for ``uvicorn --factory gateway.app:app_from_env``."""
    return create_app(load_settings(env=dict(os.environ)))
