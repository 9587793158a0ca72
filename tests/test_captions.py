"""Captions from word timings (``pipeline.captions``): cues end at sentences and clauses, keep the submitted
text's punctuation, stay within two lines of 42 columns and 7 s, in English and Chinese alike. Fast: no farm
(the farm's captions are checked in test_word_timings_farm.py, test_gateway_captions.py and test_book.py)."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest

from pipeline.captions import cues, to_srt, to_vtt
from pipeline.text.sources import spoken_words, word_after, words_after
from wire.records import SegmentJob, Word, job_words, words_from_wire

MIXED = "Hello there, how are you? 我很好。"
LONG_EN = ("The farm reads every book it is given, chapter by chapter, and it never stops for breakfast; "
           "its workers take the segments in turn, speak them in a voice that suits their language, and hand "
           "the audio back to whoever asked for it. Nobody on the night shift has ever complained about the "
           "noise, although the cat, who sleeps on the warmest server, has opinions about the fans. "
           "Tomorrow it reads the second volume.")
LONG_ZH = ("今天的天气很好，我们一起去公园散步吧。公园里有很多人，有的在跑步，有的在下棋，还有的在湖边钓鱼；"
           "孩子们在草地上放风筝，笑声传得很远很远。傍晚的时候，我们坐在长椅上看着太阳慢慢落下去，谁也不想回家！")


def timed(text: str, *, after: bool = True, per_char_s: float = 0.06) -> list[Word]:
    """The words of plain ``text`` as the farm gives them (spans with their edge punctuation cut off, what
    follows each), spoken one after another, a pause after each sentence."""
    spans = spoken_words(text)
    tails = words_after([([(a, b, a, b) for a, b in spans], text)])[0]
    out, t = [], 0.3
    for (a, b), tail in zip(spans, tails):
        end = t + per_char_s * (b - a)
        out.append(Word(text[a:b], round(t, 4), round(end, 4), a, b, False, tail if after else None))
        t = end + (0.35 if re.search(r"[.!?。！？]", tail) else 0.04)
    return out


def width(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


def check_limits(got: list[tuple[float, float, str]], words: list[Word]) -> None:
    """Every cue: at most two lines of 42 columns and 7 s; in order, no overlap, inside its words' times."""
    assert got
    for start, end, text in got:
        lines = text.split("\n")
        assert 1 <= len(lines) <= 2 and all(0 < width(line) <= 42 for line in lines), text
        assert 0 < end - start <= 7.0, (start, end, text)
    assert all(a[1] <= b[0] for a, b in zip(got, got[1:]))
    assert got[0][0] == words[0].start_s and got[-1][1] == max(w.end_s for w in words)
    assert all(min(w.start_s for w in words) <= s and e <= max(w.end_s for w in words) for s, e, _ in got)


def test_a_mixed_job_gives_a_cue_per_sentence_with_its_punctuation() -> None:
    words = timed(MIXED)
    assert [w.text for w in words] == ["Hello", "there", "how", "are", "you", "我", "很", "好"]  # no punctuation
    assert [w.after for w in words] == [" ", ", ", " ", " ", "? ", "", "", "。"]
    want = ["Hello there, how are you?", "我很好。"]
    assert [c[2] for c in cues(words)] == want  # from the words alone: the gateway, a book's chapters
    assert [c[2] for c in cues(words, MIXED)] == want  # from the submitted text: `ttsfarm submit --captions`
    check_limits(cues(words), words)
    assert [c[:2] for c in cues(words)] == [(words[0].start_s, words[4].end_s), (words[5].start_s, words[7].end_s)]
    assert to_vtt(words).startswith("WEBVTT\n\n00:00:00.300 --> 00:00:01.600\nHello there, how are you?\n\n"
                                    "00:00:01.950 --> 00:00:02.210\n我很好。\n")


def test_long_english_splits_at_sentences_and_clauses_within_the_limits() -> None:
    words = timed(LONG_EN)
    got = cues(words)
    check_limits(got, words)
    assert len(got) >= 6
    assert " ".join(c[2].replace("\n", " ") for c in got) == LONG_EN  # every word and mark, once, in order
    ends = [c[2][-1] for c in got]
    assert all(e in ".,;?!" for e in ends), ends  # a cue ends at a sentence or a clause, never mid-clause here
    assert got[-1][2] == "Tomorrow it reads the second volume."
    assert any("\n" in c[2] for c in got)  # long clauses take two lines


