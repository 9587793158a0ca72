"""The gRPC server: the Riva speech service, the standard health service (``grpc.health.v1``) and server
reflection, on one port.

    ttsfarm grpc --port 50051                      # main below: settings [grpc], TTSFARM_GRPC_*
    with BackgroundServer(settings) as server:     # on a thread, for tests, demos and benchmarks
        riva.client.Auth(uri=server.target)

Health: ``""`` and ``nvidia.riva.tts.RivaSpeechSynthesis`` are SERVING while Redis answers and a worker's
heartbeat says serving, NOT_SERVING otherwise (checked every ``HEALTH_EVERY_S``); health and reflection never need a
key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from typing import Any, Self

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from riva.client.proto import riva_tts_pb2

from pipeline.errors import TTSFarmError
from wire.errors import BrokerError
from wire.settings import GrpcSettings, Settings, settings_from_environment
from grpcfront.metrics import FrontMetrics
from grpcfront.service import SpeechSynthesis, add_to_server
from grpcfront.state import FrontState

log = logging.getLogger(__name__)

SERVICE = riva_tts_pb2.DESCRIPTOR.services_by_name["RivaSpeechSynthesis"].full_name
HEALTH_EVERY_S = 2.0


class FrontServer:
    """One ``grpc.aio`` server and what it holds; ``start`` and ``stop`` run on the event loop that serves it."""

    def __init__(self, settings: Settings, front: GrpcSettings | None = None, *, port: int | None = None,
                 host: str | None = None) -> None:
        self.settings = settings
        self.front = front or settings.grpc
        self.host = host or self.front.host
        self.port = self.front.port if port is None else port
        self.metrics = FrontMetrics()
        self.farm: FrontState | None = None
        self.server: Any = None
        self._health = health.aio.HealthServicer()
        self._watch: asyncio.Task[None] | None = None
        self.service: SpeechSynthesis | None = None

    async def start(self) -> int:
        """Bind and serve; the port bound (a free one when asked for 0)."""
        self.farm = FrontState.open(self.settings, self.front, self.metrics)
        limit = self.front.max_message_bytes
        self.server = grpc.aio.server(
            maximum_concurrent_rpcs=self.front.max_concurrent_rpcs,
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)])
        self.service = SpeechSynthesis(self.farm)
        add_to_server(self.service, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self.server)
        reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.port = self.server.add_insecure_port(f"{self.host}:{self.port}")
        await self.server.start()
        self._watch = asyncio.create_task(self._watch_health(), name="grpc-health")
        log.info("serving %s on %s:%d", SERVICE, self.host, self.port)
        return self.port

    async def _watch_health(self) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        while True:
            assert self.farm is not None
            try:
                status = serving if await self.farm.fresh_workers() else health_pb2.HealthCheckResponse.NOT_SERVING
            except (TTSFarmError, BrokerError):
                status = health_pb2.HealthCheckResponse.NOT_SERVING
            for name in ("", SERVICE):
                await self._health.set(name, status)
            await asyncio.sleep(HEALTH_EVERY_S)

    async def stop(self, grace_s: float = 2.0) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self.server is not None:
            await self.server.stop(grace_s)
        if self.service is not None:
            await self.service.settle()
        if self.farm is not None:
            await self.farm.close()

    async def serve_forever(self) -> None:
        await self.start()
        try:
            await self.server.wait_for_termination()
        finally:
            await self.stop()


class BackgroundServer:
    """The server on its own event loop thread: ``with BackgroundServer(settings) as s: ... s.target``."""

    def __init__(self, settings: Settings, front: GrpcSettings | None = None, host: str = "127.0.0.1") -> None:
        self.server = FrontServer(settings, front, port=0, host=host)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="grpc-background", daemon=True)

    @property
    def target(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    @property
    def metrics(self) -> FrontMetrics:
        return self.server.metrics

    def start(self, timeout: float = 20.0) -> Self:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ttsfarm grpc", description="Serve NVIDIA Riva's TTS protocol (gRPC) over the farm")
    ap.add_argument("--host", default=None, help="default: TTSFARM_GRPC_HOST or 127.0.0.1")
    ap.add_argument("--port", type=int, default=None, help="default: TTSFARM_GRPC_PORT or 50051")
    ap.add_argument("--redis", default=None, help="Redis URL (default: TTSFARM_REDIS_URL / settings)")
    ap.add_argument("--log-level", default="info")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``ttsfarm grpc``: settings from ``configs/`` and ``TTSFARM_*`` (``TTSFARM_GRPC_*`` for this front end)."""
    args = build_parser().parse_args(argv)
    settings = settings_from_environment(redis_url=args.redis)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = FrontServer(settings, port=args.port, host=args.host)
    if settings.grpc.metrics_port:
        server.metrics.serve(settings.grpc.metrics_port)
    try:
        asyncio.run(server.serve_forever())
    except KeyboardInterrupt:
        pass
    return 0
