"""The two-stage engine on a tiny generated voice: exact lengths, batch = solo, durations, stage errors."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from generate_tiny_voice import CONTEXT, HOP, write_tiny_voice

from pipeline.errors import MODEL_CORRUPT, MODEL_MISSING, MODEL_STAGE_FAILED, ModelError
from pipeline.settings import Catalogue, RuntimeSettings, VoiceSpec
from pipeline.voices import twostage
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions, Voice
from pipeline.voices.stages import AcousticStage, VocoderStage
from pipeline.voices.windows import StreamingVoice

TEXTS = ["a", "hello there", "the quick brown fox", "tiny voices speak in clicks", "zz", "batch equals solo"]


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_tiny_voice(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def tiny_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(twostage.STAGE_BUILDERS, "tiny", "generate_tiny_voice:build_tiny")


def _spec(acoustic: Path, vocoder: Path, max_batch: int = 4) -> VoiceSpec:
    return VoiceSpec("tiny", "twostage", ("en",), source="tiny", acoustic=str(acoustic), vocoder=str(vocoder),
                     max_batch=max_batch, sample_rate=6400)


def _bank(spec: VoiceSpec, tmp_path: Path) -> VoiceBank:
    runtime = RuntimeSettings(device="cpu", intra_op_threads=1, model_cache_dir=str(tmp_path / "cache"))
    return VoiceBank(Catalogue({spec.name: spec}, spec.name), runtime)


@pytest.fixture
def voice(tiny_files: tuple[Path, Path], tmp_path: Path) -> twostage.TwoStageVoice:
    v = _bank(_spec(*tiny_files), tmp_path).get("tiny")
    assert isinstance(v, twostage.TwoStageVoice)
    return v


def _ids(voice: Voice) -> list[tuple[int, ...]]:
    return [voice.phonemize(t, "en").ids for t in TEXTS]


def test_generated_graphs_are_a_few_kb(tiny_files: tuple[Path, Path]) -> None:
    assert all(p.stat().st_size < 16_000 for p in tiny_files)


def test_voice_and_stages_meet_their_protocols(voice: twostage.TwoStageVoice) -> None:
    assert isinstance(voice, Voice)
    assert isinstance(voice.acoustic, AcousticStage) and isinstance(voice.vocoder, VocoderStage)
    assert voice.hop == HOP and voice.vocoder.context == CONTEXT and voice.precision == "fp32"
    assert isinstance(voice, StreamingVoice)  # the worker streams its batches window by window
    one_graph = SimpleNamespace(name="g", sample_rate=22050, languages=("en",), max_batch=1, precision="fp32",
                                phonemize=voice.phonemize, synthesize_batch=voice.synthesize_batch)
    assert isinstance(one_graph, Voice) and not isinstance(one_graph, StreamingVoice)  # run whole


def test_lengths_are_exact_and_durations_sum_to_frames(voice: twostage.TwoStageVoice) -> None:
    ids = _ids(voice)
    outs = voice.acoustic_outputs(ids, SynthesisOptions())
    audio = voice.synthesize_batch(ids, SynthesisOptions())
    for item, out, wave in zip(ids, outs, audio):
        expected = [i % 3 + 1 for i in item]  # the tiny graph's duration rule
        assert out.durations.dtype == np.int64 and out.durations.tolist() == expected
        assert out.frames.shape == (sum(expected), voice.acoustic.channels) and out.frames.dtype == np.float32
        assert len(wave) == sum(expected) * HOP and wave.dtype == np.float32
        assert np.abs(wave).max() > 0.0


def test_batch_equals_solo(voice: twostage.TwoStageVoice) -> None:
    ids = _ids(voice)
    batched = voice.synthesize_batch(ids, SynthesisOptions())  # max_batch 4: two acoustic and two vocoder runs
    for item, out in zip(ids, batched):
        (solo,) = voice.synthesize_batch([item], SynthesisOptions())
        assert len(out) == len(solo)
        assert np.max(np.abs(out - solo)) <= 1e-5
    assert voice.synthesize_batch([], SynthesisOptions()) == []


def test_a_window_with_context_reproduces_whole_vocoding(voice: twostage.TwoStageVoice) -> None:
    (out,) = voice.acoustic_outputs([voice.phonemize("windowed vocoding needs context", "en").ids], SynthesisOptions())
    whole = voice.vocode([out.frames])[0]
    start, stop = 20, 30
    lo, hi = start - CONTEXT, stop + CONTEXT
    window = voice.vocode([out.frames[lo:hi]])[0][(start - lo) * HOP : (stop - lo) * HOP]
    assert np.max(np.abs(window - whole[start * HOP : stop * HOP])) <= 1e-5
    short = voice.vocode([out.frames[start - 2 : stop + 2]])[0][2 * HOP : 12 * HOP]  # too little context differs
    assert np.max(np.abs(short - whole[start * HOP : stop * HOP])) > 1e-4


def test_bank_loads_warms_and_describes_both_stages(tiny_files: tuple[Path, Path], tmp_path: Path) -> None:
    bank = _bank(_spec(*tiny_files), tmp_path)
    voice = bank.get("tiny", load=False)
    assert not voice.loaded  # type: ignore[attr-defined]
    bank.load_all()
    assert voice.loaded  # type: ignore[attr-defined]
    info = bank.describe()["tiny"]
    assert info["model"] == "tiny-acoustic.onnx+tiny-vocoder.onnx"
    assert info["stages"] == {"acoustic": {"model": "tiny-acoustic.onnx", "precision": "fp32"},
                              "vocoder": {"model": "tiny-vocoder.onnx", "precision": "fp32"}}
    assert info["create_s"] is not None and info["session"].count("+") == 1
    versions = bank.reload(bank.catalogue, ["tiny"])
    assert versions == {"tiny": 2} and bank.get("tiny") is not voice and bank.get("tiny").loaded  # type: ignore[attr-defined]


@pytest.mark.parametrize("stage", ["acoustic", "vocoder"])
def test_missing_stage_file_is_a_clear_model_error(stage: str, tiny_files: tuple[Path, Path], tmp_path: Path) -> None:
    spec = dataclasses.replace(_spec(*tiny_files), **{stage: str(tmp_path / "gone.onnx")})
    with pytest.raises(ModelError) as exc:
        _bank(spec, tmp_path).get("tiny")
    assert exc.value.code == MODEL_MISSING


@pytest.mark.parametrize("stage", ["acoustic", "vocoder"])
def test_corrupt_stage_file_is_a_clear_model_error(stage: str, tiny_files: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not an onnx model" * 50)
    spec = dataclasses.replace(_spec(*tiny_files), **{stage: str(bad)})
    with pytest.raises(ModelError) as exc:
        _bank(spec, tmp_path).get("tiny")
    assert exc.value.code == MODEL_CORRUPT and f"{stage} stage" in exc.value.message


def test_a_stage_failing_at_run_time_is_a_model_error(tiny_files: tuple[Path, Path], tmp_path: Path) -> None:
    acoustic, _ = tiny_files
    # The acoustic graph where the vocoder belongs: loads fine, fails on the first run.
    voice = _bank(_spec(acoustic, acoustic), tmp_path).get("tiny", load=False)
    with pytest.raises(ModelError) as exc:
        voice.synthesize_batch([voice.phonemize("hello", "en").ids], SynthesisOptions())
    assert exc.value.code == MODEL_STAGE_FAILED and "vocoder stage" in exc.value.message


def test_an_unknown_source_is_refused(tiny_files: tuple[Path, Path], tmp_path: Path) -> None:
    from pipeline.errors import InputError

    spec = dataclasses.replace(_spec(*tiny_files), source="nothing-like-it")
    with pytest.raises(InputError) as exc:
        _bank(spec, tmp_path).get("tiny")
    assert "nothing-like-it" in exc.value.message


@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned-copy"])
def test_cuda_path_io_binding_and_rounded_shapes_keep_every_item(voice: twostage.TwoStageVoice, pinned: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CUDA session gets (IO binding from a reused pool, padded shapes rounded up to a few sizes), run on the
    CPU provider: each item comes out as it does on the plain path, and the pool is not reallocated per batch.
    ``pinned``: outputs come back through the pinned pool's copy from the device pointer (tests/device_standin.py)."""
    from pipeline.voices.binding import StageBinding
    from pipeline.voices.gpu import ShapePolicy

    if pinned:
        from tests.device_standin import standin_torch

        monkeypatch.setitem(sys.modules, "torch", standin_torch())
    ids = _ids(voice)
    opts = SynthesisOptions.noiseless()
    plain = voice.synthesize_batch(ids, opts)
    for stage in (voice.acoustic.session, voice.vocoder.session):
        stage.load()
        stage._binding = StageBinding(stage.session, device="cpu", pinned=pinned)
        stage.shape_policy = ShapePolicy(width_multiple=16, batch_sizes=(1, 2, 4, 8))
    assert voice.acoustic.session.host_pool == ("pinned" if pinned else "pageable")
    for _ in range(3):
        bound = voice.synthesize_batch(ids[:3], opts)  # 3 rows -> 4, widths rounded to 16
        for a, b in zip(plain[:3], bound):
            assert a.shape == b.shape and float(np.max(np.abs(a - b))) <= 1e-5
    bound_all = voice.synthesize_batch(ids, opts)
    assert [len(a) for a in bound_all] == [len(a) for a in plain]
    shapes = voice.vocoder.session._binding.shapes_seen
    assert all(s[0][0] in (1, 2, 4, 8) and 0 in (s[0][1] % 16, s[0][2] % 16) for s in shapes), shapes  # [B, T, C] or [B, C, T]
    allocations = voice.vocoder.session._binding.allocations
    voice.synthesize_batch(ids[:3], opts)
    assert voice.vocoder.session._binding.allocations == allocations  # same shapes: the pool is reused
