"""Word timings phonemize each word on its own (``pipeline.timing``); ``en_word_phonemes`` remembers the words it
has phonemized, so a word heard before costs no espeak-ng call. piper-tts 1.8's ``espeakbridge.get_phonemes`` leaks
the phoneme strings it returns, so espeak-ng is read through ``pipeline.text.espeak`` instead
(tests/test_espeak_clauses.py); what is remembered stays bounded by the words known."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest

from pipeline.text import en
from pipeline.text.en import EnglishPhonemizer, en_phonemes, en_word_phonemes
from pipeline.timing import word_times
from pipeline.voices.base import Phonemized

WORDS = "the quick brown fox jumps over a lazy dog while seven tall ships sail north".split()


def test_a_word_heard_before_costs_no_espeak_call(monkeypatch: pytest.MonkeyPatch) -> None:
    en_word_phonemes.cache_clear()
    asked: list[str] = []
    real = EnglishPhonemizer._espeak_sentences
    monkeypatch.setattr(EnglishPhonemizer, "_espeak_sentences", lambda self, t, v: asked.append(t) or real(self, t, v))
    said = [en_word_phonemes(w) for _ in range(40) for w in WORDS]
    assert sorted(asked) == sorted(set(WORDS))  # once each
    assert said[: len(WORDS)] == ["".join(en_phonemes(w)) for w in WORDS]  # what the phonemizer says


def test_timing_many_segments_of_known_words_leaks_nothing_more() -> None:
    """What espeak-ng's bridge leaks stays bounded by the words known, not the segments timed."""
    for w in WORDS:
        en_word_phonemes(w)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(300):
            for w in WORDS:
                en_word_phonemes(w)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.count_diff for s in after.compare_to(before, "filename") if "espeak" in str(s.traceback))
    assert grown <= 0


def test_word_timings_use_the_remembered_words(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    fake = {"of": "ˈʌv", "the": "ðə", "cat": "kˈæt"}
    monkeypatch.setattr(en, "en_word_phonemes", lambda t: asked.append(t) or fake[t])
    phon = "ʌvðə kæt"
    units = [-1, -1] + [i for i in range(len(phon)) for _ in (0, 1)] + [-1]
    durations = np.array([1, 1] + [2, 2] * len(phon) + [1])
    ph = Phonemized(ids=tuple(range(len(units))), phonemes=phon, id_units=tuple(units))
    out = word_times([(0, 2, 0, 2), (3, 6, 3, 6), (7, 10, 7, 10)], "of the cat", "en", ph, durations, hop=10,
                     voice_rate=100, out_rate=100, speech_samples=10_000)
    assert asked == ["of", "the", "cat"] and not any(w.approx for w in out)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="reference counts")
def test_the_bridge_still_leaks_what_it_returns() -> None:
    """Why ``pipeline.text.espeak`` reads espeak-ng itself: each of the bridge's phoneme strings keeps a reference
    nobody holds. Should a piper-tts release fix it, this fails, and the bridge could be used again."""
    from piper import espeakbridge

    with en._ESPEAK_LOCK:
        en._espeak()
        espeakbridge.set_voice(en.DEFAULT_VOICE)
        ((phonemes, _, _),) = espeakbridge.get_phonemes("hello there")
    assert sys.getrefcount(phonemes) == 3  # the tuple, getrefcount's argument, and the leaked one
