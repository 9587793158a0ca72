"""The farm's broker from its settings: the one place a broker is built.

``connect(settings.redis)`` picks the backend by ``redis.url``'s scheme (``BACKENDS``): Redis for ``redis://``,
``rediss://``, ``unix://`` and ``sentinel://``; the in-process stub (``wire.stub``) for ``memory://NAME``, whose
brokers of one name share one store (a client and a worker in one process, a unit test). With ``redis.shards`` the
broker is a ``ShardedBroker`` over one broker per node, ``redis.url`` first (``wire.shards``). The SDK's faces, the
workers, the book runner, the CLI, the front ends and the bench all get their broker here; nothing outside ``wire/``
constructs one (``tests/test_structure.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Protocol

from pipeline.errors import BAD_OPTION, InputError
from wire.broker import Broker
from wire.settings import RedisSettings
from wire.shards import ShardedBroker

# URL scheme -> the backend class, as "module:Class" (imported when a URL of its scheme is used)
BACKENDS = {
    "redis": "wire.redis.broker:RedisBroker",
    "rediss": "wire.redis.broker:RedisBroker",
    "unix": "wire.redis.broker:RedisBroker",
    "sentinel": "wire.redis.broker:RedisBroker",
    "memory": "wire.stub:StubBroker",
}


class Backend(Protocol):
    def from_settings(self, settings: RedisSettings, *, asyncio: bool = False, connection: Any = None,
                      **options: Any) -> Broker: ...


def backend_of(url: str) -> Backend:
    """The broker class that serves ``url``."""
    scheme = url.strip().partition("://")[0].lower()
    where = BACKENDS.get(scheme)
    if where is None:
        raise InputError(f"setting redis.url: no broker serves {scheme + '://'!r} URLs (one of "
                         f"{', '.join(s + '://' for s in BACKENDS)})", code=BAD_OPTION)
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def connect(settings: RedisSettings, *, asyncio: bool = False, connection: Any = None, **options: Any) -> Broker:
    """The farm's broker for these settings: blocking, or for the asyncio SDK with ``asyncio``. ``connection``: the
    client library's connection to ``redis.url`` when the caller has one (Celery's, a test's); ``options`` go to the
    client library (timeouts, health checks) and win over the settings'. Nothing connects until the first step."""
    head = backend_of(settings.url).from_settings(settings, asyncio=asyncio, connection=connection, **options)
    if not settings.shards:
        return head
    more = [backend_of(url).from_settings(dataclasses.replace(settings, url=url, shards=()), asyncio=asyncio, **options)
            for url in settings.shards]
    return ShardedBroker([head, *more])  # type: ignore[return-value]


def connect_url(url: str, *, key_prefix: str = "ttsfarm", master_name: str = "", asyncio: bool = False,
                **options: Any) -> Broker:
    """``connect`` for a caller that holds a URL and a key prefix rather than the farm's settings (a tool, a launcher
    waiting for a local server)."""
    return connect(RedisSettings(url=url, key_prefix=key_prefix, master_name=master_name), asyncio=asyncio, **options)


def script_names() -> dict[str, str]:
    """The Redis backend's Lua scripts by SHA1, to their names: for a bench reading ``SLOWLOG`` (``bench.fleet``)."""
    return dict(importlib.import_module("wire.redis.broker").script_names())
