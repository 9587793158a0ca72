"""Wrong types and values at every public entry point: one table, each entry point answers the farm's
``InputError`` with the same stable code (never an AttributeError or TypeError from inside).

Entry points: the sync and asyncio SDKs (submit, job, stream, wait), books (``submit_book`` and its
``BookOptions``), the CLI (``ttsfarm submit``, ``ttsfarm book``) and the HTTP gateway (400 with the code;
a real worker serves it so that checks after the worker check are reached too).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from pipeline.errors import (
    BAD_OPTION,
    EMPTY_TEXT,
    INVALID_UTF8,
    MALFORMED_JOB,
    TEXT_TOO_LONG,
    UNKNOWN_VOICE,
    UNSUPPORTED_FORMAT,
    UNSUPPORTED_SAMPLE_RATE,
    InputError,
)
from producer.aio import AsyncClient, AsyncJob
from books import BookOptions, submit_book
from cli import main as cli
from producer.client import Client, Job
from gateway import create_app
from tests.gateway_server import BackgroundServer
from wire.errors import JOB_ID_CONFLICT
from wire.keys import Keys
from wire.settings import Settings
from tests.conftest import Farm

BOOK = Path(__file__).parent / "data" / "book" / "small_farm.md"
BAD_UTF8 = b"\xff\xfe not utf-8"

# (text, code): the text argument of a submit
TEXTS = [
    (None, MALFORMED_JOB),
    (12345, MALFORMED_JOB),
    (1.5, MALFORMED_JOB),
    (math.nan, MALFORMED_JOB),
    (True, MALFORMED_JOB),
    (["Hello."], MALFORMED_JOB),
    ({"text": "Hello."}, MALFORMED_JOB),
    (BAD_UTF8, INVALID_UTF8),
    ("abc\ud800def", INVALID_UTF8),  # a lone surrogate: a str no UTF-8 can carry (JSON's "\ud800" makes one)
    ("", EMPTY_TEXT),
    ("a" * 200_001, TEXT_TOO_LONG),
]

# (keywords, code): the options of a submit; the text is fine
OPTIONS = [
    ({"voice": []}, BAD_OPTION),
    ({"voice": 3}, BAD_OPTION),
    ({"voice": "v" * 10_000}, BAD_OPTION),
    ({"voice": "nobody"}, UNKNOWN_VOICE),
    ({"format": 3}, BAD_OPTION),
    ({"format": None}, BAD_OPTION),
    ({"format": ["wav"]}, BAD_OPTION),
    ({"format": "wma"}, UNSUPPORTED_FORMAT),
    ({"bitrate": "64k"}, BAD_OPTION),
    ({"bitrate": True}, BAD_OPTION),
    ({"format": "mp3", "bitrate": 1}, BAD_OPTION),
    ({"format": "wav", "bitrate": 64000}, BAD_OPTION),
    ({"lexicon": ["Nguyen"]}, BAD_OPTION),
    ({"lexicon": {"Nguyen": 1}}, BAD_OPTION),
    ({"lexicon": {"重庆": "chong qing"}}, "BAD_LEXICON"),
    ({"ssml": "yes"}, BAD_OPTION),
    ({"ssml": 1}, BAD_OPTION),
    ({"lane": None}, BAD_OPTION),
    ({"lane": 1}, BAD_OPTION),
    ({"lane": ["bulk"]}, BAD_OPTION),
    ({"sample_rate": "16000"}, BAD_OPTION),
    ({"sample_rate": 16000.0}, BAD_OPTION),
    ({"sample_rate": True}, BAD_OPTION),
    ({"sample_rate": [16000]}, BAD_OPTION),
    ({"sample_rate": 10**30}, UNSUPPORTED_SAMPLE_RATE),
    ({"sample_rate": -1}, UNSUPPORTED_SAMPLE_RATE),
    ({"options": [1.0]}, BAD_OPTION),
    ({"options": "fast"}, BAD_OPTION),
    ({"options": {"speed": True}}, BAD_OPTION),
    ({"options": {"speed": "1.2"}}, BAD_OPTION),
    ({"options": {"speed": [1]}}, BAD_OPTION),
    ({"options": {"speed": math.nan}}, BAD_OPTION),
    ({"options": {"speed": -1}}, BAD_OPTION),
    ({"options": {"speed": 10**400}}, BAD_OPTION),
    ({"deadline_s": "5"}, BAD_OPTION),
    ({"deadline_s": math.nan}, BAD_OPTION),
    ({"deadline_s": -1}, BAD_OPTION),
    ({"deadline_s": True}, BAD_OPTION),
    ({"deadline_s": 10**400}, BAD_OPTION),
    ({"deadline_s": {}}, BAD_OPTION),
]
SDK_ONLY_OPTIONS = [  # keywords the gateway does not take (it refuses them as unknown fields: BAD_INPUT)
    ({"options": {1: 1.0}}, BAD_OPTION),
    ({"chunk_ms": 40.5}, BAD_OPTION),
    ({"chunk_ms": "40"}, BAD_OPTION),
    ({"chunk_ms": True}, BAD_OPTION),
    ({"job_id": 12345678}, BAD_OPTION),
    ({"job_id": "../../etc/passwd"}, BAD_OPTION),
    ({"colour": "blue"}, BAD_OPTION),
]

# (keywords, code): Job.stream's arguments, and Job.wait's
STREAM_ARGS = [
    ({"after_seq": "x"}, BAD_OPTION),
    ({"after_seq": None}, BAD_OPTION),
    ({"after_seq": -2}, BAD_OPTION),
    ({"after_seq": 1.5}, BAD_OPTION),
    ({"after_seq": True}, BAD_OPTION),
    ({"after_seq": 10**30}, BAD_OPTION),
    ({"timeout": -1}, BAD_OPTION),
    ({"timeout": 0}, BAD_OPTION),
    ({"timeout": "5"}, BAD_OPTION),
    ({"timeout": math.nan}, BAD_OPTION),
    ({"block_ms": 0}, BAD_OPTION),
    ({"block_ms": None}, BAD_OPTION),
]
WAIT_ARGS = [
    ({"timeout": -1}, BAD_OPTION),
    ({"timeout": "x"}, BAD_OPTION),
    ({"timeout": math.inf}, BAD_OPTION),
    ({"timeout": [1]}, BAD_OPTION),
    ({"poll_s": 0}, BAD_OPTION),
    ({"poll_s": None}, BAD_OPTION),
]
JOB_IDS = [None, 12345, ["id"], b"bytes-id", 1.5]


def _id(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def expect(code: str, call: Any, *args: Any, **kwargs: Any) -> InputError:
    with pytest.raises(InputError) as exc:
        call(*args, **kwargs)
    assert exc.value.code == code, exc.value
    assert exc.value.message
    return exc.value


# -- the SDKs: submit ------------------------------------------------------------------------------


def submit(face: str, settings: Settings, text: Any, **kwargs: Any) -> None:
    if face == "sync":
        Client.from_url(settings=settings).submit(text, **kwargs)
        return

    async def go() -> None:
        async with AsyncClient.from_url(settings=settings) as client:
            await client.submit(text, **kwargs)

    asyncio.run(go())


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize(("text", "code"), TEXTS, ids=[_id(t) for t, _ in TEXTS])
def test_submit_text_of_any_type(settings: Settings, face: str, text: Any, code: str) -> None:
    expect(code, submit, face, settings, text)


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize(("kwargs", "code"), OPTIONS + SDK_ONLY_OPTIONS, ids=[_id(k) for k, _ in OPTIONS + SDK_ONLY_OPTIONS])
def test_submit_options_of_any_type(settings: Settings, face: str, kwargs: dict[str, Any], code: str) -> None:
    expect(code, submit, face, settings, "Hello there.", **kwargs)


# -- the SDKs: a job's handle ----------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "code"), STREAM_ARGS, ids=[_id(k) for k, _ in STREAM_ARGS])
def test_stream_arguments(settings: Settings, kwargs: dict[str, Any], code: str) -> None:
    expect(code, Job(Client.from_url(settings=settings), "no-such-job-0001", 1).stream, **kwargs)  # at the call

    async def go() -> None:
        async with AsyncClient.from_url(settings=settings) as client:
            AsyncJob(client, "no-such-job-0001", 1).stream(**kwargs)

    expect(code, asyncio.run, go())


@pytest.mark.parametrize(("kwargs", "code"), WAIT_ARGS, ids=[_id(k) for k, _ in WAIT_ARGS])
def test_wait_arguments(settings: Settings, kwargs: dict[str, Any], code: str) -> None:
    expect(code, Job(Client.from_url(settings=settings), "no-such-job-0001", 1).wait, **kwargs)

    async def go() -> None:
        async with AsyncClient.from_url(settings=settings) as client:
            await AsyncJob(client, "no-such-job-0001", 1).wait(**kwargs)

    expect(code, asyncio.run, go())


@pytest.mark.parametrize("job_id", JOB_IDS, ids=_id)
def test_job_ids_of_any_type(settings: Settings, job_id: Any) -> None:
    expect(BAD_OPTION, Client.from_url(settings=settings).job, job_id)

    async def go() -> None:
        async with AsyncClient.from_url(settings=settings) as client:
            await client.job(job_id)

    expect(BAD_OPTION, asyncio.run, go())


def test_a_job_id_that_is_not_unicode(settings: Settings) -> None:
    expect(INVALID_UTF8, Client.from_url(settings=settings).job, "abc\ud800def")

    async def go() -> None:
        async with AsyncClient.from_url(settings=settings) as client:
            await client.job("abc\ud800def")

    expect(INVALID_UTF8, asyncio.run, go())


# -- books -----------------------------------------------------------------------------------------

BOOK_ARGS = [
    ({"path": None}, BAD_OPTION),
    ({"path": 12345}, BAD_OPTION),
    ({"path": b"small_farm.md"}, BAD_OPTION),
    ({"path": ["small_farm.md"]}, BAD_OPTION),
    ({"path": "no-such-book.md"}, "BAD_BOOK"),
    ({"out": None}, BAD_OPTION),
    ({"out": 3}, BAD_OPTION),
    ({"out": ""}, BAD_OPTION),
    ({"out": "ftp://x/y"}, BAD_OPTION),
    ({"voice": []}, BAD_OPTION),
    ({"voice": "nobody"}, UNKNOWN_VOICE),
    ({"book_id": 7}, BAD_OPTION),
    ({"book_id": "a/b"}, BAD_OPTION),
    ({"opts": {"speed": 1.0}}, BAD_OPTION),
    ({"manifest": 3}, BAD_OPTION),
    ({"opts": BookOptions(format=3)}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(format="wma")}, UNSUPPORTED_FORMAT),
    ({"opts": BookOptions(format="aac")}, UNSUPPORTED_FORMAT),  # chapters: flac, ogg, mp3, wav (the M4B is AAC)
    ({"opts": BookOptions(format="mp3", bitrate=5)}, BAD_OPTION),
    ({"opts": BookOptions(lexicon=["x"])}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(lexicon={"重庆": "chong qing"})}, "BAD_LEXICON"),
    ({"opts": BookOptions(single_file="yes")}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(sample_rate="16000")}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(sample_rate=7)}, UNSUPPORTED_SAMPLE_RATE),
    ({"opts": BookOptions(options={"speed": math.nan})}, BAD_OPTION),
    ({"opts": BookOptions(options=[1])}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(read_titles="yes")}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(loudness_db=math.nan)}, BAD_OPTION),
    ({"opts": BookOptions(peak_db=5)}, BAD_OPTION),
    ({"opts": BookOptions(max_retries=1.5)}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(stall_s=-1)}, BAD_OPTION),
    ({"opts": BookOptions(fade_ms=None)}, BAD_OPTION),  # type: ignore[arg-type]
    ({"opts": BookOptions(lexicon={"farm\ud800": "fˈɑːɹm"})}, INVALID_UTF8),
    ({"manifest": {"title": "The Small \ud800 Farm"}}, INVALID_UTF8),
    ({"manifest": {"author": "A. \udcff Writer"}}, INVALID_UTF8),
]


@pytest.mark.parametrize(("kwargs", "code"), BOOK_ARGS, ids=[_id(k) for k, _ in BOOK_ARGS])
def test_submit_book_arguments(settings: Settings, tmp_path: Path, kwargs: dict[str, Any], code: str) -> None:
    import secrets

    settings = settings.replace(redis={"key_prefix": f"t{secrets.token_hex(4)}"})  # its own keys: earlier tests leave theirs
    args = {"path": str(BOOK), "out": str(tmp_path / "out"), **kwargs}
    client = Client.from_url(settings=settings)
    expect(code, submit_book, client, args.pop("path"), **args)
    assert not client.redis.keys(f"{settings.redis.key_prefix}:*"), "nothing may be queued for a refused book"


def test_a_book_file_name_that_is_not_utf8_reads_as_replacement_characters(base_settings: Settings,
                                                                             tmp_path: Path) -> None:
    """A file name's bytes that are not UTF-8 (Python keeps them as lone surrogates) never reach the plan: the
    default title reads them as U+FFFD."""
    import os

    from books import BookOptions, load_book, plan_book

    path = tmp_path / os.fsdecode(b"caf\xe9 story.txt")
    path.write_text("The road was long. We walked all day.", encoding="utf-8")
    book = load_book(path)
    assert book.chapters[0].title == "caf\ufffd story"
    plan = plan_book(base_settings, book, book_id="cafe-story", opts=BookOptions())
    assert plan.chapters[0].title == "caf\ufffd story"


def test_submit_book_refuses_unknown_keywords(settings: Settings, tmp_path: Path) -> None:
    client = Client.from_url(settings=settings)
    expect(BAD_OPTION, submit_book, client, str(BOOK), out=str(tmp_path), speed=1.2)
    expect(BAD_OPTION, submit_book, client, None, out=str(tmp_path))


# -- the CLI ----------------------------------------------------------------------------------------


def _cli_cases(tmp: Path) -> list[tuple[list[str], str]]:
    out = str(tmp / "out")
    return [
        (["submit", ""], EMPTY_TEXT),
        (["submit", "Hi there.", "--speed", "nan"], BAD_OPTION),
        (["submit", "Hi there.", "--speed", "1e999"], BAD_OPTION),
        (["submit", "Hi there.", "--speed", "-1"], BAD_OPTION),
        (["submit", "Hi there.", "--timeout", "-1"], BAD_OPTION),
        (["submit", "Hi there.", "--timeout", "nan"], BAD_OPTION),
        (["submit", "Hi there.", "--voice", "nobody"], UNKNOWN_VOICE),
        (["submit", "--file", str(tmp / "missing.txt")], BAD_OPTION),
        (["submit", "--file", str(tmp / "bad.txt")], INVALID_UTF8),
        (["submit", "caf\udce9 au lait"], INVALID_UTF8),  # an argument's byte 0xE9, as Python's surrogateescape keeps it
        (["say", "caf\udce9 au lait", "-o", out + ".wav"], INVALID_UTF8),  # offline
        (["phonemize", "abc\ud800def"], INVALID_UTF8),
        (["book", str(BOOK), "--out", out, "--speed", "nan"], BAD_OPTION),
        (["book", str(BOOK), "--out", out, "--loudness", "nan"], BAD_OPTION),
        (["book", str(BOOK), "--out", out, "--peak", "1e999"], BAD_OPTION),
        (["book", str(BOOK), "--out", out, "--rate", "7"], UNSUPPORTED_SAMPLE_RATE),
        (["book", str(BOOK), "--out", out, "--timeout", "-1"], BAD_OPTION),
        (["book", str(BOOK), "--out", out, "--book-id", "a/b"], BAD_OPTION),
        (["book", str(BOOK), "--out", ""], BAD_OPTION),
        (["book", str(tmp / "missing.md"), "--out", out], "BAD_BOOK"),
        (["book", str(BOOK), "--out", out, "--speed", "nan", "--dry-run"], BAD_OPTION),
    ]


def test_cli_answers_every_bad_value_with_a_code(redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.txt").write_bytes(BAD_UTF8)
    for argv, code in _cli_cases(tmp_path):
        assert cli(["--redis", redis_url, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert f"ttsfarm: error {code}:" in err and "Traceback" not in err, (argv, err)


# -- the HTTP gateway -------------------------------------------------------------------------------


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bytes)


JOB_FIELDS = {"voice", "format", "sample_rate", "lane", "options", "deadline_s"}
GATEWAY_JOBS = ([({"text": t}, c) for t, c in TEXTS if _json_safe(t)]
                + [({"text": "Hello there.", **k}, c) for k, c in OPTIONS if set(k) <= JOB_FIELDS]
                + [({"text": "Hello there.", "speed": v}, BAD_OPTION) for v in ("fast", True, math.nan, -1, [1])]
                + [({"text": "Hello there.", "chunk_ms": 40}, "BAD_INPUT")])  # not a gateway field
GATEWAY_SPEECH = ([({"input": t}, c) for t, c in TEXTS if _json_safe(t) and t is not None and len(str(t)) < 5000]
                  + [({"input": None}, MALFORMED_JOB)]
                  + [({"input": "Hello.", "speed": v}, BAD_OPTION) for v in ("fast", True, math.nan, 0, 10**400, [1])]
                  + [({"input": "Hello.", "response_format": v}, BAD_OPTION) for v in (3, None, ["wav"])]
                  + [({"input": "Hello.", "voice": v}, BAD_OPTION) for v in ([], 3, True, "v" * 10_000)])
GATEWAY_QUERIES = ["x", "-2", "1.5", str(10**30), "nan", "true"]


@pytest.fixture(scope="module")
def gateway(farm: Farm) -> Iterator[httpx.Client]:
    with BackgroundServer(create_app(farm.settings)) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    # NaN and huge integers as Python's json writes them (a client may send them; the server must cope)
    return http.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def test_gateway_answers_text_that_is_not_unicode_and_a_taken_job_id(settings: Settings, r: redis.Redis) -> None:
    """Without a worker process (a fresh heartbeat record stands in for one): JSON's "\\ud800" escape hands the
    gateway a lone surrogate, a 400 INVALID_UTF8 in the text or the lexicon; no string field of a request gets a
    500 for one. A job id that another request holds (JOB_ID_CONFLICT) is a 409 naming the id."""
    from fastapi.testclient import TestClient

    beat = {"state": "serving", "ts": time.time(), "pid": 1}
    r.hset(Keys(settings.redis.key_prefix).workers(), "fresh@x:1", json.dumps(beat))
    bad = "abc\ud800def"
    with TestClient(create_app(settings)) as http:
        for path, body in [("/v1/jobs", {"text": bad}), ("/v1/audio/speech", {"input": bad}),
                           ("/v1/jobs", {"text": "Hello there.", "lexicon": {bad: "fˈɑːɹm"}}),
                           ("/v1/audio/speech", {"input": "Hello there.", "lexicon": {"farm": bad}})]:
            resp = _post(http, path, body)
            assert resp.status_code == 400 and resp.json()["error"]["code"] == INVALID_UTF8, resp.text
        for path, body in [("/v1/jobs", {"text": "Hello there.", name: bad}) for name in ("voice", "format", "lane")] + \
                          [("/v1/audio/speech", {"input": "Hello.", name: bad}) for name in ("voice", "model", "response_format")]:
            resp = _post(http, path, body)
            assert resp.status_code == 400, (body, resp.text)

        async def taken(*args: Any, **kwargs: Any) -> Any:
            raise InputError("job id 'taken-job-0001' is taken by another request", code=JOB_ID_CONFLICT,
                             job_id="taken-job-0001")

        http.app.state.gateway_state.client.submit = taken  # type: ignore[attr-defined]
        resp = _post(http, "/v1/jobs", {"text": "Hello there."})
        assert resp.status_code == 409, resp.text
        assert resp.json()["error"] == {"code": JOB_ID_CONFLICT, "message": "job id 'taken-job-0001' is taken by "
                                        "another request", "job_id": "taken-job-0001"}


@pytest.mark.slow
@pytest.mark.parametrize(("body", "code"), GATEWAY_JOBS, ids=[_id(b) for b, _ in GATEWAY_JOBS])
def test_gateway_jobs_answer_400_with_the_code(gateway: httpx.Client, body: dict[str, Any], code: str) -> None:
    r = _post(gateway, "/v1/jobs", body)
    assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text


@pytest.mark.slow
@pytest.mark.parametrize(("body", "code"), GATEWAY_SPEECH, ids=[_id(b) for b, _ in GATEWAY_SPEECH])
def test_gateway_speech_answers_400_with_the_code(gateway: httpx.Client, body: dict[str, Any], code: str) -> None:
    r = _post(gateway, "/v1/audio/speech", body)
    assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text


@pytest.mark.slow
@pytest.mark.parametrize("after_seq", GATEWAY_QUERIES)
def test_gateway_after_seq_answers_400_with_the_code(gateway: httpx.Client, after_seq: str) -> None:
    r = gateway.get("/v1/jobs/no-such-job-0001/events", params={"after_seq": after_seq})
    assert r.status_code == 400 and r.json()["error"]["code"] == BAD_OPTION, r.text


def test_the_tables_cover_every_request_field() -> None:
    """A new submit keyword or book option must get rows here (the tables are the contract)."""
    from producer.submit import REQUEST_KEYS

    covered = {k for rows in (OPTIONS, SDK_ONLY_OPTIONS) for kw, _ in rows for k in kw}
    assert set(REQUEST_KEYS) <= covered
