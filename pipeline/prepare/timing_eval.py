"""How close the farm's word timings are to a recognizer's: the accuracy gate and its benchmark.

The reference is faster-whisper's word timestamps (``word_timestamps=True``, the recognizer the quality
gates use, ``pipeline/prepare/intelligibility.py``) on the very audio the farm made. Words of the two lists are
paired by their spelling (an alignment over lower-cased letters, so a word whisper misheard is left out),
and each pair gives two boundary errors, start and end. Whisper's own timestamps carry an error of a few
tens of milliseconds, so this measures an upper bound of the farm's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.prepare.intelligibility import ASR_RATE, recognizer

Timed = tuple[str, float, float]  # word, start_s, end_s


def recognized_words(audio: np.ndarray, sample_rate: int, lang: str, cache_dir: Path, *,
                     multilingual: bool = False) -> list[Timed]:
    """Whisper's words with their timestamps; English uses tiny.en unless ``multilingual`` (then base)."""
    from pipeline.audio import resample

    pcm = resample(np.asarray(audio, dtype=np.float32), sample_rate, ASR_RATE)
    model = recognizer("multi" if multilingual else lang, str(cache_dir))
    segments, _ = model.transcribe(pcm, language=lang, beam_size=5, vad_filter=False,
                                                              condition_on_previous_text=False, word_timestamps=True)
    return [(w.word, float(w.start), float(w.end)) for s in segments for w in (s.words or [])]


def _key(word: str) -> str:
    return re.sub(r"[^\w]", "", word.lower())


def boundary_errors(ours: Sequence[Timed], theirs: Sequence[Timed]) -> list[float]:
    """Absolute start and end differences (seconds) of the words both lists spell the same."""
    a, b = [_key(w) for w, _, _ in ours], [_key(w) for w, _, _ in theirs]
    out: list[float] = []
    for i, j, size in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(size):
            if not a[i + k]:
                continue
            (_, s1, e1), (_, s2, e2) = ours[i + k], theirs[j + k]
            out += [abs(s1 - s2), abs(e1 - e2)]
    return out


def junction_errors(ours: Sequence[Timed], theirs: Sequence[Timed]) -> list[float]:
    """Absolute differences (seconds) at the junctions between two consecutive words both lists spell the same.

    Whisper gives no gaps (a word ends where the next starts) and its word boundaries come from attention,
    so the comparable instant is the junction: ours is the middle of the gap between the two words."""
    a, b = [_key(w) for w, _, _ in ours], [_key(w) for w, _, _ in theirs]
    pairs = {}
    for i, j, size in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        pairs.update({i + k: j + k for k in range(size) if a[i + k]})
    out: list[float] = []
    for i, j in pairs.items():
        if pairs.get(i + 1) == j + 1:
            ours_at = (ours[i][2] + ours[i + 1][1]) / 2
            theirs_at = (theirs[j][2] + theirs[j + 1][1]) / 2
            out.append(abs(ours_at - theirs_at))
    return out


def _han(text: str) -> str:
    return "".join(c for c in text if "\u3400" <= c <= "\u9fff")


def han_boundary_errors(ours: Sequence[Timed], theirs: Sequence[Timed]) -> list[float]:
    """Chinese: whisper's words are runs of characters. Each is found (in order) among the farm's characters,
    and its start and end are compared with its first character's start and its last one's end."""
    owner: list[int] = []  # for each Han character of ours, its word
    for i, (w, _, _) in enumerate(ours):
        owner += [i] * len(_han(w))
    chars = "".join(_han(w) for w, _, _ in ours)
    out: list[float] = []
    at = 0
    for w, start, end in theirs:
        run = _han(w)
        found = chars.find(run, at) if run else -1
        if found < 0:
            continue
        first, last = ours[owner[found]], ours[owner[found + len(run) - 1]]
        out += [abs(first[1] - start), abs(last[2] - end)]
        at = found + len(run)
    return out
