"""A cancel stops the work, and a reader that lost its place says so: one real worker process, real voices.

Cancel (issue 16, item 5): the client's own script marks a job cancelled, so the client's view proves
nothing. These tests count segments the worker synthesized after the cancel, from the worker's own
``ttsfarm_segments_total`` on its metrics port: a worker that ignored the cancel would make every segment
of the job; one that honours it finishes at most the segment it was running.

Trim (item 6): the worker trims results streams at ``results_maxlen`` (10 here; a piece's chunks share one entry,
so the trim tests' farm vocodes 100 ms windows: a job is a couple of hundred entries). A reader that falls behind,
or resumes with ``after_seq`` once the head is gone, or whose stream expired, gets STREAM_TRIMMED at once: never a
wait until its timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from websockets.sync.client import connect

from producer.aio import AsyncClient
from gateway import create_app
from tests.gateway_server import BackgroundServer
from wire.errors import STREAM_TRIMMED, JobError
from wire.keys import Keys
from tests.conftest import Farm, FarmSpec
from tests.test_metrics import scrape, value_or_zero

pytestmark = pytest.mark.slow

# 12 sentences, one segment each, ~2.5 s of audio each: the worker's one bulk loop takes them one by one.
LONG = " ".join(f"Sentence number {i} of the long bulk job is read now." for i in range(12))
# 8 segments of ~2.5 s: in 100 ms windows, ~200 results entries, far over results_maxlen (and over the 100 entries of
# a stream node, which Redis's approximate trim removes whole).
TRIMMED = " ".join(f"This is sentence {w} of a job whose stream gets trimmed."
                   for w in ("one", "two", "three", "four", "five", "six", "seven", "eight"))
IN_FLIGHT = 2  # segments a worker may finish after a cancel: the one it runs (and one it had just started)


FARM = FarmSpec(metrics=True, env={"TTSFARM_QUEUE_INFERENCE_THREADS": "1", "TTSFARM_QUEUE_RESULTS_MAXLEN": "10"})
# The trim tests' farm: 100 ms windows, so that a job makes many results entries.
TRIM_FARM = FarmSpec(env={"TTSFARM_QUEUE_INFERENCE_THREADS": "1", "TTSFARM_QUEUE_RESULTS_MAXLEN": "10",
                          "TTSFARM_STREAMING_FIRST_WINDOW_MS": "100", "TTSFARM_STREAMING_WINDOW_MS": "100"})


def _gateway(farm: Farm) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(farm.settings)) as s:
        yield s


@pytest.fixture(scope="module")
def server(farm: Farm) -> Iterator[BackgroundServer]:
    yield from _gateway(farm)


@pytest.fixture(scope="module")
def trim_farm(make_module_farm: Callable[..., Farm]) -> Farm:
    return make_module_farm(TRIM_FARM)


@pytest.fixture(scope="module")
def trim_server(trim_farm: Farm) -> Iterator[BackgroundServer]:
    yield from _gateway(trim_farm)


def made(farm: Farm) -> float:
    """Bulk segments the worker has synthesized so far, from its own metrics endpoint (0 before the first; a
    series the endpoint does not declare fails)."""
    return value_or_zero(scrape(farm.settings.worker.metrics_port), "ttsfarm_segments_total", lane="bulk")


def drained(farm: Farm, timeout: float = 60.0) -> None:
    """Wait until the worker has taken every bulk segment off the queue (made or skipped)."""
    r, keys = farm.client().redis, Keys(farm.prefix)
    deadline = time.monotonic() + timeout
    while int(r.hget(keys.backlog("bulk"), "n") or 0) > 0:
        assert time.monotonic() < deadline, f"bulk lane not drained: {farm.logs()}"
        time.sleep(0.1)
    time.sleep(0.3)  # the ack comes after the metrics of a segment that was made: let the last one land


def assert_stopped(farm: Farm, job_id: str, before: float, at_cancel: float, total: int) -> None:
    drained(farm)
    after = made(farm) - at_cancel
    assert after <= IN_FLIGHT, f"the worker made {after:.0f} segments after the cancel (of {total})"
    assert made(farm) - before < total, "every segment was made: the cancel stopped nothing"
    assert farm.client().job(job_id).status()["state"] == "cancelled"
    r, keys = farm.client().redis, Keys(farm.prefix)
    assert not r.exists(keys.parts(job_id), keys.frames(job_id)), "a cancelled job's parts outlive it"


# -- cancel ----------------------------------------------------------------------------------------


def test_the_count_the_cancel_tests_read_moves_with_each_bulk_segment(farm: Farm) -> None:
    """The cancel tests pass when the count stays put: it must count this worker's bulk segments."""
    before = made(farm)
    job = farm.client().submit("A short bulk job. It has two sentences.", voice="joe", lane="bulk")
    assert job.wait(timeout=60).state == "done"
    drained(farm)
    assert made(farm) - before == job.total >= 1


def test_sync_cancel_stops_the_worker(farm: Farm) -> None:
    client = farm.client()
    before = made(farm)
    job = client.submit(LONG, voice="joe", lane="bulk")
    assert job.total == 12
    next(iter(job.stream(timeout=60)))
    assert job.cancel()
    assert_stopped(farm, job.id, before, made(farm), job.total)


