"""What one gateway process holds: the asyncio SDK client, the storage reader, and the few farm-wide
questions a request asks (is any worker serving? which voice does a name mean? where is the output?)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.requests import HTTPConnection

from pipeline.errors import UNKNOWN_VOICE, InputError
from producer.aio import AsyncClient, AsyncJob
from producer.checks import optional_name_arg
from gateway.errors import no_workers
from gateway.request_ids import mark_job
from wire.heartbeats import serving
from wire.errors import JobNotFoundError
from wire.settings import GatewaySettings, Settings

log = logging.getLogger(__name__)

MAX_JOB_ID = 64  # the contract's limit; anything longer cannot name a job
WORKERS_CACHE_S = 1.0


class GatewayState:
    def __init__(self, settings: Settings, gateway: GatewaySettings, client: AsyncClient) -> None:
        self.settings = settings
        self.gateway = gateway
        self.client = client
        self._storage: Any = None
        self._workers_checked = 0.0
        self._workers_fresh = 0

    @classmethod
    def open(cls, settings: Settings, gateway: GatewaySettings) -> GatewayState:
        return cls(settings, gateway, AsyncClient.from_url(settings=settings))

    async def close(self) -> None:
        await self.client.close()

    # -- workers -----------------------------------------------------------------------------------

    async def fresh_workers(self) -> int:
        """How many worker processes have a heartbeat that says ``serving`` from the last few seconds.

        The heartbeats are the wire's (``wire.heartbeats``), read through the SDK; the answer is cached
        for a second so a burst of requests costs one read.
        """
        now = time.time()
        if now - self._workers_checked < WORKERS_CACHE_S:
            return self._workers_fresh
        fresh = serving(await self.client.workers(), now, self.gateway.worker_fresh_s)
        self._workers_checked, self._workers_fresh = now, fresh
        return fresh

    async def require_workers(self) -> None:
        if await self.fresh_workers() == 0:
            raise no_workers()

    # -- voices ------------------------------------------------------------------------------------

    def resolve_voice(self, name: str | None) -> str:
        """A catalogue voice for a requested name: the name itself (any case), an alias, or the default."""
        catalogue = self.settings.catalogue
        name = optional_name_arg("voice", name)
        if name is None or not name.strip():
            return catalogue.get(None).name
        key = str(name).strip()
        for candidate in (key, key.lower()):
            if candidate in catalogue.voices:
                return candidate
        alias = self.gateway.voice_aliases.get(key.lower())
        if alias is not None:
            return catalogue.get(alias or None).name
        known = ", ".join(sorted(catalogue.voices))
        raise InputError(f"unknown voice {key[:64]!r}; known voices: {known} (see GET /v1/voices)", code=UNKNOWN_VOICE)

    def voice_list(self) -> dict[str, Any]:
        catalogue = self.settings.catalogue
        default = catalogue.default_voice
        voices = [
            {"id": spec.name, "engine": spec.engine, "languages": list(spec.languages), "sample_rate": spec.sample_rate,
             "default": spec.name == default}
            for spec in catalogue.voices.values()
        ]
        aliases = {alias: target or default for alias, target in self.gateway.voice_aliases.items()}
        return {"voices": voices, "default": default, "aliases": aliases}

    # -- jobs --------------------------------------------------------------------------------------

    async def job(self, job_id: str, conn: HTTPConnection) -> AsyncJob:
        """The job ``job_id`` names; its id becomes the answer's ``X-Request-Id`` (``gateway.request_ids``)."""
        if not job_id or len(job_id) > MAX_JOB_ID:
            raise JobNotFoundError(f"no job {job_id[:MAX_JOB_ID]!r} (unknown or expired)")
        job = await self.client.job(job_id)
        mark_job(conn, job.id)
        return job

    @property
    def storage(self) -> Any:
        """The farm's output storage (S3 or a local folder), built on first use: boto3 loads only then."""
        if self._storage is None:
            from wire.storage import storage_from_settings

            self._storage = storage_from_settings(self.settings.storage)
        return self._storage

    async def output_file(self, key: str) -> Any:
        """A local ``Path`` for ``key`` when the storage is a folder, else the object's bytes."""
        storage = self.storage
        path_of = getattr(storage, "path", None)
        if path_of is not None:
            path = path_of(key)
            if not path.is_file():
                from wire.storage import ObjectNotFoundError

                raise ObjectNotFoundError(f"no stored object {key!r}")
            return path
        return await asyncio.to_thread(storage.get, key)


def state_of(conn: HTTPConnection) -> GatewayState:
    """The app's ``GatewayState``, opened by the lifespan; opened here on first use if no lifespan ran
    (then it lives on the event loop of that first request)."""
    app_state = conn.app.state
    state: GatewayState | None = getattr(app_state, "gateway_state", None)
    if state is None:
        state = app_state.gateway_state = GatewayState.open(app_state.settings, app_state.gateway)
    return state
