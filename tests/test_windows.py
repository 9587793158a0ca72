"""Windowed vocoding: the plan's shape, and stitched windows equal whole-segment vocoding (tiny voice and
the real two-stage voices, noise off), batched and alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from generate_tiny_voice import CONTEXT, HOP, write_tiny_voice

from pipeline.settings import Catalogue, RuntimeSettings, VoiceSpec
from pipeline.voices import twostage
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.windows import WindowedItem, WindowPlan, plan_windows, vocode_next, vocode_windowed
from wire.settings import Settings

LONG = ("windowed vocoding lets a long sentence start to play before its last window is made, "
        "and the stitched windows must equal the whole")
TEXTS = ["a", "hello there", "the quick brown fox jumps over the lazy dog", LONG]


@pytest.mark.parametrize("n", [0, 1, 5, 10, 31, 40, 41, 100, 333, 1000])
@pytest.mark.parametrize("context", [0, 7, 18])
def test_plan_covers_every_frame_once_with_context(n: int, context: int) -> None:
    plan = WindowPlan(first=16, size=64)
    windows = plan_windows(n, plan, context=context, min_frames=10)
    assert windows[0].start == 0 and windows[-1].end == n and windows[-1].last
    assert all(not w.last for w in windows[:-1])
    for a, b in zip(windows, windows[1:]):
        assert a.end == b.start
    for w in windows:
        assert 0 <= w.lo <= max(0, w.start - context) and min(n, w.end + context) <= w.hi <= n
        assert w.hi - w.lo >= min(n, 10)
    if n > 16 + 2 * context:
        assert windows[0].end == 16 and len(windows) >= 2  # a small first window
    else:
        assert len(windows) == 1  # too short to pay for a boundary


def test_plan_from_ms() -> None:
    assert WindowPlan.from_ms(300, 4000, sample_rate=22050, hop=256) == WindowPlan(first=26, size=345)


# -- the tiny generated voice --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> twostage.TwoStageVoice:
    root = tmp_path_factory.mktemp("tiny")
    acoustic, vocoder = write_tiny_voice(root)
    spec = VoiceSpec("tiny", "twostage", ("en",), source="tiny", acoustic=str(acoustic), vocoder=str(vocoder),
                     max_batch=4, sample_rate=6400)
    runtime = RuntimeSettings(device="cpu", intra_op_threads=1, model_cache_dir=str(root / "cache"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(twostage.STAGE_BUILDERS, "tiny", "generate_tiny_voice:build_tiny")
        voice = VoiceBank(Catalogue({"tiny": spec}, "tiny"), runtime).get("tiny")
    assert isinstance(voice, twostage.TwoStageVoice)
    return voice


def _stitched_vs_whole(voice: twostage.TwoStageVoice, plan: WindowPlan, texts: list[str], lang: str = "en") -> float:
    ids = [voice.phonemize(t, lang).ids for t in texts]
    frames = [a.frames for a in voice.acoustic_outputs(ids, SynthesisOptions.noiseless())]
    whole = voice.vocode(frames)
    stitched = vocode_windowed(voice.vocoder, frames, plan)
    worst = 0.0
    for w, s, f in zip(whole, stitched, frames):
        assert len(s) == len(w) == f.shape[0] * voice.hop
        worst = max(worst, float(np.max(np.abs(s - w))) if len(w) else 0.0)
    return worst


def test_tiny_stitched_windows_equal_whole(tiny: twostage.TwoStageVoice) -> None:
    assert tiny.vocoder.context == CONTEXT and tiny.hop == HOP
    plan = WindowPlan(first=8, size=20)
    ids = tiny.phonemize(LONG, "en").ids
    (out,) = tiny.acoustic_outputs([ids], SynthesisOptions())
    assert len(plan_windows(out.frames.shape[0], plan, context=CONTEXT)) >= 4  # really windowed
    assert _stitched_vs_whole(tiny, plan, TEXTS) <= 1e-5


def test_tiny_too_little_context_differs(tiny: twostage.TwoStageVoice) -> None:
    """The check above can fail: with context 2 the seams show."""
    (out,) = tiny.acoustic_outputs([tiny.phonemize(LONG, "en").ids], SynthesisOptions())
    whole = tiny.vocode([out.frames])[0]
    blind = type("Blind", (), {"hop": HOP, "context": 2, "min_frames": 1, "max_batch": 4, "run": tiny.vocoder.run})()
    stitched = vocode_windowed(blind, [out.frames], WindowPlan(first=8, size=20))[0]  # type: ignore[arg-type]
    assert np.max(np.abs(stitched - whole)) > 1e-4


def test_tiny_windows_of_several_items_go_in_one_batch(tiny: twostage.TwoStageVoice) -> None:
    calls: list[int] = []
    real = tiny.vocoder.run

    class Counting:
        hop, context, min_frames, max_batch = tiny.vocoder.hop, tiny.vocoder.context, tiny.vocoder.min_frames, 4

        def run(self, frames):  # type: ignore[no-untyped-def]
            calls.append(len(frames))
            return real(frames)

    ids = [tiny.phonemize(t, "en").ids for t in [LONG, LONG[:60], TEXTS[2]]]
    frames = [a.frames for a in tiny.acoustic_outputs(ids, SynthesisOptions())]
    items = [WindowedItem.of(i, f, Counting(), WindowPlan(first=8, size=20)) for i, f in enumerate(frames)]  # type: ignore[arg-type]
    first = vocode_next(Counting(), items)  # type: ignore[arg-type]
    assert calls == [3] and [w.index for _, w, _ in first] == [0, 0, 0]  # every item's first window, one call
    whole = tiny.vocode(frames)
    while not all(i.done for i in items):
        vocode_next(Counting(), items)  # type: ignore[arg-type]
    for item, w in zip(items, whole):
        assert np.max(np.abs(item.whole() - w)) <= 1e-5


# -- the real voices ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_bank(base_settings: Settings) -> VoiceBank:
    return VoiceBank(base_settings.catalogue, RuntimeSettings(**{**base_settings.runtime.__dict__, "intra_op_threads": 1}))


def test_joe_stitched_windows_equal_whole(real_bank: VoiceBank, base_settings: Settings) -> None:
    voice = real_bank.get("joe")
    assert isinstance(voice, twostage.TwoStageVoice)
    s = base_settings.streaming
    served = WindowPlan.from_ms(s.first_window_ms, s.window_ms, sample_rate=voice.sample_rate, hop=voice.hop)
    small = WindowPlan(first=16, size=48)  # many seams
    for plan in (served, small):
        assert _stitched_vs_whole(voice, plan, TEXTS) <= 1e-3


def test_later_segments_get_no_small_first_window() -> None:
    plan = WindowPlan(first=16, size=64).without_small_first()
    windows = plan_windows(90, plan, context=10)
    assert [(w.start, w.end) for w in windows] == [(0, 90)]  # 64 + a remainder under half a window: one
    assert plan_windows(200, plan, context=10)[0].end == 64


def test_baker_stitched_windows_equal_whole(real_bank: VoiceBank, base_settings: Settings) -> None:
    voice = real_bank.get("baker")
    assert isinstance(voice, twostage.TwoStageVoice) and voice.vocoder.context == 18 and voice.vocoder.min_frames == 10
    s = base_settings.streaming
    served = WindowPlan.from_ms(s.first_window_ms, s.window_ms, sample_rate=voice.sample_rate, hop=voice.hop)
    texts = ["你好。", "今天天气很好，我们去公园散步吧。", "流式合成让一句长话在最后一个窗口做完之前就开始播放，拼接的窗口必须等于整段。"]
    for plan in (served, WindowPlan(first=12, size=40)):
        assert _stitched_vs_whole(voice, plan, texts, lang="zh") <= 1e-3
