"""Words of the submitted text through normalization (golden cases), word times from durations, the wire
split of words over chunks, and captions. Fast: no farm (the farm tests are test_word_timings_farm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.text.segment import Segmenter
from pipeline.text.sources import align_spans, clean_origin
from pipeline.timing import word_times
from pipeline.voices.base import Phonemized
from pipeline.captions import cues, to_srt, to_vtt
from wire.records import Word, job_words, merge_words, words_in
from wire.settings import load_settings

SETTINGS = load_settings()


def spoken(text: str) -> list[tuple[str, str]]:
    """(what the voice reads, the submitted text it stands for) per word, over all segments."""
    out = []
    for seg in Segmenter(SETTINGS.frontend).split(text):
        out += [(seg.text[a:b], text[c:d]) for a, b, c, d in seg.words]
    return out


GOLDEN = [
    ("Dr. Smith paid $3.50.", [("Doctor", "Dr."), ("Smith", "Smith"), ("paid", "paid"),
                               ("three dollars and fifty cents", "$3.50")]),
    ("It was 1,500 people at 7:30 pm.", [("It", "It"), ("was", "was"), ("one thousand five hundred", "1,500"),
                                         ("people", "people"), ("at", "at"), ("seven thirty", "7:30"), ("PM", "pm")]),
    ("Born on 2024-03-05 in the 1990s.", [("Born", "Born"), ("on", "on"), ("March fifth", "2024-03-05"),
                                          ("twenty twenty-four", "2024-03-05"),  # two segments: cut at the comma
                                          ("in", "in"), ("the", "the"), ("nineteen nineties", "1990s")]),
    ("It is 5km, or 25%!", [("It", "It"), ("is", "is"), ("five kilometers", "5km"), ("or", "or"),
                            ("twenty-five percent", "25%")]),
    ("2024年3月5日，我花了12.5元。", [("二零二四", "2024"), ("年", "年"), ("三", "3"), ("月", "月"), ("五", "5"),
                                 ("日", "日"), ("我", "我"), ("花", "花"), ("了", "了"), ("十二点五", "12.5"), ("元", "元")]),
    ("我在银行工作。I work at a bank.", [("我", "我"), ("在", "在"), ("银", "银"), ("行", "行"), ("工", "工"), ("作", "作"),
                                   ("I", "I"), ("work", "work"), ("at", "at"), ("a", "a"), ("bank", "bank")]),
    ("气温25°C，很热。", [("气", "气"), ("温", "温"), ("二十五摄氏度", "25°C"), ("很", "很"), ("热", "热")]),
    ("Ｆｕｌｌ width 😀 text\r\n\r\nand  “quotes”.", [("Full", "Ｆｕｌｌ"), ("width", "width"), ("text", "text"),
                                                 ("and", "and"), ("quotes", "quotes")]),
]


@pytest.mark.parametrize(("text", "expected"), GOLDEN, ids=[t for t, _ in GOLDEN])
def test_words_map_to_the_submitted_text(text: str, expected: list[tuple[str, str]]) -> None:
    assert spoken(text) == expected


def test_every_spoken_character_of_a_long_mixed_text_is_in_a_word_once() -> None:
    text = ("第3章 开始了。The year 2024 had 366 days, and 3/4 of them were fine. 我们在2025年1月1日见面，"
            "花了¥12.50。He said: \"C++ & Python\" at 10:30am on Jan. 5th, 2025!\n\n新段落。")
    covered: list[int] = []
    for seg in Segmenter(SETTINGS.frontend).split(text):
        for _, _, c, d in seg.words:
            covered += range(c, d)
    assert len(covered) == len(set(covered))  # no overlap between segments' words after merging per segment
    missing = [text[i] for i, ch in enumerate(text) if ch.isalnum() and i not in covered]
    assert not missing, missing


def test_clean_origin_and_align() -> None:
    raw = "\ufeffＡ\u200bb  c\r\n\r\n\r\nd"
    from pipeline.text.clean import _KEEP, clean_text

    cleaned = clean_text(raw, max_chars=1000)
    assert cleaned == "Ab c\n\nd"
    origin = clean_origin(raw, cleaned, _KEEP)
    assert [raw[i] for i in origin] == ["Ａ", "b", " ", "c", "\r", "\n", "d"] and origin == sorted(origin)
    assert align_spans("I have 2 cats", "I have two cats")[7:10] == [(7, 8)] * 3
    # a lone "." or "-" shared by two rewrites is no anchor; edge punctuation pairs one to one
    assert align_spans("$3.50.", "three dollars and fifty cents.") == [(0, 5)] * 29 + [(5, 6)]
    assert set(align_spans("2024-03-05", "March fifth, twenty twenty-four")) == {(0, 10)}


def _ph(phonemes: str, units: list[int]) -> Phonemized:
    return Phonemized(ids=tuple(range(len(units))), phonemes=phonemes, id_units=tuple(units))


def test_word_times_follow_the_durations_through_merged_words() -> None:
    # espeak joins "of the" into one group; per-word phonemes split it back
    text = "of the cat"
    words = [(0, 2, 0, 2), (3, 6, 3, 6), (7, 10, 7, 10)]
    phon = "ʌvðə kæt"
    units = [-1, -1] + [i for i in range(len(phon)) for _ in (0, 1)] + [-1]
    durations = np.array([1, 1] + [2, 2] * len(phon) + [1])
    fake = {"of": "ˈʌv", "the": "ðə", "cat": "kˈæt"}
    out = word_times(words, text, "en", _ph(phon, units), durations, hop=10, voice_rate=100, out_rate=100,
                     speech_samples=10_000, phonemize=lambda t: fake[t])
    frames = [(w.start // 10, w.end // 10) for w in out]
    # ids: BOS, PAD, then (phoneme, PAD) x 8 with 2 frames each, EOS; "ʌv" = phonemes 0-1, "ðə" 2-3, space 4, "kæt" 5-7
    assert frames == [(2, 10), (10, 18), (22, 34)]
    assert not any(w.approx for w in out)


def test_without_durations_words_share_the_segment_and_are_flagged() -> None:
    words = [(0, 1, 0, 1), (1, 2, 1, 2), (3, 8, 3, 8)]
    out = word_times(words, "今天 hello", "zh", Phonemized(ids=(1,), phonemes="x"), None, hop=0, voice_rate=24000,
                     out_rate=24000, speech_samples=1100)
    assert [(w.start, w.end) for w in out] == [(0, 300), (300, 600), (600, 1100)] and all(w.approx for w in out)


def test_any_chunking_gives_each_word_once() -> None:
    wire = [[0, 90, 0, 3, "one", 0], [100, 250, 4, 7, "two", 0], [260, 400, 8, 13, "three", 0]]
    for step in (1, 50, 90, 100, 399, 400, 1000):
        edges = list(range(0, 400, step)) + [400]
        got = [w for i, (a, b) in enumerate(zip(edges, edges[1:])) for w in words_in(wire, a, b, last=i == len(edges) - 2)]
        assert got == wire, step


def test_job_words_count_pauses_and_merge_pieces_of_one_span() -> None:
    seg0 = [[0, 100, 0, 2, "on", 0], [120, 300, 3, 11, "3/5/2024", 0]]
    seg1 = [[0, 200, 3, 11, "3/5/2024", 0], [220, 300, 12, 15, "now", 0]]
    words = job_words([seg0, seg1], [400, 300], 100)
    assert [(w.text, w.start_s, w.end_s) for w in words] == [("on", 0.0, 1.0), ("3/5/2024", 1.2, 6.0), ("now", 6.2, 7.0)]
    assert merge_words(words) == words


def test_captions_split_at_sentences_and_keep_punctuation() -> None:
    text = "Hello there, farm. 你好！"
    words = [Word("Hello", 0.1, 0.4, 0, 5), Word("there", 0.45, 0.7, 6, 11), Word("farm", 0.75, 1.0, 13, 17),
             Word("你", 1.5, 1.7, 19, 20), Word("好", 1.7, 1.9, 20, 21)]
    assert [c[2] for c in cues(words, text)] == ["Hello there, farm.", "你好！"]
    assert to_vtt(words, text).startswith("WEBVTT\n\n00:00:00.100 --> 00:00:01.000\nHello there, farm.\n")
    assert to_srt(words, text).startswith("1\n00:00:00,100 --> 00:00:01,000\nHello there, farm.\n\n2\n00:00:01,500")


def test_baker_symbols_belong_to_their_syllables() -> None:
    from pipeline.text.zh_baker import symbol_syllables

    symbols = ["sil", "h", "ua1", "er5", "#0", "^", "ai4", "#3", "n", "i3", "sil", "eos"]  # 花儿 爱，你
    assert symbol_syllables(symbols) == [-1, 0, 0, 1, -1, 2, 2, -1, 3, 3, -1, -1]


@pytest.mark.parametrize("words", [[[0, 3, 0, 3]], [[0, 99, 0, 3, "one"]], [["0", 3, 0, 3, "one"]], "one", [[2, 1, 0, 3, "x"]]])
def test_a_job_with_malformed_words_is_refused(words: object) -> None:
    import json

    from pipeline.errors import MALFORMED_JOB, InputError
    from wire.records import SegmentJob

    job = SegmentJob(job_id="abcdefgh12", seg=0, total=1, text="one two", lang="en", voice="joe", request_voice="joe",
                     format="wav", sample_rate=24000, words=[[0, 3, 0, 3, "one"]])
    fields = job.to_fields()
    assert SegmentJob.from_fields(fields).words == [[0, 3, 0, 3, "one"]]
    data = json.loads(fields["job"])
    data["words"] = words
    with pytest.raises(InputError) as err:
        SegmentJob.from_fields({"v": fields["v"], "job": json.dumps(data)})
    assert err.value.code == MALFORMED_JOB
