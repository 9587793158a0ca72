"""Every bad input named in the design gets a clear error with a stable code, before any heavy work."""

from __future__ import annotations

import pytest

from pipeline import errors
from pipeline.errors import InputError
from pipeline.synth import plan
from producer.submit import prepare_submission
from wire.errors import error_from_dict
from wire.settings import Settings


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", errors.EMPTY_TEXT),
        ("   \n\t  ", errors.EMPTY_TEXT),
        ("\u200b\u200b", errors.EMPTY_TEXT),
        (b"\xff\xfe not utf-8", errors.INVALID_UTF8),
        (b"caf\xc3", errors.INVALID_UTF8),
        ("hello\x00world", errors.CONTROL_CHARACTERS),
        ("bell\x07", errors.CONTROL_CHARACTERS),
        ("hidden \u202e reversed", errors.CONTROL_CHARACTERS),
        ("!!! ... ???", errors.NOTHING_TO_SPEAK),
        ("😀🎉🚀", errors.NOTHING_TO_SPEAK),
        ("。，！", errors.NOTHING_TO_SPEAK),
        ("Привет мир", errors.UNSUPPORTED_LANGUAGE),
        ("Hello Привет", errors.UNSUPPORTED_LANGUAGE),
        ("\ufeff", errors.EMPTY_TEXT),
        ("\t\r\n", errors.EMPTY_TEXT),
        ("\ud800\udc00?", errors.INVALID_UTF8),  # two surrogate code points, not the character they would pair to
        ("abc\ud800def", errors.INVALID_UTF8),
        ("Hello \udfff there.", errors.INVALID_UTF8),
        ("caf\udce9 au lait", errors.INVALID_UTF8),  # a command line's byte 0xE9 under surrogateescape
        ("<speak>Hello \ud800 there.</speak>", errors.INVALID_UTF8),
        ("line\x1bescape", errors.CONTROL_CHARACTERS),
        ("\x85next line", errors.CONTROL_CHARACTERS),
        ("—— ～～ ※", errors.NOTHING_TO_SPEAK),
        (b"", errors.EMPTY_TEXT),
    ],
)
def test_bad_text(settings: Settings, text: str | bytes, code: str) -> None:
    with pytest.raises(InputError) as exc:
        plan(text, None, settings)
    assert exc.value.code == code
    assert isinstance(exc.value, ValueError)


def test_text_that_is_not_valid_unicode_says_where(settings: Settings) -> None:
    """The message names the character by its position (an echo of it could not be written as UTF-8)."""
    with pytest.raises(InputError) as exc:
        plan("abc\ud800def", None, settings)
    assert exc.value.message == "text is not valid Unicode: lone surrogate U+D800 at character 3"
    exc.value.message.encode("utf-8")
    with pytest.raises(InputError) as exc:
        plan("caf\udce9", None, settings)
    assert "byte 0xE9 that is not UTF-8 at character 3" in exc.value.message


@pytest.mark.parametrize("lexicon", [{"Nguy\ud800en": "ŋwˈɪn"}, {"Nguyen": "ŋw\udcffˈɪn"}])
def test_a_lexicon_that_is_not_valid_unicode(settings: Settings, lexicon: dict[str, str]) -> None:
    for call in (lambda: plan("Hello Nguyen.", None, settings, lexicon=lexicon),
                 lambda: prepare_submission(settings, "Hello Nguyen.", lexicon=lexicon)):
        with pytest.raises(InputError) as exc:
            call()
        assert exc.value.code == errors.INVALID_UTF8


def test_text_over_the_limit(settings: Settings) -> None:
    limit = settings.frontend.max_text_chars
    with pytest.raises(InputError) as exc:
        plan("a" * (limit + 1), None, settings)
    assert exc.value.code == errors.TEXT_TOO_LONG


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        ({"voice": "nobody"}, errors.UNKNOWN_VOICE),
        ({"voice": "kumo", "text": "Hello there"}, errors.UNSUPPORTED_LANGUAGE),
        ({"voice": "joe", "text": "你好"}, errors.UNSUPPORTED_LANGUAGE),
        ({"format": "wma"}, errors.UNSUPPORTED_FORMAT),
        ({"format": ""}, errors.UNSUPPORTED_FORMAT),
        ({"sample_rate": 12345}, errors.UNSUPPORTED_SAMPLE_RATE),
        ({"sample_rate": -1}, errors.UNSUPPORTED_SAMPLE_RATE),
        ({"lane": "vip"}, errors.BAD_OPTION),
        ({"options": {"speed": 0}}, errors.BAD_OPTION),
        ({"options": {"speed": 100}}, errors.BAD_OPTION),
        ({"options": {"speed": float("nan")}}, errors.BAD_OPTION),
        ({"options": {"noise_scale": -1}}, errors.BAD_OPTION),
        ({"options": {"pitch": 1}}, errors.BAD_OPTION),
        ({"options": {"speed": "fast"}}, errors.BAD_OPTION),
        ({"deadline_s": -5}, errors.BAD_OPTION),
        ({"deadline_s": 1e12}, errors.BAD_OPTION),
        ({"chunk_ms": 10**9}, errors.BAD_OPTION),
        ({"chunk_ms": 0}, errors.BAD_OPTION),
        ({"chunk_ms": -40}, errors.BAD_OPTION),
        ({"options": {"noise_w": 1e9}}, errors.BAD_OPTION),
        ({"options": {"speed": -1.0}}, errors.BAD_OPTION),
        ({"options": {"speed": float("inf")}}, errors.BAD_OPTION),
        ({"text": "x" * 1_000_001}, errors.TEXT_TOO_LONG),
        ({"text": "abc\ud800def", "voice": "nobody"}, errors.INVALID_UTF8),  # the text is checked first
    ],
)
def test_bad_requests(settings: Settings, request_: dict, code: str) -> None:
    text = request_.pop("text", "Hello there. 你好。")
    with pytest.raises(InputError) as exc:
        prepare_submission(settings, text, **request_)
    assert exc.value.code == code


def test_errors_round_trip_by_code() -> None:
    err = InputError("bad", code=errors.UNKNOWN_VOICE)
    again = error_from_dict(err.to_dict())
    assert isinstance(again, InputError) and again.code == errors.UNKNOWN_VOICE
    model = error_from_dict({"code": errors.MODEL_MISSING, "message": "x"})
    assert isinstance(model, RuntimeError)
    assert str(err) == "[UNKNOWN_VOICE] bad"


def test_a_job_record_whose_text_is_not_unicode_is_malformed() -> None:
    """A record written around the SDK (JSON's "\\ud800" escape) reaches a worker as MALFORMED_JOB, never as text
    to speak."""
    import dataclasses
    import json

    from wire.records import SegmentJob

    job = SegmentJob(job_id="bad-text-0001", seg=0, total=1, text="abc\ud800def", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=22050)
    with pytest.raises(InputError) as exc:
        SegmentJob.from_fields({"v": str(job.v), "job": json.dumps(dataclasses.asdict(job))})
    assert exc.value.code == errors.MALFORMED_JOB and "text" in exc.value.message
