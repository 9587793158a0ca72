"""The HTTP gateway end to end: real redis-server, a real worker process, the gateway served by uvicorn.

Clients are the OpenAI Python SDK, httpx and a websockets client, as a user's would be.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from gateway import GatewaySettings, create_app
from tests.gateway_server import BackgroundServer
from wire.errors import OverloadedError
from wire.keys import Keys
from wire.settings import load_settings
from tests.conftest import Farm

pytestmark = pytest.mark.slow

TWO_SEGMENTS = "The gateway streams this sentence. Then it streams a second one, a little longer than the first."


@pytest.fixture(scope="module")
def server(farm: Farm) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(farm.settings)) as s:
        yield s


@pytest.fixture
def http(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _sse_events(http: httpx.Client, path: str, **kwargs: Any) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(event, id, data) of every event of an SSE response, read until the server ends it."""
    events, name, eid, data = [], "message", None, []
    with http.stream("GET", path, **kwargs) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                events.append((name, eid, json.loads("\n".join(data))))
                name, eid, data = "message", None, []
    return events


def _ws_messages(url: str, *, binary: bool) -> list[dict[str, Any]]:
    """Every message of a job's WebSocket; in binary mode each chunk's PCM is put back under "pcm"."""
    out: list[dict[str, Any]] = []
    with connect(url + ("&" if "?" in url else "?") + f"binary={int(binary)}", open_timeout=10) as ws:
        while True:
            try:
                raw = ws.recv(timeout=60)
            except ConnectionClosed:
                break
            if isinstance(raw, bytes):
                out[-1]["pcm"] = base64.b64encode(raw).decode()
                continue
            out.append(json.loads(raw))
    return out


def _submit(http: httpx.Client, text: str = TWO_SEGMENTS, **body: Any) -> dict[str, Any]:
    r = http.post("/v1/jobs", json={"text": text, "voice": "joe", **body})
    assert r.status_code == 201, r.text
    return r.json()


def _stored_pcm(http: httpx.Client, job_id: str) -> tuple[bytes, int]:
    deadline = time.monotonic() + 60
    while (r := http.get(f"/v1/jobs/{job_id}/audio")).status_code == 409 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.status_code == 200, r.text
    data, rate = sf.read(io.BytesIO(r.content), dtype="int16")
    return data.tobytes(), rate


# -- OpenAI's audio/speech -----------------------------------------------------------------------


def test_openai_client_streams_wav_as_it_is_made(server: BackgroundServer, http: httpx.Client) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="not-checked")
    pieces: list[bytes] = []
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="今天天气很好。" + TWO_SEGMENTS * 3, response_format="wav"
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        assert response.headers.get("transfer-encoding") == "chunked"
        job_id = response.headers["x-job-id"]
        for piece in response.iter_bytes():
            if not pieces:
                first_at = time.time()
            pieces.append(piece)
    body = b"".join(pieces)
    assert body[:4] == b"RIFF" and struct.unpack("<I", body[40:44])[0] == 0xFFFFFFFF  # length unknown while streaming
    audio, rate = sf.read(io.BytesIO(body), dtype="int16")
    assert rate == 24000 and len(audio) / rate > 2.0 and abs(audio).max() > 1000
    st = http.get(f"/v1/jobs/{job_id}").json()
    assert st["first_chunk"] <= first_at < st["finished"]  # audio arrived while the job was still being made
    stored, stored_rate = _stored_pcm(http, job_id)
    assert stored_rate == rate and stored == audio.tobytes()  # what streamed is what was stored


def test_openai_client_pcm_is_24k_raw_pcm16(server: BackgroundServer) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="x")
    with client.audio.speech.with_streaming_response.create(
        model="ttsfarm", voice={"id": "joe"}, input="Raw samples, please.", response_format="pcm", speed=1.25
    ) as response:
        assert response.headers["content-type"] == "audio/L16;rate=24000;channels=1"
        pcm = b"".join(response.iter_bytes())
    assert len(pcm) % 2 == 0 and len(pcm) / 2 / 24000 > 0.5