def test_async_cancel_stops_the_worker(farm: Farm) -> None:
    async def run() -> tuple[str, float, float, int]:
        async with AsyncClient.from_url(settings=farm.settings) as client:
            before = made(farm)
            job = await client.submit(LONG, voice="joe", lane="bulk")
            async for _ in job.stream(timeout=60):
                break
            assert await job.cancel()
            return job.id, before, made(farm), job.total

    job_id, before, at_cancel, total = asyncio.run(run())
    assert_stopped(farm, job_id, before, at_cancel, total)


def test_gateway_cancel_stops_the_worker(farm: Farm, server: BackgroundServer) -> None:
    before = made(farm)
    with httpx.Client(base_url=server.url, timeout=60) as http:
        created = http.post("/v1/jobs", json={"text": LONG, "voice": "joe", "lane": "bulk"})
        assert created.status_code == 201, created.text
        job = created.json()
        with http.stream("GET", job["links"]["events"]) as events:
            assert any(line.startswith("event: chunk") for line in _until_chunk(events.iter_lines()))
            r = http.delete(job["links"]["self"])
            assert r.status_code == 200 and r.json()["cancelled"] is True, r.text
            at_cancel = made(farm)
    assert_stopped(farm, job["id"], before, at_cancel, job["segments"])


def _until_chunk(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        yield line
        if line.startswith("event: chunk"):
            return


# -- trimmed results streams ---------------------------------------------------------------------


def _trimmed_job(trim_farm: Farm) -> str:
    """A finished job whose results stream has lost its head to results_maxlen."""
    client = trim_farm.client()
    job = client.submit(TRIMMED, voice="joe", chunk_ms=20)
    assert job.wait(timeout=60).state == "done"
    key = Keys(trim_farm.prefix).results(job.id)
    assert client.redis.xlen(key) < 200 < int(client.redis.xinfo_stream(key)["entries-added"])
    return job.id


def test_a_reader_that_falls_behind_gets_stream_trimmed(trim_farm: Farm) -> None:
    client = trim_farm.client()
    job = client.submit(TRIMMED, voice="joe", chunk_ms=20)
    resumed = None
    with pytest.raises(JobError) as exc:
        for n, _ in enumerate(job.stream(timeout=60)):
            if n == 0:
                job.wait(timeout=60)  # the reader stops reading while the job runs to its end
                resumed = time.monotonic()
    assert exc.value.code == STREAM_TRIMMED, exc.value
    assert resumed is not None and time.monotonic() - resumed < 5  # at its next read, not at the timeout


def test_async_reader_that_falls_behind_gets_stream_trimmed(trim_farm: Farm) -> None:
    async def run() -> str:
        async with AsyncClient.from_url(settings=trim_farm.settings) as client:
            job = await client.submit(TRIMMED, voice="joe", chunk_ms=20)
            try:
                n = 0
                async for _ in job.stream(timeout=30):
                    if n == 0:
                        await job.wait(timeout=60)
                    n += 1
            except JobError as exc:
                return exc.code
            return "no error"

    assert asyncio.run(run()) == STREAM_TRIMMED


def test_resuming_from_trimmed_entries_gets_stream_trimmed(trim_farm: Farm, trim_server: BackgroundServer) -> None:
    job_id = _trimmed_job(trim_farm)
    client = trim_farm.client()
    started = time.monotonic()
    with pytest.raises(JobError) as exc:
        list(client.job(job_id).stream(after_seq=3, timeout=30))
    assert exc.value.code == STREAM_TRIMMED

    async def resume() -> str:
        async with AsyncClient.from_url(settings=trim_farm.settings) as aclient:
            try:
                async for _ in (await aclient.job(job_id)).stream(after_seq=3, timeout=30):
                    pass
            except JobError as exc:
                return exc.code
            return "no error"

    assert asyncio.run(resume()) == STREAM_TRIMMED
    # the gateway's SSE and WebSocket end with an error event carrying the code
    with httpx.Client(base_url=trim_server.url, timeout=30) as http:
        r = http.get(f"/v1/jobs/{job_id}/events", params={"after_seq": 3})
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    assert events and events[-1]["type"] == "error" and events[-1]["error"]["code"] == STREAM_TRIMMED, r.text
    with connect(trim_server.url.replace("http", "ws", 1) + f"/v1/jobs/{job_id}/stream?after_seq=3") as ws:
        messages = [json.loads(m) for m in ws]
    assert messages[-1]["type"] == "error" and messages[-1]["error"]["code"] == STREAM_TRIMMED, messages
    assert time.monotonic() - started < 20  # none of them waited for its timeout


def test_an_expired_results_stream_gets_stream_trimmed(farm: Farm) -> None:
    client = farm.client()
    job = client.submit("A short job whose results stream expires.", voice="joe")
    assert job.wait(timeout=60).state == "done"
    client.redis.delete(Keys(farm.prefix).results(job.id))  # as its TTL would
    started = time.monotonic()
    with pytest.raises(JobError) as exc:
        list(client.job(job.id).stream(timeout=30))
    assert exc.value.code == STREAM_TRIMMED
    assert time.monotonic() - started < 20


def test_resuming_within_the_stream_still_works(farm: Farm) -> None:
    client = farm.client()
    job = client.submit("A short job that fits in the stream.", voice="joe")  # a few 500 ms chunks: none trimmed
    chunks = list(job.stream(timeout=60))
    assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].last
    again = list(client.job(job.id).stream(after_seq=0, timeout=30))
    assert [c.seq for c in again] == [c.seq for c in chunks[1:]]
