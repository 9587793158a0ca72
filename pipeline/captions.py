"""Captions from word timings: WebVTT and SRT cues cut the way captioners cut them.

A cue ends at a sentence end (``. ! ? … 。！？``), at a paragraph's end and before a silence longer than
``gap_s``. A cue that would outgrow ``lines`` lines of ``line_width`` columns, or ``max_s`` seconds, ends
at its last clause boundary (``, ; : — ，；：、``) when that leaves at least half a line in it, else before
the word that does not fit; a clause boundary also ends a cue that already fills a line. A cue wider than a line is broken in
two, at a clause boundary when one fits, else where the two lines are most even. Han and other wide
characters take two columns (a line holds about 21 of them); Chinese has no spaces, so it breaks between
any two characters.

Cue text keeps the submitted text's punctuation: a word's span has its edge punctuation cut off, and what
follows it (its ``after``: ``pipeline.text.sources.word_after``) is put back, from the submitted text when
the caller passes the text the words index, else from the words. Words without either are joined by a
space, except between Han characters.

Pure compute: any word objects with the fields of ``TimedWord`` will do (the farm's ``Word`` records do).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.errors import BAD_OPTION, InputError
from pipeline.text.sources import word_after

FORMATS = ("vtt", "srt")
_SENTENCE_END = re.compile(r"[.!?…。！？‼⁇⁈⁉]")
_CLAUSE_END = re.compile(r"[,;:—–)\]}、，；：）】」』》〉]")
_CJK = re.compile("[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_OPENING = ("Ps", "Pi")  # opening brackets and quotes: they lead the next word
_CLOSING = ")]}\"'”’»"


class TimedWord(Protocol):
    """A spoken word: its text, when it is spoken, and where it is in the submitted text. An ``after``
    attribute (the punctuation and space that follow the word there) is read when the object has one."""

    @property
    def text(self) -> str: ...
    @property
    def start_s(self) -> float: ...
    @property
    def end_s(self) -> float: ...
    @property
    def char_start(self) -> int: ...
    @property
    def char_end(self) -> int: ...


@dataclass(frozen=True)
class _Token:
    """A word as it shows in a cue: its text with the punctuation around it."""

    text: str
    start_s: float
    end_s: float
    space: bool  # a space before the next token
    stop: int  # what the word's punctuation ends: 2 a sentence (or a paragraph), 1 a clause, 0 nothing
    cols: int  # the text's width on screen


def caption_format(name: str) -> str:
    """``vtt`` or ``srt`` from a format name or a file name ending in one; else INPUT error BAD_OPTION."""
    fmt = name.rsplit(".", 1)[-1].lower()
    if fmt not in FORMATS:
        raise InputError(f"captions must be .vtt or .srt, not {name!r}", code=BAD_OPTION)
    return fmt


def cues(words: Sequence[TimedWord], text: str | None = None, *, line_width: int = 42, lines: int = 2,
         max_s: float = 7.0, gap_s: float = 0.6) -> list[tuple[float, float, str]]:
    """(start_s, end_s, text) per cue, in order and not overlapping; a cue's lines are joined by newlines.

    ``text``: the submitted text the words' char offsets index; ignored unless every word is its span there."""
    tokens = _tokens(words, text)
    groups: list[list[_Token]] = []
    cur: list[_Token] = []
    for t in tokens:
        if cur and t.start_s - cur[-1].end_s > gap_s:
            groups.append(cur)
            cur = []
        while cur and not _fits([*cur, t], line_width, lines, max_s):
            cut = _clause_cut(cur, line_width)
            groups.append(cur[:cut])
            cur = cur[cut:]
        cur.append(t)
        if t.stop == 2 or (t.stop == 1 and _cols(cur) >= line_width):
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    out: list[tuple[float, float, str]] = []
    for g in groups:
        start = max(g[0].start_s, out[-1][1] if out else 0.0)
        end = max(max(t.end_s for t in g), start + 0.001)
        out.append((start, end, "\n".join(_lines(g, line_width, lines) or [_join(g)])))
    return out


