"""Shared fixtures: a real redis-server per test session, settings pointing at it, flushed per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.processes import RedisServer
from wire.settings import Settings, load_settings


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


class Farm:
    """Worker processes started with the plain celery command, all on one key prefix."""

    def __init__(self, redis_url: str, root: Path, **env: str) -> None:
        import secrets

        self.redis_url = redis_url
        self.prefix = f"t{secrets.token_hex(4)}"
        self.root = root
        self.env = {
            "TTSFARM_REDIS_URL": redis_url,
            "TTSFARM_REDIS_KEY_PREFIX": self.prefix,
            "TTSFARM_STORAGE_LOCAL_DIR": str(root / "storage"),
            **env,
        }
        self.workers: list[object] = []
        self.settings = load_settings(env=self.env)

    def start_worker(self, name: str | None = None, wait: bool = True, app: str = "workers.app"):  # type: ignore[no-untyped-def]
        """``app``: the Celery app module (``tests.faults.FAULT_APP`` for a worker that injects faults)."""
        from bench.processes import WorkerProcess

        name = name or f"w{len(self.workers)}-{self.prefix}@test"
        w = WorkerProcess(name, self.env, log_path=self.root / f"{name}.log", app=app).start()
        self.workers.append(w)
        if wait:
            w.wait_ready(self.redis_url, self.prefix, master_name=self.settings.redis.master_name)
        return w

    def client(self):  # type: ignore[no-untyped-def]
        from producer.client import Client

        return Client.from_url(settings=self.settings)

    def stop(self) -> None:
        for w in self.workers:
            w.stop()  # type: ignore[attr-defined]

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in self.root.glob("*.log"))
