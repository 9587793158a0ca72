"""Quality gate: a speech recognizer understands what the voices say (the whole chain: normalization,
G2P, voice, audio). Bounds are loose on purpose; a broken frontend or voice blows far past them."""

from __future__ import annotations

import pytest

from pipeline.intelligibility import char_error_rate, transcribe, word_error_rate
from pipeline.settings import Settings
from pipeline.synth import Synthesizer
from pipeline.voices.base import SynthesisOptions

pytestmark = pytest.mark.slow

EN = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me at ten thirty tomorrow morning.",
    "We paid five dollars for two cups of coffee.",
    "The farm reads every book aloud by morning.",
]
ZH = [
    "我在银行工作了三年。",
    "今天天气很好，我们去公园散步吧。",
    "这个问题很重要，我们需要重新讨论。",
]


@pytest.fixture(scope="module")
def synth(base_settings: Settings) -> Synthesizer:
    return Synthesizer(base_settings)


def test_english_is_intelligible(synth: Synthesizer, base_settings: Settings) -> None:
    hyps = []
    for text in EN:
        out = synth.synthesize(text, "joe", SynthesisOptions.noiseless())
        hyps.append(transcribe(out.audio, out.sample_rate, "en", base_settings.runtime.cache_dir))
    wer = word_error_rate(EN, hyps)
    assert wer <= 0.15, (wer, hyps)


def test_mandarin_is_intelligible(synth: Synthesizer, base_settings: Settings) -> None:
    hyps = []
    for text in ZH:
        out = synth.synthesize(text, "kumo", SynthesisOptions())
        hyps.append(transcribe(out.audio, out.sample_rate, "zh", base_settings.runtime.cache_dir))
    cer = char_error_rate(ZH, hyps)
    assert cer <= 0.25, (cer, hyps)


def test_error_rates_count_edits() -> None:
    assert word_error_rate(["a b c d"], ["a x c"]) == 0.5
    assert char_error_rate(["银行工作"], ["银杏工作"]) == 0.25
