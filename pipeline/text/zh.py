"""Mandarin G2P for Kokoro: normalized Chinese text -> tone3 pinyin -> Kokoro phonemes.

The steps are small and separate so each can be tested on its own:

1. ``zh_pinyin_words`` splits a run into Han stretches, punctuation and ``[[pinyin]]`` blocks (a
   reading the caller chose, taken as written), segments each stretch
   with a private jieba tokenizer and looks every word up in pypinyin, so polyphones read by
   context (银行 yin2 hang2, 行走 xing2 zou3). A few context rules fix what the dictionaries
   get wrong (得 as dei3 or de5, a bare 长 as chang2).
2. Tone sandhi (``tone_sandhi=True``): 一 and 不 take the tone their neighbour asks for, and a
   third tone before a third tone becomes a second tone, following the word structure.
3. ``pinyin_to_phonemes`` turns syllables into the symbols misaki 0.9.4's Chinese frontend
   gives Kokoro-82M (``misaki.zh.ZHG2P.py2ipa``), words separated by spaces as in misaki's
   ``legacy_call``.

Numbers must be normalized first (``normalize_zh``); anything that is neither Han nor
punctuation is dropped here.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipeline.errors import NOTHING_TO_SPEAK, InputError
from pipeline.text.zh_numbers import normalize_zh

if TYPE_CHECKING:
    import jieba

logger = logging.getLogger(__name__)

__all__ = [
    "normalize_zh",
    "pinyin_to_phonemes",
    "zh_phonemes",
    "zh_pinyin_words",
    "zh_to_pinyin",
]

_HAN = "\u3007\u3400-\u4dbf\u4e00-\u9fff"
_PUNCTUATION = {
    "，": ",", ",": ",", "、": ",", "—": ",",
    "。": ".", ".": ".", "．": ".", "｡": ".", "…": ".",
    "！": "!", "!": "!", "？": "?", "?": "?",
    "；": ";", ";": ";", "：": ":", ":": ":",
}
_CHUNKS = re.compile(rf"(?P<raw>\[\[[^\]]*\]\])|(?P<han>[{_HAN}]+)|(?P<punct>[{re.escape(''.join(_PUNCTUATION))}]+)")
# What each punctuation item becomes in the phoneme string, as misaki's map_punctuation writes it.
_PHONEME_PUNCTUATION = {mark: mark + " " for mark in ",.!?;:"}
_NON_SYLLABIC = chr(815)  # combining inverted breve below; misaki's legacy_call strips it

# Words jieba should keep whole, so the phrase readings below apply.
_JIEBA_WORDS = {
    "数钱": 2000, "得去": 2000, "长得": 20000, "还钱": 2000, "还书": 2000, "和面": 2000,
}
# Phrase readings pypinyin gets wrong, in tone3.
_PHRASES = {
    "数钱": "shu3 qian2",
    "得去": "dei3 qu4",
    "长得": "zhang3 de5",
    "地方": "di4 fang5",
    "大夫": "dai4 fu5",
    "还钱": "huan2 qian2",
    "还书": "huan2 shu1",
    "和面": "huo2 mian4",
    "喜欢": "xi3 huan5",
    "谢谢": "xie4 xie5",
}
# Reduplicated kinship words read the second syllable in the neutral tone (妈妈 ma1 ma5).
_KINSHIP = frozenset("妈爸哥姐弟妹爷奶叔婶姑舅姥婆宝娃")
_PRONOUNS = frozenset(["我", "你", "您", "他", "她", "它", "我们", "你们", "他们", "她们", "咱们", "大家"])
_PRONOUN_CHARS = frozenset("我你您他她它们咱")
# A bare 得 after these is the modal "must" (我得去 wo3 dei3 qu4).
_DEI_AFTER = _PRONOUNS | frozenset("还就也都总又真")
# 长 after a degree word is the adjective (太长 tai4 chang2), unless growth follows (长得, 长大).
_DEGREE = frozenset("太很最更好多较挺过真越够")
_GROWTH_NEXT = frozenset("大高得出成着满胖")
_UNREAD = "\x00"

_NUMERALS = frozenset("零〇一二三四五六七八九十百千万亿两幺")
_DIGIT_CHARS = frozenset("零〇一二三四五六七八九幺")
_BIG_UNITS = frozenset("百千万亿")
# After these, 一 is a digit (十一, 二零二一) or an ordinal (第一), read yi1 unless it counts 百千万亿.
_YI_DIGIT_AFTER = _NUMERALS | {"第"}

_init_lock = threading.Lock()
_tokenizer: jieba.Tokenizer | None = None


def _jieba() -> jieba.Tokenizer:
    """The private jieba tokenizer, built once on first use (about a second)."""
    global _tokenizer
    if _tokenizer is None:
        with _init_lock:
            if _tokenizer is None:
                _tokenizer = _build_tokenizer()
    return _tokenizer


def _build_tokenizer() -> jieba.Tokenizer:
    import jieba
    from pypinyin import load_phrases_dict
    from pypinyin.contrib.tone_convert import to_tone

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    for word, freq in _JIEBA_WORDS.items():
        tokenizer.add_word(word, freq)
    load_phrases_dict({w: [[to_tone(s)] for s in py.split()] for w, py in _PHRASES.items()})
    logger.debug("jieba tokenizer ready with %d custom words", len(_JIEBA_WORDS))
    return tokenizer


def _unread(chars: str) -> Any:
    """pypinyin's errors hook: one placeholder per character without a reading (a list is allowed)."""
    return [_UNREAD] * len(chars)