@pytest.mark.parametrize(("fmt", "rate", "subtype"), [("flac", 22050, "PCM_16"), ("opus", 24000, "OPUS"), ("ogg", 24000, "OPUS")])
def test_flac_and_opus_come_whole(http: httpx.Client, fmt: str, rate: int, subtype: str) -> None:
    r = http.post("/v1/audio/speech", json={"model": "tts-1", "input": "Encoded at the end.", "voice": "joe",
                                            "response_format": fmt})
    assert r.status_code == 200, r.text
    info = sf.info(io.BytesIO(r.content))
    assert (info.samplerate, info.subtype) == (rate, subtype) and info.duration > 0.5
    assert r.headers["x-sample-rate"] == str(rate)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"input": ""}, "EMPTY_TEXT"),
        ({"input": "   \n "}, "EMPTY_TEXT"),
        ({"input": "hello", "voice": "nobody"}, "UNKNOWN_VOICE"),
        ({"input": "hello", "voice": {"id": "nobody"}}, "UNKNOWN_VOICE"),
        ({"input": "hello", "response_format": "wma"}, "UNSUPPORTED_FORMAT"),
        ({"input": "hello", "model": "tts-2"}, "UNKNOWN_MODEL"),
        ({"input": "hello", "response_format": "mp3", "bitrate": 1000}, "BAD_OPTION"),
        ({"input": "hello", "response_format": "wav", "bitrate": 64000}, "BAD_OPTION"),
        ({"input": "<speak>hello <emphasis>you</emphasis></speak>"}, "BAD_SSML"),
        ({"input": "hello", "lexicon": {"hello": "h3l"}}, "BAD_LEXICON"),
        ({"input": "hello", "response_format": "m4a"}, "UNSUPPORTED_FORMAT"),
        ({"input": "hello", "speed": 9}, "BAD_OPTION"),
        ({"input": "hello", "speed": 0}, "BAD_OPTION"),
        ({"input": "hello", "speed": "fast"}, "BAD_OPTION"),  # as options={"speed": "fast"} in the SDK
        ({"input": "hello", "stream_format": "sse", "response_format": "flac"}, "UNSUPPORTED_FORMAT"),
        ({"input": "x" * 4097}, "TEXT_TOO_LONG"),
        ({"voice": "joe"}, "BAD_INPUT"),
        ({"input": "\x00\x01\x02"}, "CONTROL_CHARACTERS"),
    ],
)
def test_bad_speech_requests_are_400_with_a_code(http: httpx.Client, body: dict[str, Any], code: str) -> None:
    r = http.post("/v1/audio/speech", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"text": "hi", "lane": "fast"}, "BAD_OPTION"),
        ({"text": "hi", "sample_rate": 12345}, "UNSUPPORTED_SAMPLE_RATE"),
        ({"text": "hi", "options": {"pitch": 2}}, "BAD_OPTION"),
        ({"text": "hi", "deadline_s": -1}, "BAD_OPTION"),
        ({"text": "hi", "colour": "blue"}, "BAD_INPUT"),
    ],
)
def test_bad_job_requests_are_400_with_a_code(http: httpx.Client, body: dict[str, Any], code: str) -> None:
    r = http.post("/v1/jobs", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text


def test_not_json_is_400(http: httpx.Client) -> None:
    r = http.post("/v1/audio/speech", content=b"\xff{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "BAD_INPUT"


def test_openai_sse_stream_format(http: httpx.Client) -> None:
    with http.stream("POST", "/v1/audio/speech", json={"input": "Events, please.", "voice": "joe",
                                                       "response_format": "pcm", "stream_format": "sse"}) as r:
        assert r.status_code == 200
        lines = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1]["type"] == "speech.audio.done" and {m["type"] for m in lines[:-1]} == {"speech.audio.delta"}
    pcm = b"".join(base64.b64decode(m["audio"]) for m in lines[:-1])
    assert len(pcm) / 2 / 24000 > 0.4


# -- jobs, SSE, WebSocket ------------------------------------------------------------------------


def test_sse_and_websocket_give_ordered_chunks_equal_to_the_stored_output(server: BackgroundServer,
                                                                          http: httpx.Client) -> None:
    job = _submit(http, "今天天气很好，我们去公园散步吧。" + TWO_SEGMENTS, voice=None, format="flac")
    assert job["segments"] >= 3 and job["voice"] == "default" and job["format"] == "flac"
    sse = _sse_events(http, job["links"]["events"])
    chunks = [data for name, _, data in sse if name == "chunk"]
    assert [name for name, _, _ in sse][-1] == "done" and sse[-1][2]["state"] == "done"
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert [eid for name, eid, _ in sse if name == "chunk"] == [str(c["seq"]) for c in chunks]
    assert [c["last"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert sorted({c["seg"] for c in chunks}) == list(range(job["segments"]))
    streamed = b"".join(base64.b64decode(c["pcm"]) for c in chunks)
    stored, rate = _stored_pcm(http, job["id"])
    assert rate == chunks[0]["sample_rate"] == 24000 and streamed == stored
    assert sse[-1][2]["chunks"] == len(chunks) and sse[-1][2]["audio_url"] == job["links"]["audio"]

    for binary in (False, True):
        messages = _ws_messages(server.ws_url + job["links"]["stream"], binary=binary)
        ws_chunks = [m for m in messages if m["type"] == "chunk"]
        assert messages[-1]["type"] == "done" and messages[-1]["duration_s"] == pytest.approx(len(stored) / 2 / rate, abs=1e-3)
        assert [m["seq"] for m in ws_chunks] == list(range(len(chunks)))
        assert b"".join(base64.b64decode(m["pcm"]) for m in ws_chunks) == stored
        assert all(m["bytes"] == len(base64.b64decode(m["pcm"])) for m in ws_chunks)


def test_streams_resume_after_seq(server: BackgroundServer, http: httpx.Client) -> None:
    job = _submit(http)
    full = [d for name, _, d in _sse_events(http, job["links"]["events"]) if name == "chunk"]
    assert len(full) >= 4
    tail = [d for name, _, d in _sse_events(http, job["links"]["events"], params={"after_seq": 1}) if name == "chunk"]
    assert [c["seq"] for c in tail] == [c["seq"] for c in full[2:]] and tail == full[2:]
    # an EventSource reconnecting sends Last-Event-ID
    again = [d for name, _, d in _sse_events(http, job["links"]["events"], headers={"Last-Event-ID": "2"}) if name == "chunk"]
    assert again == full[3:]
    ws_tail = _ws_messages(server.ws_url + job["links"]["stream"] + "?after_seq=1", binary=True)
    assert [m["seq"] for m in ws_tail if m["type"] == "chunk"] == [c["seq"] for c in full[2:]]
    assert [m["pcm"] for m in ws_tail if m["type"] == "chunk"] == [c["pcm"] for c in full[2:]]
    past_end = _sse_events(http, job["links"]["events"], params={"after_seq": 10_000})
    assert [name for name, _, _ in past_end] == ["done"]


def test_job_status_audio_and_cancel(http: httpx.Client) -> None:
    long_text = "This bulk job is long enough to still be running when it is cancelled. " * 40
    job = _submit(http, long_text, lane="bulk")
    r = http.get(job["links"]["audio"])
    assert r.status_code == 409 and r.json()["error"]["code"] == "JOB_NOT_DONE"
    st = http.get(job["links"]["self"]).json()
    assert st["state"] in ("queued", "running") and st["segments"] == job["segments"] and st["error"] is None
    r = http.delete(job["links"]["self"])
    assert r.status_code == 200 and r.json() == {"id": job["id"], "cancelled": True, "state": "cancelled"}
    assert http.delete(job["links"]["self"]).json()["cancelled"] is False
    st = http.get(job["links"]["self"]).json()
    assert st["state"] == "cancelled" and st["error"]["code"] == "JOB_CANCELLED"
    events = _sse_events(http, job["links"]["events"])
    assert events[-1][0] == "error" and events[-1][2]["error"]["code"] == "JOB_CANCELLED"
    r = http.get(job["links"]["audio"])
    assert r.status_code == 409 and r.json()["error"]["state"] == "cancelled"

    done = _submit(http, "Short and done.", format="pcm")
    deadline = time.monotonic() + 60
    while http.get(done["links"]["self"]).json()["state"] != "done" and time.monotonic() < deadline:
        time.sleep(0.05)
    r = http.get(done["links"]["audio"])
    assert r.status_code == 200 and r.headers["content-type"] == "audio/L16;rate=22050;channels=1"
    pcm = r.content
    st = http.get(done["links"]["self"]).json()
    assert st["duration_s"] == pytest.approx(len(pcm) / 2 / 22050, abs=1e-3) and st["done"] == st["segments"]


def test_websocket_cancel_message_cancels_the_job(server: BackgroundServer, http: httpx.Client) -> None:
    job = _submit(http, "A long text for a job the listener cancels. " * 40, lane="bulk")
    with connect(server.ws_url + job["links"]["stream"], open_timeout=10) as ws:
        ws.send(json.dumps({"type": "cancel"}))
        messages = []
        while True:
            try:
                messages.append(json.loads(ws.recv(timeout=30)))
            except ConnectionClosed:
                break
    assert messages[-1]["type"] == "error" and messages[-1]["error"]["code"] == "JOB_CANCELLED"
    assert http.get(job["links"]["self"]).json()["state"] == "cancelled"


def test_speech_client_that_goes_away_cancels_its_job(http: httpx.Client) -> None:
    with http.stream("POST", "/v1/audio/speech", json={"input": "A speech request abandoned after its first bytes. " * 30,
                                                       "voice": "joe", "response_format": "pcm"}) as r:
        assert r.status_code == 200
        job_id = r.headers["x-job-id"]
        next(r.iter_raw())
    deadline = time.monotonic() + 15
    while (state := http.get(f"/v1/jobs/{job_id}").json()["state"]) != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state == "cancelled"


@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("DELETE", ""), ("GET", "/audio"), ("GET", "/events")])
def test_unknown_job_is_404(http: httpx.Client, method: str, suffix: str) -> None:
    r = http.request(method, f"/v1/jobs/no-such-job-{method}{suffix.replace('/', '-')}{suffix}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "JOB_NOT_FOUND"


def test_unknown_job_websocket_says_why_and_closes(server: BackgroundServer) -> None:
    with connect(server.ws_url + "/v1/jobs/no-such-job/stream", open_timeout=10) as ws:
        message = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert message == {"type": "error", "error": {"code": "JOB_NOT_FOUND", "message": "no job 'no-such-job' (unknown or expired)"}}
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404


def test_voices_health_docs_and_page(http: httpx.Client) -> None:
    voices = http.get("/v1/voices").json()
    assert {v["id"] for v in voices["voices"]} >= {"joe", "kumo", "default"}
    assert voices["default"] == "default" and voices["aliases"]["alloy"] == "default"
    assert http.get("/healthz").json() == {"ok": True, "redis": True, "workers": 1}
    assert "swagger" in http.get("/docs").text.lower()
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/v1/audio/speech", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/audio", "/v1/jobs/{job_id}/events",
            "/v1/voices"} <= set(paths)
    page = http.get("/")
    assert page.status_code == 200 and 'id="speak"' in page.text
    assert http.get("/static/app.js").status_code == 200


# -- no workers, keys, overload ------------------------------------------------------------------


def _heartbeat(farm: Farm, prefix: str, name: str, *, state: str, age_s: float) -> None:
    conn = farm.client().redis
    conn.hset(Keys(prefix).workers(), name, json.dumps({"state": state, "ts": time.time() - age_s, "pid": 1}))


def test_no_fresh_worker_is_503(farm: Farm) -> None:
    prefix = farm.prefix + "-idle"
    settings = farm.settings.replace(redis={"key_prefix": prefix})
    with TestClient(create_app(settings)) as c:
        for path, body in [("/v1/audio/speech", {"input": "hello"}), ("/v1/jobs", {"text": "hello"})]:
            r = c.post(path, json=body)
            assert r.status_code == 503 and r.json()["error"]["code"] == "NO_WORKERS" and r.headers["retry-after"]
        assert c.get("/healthz").json()["workers"] == 0
        _heartbeat(farm, prefix, "old@x:1", state="serving", age_s=30)
        _heartbeat(farm, prefix, "loading@x:2", state="starting", age_s=0)
        time.sleep(1.1)  # the gateway caches the answer for a second
        assert c.post("/v1/jobs", json={"text": "hello"}).status_code == 503
        _heartbeat(farm, prefix, "fresh@x:3", state="serving", age_s=1)
        time.sleep(1.1)
        r = c.post("/v1/jobs", json={"text": "hello"})
        assert r.status_code == 201, r.text
        assert c.delete(r.json()["links"]["self"]).json()["cancelled"] is True
        # bad input is still 400 first, whatever the workers
        assert c.post("/v1/audio/speech", json={"input": ""}).status_code == 400


def test_overloaded_is_429(farm: Farm) -> None:
    prefix = farm.prefix + "-busy"
    _heartbeat(farm, prefix, "fresh@x:1", state="serving", age_s=0)
    with TestClient(create_app(farm.settings.replace(redis={"key_prefix": prefix}))) as c:

        async def shed(*args: Any, **kwargs: Any) -> Any:
            raise OverloadedError("backlog over its limit")

        c.app.state.gateway_state.client.submit = shed  # type: ignore[attr-defined]
        r = c.post("/v1/audio/speech", json={"input": "hello"})
        assert r.status_code == 429 and r.json()["error"]["code"] == "OVERLOADED" and r.headers["retry-after"]
        assert r.json()["error"]["retryable"] is True


def test_api_key_is_enforced_when_configured(farm: Farm) -> None:
    from openai import AuthenticationError, OpenAI

    app = create_app(farm.settings, GatewaySettings(api_keys=("k-one", "k-two")))
    with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        r = c.get("/v1/voices")
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
        assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/voices", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/v1/jobs", json={"text": "hi"}).status_code == 401
        assert c.get("/v1/jobs/whatever").status_code == 401
        assert c.get("/v1/voices", headers={"Authorization": "Bearer k-two"}).status_code == 200
        assert c.get("/v1/voices", params={"api_key": "k-one"}).status_code == 200
        for open_path in ("/healthz", "/", "/docs", "/openapi.json"):
            assert c.get(open_path).status_code == 200, open_path

        with pytest.raises(AuthenticationError):
            OpenAI(base_url=f"{s.url}/v1", api_key="wrong", max_retries=0).audio.speech.create(
                model="tts-1", voice="joe", input="hi", response_format="wav")
        audio = OpenAI(base_url=f"{s.url}/v1", api_key="k-one").audio.speech.create(
            model="tts-1", voice="joe", input="Key accepted.", response_format="flac")
        assert sf.info(io.BytesIO(audio.content)).samplerate == 22050

        job = c.post("/v1/jobs", json={"text": "Keyed stream.", "voice": "joe"}, headers={"Authorization": "Bearer k-one"}).json()
        with connect(s.ws_url + job["links"]["stream"], open_timeout=10) as ws:
            refused = json.loads(ws.recv(timeout=10))
        assert refused["error"]["code"] == "UNAUTHORIZED"
        messages = _ws_messages(s.ws_url + job["links"]["stream"] + "?api_key=k-one", binary=False)
        assert messages[-1]["type"] == "done"


