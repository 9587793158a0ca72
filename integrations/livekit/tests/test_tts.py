"""The plugin through LiveKit's own TTS interfaces (``synthesize``, ``stream``: push_text, flush, end_input, aclose) under
asyncio, against a real farm gateway at ``TTSFARM_GATEWAY_URL`` (the farm's tests/test_integrations.py starts one)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from livekit.agents import APIStatusError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

from livekit.plugins import ttsfarm

BASE_URL = os.environ.get("TTSFARM_GATEWAY_URL", "")
METRICS_URL = os.environ.get("TTSFARM_WORKER_METRICS_URL", "")  # the serving worker's, where the farm's tests say
WORKER_PID = int(os.environ.get("TTSFARM_WORKER_PID") or 0)  # the serving worker process (Linux: /proc)
LOOPS = int(os.environ.get("TTSFARM_WORKER_LOOPS") or 0)  # its inference loops
pytestmark = pytest.mark.skipif(not BASE_URL, reason="TTSFARM_GATEWAY_URL names no farm gateway")

TEXT = "Hello from the farm. This answer is streamed word by word, with its timings."
LONG = " ".join(f"Sentence number {i} of a long answer is read now." for i in range(10))


def run(scenario: Callable[[ttsfarm.TTS], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        t = ttsfarm.TTS(base_url=BASE_URL, **{"voice": "joe", **options})
        try:
            return await asyncio.wait_for(scenario(t), 120)
        finally:
            await t.aclose()

    return asyncio.run(main())


def words_of(events: list[tts.SynthesizedAudio]) -> list[Any]:
    return [w for ev in events for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]


async def windows_made() -> float:
    """How many vocoder windows the serving worker has made (its ``ttsfarm_vocoder_windows_total``)."""
    async with aiohttp.ClientSession() as http, http.get(METRICS_URL) as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("ttsfarm_vocoder_windows_total{"))


def cpu_s(pid: int) -> float:
    """CPU time a process has used (Linux)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def quiet(until: float) -> tuple[float, float]:
    """Wait until the worker has made no window for a second, at most until ``until`` (monotonic): its window count
    then, and when it made the last."""
    last, since = await windows_made(), time.monotonic()
    while time.monotonic() - since < 1.0 and time.monotonic() < until:
        await asyncio.sleep(0.1)
        if (now := await windows_made()) != last:
            last, since = now, time.monotonic()
    return last, since