def _lookup(word: str) -> tuple[str, list[str]]:
    """The word's Han characters that have a reading, and their tone3 pinyin."""
    from pypinyin import Style, lazy_pinyin

    pinyins = lazy_pinyin(word, style=Style.TONE3, neutral_tone_with_five=True, errors=_unread)
    if len(pinyins) != len(word):  # never seen; read character by character to stay aligned
        pinyins = [lazy_pinyin(c, style=Style.TONE3, neutral_tone_with_five=True)[0] for c in word]
    kept = [(c, p) for c, p in zip(word, pinyins, strict=True) if p != _UNREAD and p[-1:].isdigit()]
    return "".join(c for c, _ in kept), [p for _, p in kept]


def _is_phrase(text: str) -> bool:
    from pypinyin.phrases_dict import phrases_dict

    return text in phrases_dict


def _fix_de(words: list[tuple[str, list[str]]]) -> None:
    """得 after a subject is dei3 (我得去); after a verb, as a complement marker, de5 (跑得快)."""
    for w, (word, pinyin) in enumerate(words):
        prev_word = words[w - 1][0] if w else ""
        for i, char in enumerate(word):
            if char != "得" or pinyin[i] != "de2":
                continue
            before = word[i - 1] if i else prev_word[-1:]
            after = word[i + 1] if i + 1 < len(word) else _next_char(words, w)
            if after in ("了", "到"):
                continue
            if word == "得" and prev_word in _DEI_AFTER:
                pinyin[i] = "dei3"
            elif before and before not in _PRONOUN_CHARS and not _in_phrase(word, i, before, after):
                pinyin[i] = "de5"


def _in_phrase(word: str, i: int, before: str, after: str) -> bool:
    return _is_phrase(word) or _is_phrase(before + word[i]) or _is_phrase(word[i] + after)


def _fix_chang(words: list[tuple[str, list[str]]]) -> None:
    """A bare 长 or one after a degree word is the adjective chang2 (非常长, 太长了)."""
    for w, (word, pinyin) in enumerate(words):
        if not word.endswith("长") or pinyin[-1] != "zhang3":
            continue
        bare = word == "长"
        after_degree = len(word) == 2 and word[0] in _DEGREE
        if (bare or after_degree) and _next_char(words, w) not in _GROWTH_NEXT:
            pinyin[-1] = "chang2"


def _fix_kinship(words: list[tuple[str, list[str]]]) -> None:
    """妈妈, 姐姐, 宝宝: the second syllable is neutral."""
    for word, pinyin in words:
        if len(word) == 2 and word[0] == word[1] and word[0] in _KINSHIP:
            pinyin[1] = pinyin[1][:-1] + "5"


def _next_char(words: list[tuple[str, list[str]]], w: int) -> str:
    return words[w + 1][0][:1] if w + 1 < len(words) else ""


