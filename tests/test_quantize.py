"""INT8 quantization of the real joe voice: the spectral distance, the report, and the serving decision."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.prepare.quantize import CALIBRATION_EN, quantize_voice, read_sentences
from pipeline.prepare.quantize_eval import EVAL_SENTENCES_EN, logmel_l1_db
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.piper.graph import INT8_EXCLUDE, int8_paths, prepare_piper_graph
from pipeline.voices.piper.voice import choose_model
from pipeline.voices.runtime import resolve_resource
from wire.settings import Settings

RATE = 22050
EVAL = [EVAL_SENTENCES_EN[0], EVAL_SENTENCES_EN[3], EVAL_SENTENCES_EN[9]]
REPORT_KEYS = {
    "voice", "mode", "passed", "reason", "exclusions", "per_channel", "thresholds", "measures", "quantization",
    "calibration", "evaluation", "model", "source_model", "source_sha256", "int8_sha256", "model_sizes",
    "onnxruntime_version", "created",
}
MEASURE_KEYS = {
    "items", "rtf_fp32", "rtf_int8", "xrealtime_fp32", "xrealtime_int8", "speedup", "length_mismatch",
    "length_mismatch_items", "max_length_diff_samples", "logmel_l1_db", "logmel_l1_db_max", "batch_solo_int8",
    "batch_solo_fp32", "per_item",
}


def _voiced(seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    f0 = 120 + 40 * np.sin(2 * np.pi * 1.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    audio = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2)
    return (0.2 * audio).astype(np.float32)


def test_logmel_distance_is_zero_for_identical_audio_and_grows_with_noise() -> None:
    clean = _voiced()
    assert logmel_l1_db(clean, clean.copy(), RATE) == (0.0, False)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(clean.size).astype(np.float32)
    dists = [logmel_l1_db(clean, clean + level * noise, RATE)[0] for level in (1e-4, 1e-3, 1e-2, 1e-1)]
    assert dists[0] > 0.0
    assert all(a < b for a, b in itertools.pairwise(dists)), dists
    # A copy delayed by a few frames is aligned, not charged for its timing.
    late = np.concatenate([np.zeros(3 * 256, np.float32), clean])
    aligned, used_dtw = logmel_l1_db(clean, late, RATE)
    assert used_dtw and aligned < dists[2]


@pytest.fixture(scope="module")
def prepared_cache(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding only the prepared FP32 graph of joe, built once for this module."""
    cache = tmp_path_factory.mktemp("prepared")
    prepare_piper_graph(resolve_resource(base_settings.catalogue.voices["joe"].model), cache)
    return cache


def _settings_with_cache(base: Settings, prepared_cache: Path, tmp: Path) -> Settings:
    shutil.copytree(prepared_cache / "models", tmp / "models")
    runtime = dataclasses.replace(base.runtime, model_cache_dir=str(tmp), intra_op_threads=2, precision="auto")
    return dataclasses.replace(base, runtime=runtime)


def test_dynamic_quantization_of_joe_end_to_end(base_settings: Settings, prepared_cache: Path, tmp_path: Path) -> None:
    settings = _settings_with_cache(base_settings, prepared_cache, tmp_path)
    report = quantize_voice(settings, "joe", mode="dynamic", eval_texts=EVAL, repeats=1)

    spec = settings.catalogue.voices["joe"]
    prepared = prepare_piper_graph(resolve_resource(spec.model), settings.runtime.cache_dir).path
    model_path, report_path = int8_paths(prepared)
    assert model_path.is_file() and report_path.is_file()
    saved = json.loads(report_path.read_text())
    assert saved == json.loads(json.dumps(report))
    assert REPORT_KEYS <= set(saved) and MEASURE_KEYS <= set(saved["measures"])
    assert saved["mode"] == "dynamic" and saved["exclusions"] == list(INT8_EXCLUDE)
    m, gate = saved["measures"], settings.quality_gate  # the verdict is what the gate's bounds say of the measures
    holds = (m["logmel_l1_db"] <= gate.max_logmel_l1_db and m["length_mismatch"] <= gate.max_length_mismatch
             and (m["batch_solo_int8"]["identical"] or not gate.require_batch_solo_identical))
    assert saved["passed"] is holds and saved["reason"]
    assert saved["measures"]["items"] == len(EVAL)
    assert saved["quantization"]["ops_int8"].get("ConvInteger", 0) == saved["quantization"]["quantized_nodes"] - 2  # + 2 MatMul
    assert saved["model_sizes"]["int8_bytes"] < saved["model_sizes"]["fp32_bytes"]
    assert saved["thresholds"]["max_logmel_l1_db"] == settings.quality_gate.max_logmel_l1_db

    served, precision = choose_model(prepared, spec, settings.runtime)
    assert (precision == "int8") == saved["passed"]
    assert served == (model_path if saved["passed"] else prepared)
    # The decision follows the report's verdict alone: flip it and serving flips.
    report_path.write_text(json.dumps({**saved, "passed": not saved["passed"]}))
    assert choose_model(prepared, spec, settings.runtime)[1] == ("fp32" if saved["passed"] else "int8")


