"""Word timings of one segment: where each word of the caller's text is spoken in the segment's audio.

A two-stage voice's acoustic stage gives every input id a duration in frames; the voice's phonemizer says
which phoneme each id carries (``Phonemized.id_units``); and this module says which word each phoneme reads:

* English (espeak phonemes): espeak joins some words ("of the" -> ``ʌvðə``) and splits others, so each word
  of the segment is phonemized alone and the segment's phonemes are aligned to those, ignoring stress and
  length marks; a phoneme between two words goes to the word its side of the nearest space is on.
* Chinese (one syllable per Han character): the phonemizer marks each id with its syllable.

A voice without durations (Kokoro: one graph, audio only) gets each word's share of the segment's speech in
proportion to its length: ``approx`` is set on those words.

Times are samples at the job's output rate from the segment's start (``voice_rate`` -> ``out_rate``).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.text.sources import WordRef, is_han
from pipeline.voices.base import PhonemeIds, Phonemized, SynthesisOptions

log = logging.getLogger(__name__)

_MARKS = set("ˈˌː ,.!?;:-'\"()…—")


@dataclass(frozen=True)
class WordTime:
    start: int  # samples at the output rate, from the segment's start
    end: int
    char_start: int  # span of the caller's original text
    char_end: int
    approx: bool = False


def synthesize_timed(voice: object, batch: Sequence[PhonemeIds], opts: SynthesisOptions
                     ) -> tuple[list[np.ndarray], list[np.ndarray | None], int]:
    """Audio of each item, with the per-id durations (frames) when the voice has an acoustic stage, and its hop."""
    acoustic = getattr(voice, "acoustic_outputs", None)
    vocode = getattr(voice, "vocode", None)
    if acoustic is None or vocode is None:
        return voice.synthesize_batch(batch, opts), [None] * len(batch), 0  # type: ignore[attr-defined]
    outs = acoustic(batch, opts)
    return vocode([o.frames for o in outs]), [o.durations for o in outs], int(getattr(voice, "hop", 0))


def word_times(words: Sequence[WordRef], text: str, lang: str, ph: Phonemized, durations: np.ndarray | None, *,
               hop: int, voice_rate: int, out_rate: int, speech_samples: int,
               phonemize: Callable[[str], str] | None = None) -> list[WordTime]:
    """Start and end of each word of a segment (``Segment.words``) in its audio at ``out_rate``.

    ``speech_samples``: the segment's audio before its pause, at ``out_rate``; no word ends after it.
    ``phonemize``: English text -> espeak phonemes (default: ``pipeline.text.en.en_phonemes``)."""
    if not words:
        return []
    owners = None
    if durations is not None and hop > 0 and len(ph.id_units) == len(durations):
        owners = _unit_words(words, text, lang, ph, phonemize)
    if owners is None or durations is None:
        return _proportional(words, text, speech_samples)
    scale = hop * out_rate / voice_rate
    ends = np.cumsum(durations)
    starts = ends - durations
    spans: list[tuple[int, int] | None] = [None] * len(words)
    for i, unit in enumerate(ph.id_units):
        w = owners[unit] if unit >= 0 else -1
        if w < 0:
            continue
        cur = spans[w]
        spans[w] = (int(starts[i]) if cur is None else cur[0], int(ends[i]))
    out: list[WordTime] = []
    prev_end = 0
    for (_, _, cs, ce), span in zip(words, spans):
        if span is None:  # a word the voice did not read aloud: an instant where it would be
            start = end = prev_end
        else:
            start = min(speech_samples, max(prev_end, int(round(span[0] * scale))))
            end = min(speech_samples, max(start, int(round(span[1] * scale))))
        out.append(WordTime(start, end, cs, ce))
        prev_end = end
    return out


def _proportional(words: Sequence[WordRef], text: str, speech_samples: int) -> list[WordTime]:
    weights = [sum(3 if is_han(c) else 1 for c in text[a:b] if c.isalnum()) or 1 for a, b, _, _ in words]
    edges = np.concatenate([[0.0], np.cumsum(weights)]) * speech_samples / sum(weights)
    return [WordTime(int(round(edges[i])), int(round(edges[i + 1])), cs, ce, approx=True)
            for i, (_, _, cs, ce) in enumerate(words)]


def _unit_words(words: Sequence[WordRef], text: str, lang: str, ph: Phonemized,
                phonemize: Callable[[str], str] | None) -> list[int] | None:
    """For each character of ``ph.phonemes``, the index of the word it reads (-1: none)."""
    if lang == "zh":
        return _syllable_words(words, text, ph)
    if phonemize is None:
        from pipeline.text.en import en_word_phonemes

        phonemize = en_word_phonemes

    said = [(c, i) for i, c in enumerate(ph.phonemes) if c not in _MARKS]
    ref = [(c, w) for w, (a, b, _, _) in enumerate(words) for c in phonemize(text[a:b]) if c not in _MARKS]
    if not said or not ref:
        return None
    owner = [-1] * len(ph.phonemes)
    said_chars, ref_chars = [c for c, _ in said], [c for c, _ in ref]
    if said_chars == ref_chars:  # each word said as it is alone: one block, as the matcher would find (at no cost)
        blocks = [(0, 0, len(said_chars))]
    else:
        blocks = difflib.SequenceMatcher(None, said_chars, ref_chars, autojunk=False).get_matching_blocks()
    for a, b, size in blocks:
        for k in range(size):
            owner[said[a + k][1]] = ref[b + k][1]
    _fill_between(owner, ph.phonemes)
    return owner


def _fill_between(owner: list[int], phonemes: str) -> None:
    """Unmatched phonemes (a reduced vowel, a merged word's edge) go to a word: the one on both sides, else
    the one on their side of the nearest space; spaces and punctuation stay with no word."""
    known = [i for i, w in enumerate(owner) if w >= 0]
    for left, right in zip([-1, *known], [*known, len(owner)]):
        wl = owner[left] if left >= 0 else -1
        wr = owner[right] if right < len(owner) else -1
        gap = range(left + 1, right)
        space = next((i for i in gap if phonemes[i] == " "), None)
        for i in gap:
            if phonemes[i] in _MARKS:
                continue
            if wl == wr or wr < 0:
                owner[i] = wl if wl >= 0 else wr
            elif wl < 0 or (space is not None and i > space):
                owner[i] = wr
            else:
                owner[i] = wl


def _syllable_words(words: Sequence[WordRef], text: str, ph: Phonemized) -> list[int] | None:
    """Chinese: ``ph.pinyin`` has one syllable per Han character of the segment, in order, and
    ``ph.phonemes`` marks each syllable's units by ``ph.unit_syllables`` (index into ``pinyin``)."""
    if not ph.unit_syllables:
        return None
    han_word: list[int] = []
    for w, (a, b, _, _) in enumerate(words):
        han_word.extend(w for c in text[a:b] if is_han(c))
    if len(han_word) != len(ph.pinyin):
        log.warning("%d Han characters but %d syllables: word timings are approximate", len(han_word), len(ph.pinyin))
        return None
    return [han_word[s] if 0 <= s < len(han_word) else -1 for s in ph.unit_syllables]
