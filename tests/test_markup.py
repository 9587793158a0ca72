"""Pronunciation control: a lexicon and the SSML subset change what is spoken (checked by the phonemes and
pinyin the voices read, and once by the recognizer); bad markup or a bad lexicon gets a stable code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pipeline.errors import BAD_LEXICON, BAD_SSML, InputError
from pipeline.synth import Synthesizer, plan
from pipeline.text.lexicon import apply_lexicon, check_lexicon, protect, restore
from pipeline.text.ssml import parse_ssml
from pipeline.voices.base import SynthesisOptions
from producer.submit import prepare_submission
from wire.settings import Settings


@pytest.fixture(scope="module")
def synth(base_settings: Settings) -> Synthesizer:
    return Synthesizer(base_settings)


def _read(synth: Synthesizer, text: str, **kw: Any) -> tuple[str, str]:
    """(pinyin, phonemes) of every segment of ``text`` with the default voice, as `ttsfarm phonemize` shows."""
    items = synth.phonemize(text, None, **kw)
    return (" ".join(p for _, ph in items for p in ph.pinyin), " ".join(ph.phonemes for _, ph in items))


# -- lexicon ---------------------------------------------------------------------------------------------------


def test_lexicon_changes_a_chinese_reading(synth: Synthesizer) -> None:
    plain, _ = _read(synth, "我听过单田芳的评书。")
    assert "dan1 tian2 fang1" in plain  # the surname 单 is shan4; the dictionary does not know
    read, _ = _read(synth, "我听过单田芳的评书。", lexicon={"单田芳": "shan4 tian2 fang1"})
    assert "shan4 tian2 fang1" in read and "dan1" not in read
    assert read.replace("shan4", "dan1") == plain  # nothing else changed


def test_lexicon_changes_an_english_reading(synth: Synthesizer) -> None:
    _, plain = _read(synth, "I met Nguyen at the station.")
    _, read = _read(synth, "I met Nguyen at the station.", lexicon={"Nguyen": "ŋwˈɪn"})
    assert "ŋwˈɪn" in read and "ŋwˈɪn" not in plain
    _, again = _read(synth, "nguyen, NGUYEN.", lexicon={"Nguyen": "[[ŋwˈɪn]]"})  # any case, brackets or not
    assert again.count("ŋwˈɪn") == 2


def test_lexicon_words_are_whole_words_in_english_anywhere_in_chinese() -> None:
    lex = check_lexicon({"Ana": "ˈɑːnə", "重庆": "chong2 qing4"})
    assert apply_lexicon("Ana, Banana and ana. 去重庆市", lex) == "[[ˈɑːnə]], Banana and [[ˈɑːnə]]. 去[[chong2 qing4]]市"


def test_blocks_survive_segmentation_whole(base_settings: Settings) -> None:
    text = "今天2024年我去[[chong2 qing4]]。Then [[ŋwˈɪn]] read 3 books, [[ŋwˈɪn]] said."
    protected, blocks = protect(text)
    assert "[[" not in protected and restore(protected, blocks).split() == text.split()
    segs = [p.segment for p in plan(text, None, base_settings)]
    joined = " ".join(s.text for s in segs)
    assert "[[chong2 qing4]]" in joined and joined.count("[[ŋwˈɪn]]") == 2 and "three books" in joined
    assert next(s for s in segs if "chong2" in s.text).lang == "zh"


@pytest.mark.parametrize("lexicon", [
    {"重庆": "chong qing"},       # no tones
    {"重庆": "zzz2 qing4"},       # not a Mandarin syllable
    {"Nguyen": "ng<u>yen"},       # markup in phonemes
    {"Nguyen": "nu9en"},          # digits are not phonemes
    {"": "a"},
    {"x" * 65: "a"},
])
def test_bad_lexicon_is_refused(base_settings: Settings, lexicon: Any) -> None:
    with pytest.raises(InputError) as err:
        prepare_submission(base_settings, "我去重庆见Nguyen。", lexicon=lexicon)
    assert err.value.code == BAD_LEXICON


@pytest.mark.parametrize("lexicon", [["重庆"], {"重庆": 3}, "重庆=chong2 qing4"])
def test_a_lexicon_of_the_wrong_type_is_a_bad_option(base_settings: Settings, lexicon: Any) -> None:
    with pytest.raises(InputError) as err:
        prepare_submission(base_settings, "我去重庆。", lexicon=lexicon)
    assert err.value.code == "BAD_OPTION"


# -- SSML ------------------------------------------------------------------------------------------------------


def test_ssml_phoneme_and_sub_change_what_is_read(synth: Synthesizer) -> None:
    _, plain = _read(synth, "I like tomato soup.")
    _, ssml = _read(synth, '<speak>I like <phoneme alphabet="ipa" ph="təmˈɑːtoʊ">tomato</phoneme> soup.</speak>')
    assert "təmˈɑːtoʊ" in ssml and ssml != plain
    _, sub = _read(synth, '<speak>Visit the <sub alias="World Wide Web">WWW</sub>.</speak>')
    _, spoken = _read(synth, "Visit the World Wide Web.")
    assert sub == spoken
    pinyin, _ = _read(synth, '<speak>我在<phoneme alphabet="x-pinyin" ph="zhong4 qing4">重庆</phoneme>。</speak>')
    assert "zhong4 qing4" in pinyin and "chong2" not in pinyin


def test_ssml_say_as(synth: Synthesizer) -> None:
    _, chars = _read(synth, '<speak>Call <say-as interpret-as="characters">NYC</say-as>.</speak>')
    _, spelled = _read(synth, "Call en why see.")
    assert chars == spelled
    _, cardinal = _read(synth, '<speak>In <say-as interpret-as="cardinal">2024</say-as> rooms.</speak>')
    _, year = _read(synth, "In 2024 rooms.")  # a bare 2024 reads as a year
    assert cardinal == _read(synth, "In two thousand twenty-four rooms.")[1] and cardinal != year
    _, date = _read(synth, '<speak>Due <say-as interpret-as="date" format="mdy">03/05/2024</say-as>.</speak>')
    assert date == _read(synth, "Due March fifth, twenty twenty-four.")[1]
    pinyin, _ = _read(synth, '<speak>号码是<say-as interpret-as="characters">2024</say-as>。</speak>')
    assert "er4 ling2 er4 si4" in pinyin
    pinyin, _ = _read(synth, '<speak>一共<say-as interpret-as="cardinal">2024</say-as>个。</speak>')
    assert "liang3 qian1" in pinyin or "er4 qian1" in pinyin
    pinyin, _ = _read(synth, '<speak>日期是<say-as interpret-as="date">2024-03-05</say-as>。</speak>')
    assert "san1 yue4 wu3 ri4" in pinyin


def test_ssml_break_and_prosody_rate_reach_the_jobs(base_settings: Settings) -> None:
    sub = prepare_submission(base_settings, '<speak>First part.<break time="1200ms"/>Second part. '
                                            '<prosody rate="50%">Slowly now.</prosody></speak>', options={"speed": 1.2})
    texts = [s.text for s in sub.segments]
    assert texts == ["First part.", "Second part.", "Slowly now."]
    assert sub.segments[0].pause_s == pytest.approx(1.2)
    assert [s.options["speed"] for s in sub.segments] == pytest.approx([1.2, 1.2, 0.6])
    nested = parse_ssml('<speak><prosody rate="slow">a <prosody rate="200%">b</prosody></prosody></speak>')
    assert [(s.text, s.rate) for s in nested] == [("a", 0.75), ("b", 1.5)]


def test_ssml_break_and_rate_change_the_audio(synth: Synthesizer) -> None:
    opts = SynthesisOptions.noiseless()
    plain = synth.synthesize("<speak>One two three. Four five six.</speak>", "joe", opts)
    paused = synth.synthesize('<speak>One two three.<break time="2s"/>Four five six.</speak>', "joe", opts)
    slow = synth.synthesize('<speak><prosody rate="x-slow">One two three. Four five six.</prosody></speak>', "joe", opts)
    gap = paused.duration_s - plain.duration_s
    assert 1.6 <= gap <= 2.1, gap  # 2 s instead of the sentence pause
    assert slow.duration_s > 1.5 * (plain.duration_s - 0.4)
    silent = np.abs(paused.audio) < 1e-3
    runs = np.diff(np.flatnonzero(np.diff(silent.astype(np.int8)) != 0))
    assert runs.max() >= 1.9 * paused.sample_rate  # one stretch of silence of two seconds


@pytest.mark.parametrize(("text", "what"), [
    ("<speak>Hello <emphasis>there</emphasis></speak>", "<emphasis> is not supported"),
    ("<speak>Hello <break time='1s'></speak>", "not well-formed"),
    ("<speak>Hello <break time='forever'/></speak>", "500ms"),
    ("<speak>Hello <break time='20s'/></speak>", "longer than"),
    ("<speak>Hi <prosody rate='warp'>x</prosody></speak>", "prosody rate"),
    ("<speak>Hi <prosody pitch='high'>x</prosody></speak>", "does not take pitch"),
    ("<speak>Hi <say-as interpret-as='telephone'>555</say-as></speak>", "characters, cardinal, date"),
    ("<speak>Hi <say-as interpret-as='cardinal'>many</say-as></speak>", "not a whole number"),
    ("<speak>Hi <say-as interpret-as='date'>2024-13-45</say-as></speak>", "not a date"),
    ("<speak>Hi <phoneme alphabet='x-sampa' ph='h@U'>ho</phoneme></speak>", "ipa"),
    ("<speak>Hi <phoneme alphabet='x-pinyin' ph='chong qing'>重庆</phoneme></speak>", "tone"),
    ("<speak>Hi <sub>WWW</sub></speak>", "alias"),
    ("<voice name='x'>Hi</voice>", "<voice> is not supported"),  # ssml=True: wrapped in <speak>
    ('<!DOCTYPE speak [<!ENTITY a "aaaa">]><speak>&a;</speak>', "DOCTYPE"),
])
def test_bad_ssml_is_refused_never_read(base_settings: Settings, text: str, what: str) -> None:
    with pytest.raises(InputError) as err:
        prepare_submission(base_settings, text, ssml=True)
    assert err.value.code == BAD_SSML and what in err.value.message, err.value.message


def test_ssml_is_detected_and_can_be_turned_off(base_settings: Settings) -> None:
    assert [s.text for s in prepare_submission(base_settings, "<speak>Hi <break/> you.</speak>").segments] == ["Hi", "you."]
    with pytest.raises(InputError) as err:
        prepare_submission(base_settings, "<speak>Hi</speak>", ssml="yes")
    assert err.value.code == "BAD_OPTION"


@pytest.mark.slow
def test_the_recognizer_hears_what_the_markup_says(synth: Synthesizer, base_settings: Settings) -> None:
    from pipeline.prepare.intelligibility import transcribe

    opts = SynthesisOptions.noiseless()
    out = synth.synthesize('<speak>Please visit the <sub alias="public library">PL</sub> on '
                           '<say-as interpret-as="date" format="mdy">03/05/2024</say-as>.</speak>', "joe", opts)
    heard = transcribe(out.audio, out.sample_rate, "en", base_settings.runtime.cache_dir).lower()
    assert "public library" in heard and "march" in heard, heard
    out = synth.synthesize("我们明天去单田芳家。", "default", opts, lexicon={"单田芳": "shan4 tian2 fang1"})
    heard_zh = transcribe(out.audio, out.sample_rate, "zh", base_settings.runtime.cache_dir)
    plain = synth.synthesize("我们明天去单田芳家。", "default", opts)
    heard_plain = transcribe(plain.audio, plain.sample_rate, "zh", base_settings.runtime.cache_dir)
    assert heard_zh != heard_plain and "明天" in heard_zh, (heard_zh, heard_plain)