def test_the_int8_gate_fails_a_damaged_whole_graph(base_settings: Settings, prepared_cache: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A quantizer that writes a broken graph (its FP32-kept weights perturbed, tests/gates.py): the gate says
    ``passed: false`` with the failed bound, and serving stays on FP32."""
    from pipeline.prepare import quantize as quantize_module
    from tests.gates import damage

    settings = _settings_with_cache(base_settings, prepared_cache, tmp_path)
    real = quantize_module.quantize_graph

    def damaged(source: Path, target: Path, mode: str, **kw: object) -> dict[str, object]:
        done = real(source, target, mode, **kw)  # type: ignore[arg-type]
        damage(target, scale=0.5)
        return done

    monkeypatch.setattr(quantize_module, "quantize_graph", damaged)
    report = quantize_voice(settings, "joe", mode="dynamic", eval_texts=EVAL, repeats=1)
    assert report["passed"] is False
    assert report["measures"]["logmel_l1_db"] > settings.quality_gate.max_logmel_l1_db
    assert f"> {settings.quality_gate.max_logmel_l1_db:.2f} dB" in report["reason"]
    spec = settings.catalogue.voices["joe"]
    prepared = prepare_piper_graph(resolve_resource(spec.model), settings.runtime.cache_dir).path
    assert choose_model(prepared, spec, settings.runtime) == (prepared, "fp32")


def test_int8_that_passes_the_gate_is_within_the_bound(base_settings: Settings, prepared_cache: Path, tmp_path: Path) -> None:
    settings = _settings_with_cache(base_settings, prepared_cache, tmp_path)
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(read_sentences(CALIBRATION_EN)[::5]), encoding="utf-8")
    bound = settings.quality_gate.max_logmel_l1_db
    reports = []
    for mode in ("static", "dynamic"):
        report = quantize_voice(settings, "joe", mode=mode, calibration=calibration, eval_texts=EVAL, repeats=1)
        reports.append(report)
        if report["passed"]:
            break

    if not report["passed"]:  # a mode that passes is what INT8 serving rests on (issue 16): no pass is a failure
        pytest.fail("no quantization mode passed the gate: " + "; ".join(f"{r['mode']}: {r['reason']}" for r in reports))
    assert report["measures"]["logmel_l1_db"] <= bound
    # Served through the whole-graph path (PiperVoice: what `ttsfarm quantize` feeds; joe itself is served in two
    # stages, whose INT8 comes from `ttsfarm voices prepare`, tests/test_prepare.py).
    from pipeline.voices.piper.voice import PiperVoice
    from pipeline.voices.runtime import SessionFactory

    factory = SessionFactory(settings.runtime)
    voice = PiperVoice(settings.catalogue.voices["joe"], factory)
    assert voice.precision == "int8"
    # Measured again here, on sentences the gate did not see, through the serving path.
    fp32 = PiperVoice(settings.catalogue.voices["joe"], factory, precision="fp32")
    assert fp32.precision == "fp32"
    texts = [EVAL_SENTENCES_EN[2], EVAL_SENTENCES_EN[7]]
    ids = [voice.phonemize(t, "en").ids for t in texts]
    opts = SynthesisOptions.noiseless()
    for ref, test in zip(fp32.synthesize_batch(ids, opts), voice.synthesize_batch(ids, opts)):
        assert len(ref) == len(test)
        assert logmel_l1_db(ref, test, voice.sample_rate)[0] <= bound