async def job_state(job_id: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{BASE_URL}/v1/jobs/{job_id}") as r:
        return (await r.json())["state"]


def test_capabilities_and_format() -> None:
    t = ttsfarm.TTS(base_url=BASE_URL)
    assert t.capabilities.streaming and t.capabilities.aligned_transcript
    assert t.sample_rate == 24000 and t.num_channels == 1 and t.provider == "ttsfarm"
    assert ttsfarm.TTS(base_url=BASE_URL, sample_rate=16000).sample_rate == 16000


def test_stream_word_by_word_gives_audio_and_aligned_words() -> None:
    async def scenario(t: ttsfarm.TTS) -> list[tts.SynthesizedAudio]:
        stream = t.stream()
        for word in TEXT.split(" "):
            stream.push_text(word + " ")
        stream.end_input()
        events = [ev async for ev in stream]
        await stream.aclose()
        return events

    events = run(scenario)
    seconds = sum(ev.frame.duration for ev in events)
    assert all(ev.frame.sample_rate == 24000 for ev in events) and 3.0 < seconds < 12.0
    assert events[-1].is_final and len({ev.request_id for ev in events}) == 1
    words = words_of(events)
    assert "".join(words).split() == TEXT.split()
    starts = [w.start_time for w in words]
    assert starts == sorted(starts) and words[-1].end_time <= seconds + 0.05


def test_synthesize_collects_one_frame() -> None:
    async def scenario(t: ttsfarm.TTS) -> Any:
        return await t.synthesize("A short sentence to synthesize.").collect()

    frame = run(scenario, sample_rate=16000)
    assert frame.sample_rate == 16000 and 1.0 < frame.duration < 6.0


def test_flush_speaks_mid_sentence_before_the_end_of_input() -> None:
    async def scenario(t: ttsfarm.TTS) -> tuple[float, float]:
        stream = t.stream()
        stream.push_text("This turn has no end yet")
        stream.flush()
        first = await anext(aiter(stream))  # audio with the input still open
        stream.push_text(" but it ends now.")
        stream.end_input()
        rest = [ev async for ev in stream]
        await stream.aclose()
        return first.frame.duration, sum(ev.frame.duration for ev in rest)

    first, rest = run(scenario)
    assert first > 0 and rest > 0.5


def test_aclose_interrupts_and_the_farm_cancels_the_job() -> None:
    async def scenario(t: ttsfarm.TTS) -> tuple[str, float]:
        stream = t.stream()
        stream.push_text(LONG)
        stream.end_input()
        first = await anext(aiter(stream))
        started = time.monotonic()
        await stream.aclose()
        deadline = time.monotonic() + 10
        while (state := await job_state(first.request_id)) != "cancelled" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return state, time.monotonic() - started

    state, took = run(scenario)
    assert state == "cancelled" and took < 5


@pytest.mark.skipif(not (METRICS_URL and WORKER_PID and LOOPS), reason="the farm's tests name no worker to watch")
def test_closing_a_stream_after_its_first_audio_lets_only_the_units_in_flight_finish() -> None:
    """Ten sentences asked for, the stream closed at its first audio: each of the worker's loops finishes only the
    units it has in flight (a window, or a segment's acoustic pass and first window, whose publish finds the job
    cancelled), then the worker is idle: its CPU over the next second, from /proc."""

    async def scenario(t: ttsfarm.TTS) -> tuple[float, float, float, float]:
        await quiet(time.monotonic() + 15)  # what an earlier test left in flight is done
        stream = t.stream()
        stream.push_text(LONG)
        stream.end_input()
        first = await anext(aiter(stream))
        cpu_at_close, closed = cpu_s(WORKER_PID), time.monotonic()
        await stream.aclose()
        at_close = await windows_made()  # (read after the close: a stall here counts nothing)
        while await job_state(first.request_id) != "cancelled" and time.monotonic() < closed + 10:
            await asyncio.sleep(0.05)
        last, since = await quiet(closed + 10)  # the units in flight end
        cpu0, t0 = cpu_s(WORKER_PID), time.monotonic()
        spent = cpu0 - cpu_at_close
        await asyncio.sleep(1.0)
        return last - at_close, since - closed, spent, (cpu_s(WORKER_PID) - cpu0) / (time.monotonic() - t0)

    after, settled_s, spent, idle = run(scenario)
    print(f"after the close: {after:.0f} windows by {LOOPS} loops, the last {settled_s:.2f} s after it, "
          f"{spent:.2f} s of CPU until then; then the worker at {idle:.0%} of a core")
    # each loop finishes the units it holds of the job (one per segment, a loop may hold two): never the job's rest
    assert after <= 2 * LOOPS, f"{after} windows made after the close by {LOOPS} loops"
    assert idle < 0.5, f"the worker used {idle:.0%} of a core a second after the job's last window"


def test_words_every_30_ms_are_heard_while_the_answer_is_still_written() -> None:
    """An LLM's answer pushed a word every 30 ms: the first sentence is heard while the rest is still being pushed
    (a plugin that waited for the end of input would be heard after it). The delay from the first sentence's last
    word to its first audio is printed (docs/AGENTS.md records it; the farm's goal: 500 ms)."""
    first_sentence = "Hello from the farm, your answer starts now."
    rest = " ".join(f"Then part {i} of the answer follows it." for i in range(12))

    async def scenario(t: ttsfarm.TTS) -> tuple[float, float]:
        stream = t.stream()
        marks: dict[str, float] = {}

        async def write() -> None:
            words = f"{first_sentence} {rest}".split(" ")
            for i, word in enumerate(words):
                stream.push_text(word + " ")
                if i == len(first_sentence.split(" ")) - 1:
                    marks["sentence"] = time.monotonic()
                await asyncio.sleep(0.03)
            marks["written"] = time.monotonic()
            stream.end_input()

        writer = asyncio.create_task(write())
        await anext(aiter(stream))
        heard = time.monotonic()
        await writer
        _ = [ev async for ev in stream]
        await stream.aclose()
        return heard - marks["sentence"], marks["written"] - heard

    delay, ahead = run(scenario)
    print(f"first audio {delay * 1000:.0f} ms after the first sentence's last word; {ahead:.2f} s before the last word")
    assert ahead > 0, f"first heard {-ahead:.2f} s after the whole answer was written"


def test_a_farm_error_is_an_api_status_error_with_its_code() -> None:
    async def scenario(t: ttsfarm.TTS) -> None:
        await t.synthesize("Hello.").collect()

    with pytest.raises(APIStatusError) as info:
        run(scenario, voice="no-such-voice")
    assert info.value.body["code"] == "UNKNOWN_VOICE" and not info.value.retryable


def test_two_streams_share_one_socket() -> None:
    async def scenario(t: ttsfarm.TTS) -> tuple[int, int, int]:
        async def speak(text: str) -> int:
            async with t.stream() as stream:
                stream.push_text(text)
                stream.end_input()
                return len([ev async for ev in stream])

        counts = await asyncio.gather(speak("The first of two streams."), speak("And the second one, at once."))
        return *counts, id(t._socket)

    first, second, _ = run(scenario)
    assert first > 0 and second > 0
