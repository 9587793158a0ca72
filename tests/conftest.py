"""Shared fixtures: a real redis-server per test session, settings pointing at it, flushed per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pipeline.settings import Settings, load_settings
from producer.local import RedisServer


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("TTSFARM_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_url)
    conn.flushdb()
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings from configs/, with the model cache shared across the session."""
    cache = os.environ.get("TTSFARM_TEST_CACHE") or str(Path.home() / ".cache" / "ttsfarm")
    return load_settings(env={"TTSFARM_RUNTIME_MODEL_CACHE_DIR": cache})


@pytest.fixture
def settings(base_settings: Settings, redis_url: str, tmp_path: Path) -> Settings:
    return base_settings.replace(redis={"url": redis_url}, storage={"local_dir": str(tmp_path / "storage")})
