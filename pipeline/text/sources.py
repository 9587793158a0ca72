"""Where each character of normalized text came from in the caller's original text.

Word timings are reported against what was submitted, not against what the voice read: "2024年" is one
span read as four syllables, "$3.50" one span read as five words. The segmenter (``segment.py``) carries a
source span for every character it produces through each of its steps:

* ``clean_origin``: cleaning (``clean.py``) drops invisible characters, folds width forms one character at
  a time and collapses whitespace, so a greedy walk over the folded original finds each cleaned character;
* splitting into paragraphs, sentences, language runs and phrases keeps substrings, found by position;
* ``align_spans``: the normalizers (``en.py``, ``zh_numbers.py``) rewrite tokens and keep everything else
  verbatim, so the text they leave alone anchors an alignment (matching blocks, case-insensitive) and each
  rewritten stretch maps as a whole onto the stretch of the original it replaced.

A span is ``(start, end)`` in code points of the decoded original; ``NO_SOURCE`` marks characters the farm
added (the space between two joined phrases).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence

Span = tuple[int, int]
NO_SOURCE: Span = (-1, -1)
_WHITE = {" ": " ", "\t": " ", "\u00a0": " ", "\u3000": " ", "\r": "\n"}


def clean_origin(raw: str, cleaned: str, fold: dict[str, str]) -> list[int]:
    """For each character of ``cleaned`` (``clean_text(raw)``), its index in ``raw``.

    ``fold`` is the per-character map the cleaner applies before NFKC (Chinese punctuation it keeps)."""
    if raw == cleaned:
        return list(range(len(raw)))
    expanded: list[tuple[str, int]] = []
    for i, ch in enumerate(raw):
        folded = fold.get(ch) or unicodedata.normalize("NFKC", ch)
        expanded.extend((_WHITE.get(c, c), i) for c in folded)
    out: list[int] = []
    k = 0
    for ch in cleaned:
        while k < len(expanded) and expanded[k][0] != ch:
            k += 1
        if k == len(expanded):  # cannot happen for the cleaner's output; keep the map total anyway
            out.append(out[-1] if out else 0)
            continue
        out.append(expanded[k][1])
        k += 1
    return out


def _fold_case(text: str) -> str:
    return text.lower() if len(text.lower()) == len(text) else text


def align_spans(src: str, dst: str) -> list[Span]:
    """For each character of ``dst`` (a rewrite of ``src``), the span of ``src`` it stands for.

    Anchors are the blocks both texts share that hold a letter or digit and are longer than one character
    (or one Han character): what a normalizer left alone. A single shared "." or "-" or letter inside two
    rewritten stretches ("3.50" / "fifty cents." ; "2024-03-05" / "twenty-four") is no anchor. Between
    anchors, equal punctuation and spaces at the stretch's edges pair one to one, and the rest of the
    ``dst`` stretch maps, every character of it, onto the whole rest of the ``src`` stretch (an insertion
    with nothing opposite maps onto an empty span at its place)."""
    a_low, b_low = _fold_case(src), _fold_case(dst)
    if a_low == b_low:  # most runs: nothing to spell out
        return [(k, k + 1) for k in range(len(src))]
    # The text before the first rewrite and after the last is shared as is: only the middle needs diffing.
    head = next((k for k, (x, y) in enumerate(zip(a_low, b_low)) if x != y), min(len(src), len(dst)))
    while head and a_low[head - 1].isalnum():  # a prefix ends on a whole token: "D" of "Dr." / "Doctor" is no anchor
        head -= 1
    tail = 0
    while tail < min(len(src), len(dst)) - head and a_low[-1 - tail] == b_low[-1 - tail]:
        tail += 1
    while tail and a_low[len(src) - tail].isalnum():
        tail -= 1
    matcher = difflib.SequenceMatcher(None, a_low[head : len(src) - tail], b_low[head : len(dst) - tail], autojunk=False)
    middle = [(a + head, b + head, n) for a, b, n in matcher.get_matching_blocks()
              if n and any(c.isalnum() for c in src[a + head : a + head + n]) and (n > 1 or is_han(src[a + head]))]
    anchors = [(0, 0, head), *middle, (len(src) - tail, len(dst) - tail, tail)]
    spans: list[Span] = []
    i = j = 0
    for a, b, size in [*anchors, (len(src), len(dst), 0)]:
        spans.extend(_gap(src, dst, i, a, j, b))
        spans.extend((a + k, a + k + 1) for k in range(size))
        i, j = a + size, b + size
    return spans


def _gap(src: str, dst: str, i0: int, i1: int, j0: int, j1: int) -> list[Span]:
    """Spans for ``dst[j0:j1]`` rewritten from ``src[i0:i1]``."""
    head: list[Span] = []
    while i0 < i1 and j0 < j1 and src[i0] == dst[j0] and not src[i0].isalnum():
        head.append((i0, i0 + 1))
        i0, j0 = i0 + 1, j0 + 1
    tail: list[Span] = []
    while i0 < i1 and j0 < j1 and src[i1 - 1] == dst[j1 - 1] and not src[i1 - 1].isalnum():
        tail.append((i1 - 1, i1))
        i1, j1 = i1 - 1, j1 - 1
    return head + [(i0, i1)] * (j1 - j0) + tail[::-1]


def shifted(spans: Sequence[Span], offset: int) -> list[Span]:
    return [s if s == NO_SOURCE else (s[0] + offset, s[1] + offset) for s in spans]


def mapped(spans: Sequence[Span], origin: Sequence[int]) -> list[Span]:
    """Spans in an intermediate text -> spans in the text ``origin`` indexes into (its last index + 1 ends one)."""
    out: list[Span] = []
    for s in spans:
        if s == NO_SOURCE or not origin:
            out.append(NO_SOURCE)
        elif s[1] <= s[0]:
            at = origin[min(s[0], len(origin) - 1)] if s[0] < len(origin) else origin[-1] + 1
            out.append((at, at))
        else:
            out.append((origin[s[0]], origin[s[1] - 1] + 1))
    return out


def find_spans(whole: str, spans: Sequence[Span], part: str, start: int) -> tuple[list[Span], int]:
    """The spans of ``part``, found in ``whole`` at or after ``start``; and where the search may go on."""
    at = whole.find(part, start)
    if at < 0:  # a part rebuilt with other spacing: align it against the rest instead
        sub = align_spans(whole[start:], part)
        return [spans[start + s[0]] if s[1] > s[0] else NO_SOURCE for s in sub], start
    return list(spans[at : at + len(part)]), at + len(part)


# --------------------------------------------------------------------------- words of a segment

_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3007]")
_WORD = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3007]|[^\s\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3007]+")
_CORE = re.compile(r"[^\W_](?:.*[^\W_])?")

WordRef = tuple[int, int, int, int]  # start, end in the segment's text; start, end in the original text


def spoken_words(text: str) -> list[tuple[int, int]]:
    """The words of normalized text as (start, end): each Han character, else runs between spaces with
    their edge punctuation cut off ("fifth," -> "fifth"); stretches without a letter or digit are not words."""
    out: list[tuple[int, int]] = []
    for m in _WORD.finditer(text):
        core = _CORE.search(m.group())
        if core and any(c.isalnum() for c in core.group()):
            out.append((m.start() + core.start(), m.start() + core.end()))
    return out


def segment_words(text: str, spans: Sequence[Span]) -> tuple[WordRef, ...]:
    """The words of a segment, each with the span of the original it reads.

    Words whose sources overlap merge into one ("twenty twenty-four" <- "2024"; "二零二四" <- "2024"), and a
    word with no source of its own (inserted by a normalizer) joins the word before it."""
    out: list[list[int]] = []
    for start, end in spoken_words(text):
        real = [s for s in spans[start:end] if s != NO_SOURCE and s[1] > s[0]]
        if not real:
            if out:
                out[-1][1] = end
            continue
        src = [min(s[0] for s in real), max(s[1] for s in real)]
        if out and src[0] < out[-1][3]:
            out[-1][1] = end
            out[-1][3] = max(out[-1][3], src[1])
            out[-1][2] = min(out[-1][2], src[0])
        else:
            out.append([start, end, src[0], src[1]])
    return tuple((a, b, c, d) for a, b, c, d in out)


AFTER_MAX = 16  # longer runs of marks between two words are decoration, not punctuation a caption keeps


def word_after(source: str, end: int, next_start: int | None = None) -> str:
    """What follows a word that ends at ``end`` of ``source``: its punctuation and the space up to the next word
    (``next_start``, when known) or to the next character that is neither, a whitespace run as one space (one
    newline when it holds a blank line: a paragraph ends there), the text's end stripped, at most ``AFTER_MAX``
    characters. A word's own span has its edge punctuation cut off (``spoken_words``); captions put it back
    from this."""
    stop = len(source) if next_start is None else max(end, next_start)  # a span shared with the next: nothing
    j = end
    while j < stop and (source[j].isspace() or unicodedata.category(source[j]).startswith("P")):
        j += 1
    gap = re.sub(r"\s+", lambda m: "\n" if m.group().count("\n") > 1 else " ", source[end:j])
    if j >= len(source):
        gap = gap.rstrip()
    return gap[:AFTER_MAX]


def words_after(segments: Sequence[tuple[Sequence[WordRef], str]]) -> list[list[str]]:
    """``word_after`` of every word of consecutive segments, each given as (its words, the text their offsets
    index): a segment's last word looks up to the next segment's first word when both index the same text."""
    flat = [(i, w[2], w[3], src) for i, (words, src) in enumerate(segments) for w in words]
    out: list[list[str]] = [[] for _ in segments]
    for k, (i, _, end, src) in enumerate(flat):
        nxt = flat[k + 1] if k + 1 < len(flat) and flat[k + 1][3] is src else None
        out[i].append(word_after(src, end, nxt[1] if nxt else None))
    return out


def is_han(ch: str) -> bool:
    return bool(_HAN.match(ch))
