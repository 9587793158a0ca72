"""Word timings through the HTTP gateway: in the SSE and WebSocket chunk events, and as captions
(`GET /v1/jobs/{id}/captions?format=vtt|srt`). Real redis-server, a real worker, uvicorn."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway_server import BackgroundServer
from tests.test_gateway import _sse_events, _ws_messages, http, server  # noqa: F401 - its gateway and client
from tests.test_word_timings_farm import _parse_srt, _parse_vtt

pytestmark = pytest.mark.slow

TEXT = "The farm reads 2,024 words. 今天是2024年3月5日。"


def test_events_carry_words_and_captions_follow(server: BackgroundServer, http: httpx.Client) -> None:
    r = http.post("/v1/jobs", json={"text": TEXT})
    assert r.status_code == 201, r.text
    job = r.json()
    early = http.get(job["links"]["captions"])
    assert early.status_code in (200, 409)
    if early.status_code == 409:
        assert early.json()["error"]["code"] == "JOB_NOT_DONE"
    sse = _sse_events(http, job["links"]["events"])
    words = [w for name, _, d in sse if name == "chunk" for w in d["words"]]
    assert [w["text"] for w in words][:4] == ["The", "farm", "reads", "2,024"]
    assert {"2024", "年", "3", "月", "5", "日"} <= {w["text"] for w in words}
    for w in words:
        assert TEXT[w["char_start"] : w["char_end"]] == w["text"] and w["start_s"] <= w["end_s"]
    assert all(a["end_s"] <= b["start_s"] + 1e-3 for a, b in zip(words, words[1:]))
    done = sse[-1][2]
    assert done["type"] == "done" and done["captions_url"] == job["links"]["captions"] and done["words"] == len(words)
    ws = _ws_messages(server.ws_url + job["links"]["stream"], binary=True)
    assert [w for m in ws if m["type"] == "chunk" for w in m["words"]] == words

    deadline = time.monotonic() + 30
    while (vtt := http.get(job["links"]["captions"])).status_code == 409 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    cues = _parse_vtt(vtt.text)
    assert [c[2] for c in cues] == ["The farm reads 2,024 words.", "今天是2024年3月5日。"]  # a cue a sentence, its marks kept
    assert cues[0][0] == pytest.approx(words[0]["start_s"], abs=1e-3)
    assert cues[-1][1] == pytest.approx(words[-1]["end_s"], abs=1e-3)
    srt = http.get(job["links"]["captions"], params={"format": "srt"})
    assert srt.status_code == 200 and srt.headers["content-type"].startswith("application/x-subrip")
    assert [(round(a, 3), round(b, 3)) for a, b, _ in _parse_srt(srt.text)] == [(round(a, 3), round(b, 3)) for a, b, _ in cues]


def test_bad_caption_format_is_400(http: httpx.Client) -> None:
    r = http.post("/v1/jobs", json={"text": "Hello.", "voice": "joe"})
    r = http.get(r.json()["links"]["captions"], params={"format": "ass"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "BAD_OPTION"


def test_unknown_job_captions_404(http: httpx.Client) -> None:
    r = http.get("/v1/jobs/no-such-job-captions/captions")
    assert r.status_code == 404 and r.json()["error"]["code"] == "JOB_NOT_FOUND"