def _tokens(words: Sequence[TimedWord], text: str | None) -> list[_Token]:
    spans = text is not None and all(text[w.char_start : w.char_end] == w.text for w in words)
    afters: list[str | None] = []
    for i, w in enumerate(words):
        nxt = words[i + 1].char_start if i + 1 < len(words) else None
        afters.append(word_after(text, w.char_end, nxt) if spans and text is not None else getattr(w, "after", None))
    lead = _lead(text, words[0].char_start) if spans and text is not None and words else ""
    out: list[_Token] = []
    for i, (w, after) in enumerate(zip(words, afters)):
        nxt = words[i + 1].text[:1] if i + 1 < len(words) else ""
        if after is None:  # not recorded: a space, except between Han characters
            trail, next_lead, space = "", "", not (_CJK.search(w.text[-1:]) and _CJK.search(nxt))
        else:
            trail, next_lead, space = _split_after(after)
        stop = 2 if _SENTENCE_END.search(trail) else 1 if _CLAUSE_END.search(trail) else 0
        if stop == 2 and trail.rstrip(_CLOSING).endswith(".") and nxt.islower():
            stop = 0  # an abbreviation's point ("e.g. the"), not a sentence's
        if "\n" in (after or ""):
            stop = 2  # a paragraph's end
        shown = lead + w.text + trail
        out.append(_Token(shown, w.start_s, w.end_s, space, stop, _width(shown)))
        lead = next_lead
    return out


def _lead(text: str, start: int) -> str:
    """The opening punctuation right before the first word ("“", "(")."""
    k = start
    while k > 0 and unicodedata.category(text[k - 1]).startswith("P") and start - k < 8:
        k -= 1
    return text[k:start]


def _split_after(after: str) -> tuple[str, str, bool]:
    """What follows a word -> (its trailing punctuation, the next word's opening one, a space between)."""
    k = max(after.rfind(" "), after.rfind("\n"))
    if k >= 0:
        return after[:k].strip("\n"), after[k + 1 :], True
    k = next((i for i, ch in enumerate(after) if unicodedata.category(ch) in _OPENING), len(after))
    return after[:k], after[k:], False


def _join(tokens: Sequence[_Token]) -> str:
    return "".join(t.text + (" " if t.space and i < len(tokens) - 1 else "") for i, t in enumerate(tokens))


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _cols(tokens: Sequence[_Token]) -> int:
    """The width of ``_join(tokens)``."""
    return sum(t.cols for t in tokens) + sum(t.space for t in tokens[:-1])


def _lines(tokens: Sequence[_Token], width: int, lines: int) -> list[str] | None:
    """The cue's text in one line of ``width`` columns or, with ``lines`` of 2 or more, two; None if it
    does not fit."""
    total = _cols(tokens)
    if total <= width:
        return [_join(tokens)]
    if lines < 2 or total > 2 * width + 1:
        return None
    best: tuple[int, int] | None = None  # (score, where line two starts)
    first = 0
    for k in range(1, len(tokens)):
        first += tokens[k - 1].cols + (tokens[k - 2].space if k > 1 else 0)
        second = total - first - tokens[k - 1].space
        if first <= width and second <= width:
            score = abs(first - second) + (0 if tokens[k - 1].stop else width)  # after punctuation first, then even
            if best is None or score < best[0]:
                best = (score, k)
    return None if best is None else [_join(tokens[: best[1]]), _join(tokens[best[1] :])]


def _fits(tokens: Sequence[_Token], width: int, lines: int, max_s: float) -> bool:
    return tokens[-1].end_s - tokens[0].start_s <= max_s and _lines(tokens, width, lines) is not None


def _clause_cut(tokens: Sequence[_Token], width: int) -> int:
    """Where a full cue ends: after its last clause boundary that keeps half a line before it, else at its end."""
    for k in range(len(tokens) - 1, 0, -1):
        if tokens[k - 1].stop and _cols(tokens[:k]) >= width // 2:
            return k
    return len(tokens)


def _stamp(seconds: float, sep: str) -> str:
    ms = int(round(max(0.0, seconds) * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _vtt_escape(cue: str) -> str:
    """WebVTT cue text reads ``&`` and ``<`` as markup (and ``-->`` would end nothing well)."""
    return cue.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(words: Sequence[TimedWord], text: str | None = None) -> str:
    lines = ["WEBVTT", ""]
    for start, end, cue in cues(words, text):
        lines += [f"{_stamp(start, '.')} --> {_stamp(end, '.')}", _vtt_escape(cue), ""]
    return "\n".join(lines)


def to_srt(words: Sequence[TimedWord], text: str | None = None) -> str:
    lines: list[str] = []
    for i, (start, end, cue) in enumerate(cues(words, text), 1):
        lines += [str(i), f"{_stamp(start, ',')} --> {_stamp(end, ',')}", cue, ""]
    return "\n".join(lines)


def render(words: Sequence[TimedWord], fmt: str, text: str | None = None) -> str:
    return to_vtt(words, text) if caption_format(fmt) == "vtt" else to_srt(words, text)
