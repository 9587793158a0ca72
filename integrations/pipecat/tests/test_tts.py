"""The service through Pipecat's own test pipeline (``pipecat.tests.utils.run_test``) against a real farm gateway at
``TTSFARM_GATEWAY_URL`` (the farm's tests/test_integrations.py starts one)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_ttsfarm import TTSFarmTTSService

BASE_URL = os.environ.get("TTSFARM_GATEWAY_URL", "")
pytestmark = pytest.mark.skipif(not BASE_URL, reason="TTSFARM_GATEWAY_URL names no farm gateway")

LONG = " ".join(f"Sentence number {i} of a long answer is read now." for i in range(10))


def run(frames: Iterable[Frame], observers: Sequence[BaseObserver] = (),
        **options: Any) -> tuple[TTSFarmTTSService, Sequence[Frame], Sequence[Frame]]:
    tts = TTSFarmTTSService(base_url=BASE_URL, **{"voice": "joe", **options})
    sent = frames if isinstance(frames, Sequence) else cast(Sequence[Frame], frames)  # run_test iterates it once
    down, up = asyncio.run(asyncio.wait_for(run_test(tts, frames_to_send=sent, observers=list(observers)), 120))
    return tts, down, up


def of(kind: type, frames: Sequence[Frame]) -> list[Any]:
    return [f for f in frames if isinstance(f, kind)]


def job_state(job_id: str) -> str:
    with urllib.request.urlopen(f"{BASE_URL}/v1/jobs/{job_id}", timeout=10) as r:
        return json.loads(r.read())["state"]


def test_speak_gives_audio_frames_and_timed_words() -> None:
    text = "Hello from the farm. Each word comes back with its time."
    _, down, up = run([TTSSpeakFrame(text)])
    audio = of(TTSAudioRawFrame, down)
    assert not of(ErrorFrame, up) and audio and all(f.sample_rate == 24000 and f.num_channels == 1 for f in audio)
    assert sum(len(f.audio) for f in audio) / 2 / 24000 > 2.0
    assert " ".join(f.text for f in of(TTSTextFrame, down)).split() == text.split()
    kinds = [type(f) for f in down if isinstance(f, (TTSStartedFrame, TTSAudioRawFrame, TTSStoppedFrame))]
    assert kinds[0] is TTSStartedFrame and kinds[-1] is TTSStoppedFrame


def test_an_llm_turn_in_pieces_is_one_context() -> None:
    pieces = ["Sure, ", "here is the answer. ", "It comes in pieces", " and ends without a full stop"]
    tts, down, up = run([LLMFullResponseStartFrame(), *[LLMTextFrame(p) for p in pieces], LLMFullResponseEndFrame()],
                        sample_rate=16000)
    assert not of(ErrorFrame, up) and len(tts.jobs) == 1
    assert all(f.sample_rate == 16000 for f in of(TTSAudioRawFrame, down))
    words = " ".join(f.text for f in of(TTSTextFrame, down)).split()
    assert words == "".join(pieces).split() and job_state(next(iter(tts.jobs.values()))) == "done"


class Heard(BaseObserver):
    """Whether audio has come down the pipeline yet."""

    def __init__(self) -> None:
        super().__init__()
        self.audio = False

    async def on_push_frame(self, data: FramePushed) -> None:
        self.audio = self.audio or isinstance(data.frame, TTSAudioRawFrame)


def once_heard(heard: Heard, frames: Sequence[Frame], then: Sequence[Frame], wait_s: float = 60.0) -> Iterator[Frame]:
    """``frames``, then short sleeps until audio has come (``run_test`` takes the next frame after each), then ``then``:
    a caller talks over the bot once it speaks, however long the farm takes to start on a loaded machine."""
    yield from frames
    deadline = time.monotonic() + wait_s
    while not heard.audio and time.monotonic() < deadline:
        yield SleepFrame(0.05)
    yield from then


def test_an_interruption_cancels_the_farm_job() -> None:
    heard = Heard()
    tts, down, _ = run(once_heard(heard, [LLMFullResponseStartFrame(), LLMTextFrame(LONG), LLMFullResponseEndFrame()],
                                  [SleepFrame(0.3), InterruptionFrame(), SleepFrame(0.5)]), observers=[heard])
    assert of(TTSAudioRawFrame, down) and len(tts.jobs) == 1
    job_id = next(iter(tts.jobs.values()))
    deadline = time.monotonic() + 10
    while (state := job_state(job_id)) != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state == "cancelled"


def test_a_farm_error_is_an_error_frame_with_its_code() -> None:
    _, down, up = run([TTSSpeakFrame("Hello."), SleepFrame(1.0)], voice="no-such-voice")
    errors = of(ErrorFrame, up)
    assert errors and "UNKNOWN_VOICE" in errors[0].error and not of(TTSAudioRawFrame, down)