def _stretch_words(stretch: str, *, tone_sandhi: bool) -> list[tuple[str, list[str]]]:
    """Segment one Han stretch (no punctuation inside) and read each word."""
    words = [_lookup(w) for w in _jieba().cut(stretch, HMM=True)]
    words = [(w, p) for w, p in words if w]
    _fix_de(words)
    _fix_chang(words)
    _fix_kinship(words)
    _apply_tone_sandhi(words, enabled=tone_sandhi)
    return words


# --- tone sandhi ------------------------------------------------------------------------


def _tone(syllable: str) -> int:
    return int(syllable[-1])


def _retone(syllable: str, tone: int) -> str:
    return syllable[:-1] + str(tone)


def _apply_tone_sandhi(words: list[tuple[str, list[str]]], *, enabled: bool) -> None:
    """Rewrite the words' pinyin in place: citation tones for 一/不, then sandhi if enabled."""
    chars = "".join(word for word, _ in words)
    flat = [p for _, pinyin in words for p in pinyin]
    pinyins = [_citation(c, p) for c, p in zip(chars, flat, strict=True)]
    if enabled:
        word_lengths = [len(word) for word, _ in words]
        pinyins = _yi_bu_sandhi(chars, pinyins, word_lengths)
        pinyins = _third_tone_sandhi(pinyins, [word for word, _ in words])
    start = 0
    for word, pinyin in words:
        pinyin[:] = pinyins[start : start + len(word)]
        start += len(word)


def _citation(char: str, pinyin: str) -> str:
    """Undo the sandhi pypinyin bakes into some phrases (一个 yi2, 不要 bu2); keep neutral tones."""
    if char == "一" and pinyin in ("yi2", "yi4"):
        return "yi1"
    if char == "不" and pinyin == "bu2":
        return "bu4"
    return pinyin


def _yi_bu_sandhi(chars: str, pinyins: list[str], word_lengths: list[int]) -> list[str]:
    word_final = set()
    end = 0
    for length in word_lengths:
        end += length
        if length > 1:
            word_final.add(end - 1)
    out = list(pinyins)
    for i, char in enumerate(chars):
        if char == "一" and pinyins[i] == "yi1":
            out[i] = _retone(pinyins[i], _yi_tone(chars, pinyins, i, i in word_final))
        elif char == "不" and pinyins[i] == "bu4":
            out[i] = _retone(pinyins[i], _bu_tone(chars, pinyins, i))
    return out


def _yi_tone(chars: str, pinyins: list[str], i: int, word_final: bool) -> int:
    """一: yi1 alone, last, in ordinals and numbers; yi5 in 看一看; yi2 before tone 4, else yi4."""
    before = chars[i - 1] if i else ""
    after = chars[i + 1] if i + 1 < len(chars) else ""
    if not after:
        return 1
    if before and before in _YI_DIGIT_AFTER:
        counts = after in _BIG_UNITS and before != "十"  # 一千一百, 第一千 vs 十一万, 第一
        return _yi_before(pinyins[i + 1]) if counts else 1
    if before == after:
        return 5
    if after in _DIGIT_CHARS or after == "月" or (before == "月" and after in "日号"):
        return 1
    if after in "点比" and chars[i + 2 : i + 3] and chars[i + 2] in _NUMERALS:
        return 1  # 一点五, 一比一
    return 1 if word_final else _yi_before(pinyins[i + 1])


def _yi_before(following: str) -> int:
    return 2 if _tone(following) == 4 else 4


def _bu_tone(chars: str, pinyins: list[str], i: int) -> int:
    """不: bu5 in A不A (是不是), bu2 before a fourth tone, otherwise bu4."""
    if 0 < i < len(chars) - 1 and chars[i - 1] == chars[i + 1]:
        return 5
    if i + 1 < len(chars) and _tone(pinyins[i + 1]) == 4:
        return 2
    return 4


