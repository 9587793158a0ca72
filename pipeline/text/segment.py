"""Text -> ordered segments, each one language run short enough for one model call.

Paragraphs, then sentences, then language runs (Chinese and English), then phrases at commas and
pauses, packed greedily up to the configured length. The first segment is only the first phrase, so
streaming can start while the rest is being made. Numbers and symbols are read by the language of the
run they belong to.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Literal

from pipeline.errors import NOTHING_TO_SPEAK, UNSUPPORTED_LANGUAGE, InputError
from pipeline.settings import FrontendSettings
from pipeline.text.clean import clean_text, decode, source_of_cleaned
from pipeline.text.sources import NO_SOURCE, Span, WordRef, align_spans, find_spans, mapped, segment_words, shifted
from pipeline.text.lexicon import protect, restore

Break = Literal["paragraph", "sentence", "phrase", "none", "end"]

_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3007]")
_LATIN = re.compile("[A-Za-z\u00c0-\u024f]")
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;…])|(?<=\.)(?=\s|$)")
_ABBREVIATION = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|vs|etc|e\.g|i\.e|No|Jr|Sr)|\b[A-Z])\.$")
_PHRASE_END = re.compile(r"(?<=[，、：—])|(?<=[,:])(?!\d)")
_UNITS = {"km", "m", "cm", "mm", "kg", "g", "mg", "ml", "l", "L", "h", "min", "s", "ms", "GB", "MB", "KB", "TB",
          "Hz", "kHz", "MHz", "GHz", "mAh", "W", "kW", "V", "C", "F", "mph", "kmh"}
_KEEP_SYMBOLS = set("°℃℉")
SEC_PER_CHAR = {"en": 0.068, "zh": 0.24}


@dataclass(frozen=True)
class Segment:
    """One unit of synthesis: normalized text of one language, and the silence that follows it."""

    index: int
    text: str
    lang: str
    pause_after_s: float
    est_seconds: float
    brk: Break = "end"
    # Each spoken word of ``text``: its start and end there, and the span of the caller's original text it
    # reads (code points; ``pipeline/text/sources.py``). Words sharing a source ("2024" -> four words) are one.
    words: tuple[WordRef, ...] = ()


def _kind(ch: str) -> str:
    if _HAN.match(ch):
        return "zh"
    if _LATIN.match(ch):
        return "en"
    if ch.isalpha():
        return "other"
    return "neutral"


def _read_as(ch: str) -> str:
    """Emoji and pictographs are not read: a space in their place."""
    return " " if unicodedata.category(ch) in ("So", "Sk", "Co", "Cs", "Cn") and ch not in _KEEP_SYMBOLS else ch


def _stretches(sentence: str) -> list[list[str]]:
    """Maximal runs of one character kind: [[kind, text], ...]."""
    out: list[list[str]] = []
    for ch in sentence:
        ch = _read_as(ch)
        kind = _kind(ch)
        if out and out[-1][0] == kind:
            out[-1][1] += ch
        else:
            out.append([kind, ch])
    return out


def _is_unit(stretches: list[list[str]], i: int) -> bool:
    """A Latin unit (5km, 25°C) glued to a number reads in the language around the number."""
    kind, text = stretches[i]
    if kind != "en" or text not in _UNITS or i == 0:
        return False
    prev = stretches[i - 1][1]
    return bool(prev) and (prev[-1].isdigit() or prev[-1] == "°")


def language_runs(sentence: str, default_lang: str) -> list[tuple[str, str]]:
    """Split one sentence into (lang, text) runs; digits and punctuation join the run they touch."""
    st = _stretches(sentence)
    for i in range(len(st)):
        if _is_unit(st, i):
            st[i][0] = "neutral"
    lettered = [k for k, _ in st if k != "neutral"]
    if not lettered:
        text = "".join(t for _, t in st)
        return [(default_lang, text)] if any(c.isdigit() for c in text) else []
    for i, (kind, text) in enumerate(st):
        if kind != "neutral":
            continue
        prev = next((st[j][0] for j in range(i - 1, -1, -1) if st[j][0] != "neutral"), None)
        nxt = next((st[j][0] for j in range(i + 1, len(st)) if st[j][0] != "neutral"), None)
        if nxt == "zh" and not text[-1].isspace() and i + 1 < len(st) and st[i + 1][0] in ("zh", "neutral"):
            st[i][0] = "zh"
        elif prev == "zh" and not text[0].isspace():
            st[i][0] = "zh"
        else:
            st[i][0] = prev or nxt or default_lang
    runs: list[tuple[str, str]] = []
    for kind, text in st:
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + text)
        else:
            runs.append((kind, text))
    return [(k, t.strip()) for k, t in runs if t.strip()]


def split_sentences(paragraph: str) -> list[str]:
    parts = [p for p in _SENTENCE_END.split(paragraph) if p]
    out: list[str] = []
    for part in parts:
        if out and _ABBREVIATION.search(out[-1].rstrip()):
            out[-1] += part
        else:
            out.append(part)
    return [s.strip() for s in out if s.strip()]


def _normalize(lang: str, text: str) -> str:
    if lang == "zh":
        from pipeline.text.zh import normalize_zh

        return normalize_zh(text)
    if lang == "en":
        from pipeline.text.en import normalize_en

        return normalize_en(text)
    raise InputError(f"cannot read {text!r}: only Chinese and English text is supported", code=UNSUPPORTED_LANGUAGE)


def _length(lang: str, text: str) -> int:
    return len(_HAN.findall(text)) if lang == "zh" else len(text)


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _hard_cut(lang: str, phrase: str, limit: int) -> list[str]:
    """Split a phrase longer than ``limit``: at spaces for English, by characters for Chinese."""
    if lang == "zh":
        pieces, cur, n = [], "", 0
        for ch in phrase:
            cur += ch
            n += 1 if _HAN.match(ch) else 0
            if n >= limit:
                pieces.append(cur)
                cur, n = "", 0
        return pieces + ([cur] if cur.strip() else [])
    pieces, cur = [], ""
    for word in phrase.split(" "):
        if cur and len(cur) + 1 + len(word) > limit:
            pieces.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return pieces + ([cur] if cur else [])


class Segmenter:
    """Turns cleaned text into ``Segment``s using the frontend settings."""

    def __init__(self, settings: FrontendSettings) -> None:
        self.s = settings

    def _limits(self, lang: str) -> tuple[int, int]:
        if lang == "zh":
            return self.s.max_segment_chars_zh, self.s.first_segment_chars_zh
        return self.s.max_segment_chars, self.s.first_segment_chars

    def _pause(self, brk: Break) -> float:
        return {"paragraph": self.s.paragraph_pause_s, "sentence": self.s.sentence_pause_s,
                "phrase": self.s.phrase_pause_s}.get(brk, 0.0)

    def split(self, raw: bytes | str) -> list[Segment]:
        """Segments of ``raw``; each carries its words with their spans in ``raw`` decoded (``Segment.words``).
        Pronunciation blocks (``[[chong2 qing4]]``, ``[[ŋwˈɪn]]``, from a lexicon or SSML) pass through whole;
        the segments of a text holding any carry no word spans (the text read is no longer the text given)."""
        protected, blocks = protect(decode(raw))
        segments = self._split(protected)
        if not blocks:
            return segments
        return [dataclasses.replace(s, text=restore(s.text, blocks), words=()) for s in segments]

    def _split(self, raw: str) -> list[Segment]:
        """The segments of text without pronunciation blocks; every piece is found in the text it was cut from by
        position, so each character's source is known."""
        text = clean_text(raw, max_chars=self.s.max_text_chars)
        origin = source_of_cleaned(decode(raw), text)
        default_lang = "zh" if len(_HAN.findall(text)) > len(_LATIN.findall(text)) / 4 else "en"
        pieces: list[tuple[str, str, Break, list[Span]]] = []  # (lang, phrase, break after it, sources)
        para_at = 0
        for paragraph in re.split(r"\n\s*\n", text):
            para_at = text.find(paragraph, para_at)
            flat = paragraph.replace("\n", " ")
            sent_at = 0
            sentences = split_sentences(flat)
            for si, sentence in enumerate(sentences):
                sent_at = flat.find(sentence, sent_at)
                readable = "".join(map(_read_as, sentence))
                run_at = 0
                runs = language_runs(sentence, default_lang)
                for ri, (lang, run) in enumerate(runs):
                    run_at = readable.find(run, run_at)
                    normalized = _normalize(lang, run)
                    spans = mapped(shifted(align_spans(run, normalized), para_at + sent_at + run_at), origin)
                    run_at += len(run)
                    phrases = [p.strip() for p in _PHRASE_END.split(normalized) if p.strip()]
                    phrase_at = 0
                    for pi, phrase in enumerate(phrases):
                        phrase_spans, phrase_at = find_spans(normalized, spans, phrase, phrase_at)
                        last_phrase = pi == len(phrases) - 1
                        if not last_phrase:
                            brk: Break = "phrase"
                        elif ri < len(runs) - 1:
                            brk = "phrase" if phrase[-1] in "，、,:：;；—" else "none"
                        else:
                            brk = "sentence" if si < len(sentences) - 1 else "paragraph"
                        pieces.append((lang, phrase, brk, phrase_spans))
                sent_at += len(sentence)
            para_at += len(paragraph)
        pieces = [p for p in pieces if _speakable(p[1])]
        if not pieces:
            raise InputError("text has nothing to speak (only punctuation, symbols or emoji)", code=NOTHING_TO_SPEAK)
        return self._pack(pieces)

    def _pack(self, pieces: list[tuple[str, str, Break, list[Span]]]) -> list[Segment]:
        segments: list[Segment] = []
        cur_lang, cur_text = "", ""
        cur_brk: Break = "none"
        cur_spans: list[Span] = []

        def flush() -> None:
            nonlocal cur_text, cur_spans
            if cur_text:
                segments.append(self._segment(len(segments), cur_lang, cur_text, cur_brk, cur_spans))
            cur_text, cur_spans = "", []

        for lang, phrase, brk, spans in pieces:
            limit, first = self._limits(lang)
            if _length(lang, phrase) > limit:
                flush()
                at = 0
                for part in _hard_cut(lang, phrase, limit):
                    cur_spans, at = find_spans(phrase, spans, part, at)
                    cur_lang, cur_text, cur_brk = lang, part, "none"
                    flush()
                cur_brk = brk
                if segments:
                    segments[-1] = replace(self._segment(segments[-1].index, lang, segments[-1].text, brk), words=segments[-1].words)
                continue
            space = bool(cur_text) and lang == "en"
            joined = f"{cur_text} {phrase}" if space else cur_text + phrase
            joined_spans = cur_spans + [NO_SOURCE] * space + spans
            fits = cur_lang == lang and _length(lang, joined) <= (first if not segments else limit)
            if cur_text and not fits:
                flush()
                joined, joined_spans = phrase, spans
            cur_lang, cur_text, cur_brk, cur_spans = lang, joined, brk, joined_spans
            if not segments and cur_text:
                flush()  # the first phrase alone: a short first segment starts streaming early
            elif brk in ("sentence", "paragraph"):
                flush()  # a segment never spans sentences: Piper voices were trained a sentence at a time
        flush()
        last = segments[-1]
        segments[-1] = replace(last, pause_after_s=0.0, est_seconds=last.est_seconds - last.pause_after_s, brk="end")
        return segments

    def _segment(self, index: int, lang: str, text: str, brk: Break, spans: list[Span] | None = None) -> Segment:
        pause = self._pause(brk)
        est = _length(lang, text) * SEC_PER_CHAR.get(lang, 0.07) + pause
        words = segment_words(text, spans) if spans is not None else ()
        return Segment(index=index, text=text, lang=lang, pause_after_s=pause, est_seconds=round(est, 3), brk=brk, words=words)
