"""Word timings and captions on a real farm: real redis-server, a real Celery worker, real voices.

Each job's words are checked against what was submitted (every spoken word of the original text is
covered, in order, by character offsets into it), against the audio (monotonic, inside it), across the
streamed chunks (each word exactly once, in the chunk it ends in) and against a recognizer's forced
alignment (faster-whisper word timestamps) within the bound docs/lab/word-timings-and-encoders.md states.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import from_pcm16
from pipeline.captions import render, to_srt, to_vtt
from pipeline.text.sources import word_after
from wire.records import Word, merge_words
from tests.conftest import Farm

pytestmark = pytest.mark.slow

BOUND_ZH_S = 0.100  # the same, Chinese (baker) against whisper base: measured 46 ms
BOUND_S = 0.120  # docs/lab/word-timings-and-encoders.md: the bound this test holds (goal 60 ms; see there why)

TEXTS = [
    "Dr. Smith paid $3.50 on 3/5/2024, and the train left at 7:30 pm.",
    "2024年3月5日，我花了12.5元。Hello world, it is 5km away!",
    "We sell coffee and tea.\n\nThe second paragraph has 1,500 people in it.",
]


def _spoken_chars(text: str) -> list[int]:
    """Indexes of the letters, digits and Han characters of ``text``: what a reader says."""
    return [i for i, c in enumerate(text) if c.isalnum()]


def _check_words(text: str, words: list[Word], duration_s: float) -> None:
    assert words, "no words"
    covered = set()
    for w in words:
        assert 0 <= w.char_start < w.char_end <= len(text)
        assert w.text == text[w.char_start : w.char_end]
        assert 0 <= w.start_s <= w.end_s <= duration_s + 1e-3, w
        covered.update(range(w.char_start, w.char_end))
    for i, w in enumerate(words):  # what follows each word, for captions: up to the next word
        assert w.after == word_after(text, w.char_end, words[i + 1].char_start if i + 1 < len(words) else None), w
    for a, b in zip(words, words[1:]):
        assert a.char_end <= b.char_start, (a, b)  # in the text's order, no overlap
        assert a.end_s <= b.start_s + 1e-3, (a, b)  # monotonic in time
    missing = [text[i] for i in _spoken_chars(text) if i not in covered]
    assert not missing, f"not covered: {missing}"


@pytest.mark.parametrize("text", TEXTS)
def test_words_cover_the_text_in_order_inside_the_audio(farm: Farm, text: str) -> None:
    client = farm.client()
    job = client.submit(text, chunk_ms=200)
    chunks = list(job.stream(timeout=180))
    pcm = b"".join(c.pcm for c in chunks)
    rate = chunks[0].sample_rate
    duration = len(pcm) / 2 / rate
    result = job.wait(timeout=60)
    _check_words(text, list(result.words), duration)
    # The chunks carry the same words, each once, in the chunk during which it ends.
    streamed = [w for c in chunks for w in c.words]
    assert merge_words(streamed) == list(result.words)
    at = 0
    for c in chunks:
        end = at + len(c.pcm) // 2
        for w in c.words:
            assert at / rate - 1e-3 <= w.end_s <= end / rate + 1e-3 or c.last
        at = end
    # "2024年" is one span read as four syllables; "$3.50" one span read as five words.
    spans = {w.text for w in result.words}
    assert ("2024" in spans) or ("$3.50" in spans) or ("1,500" in spans)


def test_async_client_gets_the_same_words(farm: Farm) -> None:
    import asyncio

    from producer.aio import AsyncClient

    text = TEXTS[1]

    async def go() -> tuple[list[Word], list[Word]]:
        async with AsyncClient.from_url(settings=farm.settings) as client:
            job = await client.submit(text, voice="default", chunk_ms=300)
            streamed = [w async for c in job.stream(timeout=120) for w in c.words]
            return streamed, list((await job.wait(timeout=30)).words)

    streamed, words = asyncio.run(go())
    sync_job = farm.client().submit(text, voice="default", chunk_ms=300)
    list(sync_job.stream(timeout=120))
    sync_words = list(sync_job.wait(timeout=30).words)
    assert merge_words(streamed) == words
    # the same text, voice and options: the same words and spans; times within noise of the stochastic voice
    assert [(w.text, w.char_start, w.char_end) for w in words] == [(w.text, w.char_start, w.char_end) for w in sync_words]


def test_joe_timings_match_the_recognizer(farm: Farm, tmp_path: Path) -> None:
    from pipeline.prepare.timing_eval import boundary_errors, recognized_words

    text = "The quick brown fox jumps over the lazy dog near the river bank. She sells sea shells by the sea shore."
    client = farm.client()
    job = client.submit(text, voice="joe")
    pcm, rate = job.audio(timeout=180)
    words = job.wait(timeout=60).words
    theirs = recognized_words(from_pcm16(pcm), rate, "en", farm.settings.runtime.cache_dir)
    errors = boundary_errors([(w.text, w.start_s, w.end_s) for w in words], theirs)
    assert len(errors) >= 2 * 15, (words, theirs)
    assert float(np.median(errors)) <= BOUND_S, f"median {np.median(errors) * 1000:.0f} ms"


def test_baker_timings_per_character_match_the_recognizer(farm: Farm) -> None:
    from pipeline.prepare.timing_eval import han_boundary_errors, recognized_words

    text = "我们明天早上八点在学校门口见面。这家饭店的菜做得非常好吃。"
    job = farm.client().submit(text, voice="baker")
    pcm, rate = job.audio(timeout=180)
    words = list(job.wait(timeout=60).words)
    _check_words(text, words, len(pcm) / 2 / rate)
    assert [w.text for w in words] == [c for c in text if c.isalnum()] and not any(w.approx for w in words)
    theirs = recognized_words(from_pcm16(pcm), rate, "zh", farm.settings.runtime.cache_dir)
    errors = han_boundary_errors([(w.text, w.start_s, w.end_s) for w in words], theirs)
    assert len(errors) >= 2 * 6, (words, theirs)
    assert float(np.median(errors)) <= BOUND_ZH_S, f"median {np.median(errors) * 1000:.0f} ms"


def test_kokoro_words_are_flagged_approximate(farm: Farm) -> None:
    text = "今天天气很好，我们去公园散步吧。"
    job = farm.client().submit(text, voice="kumo")
    pcm, rate = job.audio(timeout=180)
    words = list(job.wait(timeout=60).words)
    _check_words(text, words, len(pcm) / 2 / rate)
    assert all(w.approx for w in words)


def test_submit_writes_captions_that_parse(farm: Farm, tmp_path: Path) -> None:
    env = {**farm.env, "PATH": "/usr/bin:/bin"}
    for ext in ("vtt", "srt"):
        out = tmp_path / f"out.{ext}"
        subprocess.run([sys.executable, "-m", "cli", "submit", "Hello from the farm. It is 5km away.",
                        "-o", str(tmp_path / "a.wav"), "--captions", str(out)], env=env, check=True, timeout=180,
                       capture_output=True)
        cues = _parse_vtt(out.read_text()) if ext == "vtt" else _parse_srt(out.read_text())
        assert [c[2] for c in cues] == ["Hello from the farm.", "It is 5km away."]
        assert all(s < e for s, e, _ in cues) and cues[0][1] <= cues[1][0]


def test_a_mixed_job_has_a_cue_per_sentence_with_its_punctuation(farm: Farm) -> None:
    text = "Hello there, how are you? 我很好。"
    words = list(farm.client().submit(text).wait(timeout=180).words)
    for fmt in ("vtt", "srt"):  # from the words alone, as the gateway and a book's chapters have them
        got = _parse_vtt(render(words, fmt)) if fmt == "vtt" else _parse_srt(render(words, fmt))
        assert [c[2] for c in got] == ["Hello there, how are you?", "我很好。"]
        assert got[0][0] == pytest.approx(words[0].start_s, abs=1e-3) and got[0][1] <= got[1][0]
        assert got[-1][1] == pytest.approx(words[-1].end_s, abs=1e-3)


_STAMP = r"(\d\d):(\d\d):(\d\d)[.,](\d{3})"


def _secs(m: tuple[str, ...]) -> float:
    h, mi, s, ms = (int(x) for x in m)
    return h * 3600 + mi * 60 + s + ms / 1000


def _parse_vtt(data: str) -> list[tuple[float, float, str]]:
    blocks = data.strip().split("\n\n")
    assert blocks[0].strip() == "WEBVTT"
    return [_cue(block.splitlines()) for block in blocks[1:]]


def _parse_srt(data: str) -> list[tuple[float, float, str]]:
    out = []
    for i, block in enumerate(data.strip().split("\n\n"), 1):
        lines = block.splitlines()
        assert lines[0] == str(i)
        out.append(_cue(lines[1:]))
    return out


def _cue(lines: list[str]) -> tuple[float, float, str]:
    m = re.fullmatch(_STAMP + " --> " + _STAMP, lines[0])
    assert m, lines
    return _secs(m.groups()[:4]), _secs(m.groups()[4:]), " ".join(lines[1:])


def test_captions_from_words_without_text() -> None:
    words = [Word("今", 0.0, 0.2, 0, 1), Word("天", 0.2, 0.4, 1, 2), Word("Hi", 0.5, 0.7, 2, 4)]
    assert _parse_vtt(to_vtt(words)) == [(0.0, 0.7, "今天 Hi")]
    assert _parse_srt(to_srt(words)) == [(0.0, 0.7, "今天 Hi")]
