"""What one gRPC front end process holds: the asyncio SDK client, its settings and metrics, and the farm-wide
questions a call asks (is any worker serving? was a key presented?)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence
from typing import Any

from producer.aio import AsyncClient
from wire.heartbeats import serving
from wire.settings import GrpcSettings, Settings
from grpcfront.errors import no_workers
from grpcfront.metrics import FrontMetrics

WORKERS_CACHE_S = 1.0


class FrontState:
    def __init__(self, settings: Settings, front: GrpcSettings, client: AsyncClient, metrics: FrontMetrics) -> None:
        self.settings = settings
        self.front = front
        self.client = client
        self.metrics = metrics
        self._workers_checked = 0.0
        self._workers_fresh = 0

    @classmethod
    def open(cls, settings: Settings, front: GrpcSettings, metrics: FrontMetrics | None = None) -> FrontState:
        return cls(settings, front, AsyncClient.from_url(settings=settings), metrics or FrontMetrics())

    async def close(self) -> None:
        await self.client.close()

    async def fresh_workers(self) -> int:
        """Workers whose heartbeat says ``serving`` from the last ``worker_fresh_s``; cached a second, so a burst
        of calls costs one read."""
        now = time.time()
        if now - self._workers_checked >= WORKERS_CACHE_S:
            self._workers_fresh = serving(await self.client.workers(), now, self.front.worker_fresh_s)
            self._workers_checked = now
        return self._workers_fresh

    async def require_workers(self) -> None:
        if await self.fresh_workers() == 0:
            raise no_workers()

    def key_ok(self, metadata: Sequence[tuple[str, Any]] | None) -> bool:
        """Whether the call's metadata presents a configured key (``authorization: Bearer <key>``); True when no
        keys are configured. Every key is compared, so the time taken does not tell which one was close."""
        if not self.front.api_keys:
            return True
        given = b""
        for name, value in metadata or ():
            if name.lower() == "authorization":
                scheme, _, token = str(value).partition(" ")
                if scheme.lower() == "bearer":
                    given = token.strip().encode()
        ok = False
        for key in self.front.api_keys:
            ok |= hmac.compare_digest(given, key.encode())
        return ok
