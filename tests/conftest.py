"""Shared fixtures: a real redis-server per test session, settings pointing at it, flushed per test; an S3 server
(moto) per session; and the one way a test gets a farm (a private key prefix on the session's redis-server and real
worker processes), built, started, waited for and stopped by ``running_farm`` from a ``FarmSpec``:

* ``farm``: the test module's farm, started on first use and stopped after the module's last test. A module says
  what its farm is with a module-level ``FARM = FarmSpec(...)``; without one it is a plain farm (one worker, the
  shipped settings, outputs in a local folder).
* ``make_module_farm(spec, **env)``: a module's second farm, kept as long.
* ``make_farm(spec, **env)``: a farm for one test, stopped after it (``workers=0``: the test starts them).

A test whose farm lives and dies inside it (a worker killed, Redis restarted) builds a ``Farm`` itself.
"""

from __future__ import annotations

import itertools
import os
import secrets
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.processes import RedisServer, free_port
from wire.settings import Settings, load_settings


@pytest.fixture(scope="session", autouse=True)
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty folder of the user's own voices (``runtime.user_dir``) for the session, in this process's environment
    (so the CLI run in-process and every worker started here read it): no test sees the voices the machine's user
    added, and no test adds to them."""
    path = tmp_path_factory.mktemp("user")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTSFARM_RUNTIME_USER_DIR", str(path))
        yield path


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
def base_settings(tmp_path_factory: pytest.TempPathFactory, user_dir: Path) -> Settings:
    """Settings from configs/, with the model cache shared across the session."""
    cache = os.environ.get("TTSFARM_TEST_CACHE") or str(Path.home() / ".cache" / "ttsfarm")
    return load_settings(env={"TTSFARM_RUNTIME_MODEL_CACHE_DIR": cache, "TTSFARM_RUNTIME_USER_DIR": str(user_dir)})


@pytest.fixture
def settings(base_settings: Settings, redis_url: str, tmp_path: Path) -> Settings:
    return base_settings.replace(redis={"url": redis_url}, storage={"local_dir": str(tmp_path / "storage")})


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server of the session's own on a free port, or the one ``TTSFARM_TEST_S3_ENDPOINT`` names (a MinIO,
    say, with ``TTSFARM_TEST_S3_KEY`` and ``TTSFARM_TEST_S3_SECRET``)."""
    if url := os.environ.get("TTSFARM_TEST_S3_ENDPOINT"):
        yield url
        return
    from bench.local import MotoServer

    server = MotoServer().start()
    try:
        yield server.url
    finally:
        server.stop()


class Farm:
    """Worker processes started with the plain celery command, all on one key prefix."""

    def __init__(self, redis_url: str, root: Path, **env: str) -> None:
        self.redis_url = redis_url
        self.prefix = f"t{secrets.token_hex(4)}"
        self.root = root
        self.env = {
            **{k: v for k, v in os.environ.items() if k == "TTSFARM_RUNTIME_USER_DIR"},  # the session's (``user_dir``)
            "TTSFARM_REDIS_URL": redis_url,
            "TTSFARM_REDIS_KEY_PREFIX": self.prefix,
            "TTSFARM_STORAGE_LOCAL_DIR": str(root / "storage"),
            **env,
        }
        self.workers: list[object] = []
        self.settings = load_settings(env=self.env)

    @property
    def nodes(self) -> list[str]:
        """The farm's Redis nodes: ``redis.url``, then each of ``redis.shards``."""
        return [self.redis_url, *self.settings.redis.shards]

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


