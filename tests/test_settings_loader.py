"""One loader for every section (producer/wire/settings.py): the farm's sections, the compute package's and the
gateway's, from configs/ and TTSFARM_* overrides; the SDK's from_url honours the same overrides as the CLI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.settings import PipelineSettings
from producer.aio import AsyncClient
from producer.client import Client
from producer.wire.settings import GatewaySettings, Settings, load_settings


def test_from_url_honours_the_environment_like_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", "from-env")
    monkeypatch.setenv("TTSFARM_QUEUE_JOB_TTL_S", "123")
    client = Client.from_url("redis://127.0.0.1:1/0")  # from_url does not connect
    assert client.settings.redis.key_prefix == "from-env" and client.settings.queue.job_ttl_s == 123
    client.close()
    aclient = AsyncClient.from_url("redis://127.0.0.1:1/0")
    assert aclient.settings.redis.key_prefix == "from-env"
    asyncio.run(aclient.close())


def test_given_settings_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", "from-env")
    mine = Settings().replace(redis={"key_prefix": "mine"})
    with Client.from_url("redis://127.0.0.1:1/0", settings=mine) as client:
        assert client.settings.redis.key_prefix == "mine"


def test_the_gateway_is_a_section_of_the_one_loader(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text('[gateway]\nport = 9100\napi_keys = ["k1"]\n[queue]\nbucket_edges_s = [1, 3]\n')
    s = load_settings(tmp_path, env={"TTSFARM_GATEWAY_CORS": "https://a.example,https://b.example"})
    assert (s.gateway.port, s.gateway.api_keys) == (9100, ("k1",))
    assert s.gateway.cors == ("https://a.example", "https://b.example") and s.queue.bucket_edges_s == (1.0, 3.0)
    with pytest.raises(InputError):
        load_settings(tmp_path, env={"TTSFARM_GATEWAY_PORT": "0"})
    (tmp_path / "settings.toml").write_text("[gateway]\nno_such_key = 1\n")
    with pytest.raises(InputError):
        load_settings(tmp_path)
    assert load_settings(tmp_path / "none").gateway == GatewaySettings()


def test_farm_settings_extend_the_compute_packages_own() -> None:
    s = load_settings()
    assert isinstance(s, PipelineSettings)
    assert not {"redis", "queue", "storage", "worker", "gateway"} & {f for f in PipelineSettings.__dataclass_fields__}
