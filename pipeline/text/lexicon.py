"""Pronunciations the caller chooses: a lexicon, and the ``[[...]]`` blocks it (and SSML's ``<phoneme>``) becomes.

A lexicon maps a word to how it is read:

- a Chinese word (any Han character in it) to pinyin with tone numbers, one syllable per character:
  ``{"重庆": "chong2 qing4"}``;
- an English word to espeak-ng IPA phonemes, as Piper voices read them: ``{"Nguyen": "ŋwˈɪn"}`` (the
  ``[[ ]]`` around them may be written or not).

``apply_lexicon`` replaces every occurrence in the text with a pronunciation block ``[[...]]``: Chinese
words anywhere (Chinese has no spaces), English words as whole words, case-insensitively; longer keys
first. The segmenter keeps blocks whole (``protect``/``restore``) and the phonemizers read them as they
are (``pipeline.text.en``: Piper's own ``[[ phonemes ]]``; ``pipeline.text.zh``: pinyin).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from pipeline.errors import BAD_LEXICON, InputError
from pipeline.text.clean import check_unicode

MAX_ENTRIES = 2000
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 256

BLOCK = re.compile(r"\[\[(.*?)\]\]", re.S)
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3007]")
_WORD = "A-Za-z0-9\u00c0-\u024f'"  # what may not touch an English lexicon word on either side
_PINYIN_BLOCK = re.compile(r"\s*[a-zü]+[1-5](?:\s+[a-zü]+[1-5])*\s*")
# Placeholders a protected block stands as while the segmenter works: a Latin word for phonemes (read as
# English), a rare Han character for pinyin (so it stays inside its Chinese run).
_EN_MARK = "qzxjblk"
_ZH_MARKS = [chr(c) for c in range(0x4DB5, 0x4D00, -1)]


def is_pinyin(value: str) -> bool:
    """``chong2 qing4``: lower-case syllables, each ending in a tone number 1-5 (5 = neutral)."""
    return _PINYIN_BLOCK.fullmatch(value.replace("v", "ü")) is not None


def check_pinyin(value: str, where: str) -> str:
    """Pinyin syllables the Mandarin frontend can read (each checked against its tables), space-joined."""
    from pipeline.text.zh import pinyin_to_phonemes

    text = value.strip().lower().replace("v", "ü").replace("u:", "ü")
    if not is_pinyin(text):
        raise InputError(f"{where}: {value!r} is not pinyin with tone numbers (e.g. 'chong2 qing4')", code=BAD_LEXICON)
    syllables = text.split()
    try:
        pinyin_to_phonemes(syllables)
    except InputError:
        raise InputError(f"{where}: {value!r} holds a syllable Mandarin does not have", code=BAD_LEXICON) from None
    return " ".join(syllables)


def check_phonemes(value: str, where: str) -> str:
    """IPA phonemes for an English word: letters, combining marks, stress and length marks, spaces."""
    text = value.strip()
    if text.startswith("[[") and text.endswith("]]"):
        text = text[2:-2].strip()
    if not text:
        raise InputError(f"{where}: the phonemes are empty", code=BAD_LEXICON)
    bad = [c for c in text if not (c.isspace() or unicodedata.category(c)[0] in "LM" or c in "ˈˌːˑ.'-")]
    if bad or any(c.isdigit() or c in "[]<>&" for c in text):
        raise InputError(f"{where}: {value!r} is not IPA phonemes (odd characters {''.join(sorted(set(bad)))!r})",
                         code=BAD_LEXICON)
    return text


def check_lexicon(lexicon: Any) -> dict[str, str]:
    """A lexicon checked and normalized: ``{word: "pinyin" | "phonemes"}``; anything off is BAD_LEXICON (a
    string that is not valid Unicode, INVALID_UTF8, as in the text)."""
    if lexicon is None:
        return {}
    if not isinstance(lexicon, Mapping):
        raise InputError(f"the lexicon must be a mapping of word -> pronunciation, not {type(lexicon).__name__}",
                         code=BAD_LEXICON)
    if len(lexicon) > MAX_ENTRIES:
        raise InputError(f"the lexicon has {len(lexicon)} entries; at most {MAX_ENTRIES}", code=BAD_LEXICON)
    out: dict[str, str] = {}
    for word, value in lexicon.items():
        if not isinstance(word, str) or not isinstance(value, str):
            raise InputError("lexicon words and pronunciations must be strings", code=BAD_LEXICON)
        check_unicode(word, "a lexicon word")
        check_unicode(value, "a lexicon pronunciation")
        key = word.strip()
        if not key or len(key) > MAX_KEY_CHARS or len(value) > MAX_VALUE_CHARS or "[" in key or "]" in key:
            raise InputError(f"lexicon word {word[:40]!r}: 1 to {MAX_KEY_CHARS} characters, pronunciation at most "
                             f"{MAX_VALUE_CHARS}", code=BAD_LEXICON)
        where = f"lexicon[{key!r}]"
        out[key] = check_pinyin(value, where) if _HAN.search(key) else check_phonemes(value, where)
    return out


def apply_lexicon(text: str, lexicon: Mapping[str, str]) -> str:
    """``text`` with every lexicon word replaced by its ``[[pronunciation]]`` block (see the module doc).

    Text already inside a block is left alone."""
    if not lexicon:
        return text
    words = sorted(lexicon, key=len, reverse=True)
    han = [w for w in words if _HAN.search(w)]
    latin = [w for w in words if not _HAN.search(w)]
    parts = []
    if han:
        parts.append("|".join(re.escape(w) for w in han))
    if latin:
        parts.append(rf"(?<![{_WORD}])(?:" + "|".join(re.escape(w) for w in latin) + rf")(?![{_WORD}])")
    pattern = re.compile("|".join(parts), re.IGNORECASE)
    folded = {w.lower(): v for w, v in lexicon.items()}
    pieces = BLOCK.split(text)  # even: plain text, odd: the insides of existing blocks
    for i in range(0, len(pieces), 2):
        pieces[i] = pattern.sub(lambda m: f"[[{folded[m.group(0).lower()]}]]", pieces[i])
    return "".join(p if i % 2 == 0 else f"[[{p}]]" for i, p in enumerate(pieces))


def protect(text: str) -> tuple[str, dict[str, str]]:
    """Blocks replaced by placeholder words the segmenter passes through unchanged; ``restore`` undoes it.

    A pinyin block becomes a rare Han character (it is read in the Chinese run it sits in), any other
    block a Latin placeholder word (read in English). Placeholders already in the text are never reused."""
    blocks: dict[str, str] = {}
    zh_marks = (m for m in _ZH_MARKS if m not in text)

    def swap(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        if is_pinyin(inner.lower()):
            mark = next(zh_marks, None)
            if mark is None:
                raise InputError("too many pinyin blocks in one text", code=BAD_LEXICON)
            blocks[mark] = "[[" + inner.lower() + "]]"
            return mark
        mark = f" {_EN_MARK}{_letters(len(blocks))} "
        blocks[mark.strip()] = "[[" + inner + "]]"
        return mark

    return BLOCK.sub(swap, text), blocks


def restore(text: str, blocks: Mapping[str, str]) -> str:
    """Placeholders back to their ``[[...]]`` blocks."""
    for mark in sorted(blocks, key=len, reverse=True):  # qzxjblkba before qzxjblkb
        text = text.replace(mark, blocks[mark])
    return text


def _letters(n: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'ba': a placeholder suffix without digits (digits would be read out)."""
    out = ""
    while True:
        out = chr(ord("a") + n % 26) + out
        n //= 26
        if not n:
            return out