def _third_tone_sandhi(pinyins: list[str], words: list[str]) -> list[str]:
    """3-3 -> 2-3: inside feet first, then between a word's parts, then between words.

    Each level goes right to left on the tones the level below left, so 展览|馆 reads
    zhan2 lan2 guan3, 纸|老虎 zhi3 lao2 hu3 and 我 很 好 wo3 hen2 hao3.
    """
    tones = [_tone(p) for p in pinyins]
    feet: list[int] = []  # boundaries inside a foot
    parts: list[int] = []  # boundaries between the feet of one word
    word_starts: list[int] = []
    start = 0
    for word in words:
        offset = start
        for size in _part_sizes(word):
            if offset > start:
                parts.append(offset)
            feet.extend(range(offset + 1, offset + size))
            offset += size
        word_starts.append(start)
        start += len(word)
    for boundaries in (feet, parts, word_starts[1:]):
        for b in reversed(boundaries):
            if tones[b - 1] == 3 and tones[b] == 3:
                tones[b - 1] = 2
    return [_retone(p, t) for p, t in zip(pinyins, tones, strict=True)]


def _part_sizes(word: str) -> list[int]:
    """A word's feet: 展览|馆 [2, 1] or 纸|老虎 [1, 2] by jieba frequency; longer words in pairs."""
    if len(word) <= 2:
        return [len(word)]
    if len(word) == 3:
        freq = _jieba().FREQ
        return [1, 2] if freq.get(word[1:], 0) > freq.get(word[:2], 0) else [2, 1]
    return [2] * (len(word) // 2) + [1] * (len(word) % 2)


def zh_pinyin_words(text: str, *, tone_sandhi: bool = True) -> list[tuple[str, list[str]]]:
    """Each jieba word with its tone3 pinyin; punctuation as (mark, [mark]) with ASCII marks."""
    out: list[tuple[str, list[str]]] = []
    for m in _CHUNKS.finditer(text):
        if m["raw"]:  # a pronunciation the caller chose (lexicon, SSML <phoneme>): read as written
            syllables = m["raw"][2:-2].split()
            if syllables:
                out.append((m["raw"], syllables))
            continue
        if m["han"]:
            out.extend(_stretch_words(m["han"], tone_sandhi=tone_sandhi))
            continue
        for char in m["punct"]:
            mark = _PUNCTUATION[char]
            if not out or out[-1][0] != mark:
                out.append((mark, [mark]))
    return out


def zh_to_pinyin(text: str, *, tone_sandhi: bool = True) -> list[str]:
    """One tone3 syllable per Han character (neutral tone 5), punctuation as its own item."""
    return [p for _, pinyin in zh_pinyin_words(text, tone_sandhi=tone_sandhi) for p in pinyin]


@functools.lru_cache(maxsize=4096)
def _syllable_phonemes(syllable: str) -> str:
    from misaki.zh import ZHG2P

    try:
        _tone(syllable)
        return str(ZHG2P.py2ipa(syllable)).replace(_NON_SYLLABIC, "")
    except (ValueError, AssertionError) as exc:
        raise InputError(f"not a tone3 pinyin syllable: {syllable!r}") from exc


def pinyin_to_phonemes(pinyins: Sequence[str]) -> str:
    """Kokoro phonemes for pinyin items, as misaki 0.9.4's Chinese frontend writes them.

    Each item is a punctuation mark (, . ! ? ; :), one syllable, or the syllables of one word
    separated by spaces ("yin2 hang2"); a word's syllables are joined without a space and
    words are separated by one.
    """
    pieces: list[str] = []
    spoken = False
    for item in pinyins:
        if item in _PHONEME_PUNCTUATION:
            pieces.append(_PHONEME_PUNCTUATION[item])
            continue
        word = "".join(_syllable_phonemes(s) for s in item.split())
        if not word:
            continue
        if pieces and not pieces[-1].endswith(" "):
            pieces.append(" ")
        pieces.append(word)
        spoken = True
    if not spoken:
        raise InputError("no Mandarin syllables to speak", code=NOTHING_TO_SPEAK)
    return "".join(pieces).strip()


def zh_phonemes(text: str, *, tone_sandhi: bool = True) -> tuple[list[str], str]:
    """(pinyin list, Kokoro phoneme string) for a normalized Chinese run."""
    words = zh_pinyin_words(text, tone_sandhi=tone_sandhi)
    if not any(p not in _PHONEME_PUNCTUATION for _, pinyin in words for p in pinyin):
        raise InputError("no Han characters to speak in this run", code=NOTHING_TO_SPEAK)
    phonemes = pinyin_to_phonemes([" ".join(pinyin) for _, pinyin in words])
    return [p for _, pinyin in words for p in pinyin], phonemes
