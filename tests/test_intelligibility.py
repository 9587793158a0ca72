"""Quality gate: a speech recognizer understands what the voices say (the whole chain: normalization,
G2P, voice, audio). Bounds are loose on purpose; a broken frontend or voice blows far past them."""

from __future__ import annotations

import pytest

from pipeline.prepare.intelligibility import char_error_rate, transcribe, word_error_rate
from pipeline.synth import Synthesizer
from pipeline.voices.base import SynthesisOptions
from wire.settings import Settings

pytestmark = pytest.mark.slow

# No digits (the recognizer writes "10:30" where the voice says "ten thirty") and no homophones
# ("aloud" / "allowed"): the gate measures the voice, not the recognizer's spelling.
EN = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me tomorrow morning before the meeting starts.",
    "We bought two cups of coffee and a slice of cake.",
    "The farm reads every book to its listeners by morning.",
    "She opened the window and looked at the quiet street.",
    "A strong wind blew the leaves across the garden.",
    "The children laughed when the little dog chased its tail.",
    "Turn left at the bridge and follow the river to the village.",
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
