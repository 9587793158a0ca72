"""First look at user text: decoding, limits, control characters, width forms.

Everything here is cheap and runs before any heavy work, so a bad request costs the farm nothing.
"""

from __future__ import annotations

import re
import unicodedata

from pipeline.errors import CONTROL_CHARACTERS, EMPTY_TEXT, INVALID_UTF8, TEXT_TOO_LONG, InputError

# C0 and C1 controls other than tab and newlines, plus the bidi overrides that can hide text.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Invisible characters dropped silently: zero-width spaces and joiners, BOM, soft hyphen.
_INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff\u00ad]")
_SPACES = re.compile(r"[ \t\u00a0\u3000]+")
# Surrogate code points: a Python str can hold one alone (JSON's "\ud800", a command line's undecodable byte
# under surrogateescape), but no UTF-8 encodes it, so such text cannot be stored, sent or spoken.
SURROGATE = re.compile("[\ud800-\udfff]")
# NFKC folds full-width ASCII to half-width, but it would also turn Chinese punctuation into ASCII
# and split some symbols; these keep their Chinese form so the segmenter sees CJK sentence ends.
_KEEP = {"，": "，", "。": "。", "！": "！", "？": "？", "：": "：", "；": "；", "（": "（", "）": "）"}


def source_of_cleaned(raw: str, cleaned: str) -> list[int]:
    """For each character of ``clean_text(raw)``, its index in ``raw`` (``pipeline/text/sources.py``)."""
    from pipeline.text.sources import clean_origin

    return clean_origin(raw, cleaned, _KEEP)


def check_unicode(text: str, what: str = "text") -> str:
    """``text`` unless it holds a surrogate code point (INVALID_UTF8). The message names the character by its
    position, never by itself: an error that echoed it could not be written as UTF-8 either."""
    bad = SURROGATE.search(text)
    if bad is None:
        return text
    code = ord(bad.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for a byte that was not UTF-8
        why = f"byte 0x{code - 0xDC00:02X} that is not UTF-8"
    else:
        why = f"lone surrogate U+{code:04X}"
    raise InputError(f"{what} is not valid Unicode: {why} at character {bad.start()}", code=INVALID_UTF8)


def decode(raw: bytes | str) -> str:
    if isinstance(raw, str):
        return check_unicode(raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"text is not valid UTF-8 (byte {exc.start})", code=INVALID_UTF8) from None


def clean_text(raw: bytes | str, *, max_chars: int) -> str:
    """Decoded, checked and width-folded text, with paragraph breaks kept as blank lines."""
    text = decode(raw)
    if len(text) > max_chars:
        raise InputError(f"text has {len(text)} characters; the limit is {max_chars}", code=TEXT_TOO_LONG)
    bad = _CONTROL.search(text)
    if bad:
        raise InputError(f"text contains control character U+{ord(bad.group()):04X} at {bad.start()}", code=CONTROL_CHARACTERS)
    text = _INVISIBLE.sub("", text)
    text = "".join(_KEEP.get(ch) or unicodedata.normalize("NFKC", ch) for ch in text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    if not text:
        raise InputError("text is empty", code=EMPTY_TEXT)
    return text
