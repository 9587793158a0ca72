"""espeak-ng read without piper-tts's bridge leak (``pipeline.text.espeak``): the same clauses and phonemes as
``espeakbridge.get_phonemes`` and ``EspeakPhonemizer.phonemize`` on the same texts, and nothing left alive per call,
where the bridge keeps every clause it returned (a worker's RSS grew with every segment: docs/lab/memory.md)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from pipeline.text import en
from pipeline.text.en import EnglishPhonemizer

TEXTS = [
    "Hello there.",
    "Hello there, how are you? I am fine!",
    "Three things: bread; milk; and eggs.",
    "no terminator at the end",
    "",
    "   ",
    "The café in Zürich serves crème brûlée, naïvely.",
    "Dr. Smith paid $3.50 on 3/5/2024 at 10:30 pm.",
    "Wait... what?! Really?",
    "«Quoted» text — with dashes – and ‘quotes’.",
    "Ein Satz auf Deutsch. Bonjour, mon ami.",
    "one\ntwo\n\nthree",
]


def _bridge_clauses(text: str) -> list[tuple[str, str, bool]]:
    from piper import espeakbridge

    return [tuple(c) for c in espeakbridge.get_phonemes(text)]


@pytest.mark.parametrize("voice", ["en-us", "en"])
def test_the_same_clauses_as_the_bridge(voice: str) -> None:
    with en._ESPEAK_LOCK:
        espeak = en._espeak()
        espeak.set_voice(voice)
        for text in TEXTS:
            assert list(espeak.clauses(text)) == _bridge_clauses(text), text


@pytest.mark.parametrize("clusters", [None, {("a", "ɪ"), ("o", "ʊ"), ("e", "ɪ")}])
def test_the_same_sentences_as_pipers_phonemizer(clusters: set[tuple[str, ...]] | None) -> None:
    from piper.phonemize_espeak import EspeakPhonemizer

    piper = EspeakPhonemizer()
    ours = EnglishPhonemizer(vowel_clusters=clusters)
    for text in TEXTS:
        with en._ESPEAK_LOCK:
            theirs = piper.phonemize("en-us", text, vowel_clusters=clusters)
        assert ours._espeak_sentences(text, "en-us") == theirs, text


def _blocks_left(call, texts: list[str]) -> int:
    """Bytes still allocated by ``call`` after it ran on every text and its results were dropped."""
    call(texts[0])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for text in texts:
            call(text)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))


def test_phonemizing_leaves_nothing_alive_where_the_bridge_keeps_every_clause() -> None:
    texts = [f"Sentence number {i}, said the clerk to visitor {i * 7}." for i in range(300)]
    with en._ESPEAK_LOCK:
        espeak = en._espeak()
        espeak.set_voice("en-us")
        ours = _blocks_left(lambda t: list(espeak.clauses(t)), texts)
        theirs = _blocks_left(_bridge_clauses, texts)
    assert theirs > 300 * 2 * 100  # two clauses a text, each a tuple and a string of some 30 phonemes, kept
    assert ours < 16 * 1024  # at most tracemalloc's own bookkeeping


def test_unknown_voice_and_nul_are_errors_as_before() -> None:
    with en._ESPEAK_LOCK:
        espeak = en._espeak()
        with pytest.raises(RuntimeError, match="set voice"):
            espeak.set_voice("no-such-voice")
        espeak.set_voice("en-us")
        with pytest.raises(ValueError, match="null character"):
            list(espeak.clauses("a\0b"))


def test_a_voice_set_again_is_kept_unless_another_user_changed_it() -> None:
    """The voice is not set again when it is the one set last, but it is when something else (piper-tts's own
    phonemizer, on the same library) set another meanwhile: the phonemes are those of the voice asked for."""
    from piper import espeakbridge

    with en._ESPEAK_LOCK:
        espeak = en._espeak()
        espeak.set_voice("en-us")
        us = list(espeak.clauses("tomato schedule"))
        espeak.set_voice("en")
        gb = list(espeak.clauses("tomato schedule"))
        assert us != gb  # the two voices say these words differently
        espeak.set_voice("en-us")
        espeakbridge.set_voice("en")  # another user of the library
        espeak.set_voice("en-us")
        assert list(espeak.clauses("tomato schedule")) == us
        calls = []
        real = espeak._bridge
        try:
            espeak._bridge = type("Counting", (), {"set_voice": staticmethod(lambda v: (calls.append(v), real.set_voice(v)))})()
            espeak.set_voice("en-us")
            espeak.set_voice("en-us")
            assert calls == []  # the voice set last: not set again
            espeak.set_voice("en")
            assert calls == ["en"]
        finally:
            espeak._bridge = real
