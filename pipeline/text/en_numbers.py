"""English number words, as an American reader says them.

Pure functions from digits to words: cardinals (``123`` -> "one hundred twenty-three", no "and"),
ordinals, decimals read digit by digit after "point", years, fractions and digit-by-digit strings.
No external number library; everything here is deterministic.
"""

from __future__ import annotations

import logging

_LOGGER = logging.getLogger(__name__)

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (10**3, "thousand"))

# Numbers at or above this are read digit by digit: nobody says "one quadrillion ...".
MAX_CARDINAL = 10**15
MAX_CARDINAL_DIGITS = 15

MONTHS = (
    "January February March April May June July August September October November December"
).split()

_IRREGULAR_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}


def _below_hundred(n: int) -> str:
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] if ones == 0 else f"{_TENS[tens]}-{_ONES[ones]}"


def _below_thousand(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest:
        words.append(_below_hundred(rest))
    return " ".join(words)


def int_to_words(n: int) -> str:
    """Cardinal words for ``n``: ``1234567`` -> "one million two hundred thirty-four thousand ...".

    Negative numbers read "minus ...". Magnitudes of a quadrillion or more are read digit by digit.
    """
    if n < 0:
        return f"minus {int_to_words(-n)}"
    if n >= MAX_CARDINAL:
        return digits_to_words(str(n))
    if n == 0:
        return "zero"
    words: list[str] = []
    for value, name in _SCALES:
        count, n = divmod(n, value)
        if count:
            words.append(f"{_below_thousand(count)} {name}")
    if n:
        words.append(_below_thousand(n))
    return " ".join(words)


def ordinalize(words: str) -> str:
    """Make the last word of cardinal ``words`` ordinal: "twenty-three" -> "twenty-third"."""
    cut = max(words.rfind(" "), words.rfind("-")) + 1
    head, last = words[:cut], words[cut:]
    if last in _IRREGULAR_ORDINALS:
        return head + _IRREGULAR_ORDINALS[last]
    if last.endswith("y"):
        return head + last[:-1] + "ieth"
    return head + last + "th"


def ordinal_to_words(n: int) -> str:
    """Ordinal words: ``1`` -> "first", ``23`` -> "twenty-third", ``101`` -> "one hundred first"."""
    return ordinalize(int_to_words(n))


def digits_to_words(digits: str) -> str:
    """Read a string of digits one by one: ``"4567"`` -> "four five six seven"."""
    return " ".join(_ONES[int(d)] for d in digits if d.isdigit())


def integer_string_to_words(text: str) -> str:
    """Words for an integer as written, with optional thousands commas: ``"1,234"``.

    A leading zero (``"007"``) means an identifier, so the digits are read one by one, as are
    numbers of more than 15 digits.
    """
    digits = text.replace(",", "")
    if (len(digits) > 1 and digits.startswith("0")) or len(digits) > MAX_CARDINAL_DIGITS:
        return digits_to_words(digits)
    return int_to_words(int(digits))


def number_string_to_words(text: str) -> str:
    """Words for a written number: optional minus, thousands commas and decimals.

    ``"3.14"`` -> "three point one four", ``"-2"`` -> "minus two", ``".5"`` -> "point five".
    """
    sign = ""
    if text.startswith(("-", "\u2212")):
        sign, text = "minus ", text[1:]
    whole, _, fraction = text.partition(".")
    parts = [integer_string_to_words(whole)] if whole else []
    if fraction:
        parts += ["point", digits_to_words(fraction)]
    return sign + " ".join(parts)


def is_one(text: str) -> bool:
    """Whether a written number takes a singular noun: exactly ``1`` (not ``1.0`` or ``1.5``)."""
    return text.lstrip("-\u2212").replace(",", "") == "1"


def year_to_words(year: int) -> str:
    """Read a year the American way.

    ``1999`` -> "nineteen ninety-nine", ``1900`` -> "nineteen hundred", ``1905`` -> "nineteen oh
    five", ``2000`` -> "two thousand", ``2005`` -> "two thousand five", ``2024`` -> "twenty
    twenty-four".
    Years outside 1000-9999 (and the x000 and 200x years) are read as cardinals.
    """
    two_thousands = year // 1000 == 2 and year % 1000 < 10
    if not 1000 <= year <= 9999 or two_thousands or year % 1000 == 0:
        return int_to_words(year)
    century, rest = divmod(year, 100)
    if rest == 0:
        return f"{_below_hundred(century)} hundred"
    if rest < 10:
        return f"{_below_hundred(century)} oh {_ONES[rest]}"
    return f"{_below_hundred(century)} {_below_hundred(rest)}"


def pluralize(words: str) -> str:
    """Plural of the last word: "nineteen ninety" -> "nineteen nineties", "third" -> "thirds"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    if words.endswith("x"):
        return words + "es"
    return words + "s"


def fraction_to_words(numerator: int, denominator: int) -> str:
    """``1/2`` -> "one half", ``3/4`` -> "three quarters", ``2/3`` -> "two thirds"."""
    top = int_to_words(numerator)
    if denominator == 1:
        return f"{top} over one"
    if denominator == 2:
        bottom = "half"
    elif denominator == 4:
        bottom = "quarter"
    else:
        bottom = ordinal_to_words(denominator)
    if numerator != 1:
        bottom = "halves" if bottom == "half" else pluralize(bottom)
    return f"{top} {bottom}"


def date_to_words(month: int, day: int, year: int | None = None) -> str | None:
    """``(3, 5, 2024)`` -> "March fifth, twenty twenty-four"; ``None`` for an impossible date."""
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    words = f"{MONTHS[month - 1]} {ordinal_to_words(day)}"
    return words if year is None else f"{words}, {year_to_words(year)}"
