"""Captions from word timings: WebVTT and SRT cues of a few words each.

A cue ends at a sentence end of the submitted text, after ``max_words`` words or ``max_s`` seconds, or
before a silence longer than ``gap_s``. Cue text is the submitted text from the cue's first word to its
last when the text is at hand (punctuation kept), else the words joined (no space between Han characters).

Pure compute: any word objects with the fields of ``TimedWord`` will do (the farm's ``Word`` records do).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from pipeline.errors import BAD_OPTION, InputError

FORMATS = ("vtt", "srt")
_SENTENCE_END = re.compile(r"[.!?。！？；;…]")
_CJK = re.compile("[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


class TimedWord(Protocol):
    """A spoken word: its text, when it is spoken, and where it is in the submitted text."""

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


def caption_format(name: str) -> str:
    """``vtt`` or ``srt`` from a format name or a file name ending in one; else INPUT error BAD_OPTION."""
    fmt = name.rsplit(".", 1)[-1].lower()
    if fmt not in FORMATS:
        raise InputError(f"captions must be .vtt or .srt, not {name!r}", code=BAD_OPTION)
    return fmt


def cues(words: Sequence[TimedWord], text: str | None = None, *, max_words: int = 8, max_s: float = 4.0,
         gap_s: float = 0.6) -> list[tuple[float, float, str]]:
    """(start_s, end_s, text) per cue, in order."""
    groups: list[list[TimedWord]] = []
    for w in words:
        cur = groups[-1] if groups else None
        if cur is None or _ends_cue(cur, w, text, max_words, max_s, gap_s):
            groups.append([w])
        else:
            cur.append(w)
    return [(g[0].start_s, max(g[-1].end_s, g[0].start_s + 0.001), _cue_text(g, text)) for g in groups]


def _ends_cue(cur: list[TimedWord], nxt: TimedWord, text: str | None, max_words: int, max_s: float, gap_s: float) -> bool:
    prev = cur[-1]
    if len(cur) >= max_words or nxt.end_s - cur[0].start_s > max_s or nxt.start_s - prev.end_s > gap_s:
        return True
    return text is not None and bool(_SENTENCE_END.search(text[prev.char_end : nxt.char_start]))


def _cue_text(group: list[TimedWord], text: str | None) -> str:
    if text is not None:
        tail = re.match(r"[^\s\w]*", text[group[-1].char_end :])
        piece = text[group[0].char_start : group[-1].char_end] + (tail.group() if tail else "")
        return " ".join(piece.split())
    out = group[0].text
    for w in group[1:]:
        glue = "" if _CJK.search(out[-1:]) and _CJK.search(w.text[:1]) else " "
        out += glue + w.text
    return out


def _stamp(seconds: float, sep: str) -> str:
    ms = int(round(max(0.0, seconds) * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_vtt(words: Sequence[TimedWord], text: str | None = None) -> str:
    lines = ["WEBVTT", ""]
    for start, end, cue in cues(words, text):
        lines += [f"{_stamp(start, '.')} --> {_stamp(end, '.')}", cue.replace("-->", "->"), ""]
    return "\n".join(lines)


def to_srt(words: Sequence[TimedWord], text: str | None = None) -> str:
    lines: list[str] = []
    for i, (start, end, cue) in enumerate(cues(words, text), 1):
        lines += [str(i), f"{_stamp(start, ',')} --> {_stamp(end, ',')}", cue, ""]
    return "\n".join(lines)


def render(words: Sequence[TimedWord], fmt: str, text: str | None = None) -> str:
    return to_vtt(words, text) if caption_format(fmt) == "vtt" else to_srt(words, text)
