"""The English text frontend: normalization to speakable words, then espeak phonemes and ids.

``normalize_en`` rewrites digits, symbols and a few abbreviations as an American reader says them,
with one ordered list of regex passes. Each pass owns one kind of token and leaves plain words and
punctuation alone, so later passes only see what earlier ones left as digits. The order matters:

1. abbreviations (Mr, Mrs, Ms, Dr before a capitalized name; vs., e.g., i.e., etc., No. 5)
2. dates (2024-03-05, 3/5/2024, March 5, 2024), then phone numbers (555-123-4567, +1 555 123 4567)
3. ranges (5-10 -> 5 to 10; a hyphen between two numbers), then negatives (-5 -> minus 5)
4. times (10:30, 7:00 pm, 5pm), currency ($3.50, EUR/GBP/JPY signs), percentages, units (5 km)
5. ordinals (23rd), fractions (3/4, 1 1/2), decades (1990s, '90s), years, symbols (& + @ #)
6. whatever digits remain: decimals (3.14 -> three point one four) and cardinals.

Years: a bare four-digit number from 1100 to 2099, written without a thousands comma and not
already consumed as a price, unit amount, time or date, is read as a year (1999 -> nineteen
ninety-nine, 2005 -> two thousand five). So "1500 people" reads "fifteen hundred people", as many
Americans say it anyway, while "1,500 people" reads "one thousand five hundred people".

``EnglishPhonemizer`` turns (normalized) text into espeak-ng phonemes exactly as Piper does for its
voices (``piper.voice.PiperVoice.phonemize`` with ``phoneme_type`` espeak), and phonemes into ids
with Piper's ``phonemes_to_ids``. Piper synthesizes each sentence on its own, with its own
BOS/EOS ids; ``phonemize_sentences`` gives those per-sentence lists and ``phonemize`` their plain
concatenation.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.errors import MODEL_CORRUPT, UNKNOWN_VOICE, InputError, ModelError
from pipeline.text.en_numbers import (
    MONTHS,
    date_to_words,
    digits_to_words,
    fraction_to_words,
    int_to_words,
    is_one,
    number_string_to_words,
    ordinal_to_words,
    pluralize,
    year_to_words,
)

if TYPE_CHECKING:
    from pipeline.text.espeak import EspeakClauses

_LOGGER = logging.getLogger(__name__)

DEFAULT_VOICE = "en-us"

_Sub = Callable[[re.Match[str]], str]
# An integer of at most 15 digits, maybe with thousands commas: 5, 1,234. Longer ones fall through
# to the last pass, which reads them digit by digit.
_INT = r"(?:\d{1,3}(?:,\d{3}){1,4}|\d{1,15})(?!\d|,\d{3})"
_NUM = _INT + r"(?:\.\d+)?"  # a written number: 5, 1,234, 3.5
_MONTH_BY_NAME = {name: i + 1 for i, name in enumerate(MONTHS)}
_MONTH_BY_NAME.update({m[:3]: i + 1 for i, m in enumerate(MONTHS) if m != "May"} | {"Sept": 9})

# --------------------------------------------------------------------------- helpers

_SENTENCE_GOES_ON_RE = re.compile(r"\s*\Z|\s+[A-Z\"'(]")


def _keep_sentence_end(match: re.Match[str]) -> str:
    """A "." ending an abbreviation also ends the sentence if the text ends or a capital follows."""
    if not match.group(0).endswith("."):
        return ""
    return "." if _SENTENCE_GOES_ON_RE.match(match.string, match.end()) else ""


# --------------------------------------------------------------------------- abbreviations

_TITLES = {"Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Dr": "Doctor", "Prof": "Professor"}
_TITLE_RE = re.compile(r"\b(Mr|Mrs|Ms|Dr|Prof)\b\.?(?=\s+[A-Z])")
_LATIN_RE = re.compile(r"\b([Ee])\.g\.|\b([Ii])\.e\.|\b([Vv])s\.?(?=\s)|\b([Ee])tc\.")


def _latin(match: re.Match[str]) -> str:
    eg, ie, vs, etc = match.groups()
    if eg:
        return "For example" if eg.isupper() else "for example"
    if ie:
        return "That is" if ie.isupper() else "that is"
    if vs:
        return "Versus" if vs.isupper() else "versus"
    return ("Et cetera" if etc.isupper() else "et cetera") + _keep_sentence_end(match)


def _abbreviations(text: str) -> str:
    text = _TITLE_RE.sub(lambda m: _TITLES[m.group(1)], text)
    text = _LATIN_RE.sub(_latin, text)
    return re.sub(r"\bNo\.\s?(?=\d)", "number ", text)


# --------------------------------------------------------------------------- dates and phones

_ISO_DATE_RE = re.compile(r"(?<![\d-])(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?![\d-])")
_US_DATE_RE = re.compile(r"(?<![\d/])(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4})(?![\d/])")
_NAMED_DATE_RE = re.compile(
    r"\b(" + "|".join(sorted(_MONTH_BY_NAME, key=len, reverse=True)) + r")\b\.?"
    r"\s+(\d{1,2})(?:st|nd|rd|th)?(?!\d)(?:,?\s+(\d{4})(?!\d))?"
)
_PHONE_RE = re.compile(
    r"(?<![\w+])(?:\+(\d{1,3})[\s.-]?)?(?:\((\d{3})\)\s?|(\d{3})[\s.-])(\d{3})[\s.-](\d{4})(?!\d)"
)


def _numeric_date(match: re.Match[str]) -> str:
    month, day, year = (int(match.group(g)) for g in "mdy")
    return date_to_words(month, day, year) or match.group(0)


def _named_date(match: re.Match[str]) -> str:
    month = _MONTH_BY_NAME[match.group(1)]
    year = int(match.group(3)) if match.group(3) else None
    return date_to_words(month, int(match.group(2)), year) or match.group(0)


def _phone(match: re.Match[str]) -> str:
    country, area_paren, area, exchange, line = match.groups()
    groups = [digits_to_words(g) for g in (area_paren or area, exchange, line)]
    if country:
        groups.insert(0, f"plus {digits_to_words(country)}")
    return ", ".join(groups)


# --------------------------------------------------------------------------- ranges, signs, times

_RANGE_RE = re.compile(
    r"(?<![\d.,:/-])(" + _NUM + r"|\d{1,2}:\d\d)(%|\s?[AaPp]\.?[Mm]\b\.?)?"
    r"(?:-|\s?–\s?)(?=[$€£¥]?\d)"
)
_NEGATIVE_RE = re.compile(r"(?<![\w.,)])[-−](?=[$€£¥]?\.?\d)")
_AMPM = r"(?:\s?([AaPp])\.?\s?[Mm]\b\.?)"
_CLOCK_RE = re.compile(r"(?<![\d:.])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])" + _AMPM + "?")
_HOUR_AMPM_RE = re.compile(r"(?<![\w:.,])(\d{1,2})" + _AMPM)


def _ampm_words(letter: str | None, match: re.Match[str]) -> str:
    # Capital "AM"/"PM": espeak reads them as letters; "a m" would read as the article "a".
    return "" if letter is None else f" {letter.upper()}M{_keep_sentence_end(match)}"


def _clock(match: re.Match[str]) -> str:
    hour, minute = int(match.group(1)), int(match.group(2))
    seconds, letter = match.group(3), match.group(4)
    if hour > 24 or minute > 59 or (letter and not 1 <= hour <= 12):
        return match.group(0)
    words = int_to_words(hour)
    if minute == 0 and letter is None:
        words += " o'clock" if 1 <= hour <= 12 else " hundred"
    elif 0 < minute < 10:
        words += f" oh {int_to_words(minute)}"
    elif minute:
        words += f" {int_to_words(minute)}"
    if seconds is not None and int(seconds):
        unit = "second" if int(seconds) == 1 else "seconds"
        words += f" and {int_to_words(int(seconds))} {unit}"
    return words + _ampm_words(letter, match)


def _hour_ampm(match: re.Match[str]) -> str:
    hour = int(match.group(1))
    if not 1 <= hour <= 12:
        return match.group(0)
    return int_to_words(hour) + _ampm_words(match.group(2), match)


# --------------------------------------------------------------------------- money, percent, units

# sign -> (one, many, one hundredth, many hundredths); yen has no minor unit in speech.
_CURRENCIES: dict[str, tuple[str, str, str | None, str | None]] = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", None, None),
}
_SCALE_WORDS = {"K": "thousand", "k": "thousand", "M": "million", "B": "billion", "bn": "billion"}
_CURRENCY_RE = re.compile(
    r"([$€£¥])\s?(" + _INT + r")(?:\.(\d+))?"
    r"(?:\s?(thousand|million|billion|trillion|bn|[kKMB])(?![\w]))?"
)
_PERCENT_RE = re.compile(r"(" + _NUM + r"|\.\d+)\s?%")

# Unit symbol -> singular name; the plural comes from _unit_plural. Case matters ("mL" vs "ML").
# Left out on purpose, as too often plain words or letters: "in", "s", "t", "A", "V", "W".
_UNITS: dict[str, str] = {
    "km": "kilometer", "m": "meter", "cm": "centimeter", "mm": "millimeter", "mi": "mile",
    "ft": "foot", "yd": "yard", "kg": "kilogram", "g": "gram", "mg": "milligram", "lb": "pound",
    "lbs": "pound", "oz": "ounce", "mph": "mile per hour", "km/h": "kilometer per hour",
    "kph": "kilometer per hour", "m/s": "meter per second", "ms": "millisecond", "sec": "second",
    "secs": "second", "min": "minute", "mins": "minute", "h": "hour", "hr": "hour", "hrs": "hour",
    "KB": "kilobyte", "kB": "kilobyte", "MB": "megabyte", "GB": "gigabyte", "TB": "terabyte",
    "Mbps": "megabit per second", "Gbps": "gigabit per second", "Hz": "hertz", "kHz": "kilohertz",
    "MHz": "megahertz", "GHz": "gigahertz", "ml": "milliliter", "mL": "milliliter", "L": "liter",
    "kW": "kilowatt", "kWh": "kilowatt hour", "°C": "degree Celsius", "°F": "degree Fahrenheit",
    "°": "degree",
}
_UNIT_RE = re.compile(
    r"(?<![\w./])(" + _NUM + r")\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/])"
)


def _currency(match: re.Match[str]) -> str:
    sign, whole, minor, scale = match.groups()
    one, many, minor_one, minor_many = _CURRENCIES[sign]
    if scale:  # $2.5 million -> two point five million dollars
        amount = whole + (f".{minor}" if minor else "")
        return f"{number_string_to_words(amount)} {_SCALE_WORDS.get(scale, scale)} {many}"
    if minor and (minor_one is None or minor_many is None or len(minor) > 2):
        return f"{number_string_to_words(f'{whole}.{minor}')} {many}"
    major = int(whole.replace(",", ""))
    cents = int(minor.ljust(2, "0")) if minor else 0
    parts = []
    if major or not cents:
        parts.append(f"{int_to_words(major)} {one if major == 1 else many}")
    if cents:
        parts.append(f"{int_to_words(cents)} {minor_one if cents == 1 else minor_many}")
    return " and ".join(parts)


_PLURAL_FIRST_WORD_RE = re.compile(r"^\w+(?= per | Celsius| Fahrenheit)")


def _unit_plural(name: str) -> str:
    """"mile per hour" -> "miles per hour", "degree Celsius" -> "degrees Celsius"."""
    if name.endswith("hertz"):
        return name
    if name == "foot":
        return "feet"
    if _PLURAL_FIRST_WORD_RE.match(name):
        return _PLURAL_FIRST_WORD_RE.sub(lambda m: m.group(0) + "s", name)
    return name + "s"


def _unit(match: re.Match[str]) -> str:
    number, unit = match.groups()
    name = _UNITS[unit]
    return f"{number_string_to_words(number)} {name if is_one(number) else _unit_plural(name)}"


# --------------------------------------------------------------------------- ordinals to symbols

_ORDINAL_RE = re.compile(r"(?<![\w.])(" + _INT + r")(?:st|nd|rd|th)\b")
_MIXED_FRACTION_RE = re.compile(r"(?<![\w/.,])(\d{1,9})\s+(\d{1,9})/(\d{1,9})(?![\w/]|[.,]\d)")
_FRACTION_RE = re.compile(r"(?<![\w/.,])(\d{1,9})/(\d{1,9})(?![\w/]|[.,]\d)")
_DECADE_RE = re.compile(r"(?<![\w.,])(1[1-9]\d0|20\d0)s\b|(?<!\w)['’](\d0)s\b")
_YEAR_RE = re.compile(r"(?<![\w.,])(1[1-9]\d\d|20\d\d)(?![\w]|[.,]\d)")
_LETTER_DIGIT_RE = re.compile(r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
_NUMBER_RE = re.compile(r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)*|(?<![\w.])\.\d+")


def _mixed_fraction(match: re.Match[str]) -> str:
    whole, top, bottom = (int(g) for g in match.groups())
    if not 0 < top < bottom:
        return match.group(0)
    return f"{int_to_words(whole)} and {fraction_to_words(top, bottom)}"


def _fraction(match: re.Match[str]) -> str:
    top, bottom = int(match.group(1)), int(match.group(2))
    if bottom == 0:
        return match.group(0)
    if (top, bottom) == (24, 7):
        return "twenty-four seven"
    return fraction_to_words(top, bottom)


def _decade(match: re.Match[str]) -> str:
    if match.group(1):
        return pluralize(year_to_words(int(match.group(1))))
    return pluralize(int_to_words(int(match.group(2))))


def _number(match: re.Match[str]) -> str:
    # "1.2.3" (versions, addresses) reads "one point two point three".
    return " point ".join(
        number_string_to_words(part) if i == 0 else digits_to_words(part)
        for i, part in enumerate(match.group(0).split("."))
    ).strip()


def _spell_symbol(text: str, symbol: str, word: str) -> str:
    """``a&b`` -> ``a and b``, ``C++`` -> ``C plus plus``: one space each side, none at the ends."""

    def spell(match: re.Match[str]) -> str:
        words = " ".join([word] * match.group(0).count(symbol))
        lead = " " if match.start() > 0 else ""
        trail = " " if match.end() < len(match.string) else ""
        return f"{lead}{words}{trail}"

    # Start only where no whitespace precedes, so long runs of spaces stay linear.
    return re.sub(rf"(?<!\s)\s*(?:{re.escape(symbol)}\s*)+", spell, text)


def _symbols(text: str) -> str:
    text = re.sub(r"#\s?(?=\d)", "number ", text)
    for symbol, word in (("&", "and"), ("+", "plus"), ("@", "at")):
        text = _spell_symbol(text, symbol, word)
    return text


# --------------------------------------------------------------------------- the pass list

_PASSES: tuple[tuple[re.Pattern[str], _Sub | str], ...] = (
    (_ISO_DATE_RE, _numeric_date),
    (_US_DATE_RE, _numeric_date),
    (_NAMED_DATE_RE, _named_date),
    (_PHONE_RE, _phone),
    (_RANGE_RE, lambda m: f"{m.group(1)}{m.group(2) or ''} to "),
    (_NEGATIVE_RE, "minus "),
    (_CLOCK_RE, _clock),
    (_HOUR_AMPM_RE, _hour_ampm),
    (_CURRENCY_RE, _currency),
    (_PERCENT_RE, lambda m: f"{number_string_to_words(m.group(1))} percent"),
    (_UNIT_RE, _unit),
    (_ORDINAL_RE, lambda m: ordinal_to_words(int(m.group(1).replace(",", "")))),
    (_MIXED_FRACTION_RE, _mixed_fraction),
    (_FRACTION_RE, _fraction),
    (_DECADE_RE, _decade),
    (_YEAR_RE, lambda m: year_to_words(int(m.group(1)))),
)


def normalize_en(text: str) -> str:
    """Spell out numbers, dates, times, money, units and symbols as an American reader says them.

    >>> normalize_en("Dr. Smith paid $3.50 on 3/5/2024.")
    'Doctor Smith paid three dollars and fifty cents on March fifth, twenty twenty-four.'
    """
    text = _abbreviations(text)
    for pattern, replacement in _PASSES:
        text = pattern.sub(replacement, text)
    text = _symbols(text)
    text = _LETTER_DIGIT_RE.sub(" ", text)
    return _NUMBER_RE.sub(_number, text)


# --------------------------------------------------------------------------- phonemes and ids

_RAW_PHONEMES_RE = re.compile(r"(\[\[.*?\]\])")
_ESPEAK_LOCK = threading.Lock()  # espeak-ng is one process-global C library
_ESPEAK: EspeakClauses | None = None


def _espeak() -> EspeakClauses:
    """The process-wide espeak-ng phonemizer, created on first use; hold ``_ESPEAK_LOCK``."""
    global _ESPEAK
    if _ESPEAK is None:
        try:
            from pipeline.text.espeak import EspeakClauses

            _ESPEAK = EspeakClauses()
        except ImportError as exc:  # piper-tts is installed without deps; say what is missing
            raise ModelError(f"piper-tts with espeak-ng is not installed: {exc}") from exc
        _LOGGER.debug("espeak-ng phonemizer initialized")
    return _ESPEAK


class EnglishPhonemizer:
    """Text to espeak-ng phonemes and Piper phoneme ids, exactly as Piper voices were trained.

    ``vowel_clusters`` is a voice config's optional ``vowel_clusters`` (as in ``PiperConfig``).
    Instances are cheap; all share one espeak-ng engine behind one lock.
    """

    def __init__(self, vowel_clusters: set[tuple[str, ...]] | None = None) -> None:
        self.vowel_clusters = vowel_clusters

    def phonemize_sentences(self, text: str, voice: str = DEFAULT_VOICE) -> list[list[str]]:
        """Phonemes per sentence, as ``PiperVoice.phonemize`` gives them, ``[[raw]]`` blocks too."""
        sentences: list[list[str]] = []
        parts = _RAW_PHONEMES_RE.split(text)
        prev_raw = False
        for i, part in enumerate(parts):
            if part.startswith("[["):
                prev_raw = True
                if not sentences:
                    sentences.append([])
                if i > 0 and parts[i - 1].endswith(" "):
                    sentences[-1].append(" ")
                sentences[-1].extend(part[2:-2].strip())
                if i < len(parts) - 1 and parts[i + 1].startswith(" "):
                    sentences[-1].append(" ")
                continue
            part_sentences = self._espeak_sentences(part, voice)
            if prev_raw and part_sentences:
                sentences[-1].extend(part_sentences[0])
                part_sentences = part_sentences[1:]
            sentences.extend(part_sentences)
            prev_raw = False
        if sentences and not sentences[-1]:
            sentences.pop()
        return sentences

    def _espeak_sentences(self, text: str, voice: str) -> list[list[str]]:
        with _ESPEAK_LOCK:
            try:
                espeak = _espeak()
                espeak.set_voice(voice)
                return espeak.phonemize(text, vowel_clusters=self.vowel_clusters)
            except RuntimeError as exc:
                if "set voice" not in str(exc):
                    raise
                raise InputError(f"espeak-ng has no voice {voice!r}", code=UNKNOWN_VOICE) from exc

    def phonemize(self, text: str, voice: str = DEFAULT_VOICE) -> list[str]:
        """All phonemes of ``text``: Piper's per-sentence lists concatenated in order.

        Each sentence already ends with its terminator ("." "?" "!"), so no separator is added.
        For ids identical to Piper's synthesis, which runs one sentence at a time, use
        ``phonemize_sentences`` and ``to_ids`` per sentence.
        """
        return [p for sentence in self.phonemize_sentences(text, voice) for p in sentence]

    @staticmethod
    def to_ids(phonemes: Sequence[str], phoneme_id_map: Mapping[str, Sequence[int]]) -> list[int]:
        """Piper's ``phonemes_to_ids``: BOS, PAD after every phoneme, EOS.

        Symbols missing from the map are dropped with one warning. A map without Piper's
        BOS/EOS/PAD symbols is a broken voice config and raises ``ModelError`` (MODEL_CORRUPT).
        """
        from piper.const import BOS, EOS, PAD
        from piper.phoneme_ids import phonemes_to_ids

        absent = [s for s in (BOS, EOS, PAD) if s not in phoneme_id_map]
        if absent:
            raise ModelError(f"phoneme_id_map lacks {absent}", code=MODEL_CORRUPT)
        missing = sorted({p for p in phonemes if p not in phoneme_id_map})
        if missing:
            _LOGGER.warning("Dropping phonemes missing from the voice's id map: %s", missing)
            phonemes = [p for p in phonemes if p in phoneme_id_map]
        return phonemes_to_ids(list(phonemes), phoneme_id_map)


_DEFAULT_PHONEMIZER: EnglishPhonemizer | None = None
_DEFAULT_LOCK = threading.Lock()


def en_phonemes(text: str) -> list[str]:
    """Phonemes of ``text`` (not normalized: call ``normalize_en`` first) with the en-us voice."""
    global _DEFAULT_PHONEMIZER
    with _DEFAULT_LOCK:
        if _DEFAULT_PHONEMIZER is None:
            _DEFAULT_PHONEMIZER = EnglishPhonemizer()
    return _DEFAULT_PHONEMIZER.phonemize(text)


@functools.lru_cache(maxsize=16384)
def en_word_phonemes(word: str) -> str:
    """``en_phonemes`` of one word alone, joined, remembered for the 16,384 words last asked. Word timings phonemize
    every word of every segment on its own, so a word heard before costs no espeak-ng call."""
    return "".join(en_phonemes(word))