# Dummy credentials for a farm on the session's S3 server: its workers get them, and this process has them while the
# farm runs (a test reads what the workers stored); nothing comes from the machine's own AWS configuration.
AWS_ENV = {"AWS_ACCESS_KEY_ID": os.environ.get("TTSFARM_TEST_S3_KEY", "testing"),
           "AWS_SECRET_ACCESS_KEY": os.environ.get("TTSFARM_TEST_S3_SECRET", "testing"),
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
AWS_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@dataclass(frozen=True)
class FarmSpec:
    """What a farm is: its workers' ``TTSFARM_*`` settings and what it needs besides the session's redis-server.

    A module-level ``FARM = FarmSpec(...)`` is the module's ``farm``; ``make_farm(FarmSpec(...))`` a test's own.
    """

    env: Mapping[str, str] = field(default_factory=dict)  # TTSFARM_* overrides of the shipped settings
    workers: int = 1  # started, and each serving, before the farm is handed over; 0: the test starts them
    baker: bool = False  # prepare the native Mandarin voice first (setup.sh has; then a no-op, or a skip without
    # a converter environment: tests/baker_voice.py)
    s3: bool = False  # the session's S3 server as the farm's storage.s3_endpoint_url, with dummy credentials
    s3_outputs: bool = False  # and the farm's outputs stored there, in a fresh bucket (implies s3)
    shards: int = 0  # more redis-servers of the farm's own, its redis.shards after the session's (farm.nodes)
    metrics: bool = False  # each worker's metrics endpoint on a free local port (settings.worker.metrics_port)
    configs: Callable[[Path], Path] | None = None  # writes the farm's configs folder into the path it is given


@contextmanager
def running_farm(spec: FarmSpec, redis_url: str, root: Path, base_settings: Settings,
                 s3_endpoint: Callable[[], str], **env: str) -> Iterator[Farm]:
    """The farm ``spec`` (``env`` over its own), its workers serving; stopped, with all it started, on the way out."""
    with ExitStack() as stack:
        own = {"TTSFARM_RUNTIME_MODEL_CACHE_DIR": str(base_settings.runtime.cache_dir)}
        if spec.baker:
            from tests.baker_voice import prepared_baker

            prepared_baker(base_settings)
        if spec.configs:
            own["TTSFARM_CONFIG_DIR"] = str(spec.configs(root / "configs"))
        if spec.metrics:
            own.update(TTSFARM_WORKER_METRICS_PORT=str(free_port()), TTSFARM_WORKER_METRICS_HOST="127.0.0.1")
        if spec.shards:
            shards = [RedisServer().start() for _ in range(spec.shards)]
            for server in shards:
                stack.callback(server.stop)
            own["TTSFARM_REDIS_SHARDS"] = ",".join(s.url for s in shards)
        if spec.s3 or spec.s3_outputs:
            endpoint = s3_endpoint()
            aws = stack.enter_context(pytest.MonkeyPatch.context())
            for name in AWS_UNSET:
                aws.delenv(name, raising=False)
            for name, value in AWS_ENV.items():
                aws.setenv(name, value)
            own.update(AWS_ENV, TTSFARM_STORAGE_S3_ENDPOINT_URL=endpoint)
            if spec.s3_outputs:
                import boto3

                bucket = f"ttsfarm-farm-{uuid.uuid4().hex[:12]}"
                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
                own["TTSFARM_STORAGE_S3_BUCKET"] = bucket
        farm = Farm(redis_url, root, **{**own, **spec.env, **env})
        stack.callback(farm.stop)
        for _ in range(spec.workers):
            farm.start_worker()
        yield farm


@contextmanager
def _farm_factory(request: pytest.FixtureRequest, redis_url: str, base_settings: Settings,
                  root: Callable[[], Path]) -> Iterator[Callable[..., Farm]]:
    """``make(spec, **env)``: a running farm in a fresh folder from ``root()``; all stopped when this ends."""
    with ExitStack() as stack:

        def make(spec: FarmSpec = FarmSpec(), **env: str) -> Farm:
            return stack.enter_context(running_farm(spec, redis_url, root(), base_settings,
                                                    lambda: request.getfixturevalue("s3_endpoint"), **env))

        yield make


@pytest.fixture(scope="module")
def make_module_farm(request: pytest.FixtureRequest, redis_url: str, base_settings: Settings,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Farm]]:
    """``make_module_farm(spec, **env)``: a farm kept until the module's last test (a module's second farm)."""
    name = request.module.__name__.rpartition(".")[2] + "-farm"
    with _farm_factory(request, redis_url, base_settings, lambda: tmp_path_factory.mktemp(name)) as make:
        yield make


@pytest.fixture(scope="module")
def farm(request: pytest.FixtureRequest, make_module_farm: Callable[..., Farm]) -> Farm:
    """The module's farm, as its ``FARM`` says (a plain one-worker farm where it says nothing)."""
    return make_module_farm(getattr(request.module, "FARM", FarmSpec()))


@pytest.fixture
def make_farm(request: pytest.FixtureRequest, redis_url: str, base_settings: Settings,
              tmp_path: Path) -> Iterator[Callable[..., Farm]]:
    """``make_farm(spec, **env)``: a farm for this test (``env`` over the spec's own), stopped after it."""
    made = itertools.count()

    def root() -> Path:
        (path := tmp_path / f"farm{next(made)}").mkdir()
        return path

    with _farm_factory(request, redis_url, base_settings, root) as make:
        yield make


@pytest.fixture(scope="module")
def gateway_server(farm: Farm) -> Iterator[Any]:
    """The HTTP gateway over the module's farm, served by uvicorn on a free port (``tests.gateway_server``)."""
    from gateway import create_app
    from tests.gateway_server import BackgroundServer

    with BackgroundServer(create_app(farm.settings)) as server:
        yield server


@pytest.fixture
def gateway_http(gateway_server: Any) -> Iterator[Any]:
    """An ``httpx.Client`` on the module's gateway."""
    import httpx

    with httpx.Client(base_url=gateway_server.url, timeout=60) as client:
        yield client