def test_chinese_alone_splits_at_its_punctuation_within_the_limits() -> None:
    words = timed(LONG_ZH)
    assert len(words) == sum(1 for ch in LONG_ZH if ch.isalnum())  # one word per Han character
    got = cues(words)
    check_limits(got, words)
    assert "".join(c[2].replace("\n", "") for c in got) == LONG_ZH  # no spaces put in, every mark kept
    assert all(c[2][-1] in "，。；！" for c in got), [c[2] for c in got]
    assert got[0][2] == "今天的天气很好，我们一起去公园散步吧。"


def test_an_abbreviation_point_ends_no_cue() -> None:
    text = "Bring fruit, e.g. apples. Then rest."
    assert [c[2] for c in cues(timed(text))] == ["Bring fruit, e.g. apples.", "Then rest."]


def test_a_paragraph_ends_a_cue() -> None:
    text = "Chapter 3: The Market\n\nWe sold apples and pears.\n\n我们卖苹果。"
    assert [c[2] for c in cues(timed(text))] == ["Chapter 3: The Market", "We sold apples and pears.", "我们卖苹果。"]


def test_a_cue_lasts_at_most_seven_seconds() -> None:
    text = " ".join(["slowly"] * 12) + "."
    words = timed(text, per_char_s=0.25)  # 1.5 s a word: no punctuation inside, the time limit cuts
    got = cues(words)
    check_limits(got, words)
    assert len(got) >= 3 and got[-1][2].endswith("slowly.")


def test_words_without_after_or_text_are_joined_by_spaces() -> None:
    words = timed(MIXED, after=False)
    assert [c[2] for c in cues(words)] == ["Hello there how are you 我很好"]
    assert [c[2] for c in cues(words, MIXED)] == ["Hello there, how are you?", "我很好。"]
    assert [c[2] for c in cues(words, "some other text")] == ["Hello there how are you 我很好"]  # not their spans


def test_opening_marks_lead_the_next_cue_and_vtt_escapes_markup() -> None:
    text = "“Fish & chips,” she said. (Twice.) 他说：“好。”"
    words = timed(text)
    got = [c[2] for c in cues(words, text)]
    assert got == ["“Fish & chips,” she said.", "(Twice.)", "他说：“好。”"]
    assert [c[2] for c in cues(words)] == ["Fish & chips,” she said.", *got[1:]]  # the text's first mark needs the text
    assert "Fish &amp; chips" in to_vtt(words) and "Fish & chips" in to_srt(words)


def test_after_goes_over_the_wire_and_a_record_without_it_still_reads() -> None:
    job = SegmentJob(job_id="abcdefgh12", seg=0, total=1, text="one, two", lang="en", voice="joe", request_voice="joe",
                     format="wav", sample_rate=24000, words=[[0, 3, 0, 3, "one", ", "], [5, 8, 5, 8, "two", ""]])
    assert SegmentJob.from_fields(job.to_fields()).words == [[0, 3, 0, 3, "one", ", "], [5, 8, 5, 8, "two", ""]]
    wire = [[0, 100, 0, 3, "one", 0, ", "], [120, 200, 5, 8, "two", 0, ""]]
    assert [w.after for w in words_from_wire(wire, 0, 100)] == [", ", ""]
    assert [w.after for w in words_from_wire([w[:6] for w in wire], 0, 100)] == [None, None]
    stored = json.loads(json.dumps([w.to_dict() for w in job_words([wire], [300], 100)]))
    assert [Word(**w).after for w in stored] == [", ", ""]
    old = [{k: v for k, v in w.items() if k != "after"} for w in stored]
    assert [Word(**w).after for w in old] == [None, None]


@pytest.mark.parametrize(("source", "end", "nxt", "want"), [
    ("Hi, you", 2, 4, ", "), ("Hi,\n\n  you", 2, None, ",\n"), ("hard\nwrapped", 4, 5, " "), ("end.  ", 3, None, "."),
    ("是2024年", 1, 2, ""), ("ok. $3", 2, None, ". "), ("a" + "-" * 40 + "b", 1, 41, "-" * 16), ("twenty24", 6, 4, ""),
])
def test_word_after(source: str, end: int, nxt: int | None, want: str) -> None:
    assert word_after(source, end, nxt) == want
