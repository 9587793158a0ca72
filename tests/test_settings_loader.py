"""One loader for every section (wire/settings.py): the farm's sections, the compute package's and the
gateway's, from configs/ and TTSFARM_* overrides; the SDK's from_url honours the same overrides as the CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import tomllib
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.settings import PipelineSettings
from producer.aio import AsyncClient
from producer.client import Client
from wire.settings import SECTIONS, GatewaySettings, SchedulingSettings, Settings, load_settings


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
    assert not {"redis", "queue", "storage", "worker", "streaming", "scheduling", "gateway"} & {f for f in PipelineSettings.__dataclass_fields__}


# -- the settings' documentation: docs/SETTINGS.md's table and configs/settings.toml ---------------------------
ROOT = Path(__file__).resolve().parent.parent


def test_the_settings_table_is_made_from_the_classes() -> None:
    from scripts.settings_table import SETTINGS_DOC, rewrite

    doc = SETTINGS_DOC.read_text(encoding="utf-8")
    assert rewrite(doc) == doc, "docs/SETTINGS.md's settings table is stale: run .venv/bin/python -m scripts.settings_table"
    assert "| `streaming.window_ms` | `4000` |" in doc and "| `gateway.port` | `8000` |" in doc


def test_every_setting_has_a_meaning() -> None:
    from scripts.settings_table import meanings, table, undocumented

    assert {name: undocumented(cls) for name, cls in SECTIONS.items() if undocumented(cls)} == {}
    rows = table().splitlines()[2:]
    assert len(rows) == sum(len(dataclasses.fields(cls)) for cls in SECTIONS.values())
    assert meanings(SchedulingSettings)["max_open"].startswith("Segments a loop holds")

    @dataclasses.dataclass(frozen=True)
    class Half:
        said: int = 1
        """What it is."""
        unsaid: int = 2

    assert undocumented(Half) == ["unsaid"]
    with pytest.raises(ValueError, match="half.unsaid"):
        table({"half": Half})


def test_configs_settings_toml_holds_every_section_and_key_at_its_default() -> None:
    """configs/settings.toml is the deploy-time file a reader edits: it shows every key the classes have, each at
    the classes' default (so the documented defaults are what a fresh checkout runs with)."""
    data = tomllib.loads((ROOT / "configs" / "settings.toml").read_text(encoding="utf-8"))
    assert set(data) == set(SECTIONS), f"sections in the file but not the classes, or the other way: {set(data) ^ set(SECTIONS)}"
    loaded, defaults = load_settings(ROOT / "configs"), Settings()
    for name, cls in SECTIONS.items():
        keys = {f.name for f in dataclasses.fields(cls)}
        assert set(data[name]) == keys, f"[{name}]: missing {keys - set(data[name])}, unknown {set(data[name]) - keys}"
        assert getattr(loaded, name) == getattr(defaults, name), f"[{name}] differs from the classes' defaults"