def test_gateway_settings_from_env() -> None:
    gw = load_settings(env={
        "TTSFARM_GATEWAY_HOST": "0.0.0.0", "TTSFARM_GATEWAY_PORT": "9000", "TTSFARM_GATEWAY_API_KEYS": "a, b,,",
        "TTSFARM_GATEWAY_CORS": "https://x.example", "TTSFARM_GATEWAY_VOICE_ALIASES": "Alloy=joe,nova=",
        "TTSFARM_GATEWAY_FIRST_CHUNK_TIMEOUT_S": "5", "TTSFARM_OTHER": "ignored",
    }).gateway
    assert (gw.host, gw.port, gw.api_keys, gw.cors) == ("0.0.0.0", 9000, ("a", "b"), ("https://x.example",))
    assert gw.voice_aliases == {"alloy": "joe", "nova": ""} and gw.first_chunk_timeout_s == 5.0
    assert load_settings(env={}).gateway == GatewaySettings()
    with pytest.raises(ValueError):
        load_settings(env={"TTSFARM_GATEWAY_PORT": "eighty"})


def test_cors_is_off_by_default_and_on_when_configured(farm: Farm) -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    with TestClient(create_app(farm.settings)) as c:
        assert "access-control-allow-origin" not in c.get("/healthz", headers={"Origin": "https://app.example"}).headers
    with TestClient(create_app(farm.settings, GatewaySettings(cors=("https://app.example",)))) as c:
        r = c.options("/v1/audio/speech", headers=preflight)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        r = c.get("/v1/voices", headers={"Origin": "https://app.example"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        assert "x-job-id" in r.headers["access-control-expose-headers"].lower()
        assert "access-control-allow-origin" not in c.options("/v1/jobs", headers={**preflight, "Origin": "https://evil.example"}).headers
