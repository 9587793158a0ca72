"""The gateway's OpenAI edges and encoded streams, end to end (real redis-server, a real worker process,
uvicorn), with the OpenAI Python SDK as a user's client: MP3, Opus and AAC stream as they are made in one
container and decode to the job's duration; stored outputs too; models, voices, speed, instructions."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from pipeline.encoders import MP3_PRIMING, mp3_frame_samples
from tests.gateway_server import BackgroundServer
from tests.decode import decode_av
from tests.test_gateway import http, server  # noqa: F401  (the same gateway and client fixtures, on this module's farm)

pytestmark = pytest.mark.slow

LONG = ("The farm encodes this while it is still being made. " * 2 + "Each sentence is its own segment. ") * 2
# streamed: long enough (24 segments, ~2 s of a CPU worker's time) that its first bytes reach the client before the
# job ends however slow the test process is (six segments could all be made before a busy client read the first)
STREAMED = LONG * 4
OPUS_DECODE_RATE = 48000


@pytest.fixture
def openai_client(server: BackgroundServer) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="not-checked")


def _done(http: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while (st := http.get(f"/v1/jobs/{job_id}").json())["state"] not in ("done", "failed", "cancelled"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert st["state"] == "done", st
    return st


def _within(fmt: str, decoded: int, rate: int, duration_s: float, *, streamed: bool) -> None:
    """Decoded length vs the job's duration: Opus exactly (its end granule), a tagged (stored) MP3 within one
    frame, a streamed (untagged) MP3 as whole frames holding LAME's priming, the audio and LAME's end: the last frame
    filled and its flush, 48-617 samples at 22.05 kHz by the audio's length (``AudioEncoder`` over 83 lengths within
    one frame: more than one frame past the audio for 7 % of them, as a CI run met), ADTS AAC after its 1,024 priming
    samples."""
    if fmt == "opus":
        assert abs(decoded / OPUS_DECODE_RATE - duration_s) <= 2 / 22050, (decoded, duration_s)
    elif fmt == "mp3" and streamed:
        frame = mp3_frame_samples(rate)
        assert decoded % frame == 0 and 0 <= decoded - MP3_PRIMING - duration_s * rate < 2 * frame, (decoded, duration_s * rate)
    elif fmt == "mp3":
        assert abs(decoded - duration_s * rate) <= mp3_frame_samples(rate), (decoded, duration_s * rate)
    else:
        assert 0 <= decoded - duration_s * rate <= 3 * 1024, (decoded, duration_s * rate)


@pytest.mark.parametrize(("fmt", "ctype", "rate"), [("mp3", "audio/mpeg", 22050), ("opus", "audio/ogg", 24000),
                                                    ("aac", "audio/aac", 22050)])
def test_encoded_formats_stream_as_they_are_made_and_decode_to_the_job_duration(
        openai_client: Any, http: httpx.Client, fmt: str, ctype: str, rate: int) -> None:
    pieces, first_state = [], None
    with openai_client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="joe", input=STREAMED, response_format=fmt) as response:
        assert response.headers["content-type"].startswith(ctype)
        assert response.headers.get("transfer-encoding") == "chunked"
        assert response.headers["x-sample-rate"] == str(rate)
        job_id = response.headers["x-job-id"]
        for piece in response.iter_bytes():
            if first_state is None:
                first_state = http.get(f"/v1/jobs/{job_id}").json()
            pieces.append(piece)
    assert first_state is not None and first_state["done"] < first_state["segments"]  # bytes before the job ended
    st = _done(http, job_id)
    samples, decode_rate = decode_av(b"".join(pieces))
    assert decode_rate == (OPUS_DECODE_RATE if fmt == "opus" else rate)
    _within(fmt, len(samples), rate, st["duration_s"], streamed=True)
    stored = http.get(f"/v1/jobs/{job_id}/audio")  # the job's stored output is in the same format
    assert stored.status_code == 200 and stored.headers["content-type"].startswith(ctype)
    samples, _ = decode_av(stored.content)
    _within(fmt, len(samples), rate, st["duration_s"], streamed=False)


def test_jobs_store_mp3_at_the_bitrate_and_rate_asked(http: httpx.Client) -> None:
    r = http.post("/v1/jobs", json={"text": LONG, "voice": "joe", "format": "mp3", "bitrate": 32000, "sample_rate": 16000})
    assert r.status_code == 201, r.text
    st = _done(http, r.json()["id"])
    audio = http.get(f"/v1/jobs/{st['id']}/audio")
    assert audio.headers["content-type"] == "audio/mpeg"
    samples, rate = decode_av(audio.content)
    assert rate == 16000
    _within("mp3", len(samples), rate, st["duration_s"], streamed=False)
    assert len(audio.content) * 8 / st["duration_s"] == pytest.approx(32000, rel=0.2)


def test_models_and_voices_lists(openai_client: Any, http: httpx.Client) -> None:
    ids = [m.id for m in openai_client.models.list()]
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= set(ids)
    voices = http.get("/v1/audio/voices").json()
    assert {"joe", "kumo", "default", "alloy", "nova"} <= set(voices["voices"]) and voices["default"]


@pytest.mark.parametrize("model", ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"])
def test_openai_models_are_accepted_and_instructions_noted(openai_client: Any, model: str) -> None:
    with openai_client.audio.speech.with_streaming_response.create(
            model=model, voice="alloy", input="Model names.", response_format="pcm",
            instructions="Speak like a pirate.") as response:
        assert response.status_code == 200
        assert "ignored" in response.headers["x-ttsfarm-note"]
        assert len(response.read()) > 24000


def test_unknown_model_is_a_clear_400(openai_client: Any) -> None:
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as err:
        openai_client.audio.speech.create(model="tts-3", voice="alloy", input="No.")
    assert err.value.status_code == 400 and "UNKNOWN_MODEL" in str(err.value.body)


def test_speed_is_honoured(openai_client: Any) -> None:
    lengths = {}
    for speed in (0.5, 1.0, 2.0):
        with openai_client.audio.speech.with_streaming_response.create(
                model="tts-1", voice="joe", input="Speed changes how long this sentence takes to say.",
                response_format="pcm", speed=speed) as response:
            lengths[speed] = len(response.read())
    # Piper rounds each phoneme's duration up to whole frames, so twice the speed is not quite half the length.
    assert 0.5 <= lengths[2.0] / lengths[1.0] <= 0.78 and 1.45 <= lengths[0.5] / lengths[1.0] <= 2.2, lengths


def test_sdk_encodes_a_jobs_chunks_as_they_stream(farm: Any) -> None:
    from producer.encoded import encode_chunks

    job = farm.client().submit(LONG, voice="joe", format="ogg")
    pieces = list(encode_chunks(job.stream(timeout=60), "ogg"))
    result = job.wait(timeout=60)
    assert len(pieces) > 5 and pieces[0][:4] == b"OggS"
    samples, _ = decode_av(b"".join(pieces))
    _within("opus", len(samples), 22050, result.duration_s, streamed=True)
    stored, _ = decode_av(_stored(farm, job.id))
    assert abs(len(stored) - len(samples)) <= 1  # the same length as the job's stored Ogg Opus


def _stored(farm: Any, job_id: str) -> bytes:
    from wire.storage import storage_from_settings

    return storage_from_settings(farm.settings.storage).get(f"{job_id}/audio.ogg")
