"""An SSML subset on input: what a caller may mark up, turned into plain text runs for the segmenter.

Supported (anything else, or text that is not well-formed XML, is ``BAD_SSML``; tags are never read out):

``<speak>``            the root (required); ``xml:lang`` and ``version`` attributes are allowed
``<p>``, ``<s>``        paragraph and sentence
``<break>``            ``time="500ms"`` / ``"1.5s"`` (at most 10 s) or ``strength="none|x-weak|weak|medium|
                       strong|x-strong"``: a pause of that length where it stands
``<prosody rate>``     ``x-slow|slow|medium|fast|x-fast|default``, a percentage (``"150%"``) or a factor
                       (``"1.2"``) of the request's speed; nested rates multiply
``<say-as>``           ``interpret-as="characters"`` (spelled: A B C, 一二三), ``"cardinal"`` (a number as a
                       number: 2024 -> two thousand twenty-four, 两千零二十四), ``"date"`` (``format="ymd"``
                       default, or ``"mdy"``/``"dmy"``; digits separated by - / or .)
``<phoneme>``          ``alphabet="ipa"`` (espeak-ng IPA, English) or ``"x-pinyin"``/``"pinyin"`` (tone numbers,
                       Chinese), ``ph="..."``: the content is read as ``ph`` says
``<sub alias="...">``  the alias is read instead of the content

:func:`parse_ssml` returns :class:`Span` s: text (pronunciation blocks ``[[...]]`` inside, see
``pipeline.text.lexicon``), the speed factor that applies to it, and the pause after it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Final

from pipeline.errors import BAD_SSML, NOTHING_TO_SPEAK, InputError
from pipeline.text.lexicon import check_phonemes, check_pinyin

MAX_BREAK_S: Final = 10.0
RATE_RANGE: Final = (0.25, 4.0)
RATES: Final = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.75}
STRENGTHS: Final = {"none": 0.0, "x-weak": 0.1, "weak": 0.2, "medium": 0.4, "strong": 0.7, "x-strong": 1.2}
_ATTRS: Final = {
    "speak": {"version", "lang", "base"},
    "p": set(), "s": set(),
    "break": {"time", "strength"},
    "prosody": {"rate"},
    "say-as": {"interpret-as", "format", "detail"},
    "phoneme": {"alphabet", "ph"},
    "sub": {"alias"},
}
_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*")
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")
_LETTERS: Final = {
    "a": "ay", "b": "bee", "c": "see", "d": "dee", "e": "ee", "f": "eff", "g": "jee", "h": "aitch", "i": "eye",
    "j": "jay", "k": "kay", "l": "el", "m": "em", "n": "en", "o": "oh", "p": "pee", "q": "cue", "r": "ar",
    "s": "ess", "t": "tee", "u": "you", "v": "vee", "w": "double you", "x": "ex", "y": "why", "z": "zee",
}
_DIGITS_EN: Final = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


@dataclass(frozen=True)
class Span:
    """A run of text read at one speed factor, followed by ``pause_s`` seconds of silence (``None``: the
    segmenter's own pause)."""

    text: str
    rate: float = 1.0
    pause_s: float | None = None


def looks_like_ssml(text: str) -> bool:
    return text.lstrip().startswith("<speak")


def _fail(message: str) -> InputError:
    return InputError(message, code=BAD_SSML)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_ssml(text: str) -> list[Span]:
    """Spans of an SSML document (see the module doc); BAD_SSML for anything outside the subset."""
    if re.search(r"<!(DOCTYPE|ENTITY)", text, re.I):
        raise _fail("SSML may not declare a DOCTYPE or entities")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise _fail(f"SSML is not well-formed XML: {exc}") from None
    if _local(root.tag) != "speak":
        raise _fail(f"SSML must have <speak> as its root, not <{_local(root.tag)}>")
    lang = "zh" if len(_HAN.findall(text)) * 4 > len(re.findall(r"[A-Za-z]", re.sub(r"<[^>]*>", "", text))) else "en"
    builder = _Builder(lang)
    builder.element(root, 1.0)
    spans = builder.finish()
    if not any(s.text.strip() for s in spans):
        raise InputError("the SSML has no text to speak", code=NOTHING_TO_SPEAK)
    return spans


class _Builder:
    def __init__(self, lang: str) -> None:
        self.lang = lang
        self.spans: list[Span] = []
        self.text = ""
        self.rate = 1.0

    def add(self, text: str | None, rate: float) -> None:
        if not text:
            return
        if rate != self.rate and self.text.strip():
            self.cut(None)
        self.rate = rate
        self.text += text

    def cut(self, pause: float | None) -> None:
        if self.text.strip():
            self.spans.append(Span(self.text.strip(), self.rate, pause))
        elif pause is not None and self.spans:  # two breaks in a row, or a break after a cut: add them up
            last = self.spans[-1]
            self.spans[-1] = Span(last.text, last.rate, (last.pause_s or 0.0) + pause)
        self.text = ""

    def finish(self) -> list[Span]:
        self.cut(None)
        return self.spans

    def element(self, el: ET.Element, rate: float) -> None:
        tag = _local(el.tag)
        if tag not in _ATTRS:
            raise _fail(f"<{tag}> is not supported; supported: {', '.join('<' + t + '>' for t in _ATTRS)}")
        attrs = {_local(k): v for k, v in el.attrib.items()}
        unknown = sorted(set(attrs) - _ATTRS[tag])
        if unknown:
            raise _fail(f"<{tag}> does not take {', '.join(unknown)}")
        if tag == "break":
            if (el.text or "").strip() or len(el):
                raise _fail("<break> must be empty")
            self.cut(_break_s(attrs))
        elif tag in ("say-as", "phoneme", "sub"):
            if len(el):
                raise _fail(f"<{tag}> may hold only text, not other elements")
            self.add(" " + self.leaf(tag, attrs, el.text or "") + " ", rate)
        else:
            if tag == "prosody":
                rate = rate * _rate(attrs.get("rate", "default"))
                if not RATE_RANGE[0] <= rate <= RATE_RANGE[1]:
                    raise _fail(f"prosody rate comes to {rate:g}; it must stay within {RATE_RANGE[0]} to {RATE_RANGE[1]}")
            if tag == "p":
                self.add("\n\n", rate)
            self.add(el.text, rate)
            for child in el:
                self.element(child, rate)
                self.add(child.tail, rate)
            if tag == "p":
                self.add("\n\n", rate)
            elif tag == "s":
                self.add(" 。" if self.lang == "zh" and not self.text.rstrip().endswith(("。", "！", "？")) else " ", rate)

    def leaf(self, tag: str, attrs: dict[str, str], content: str) -> str:
        if tag == "sub":
            if "alias" not in attrs:
                raise _fail("<sub> needs an alias")
            return attrs["alias"]
        if tag == "phoneme":
            return _phoneme(attrs, content)
        return _say_as(attrs, content.strip(), self.lang)


def _break_s(attrs: dict[str, str]) -> float:
    if "time" in attrs:
        m = _TIME.fullmatch(attrs["time"])
        if not m:
            raise _fail(f"<break time={attrs['time']!r}>: write it as '500ms' or '1.5s'")
        seconds = float(m[1]) / (1000 if m[2] == "ms" else 1)
        if seconds > MAX_BREAK_S:
            raise _fail(f"<break> of {seconds:g} s is longer than {MAX_BREAK_S:g} s")
        return seconds
    strength = attrs.get("strength", "medium")
    if strength not in STRENGTHS:
        raise _fail(f"<break strength={strength!r}>: one of {', '.join(STRENGTHS)}")
    return STRENGTHS[strength]


def _rate(value: str) -> float:
    v = value.strip().lower()
    if v in RATES:
        return RATES[v]
    try:
        factor = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    except ValueError:
        raise _fail(f"prosody rate {value!r}: a percentage ('150%'), a factor ('1.2') or one of {', '.join(RATES)}") from None
    if not factor > 0:
        raise _fail(f"prosody rate {value!r} must be positive")
    return factor


def _phoneme(attrs: dict[str, str], content: str) -> str:
    alphabet, ph = attrs.get("alphabet", "ipa").lower(), attrs.get("ph")
    if ph is None:
        raise _fail("<phoneme> needs ph")
    try:
        if alphabet in ("x-pinyin", "pinyin"):
            return f"[[{check_pinyin(ph, '<phoneme ph>')}]]"
        if alphabet == "ipa":
            return f"[[{check_phonemes(ph, '<phoneme ph>')}]]"
    except InputError as exc:
        raise _fail(exc.message) from None
    raise _fail(f"<phoneme alphabet={alphabet!r}>: use ipa (English) or x-pinyin (Chinese)")


def _say_as(attrs: dict[str, str], content: str, lang: str) -> str:
    kind = attrs.get("interpret-as", "")
    if not content:
        raise _fail(f"<say-as interpret-as={kind!r}> is empty")
    if kind == "characters":
        return _characters(content, lang)
    if kind == "cardinal":
        return _cardinal(content, lang)
    if kind == "date":
        return _date(content, attrs.get("format", "ymd"), lang)
    raise _fail(f"<say-as interpret-as={kind!r}>: supported: characters, cardinal, date")


def _characters(content: str, lang: str) -> str:
    from pipeline.text.zh_numbers import digits

    out = []
    for ch in content:
        if ch.isspace():
            continue
        if ch.isdigit():
            out.append(digits(ch) if lang == "zh" else _DIGITS_EN[int(ch)])
        elif ch.lower() in _LETTERS:
            out.append(_LETTERS[ch.lower()])
        else:
            out.append(ch)
    return ("" if lang == "zh" and all(_HAN.match(c) or c.isdigit() for c in content) else " ").join(out)


def _cardinal(content: str, lang: str) -> str:
    from pipeline.text.en_numbers import int_to_words
    from pipeline.text.zh_numbers import cardinal

    digits_only = content.replace(",", "").replace("_", "")
    negative = digits_only.startswith("-")
    digits_only = digits_only.lstrip("-")
    if not digits_only.isdigit() or len(digits_only) > 15:
        raise _fail(f"<say-as interpret-as='cardinal'>{content[:40]}: not a whole number")
    n = int(digits_only)
    if lang == "zh":
        return ("负" if negative else "") + cardinal(n)
    return ("minus " if negative else "") + int_to_words(n)


def _date(content: str, fmt: str, lang: str) -> str:
    from pipeline.text.en_numbers import date_to_words

    parts = re.split(r"[-/.]", content)
    order = {"ymd": (0, 1, 2), "mdy": (2, 0, 1), "dmy": (2, 1, 0)}.get(fmt)
    if order is None:
        raise _fail(f"<say-as interpret-as='date' format={fmt!r}>: use ymd, mdy or dmy")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise _fail(f"<say-as interpret-as='date'>{content[:40]}: write it as digits like 2024-03-05 ({fmt})")
    year, month, day = (int(parts[i]) for i in order)
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise _fail(f"<say-as interpret-as='date'>{content[:40]}: not a date ({fmt})")
    if lang == "zh":
        from pipeline.text.zh_numbers import cardinal, digits

        return f"{digits(str(year))}年{cardinal(month)}月{cardinal(day)}日"
    words = date_to_words(month, day, year)
    if words is None:
        raise _fail(f"<say-as interpret-as='date'>{content[:40]}: not a date ({fmt})")
    return words
