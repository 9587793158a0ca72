"""What wire/storage/ holds for every backend: the key check (``safe_key``, wire/storage/keys.py; the keys every
backend refuses are tests/bad_keys.py, which each backend's own file feeds it too) and the choice of backend from the
settings (``storage_from_settings``), made without loading Celery or boto3. The backends themselves:
tests/test_storage_local.py and tests/test_storage_s3.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import BAD_OPTION, InputError
from wire import storage as st
from wire.errors import BAD_KEY
from wire.settings import StorageSettings
from wire.storage import LocalStorage, safe_key
from wire.storage.s3 import S3Storage
from tests.bad_keys import BAD_KEYS

ROOT = Path(__file__).resolve().parent.parent

# -- safe_key --------------------------------------------------------------------------------------


def test_safe_key_joins_and_normalises() -> None:
    assert safe_key("jobs", "abc/123", "audio.wav") == "jobs/abc/123/audio.wav"
    assert safe_key("日本語/声.wav") == "日本語/声.wav"
    assert safe_key("a..b/..c/d..") == "a..b/..c/d.."  # dots inside names are fine
    key = safe_key("jobs", "x", "y.flac")
    assert safe_key(key) == key


@pytest.mark.parametrize("key", BAD_KEYS)
def test_safe_key_refuses(key: str) -> None:
    with pytest.raises(InputError) as err:
        safe_key(key)
    assert err.value.code == BAD_KEY
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("parts", [(), ("jobs", ""), ("jobs", "/abs"), ("jobs", ".."), ("jobs", 3)])
def test_safe_key_refuses_bad_parts(parts: tuple[object, ...]) -> None:
    with pytest.raises(InputError) as err:
        safe_key(*parts)  # type: ignore[arg-type]
    assert err.value.code == BAD_KEY


# -- choosing a backend ----------------------------------------------------------------------------


def test_storage_from_settings(tmp_path: Path) -> None:
    local = st.storage_from_settings(StorageSettings(local_dir=str(tmp_path), prefix="pre"))
    assert isinstance(local, LocalStorage)
    assert local.put("a.wav", b"a", "audio/wav") == (tmp_path.resolve() / "pre" / "a.wav").as_uri()
    assert isinstance(st.storage_from_settings(StorageSettings(s3_bucket="b")), S3Storage)
    assert isinstance(
        st.storage_from_settings(StorageSettings(backend="local", s3_bucket="b", local_dir=str(tmp_path))), LocalStorage
    )
    assert isinstance(st.storage_from_settings(StorageSettings(backend="S3", s3_bucket="b")), S3Storage)
    for bad in (StorageSettings(backend="s3"), StorageSettings(backend="gcs")):
        with pytest.raises(InputError) as err:
            st.storage_from_settings(bad)
        assert err.value.code == BAD_OPTION


def test_importing_storage_does_not_import_celery() -> None:
    code = ("import sys, wire.storage; assert 'celery' not in sys.modules, 'celery imported'; "
            "assert 'boto3' not in sys.modules, 'boto3 imported'")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
