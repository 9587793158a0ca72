"""Segmentation and language routing."""

from __future__ import annotations

from pipeline.synth import plan
from pipeline.text.segment import Segmenter, language_runs
from wire.settings import Settings


def test_mixed_text_is_split_into_language_runs_routed_to_voices(settings: Settings) -> None:
    planned = plan("今天天气很好，我们去公园散步吧。Hello from the farm.", None, settings)
    assert [(p.segment.lang, p.voice) for p in planned] == [("zh", "baker"), ("zh", "baker"), ("en", "joe")]
    assert planned[0].segment.text == "今天天气很好，"
    assert planned[-1].segment.pause_after_s == 0.0


def test_numbers_follow_the_run_they_touch() -> None:
    assert language_runs("我有3个苹果", "en") == [("zh", "我有3个苹果")]
    assert language_runs("I have 3 apples, 你呢", "en") == [("en", "I have 3 apples,"), ("zh", "你呢")]
    assert language_runs("跑了5km的路", "en") == [("zh", "跑了5km的路")]


def test_first_segment_is_short_and_later_ones_pack_phrases(settings: Settings) -> None:
    text = ("This is the first phrase, and then a second phrase follows, and a third one, "
            "and a fourth one that keeps going for quite a while longer.")
    segs = Segmenter(settings.frontend).split(text)
    assert segs[0].text == "This is the first phrase,"
    assert len(segs) == 2
    assert segs[0].pause_after_s == settings.frontend.phrase_pause_s


def test_segments_stay_under_the_limit_and_keep_every_word(settings: Settings) -> None:
    words = [("alpha", "bravo", "charlie", "delta", "echo")[i % 5] for i in range(300)]
    segs = Segmenter(settings.frontend).split(" ".join(words) + ".")
    assert all(len(s.text) <= settings.frontend.max_segment_chars for s in segs)
    spoken = " ".join(s.text for s in segs).replace(".", "").split()
    assert len(spoken) == 300


def test_chinese_segments_are_cut_by_characters(settings: Settings) -> None:
    segs = Segmenter(settings.frontend).split("这是一个非常长的句子" * 20)
    assert all(sum(1 for c in s.text if "\u4e00" <= c <= "\u9fff") <= settings.frontend.max_segment_chars_zh for s in segs)
    assert "".join(s.text for s in segs) == "这是一个非常长的句子" * 20


def test_paragraphs_and_sentences_get_their_pauses(settings: Settings) -> None:
    fs = settings.frontend
    segs = Segmenter(fs).split("One. Two.\n\nThree.")
    assert [s.text for s in segs] == ["one.", "two.", "three."] or [s.text for s in segs] == ["One.", "Two.", "Three."]
    assert [s.pause_after_s for s in segs] == [fs.sentence_pause_s, fs.paragraph_pause_s, 0.0]
