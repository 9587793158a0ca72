"""The naturalness gate (pipeline/prepare/naturalness.py): DNSMOS on the held-out audio a preparation listens to.
A clean voice passes ``quality_gate.min_p808_mos``; the same voice with its vocoder broken (noise or coarse
quantization injected into the vocoder stage's output) fails it, its verdicts say so, and a blend stops routing to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.prepare.naturalness import melspec_db, mel_filters, naturalness
from pipeline.prepare.piper import listen_to_served
from pipeline.voices.piper.stages import piper_fingerprint
from pipeline.voices.prepared import gate_failure, prepared_dir, read_prepared
from pipeline.voices.runtime import SessionFactory
from pipeline.voices.twostage import OnnxVocoder
from wire.settings import Settings


def test_the_mel_spectrogram_is_dnsmos_own() -> None:
    """The shape DNSMOS's P.808 model takes (900 frames of 120 mels for its 9 s window), the triangles in order across
    the band, and the dB scale it was trained on: ``(power_to_db(ref=max, top_db=80) + 40) / 40`` spans [-1, 1].
    (Against librosa 0.11 itself, in a scratch venv: filters equal to 2e-9, spectrogram to 3e-7; docs/VOICES.md.)"""
    filters = mel_filters()
    assert filters.shape == (120, 161) and (filters >= 0).all()
    peaks = filters.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all() and peaks[0] <= 1 and peaks[-1] >= 155
    mel = melspec_db(np.random.default_rng(0).normal(0, 0.1, 144160 - 160).astype(np.float32))
    assert mel.shape == (900, 120) and abs(float(mel.max()) - 1.0) < 1e-6 and float(mel.min()) >= -1.0 - 1e-6


def _break(kind: str) -> Any:
    def run(self: OnnxVocoder, frames: Any) -> list[np.ndarray]:
        out = CLEAN_RUN(self, frames)
        if kind == "noise":  # a vocoder that hisses
            rng = np.random.default_rng(0)
            return [a + rng.normal(0, 0.02, a.shape).astype(a.dtype) for a in out]
        return [(np.round(a * 8) / 8).astype(a.dtype) for a in out]  # 16 levels: a vocoder quantized to pieces
    return run


CLEAN_RUN = OnnxVocoder.run


@pytest.mark.parametrize("vocoder", ["clean", "noise", "quantized"])
def test_the_gate_rejects_a_broken_vocoder(vocoder: str, base_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Piper preparer's gate on joe's prepared stages, as `ttsfarm voices prepare` runs it."""
    spec = base_settings.catalogue.get("joe")
    prepared = read_prepared(prepared_dir(base_settings.runtime.cache_dir, "joe", piper_fingerprint(spec)), verify=False)
    if prepared is None:
        pytest.skip("joe is not prepared (scripts/setup.sh prepares it)")
    stages = {stage: {p: entry["file"] for p, entry in files.items()} for stage, files in prepared.manifest["stages"].items()}
    verdicts = [dict(v, recognizer=None, naturalness=None) for v in prepared.verdicts.values()]
    if vocoder != "clean":
        monkeypatch.setattr(OnnxVocoder, "run", _break(vocoder))
    listen_to_served(spec, base_settings, prepared.folder, prepared.info, stages, verdicts)
    figures = [v["naturalness"] for v in verdicts if v.get("naturalness")]
    assert figures, "the gate recorded no naturalness figure (is speechmos installed?)"
    figure = figures[0]
    print(f"joe, {vocoder} vocoder: DNSMOS P.808 {figure['value']:.2f} (floor {figure['floor']}), P.835 {figure['p835']}")
    assert figure["floor"] == base_settings.quality_gate.min_p808_mos and figure["clips"] >= 8
    assert figure["passed"] is (vocoder == "clean")
    reasons = " ".join(v["reason"] for v in verdicts if v.get("naturalness"))
    assert ("naturalness gate passed" if vocoder == "clean" else "naturalness gate FAILED") in reasons


def test_a_failed_naturalness_figure_keeps_a_blend_from_routing_to_the_voice(tmp_path: Path) -> None:
    folder = tmp_path / "prepared" / "broken" / "0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"voice": "broken", "stages": {}}))
    figure = {"metric": "dnsmos_p808", "value": 2.45, "floor": 3.0, "passed": False, "p835": {}}
    (folder / "vocoder.fp32.verdict.json").write_text(json.dumps({"stage": "vocoder", "precision": "fp32", "naturalness": figure}))
    assert "naturalness gate failed: DNSMOS P.808 2.45 under the floor 3.00" in gate_failure(tmp_path, "broken")


def test_silence_scores_the_lowest(base_settings: Settings) -> None:
    figure = naturalness([(np.zeros(22050, dtype=np.float32), 22050)], 3.0, SessionFactory(base_settings.runtime))
    assert figure["value"] == 1.0 and figure["passed"] is False
