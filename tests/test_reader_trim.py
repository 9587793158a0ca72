"""The results reader and a trimmed stream, step by step on a real redis-server (no worker: the test
writes the records a worker would, trimming as the publisher does, so each case is exact).

Trimming what a reader has already read is harmless; trimming what it has not is STREAM_TRIMMED at the
next read, on both SDK faces. The end-to-end cases (a real worker and ``results_maxlen``) are in
``test_farm_cancel_trim.py``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from producer.aio import AsyncClient
from producer.client import Client
from wire.errors import STREAM_TRIMMED, JobError
from wire.keys import Keys
from wire.records import ENTRY, chunk_fields, final_fields
from wire.settings import Settings

MAXLEN = 5
PARTS = 4  # chunks per segment: two segments overflow the stream
JOB = "trimjob-0001"


def add(r: redis.Redis, keys: Keys, fields: dict[str, Any], *, counted: bool = True) -> None:
    """An entry as the worker's scripts add it: trimmed at MAXLEN, counted in the status's 'results_entries' and
    numbered by that count (what tells a reader that trimming took entries it has not read) unless ``counted`` is
    off (a worker from before the numbers)."""
    if counted:
        fields = {ENTRY: r.hincrby(keys.status(JOB), "results_entries", 1), **fields}
    r.xadd(keys.results(JOB), fields, maxlen=MAXLEN, approximate=False)


def publish(r: redis.Redis, keys: Keys, seg: int, *, counted: bool = True) -> None:
    for part in range(PARTS):
        add(r, keys, chunk_fields(seg, part, part == PARTS - 1, "w/0", 16000, bytes([seg, part]) * 8), counted=counted)


def finish(r: redis.Redis, keys: Keys, *, counted: bool = True) -> None:
    r.hset(keys.status(JOB), "state", "done")
    add(r, keys, final_fields("done"), counted=counted)


@pytest.fixture
def client(settings: Settings, r: redis.Redis) -> Client:
    r.hset(Keys(settings.redis.key_prefix).status(JOB), mapping={"state": "running", "total": 3})
    return Client.from_url(settings=settings)


def test_trimming_what_was_read_is_harmless(client: Client, r: redis.Redis) -> None:
    keys = client.keys
    publish(r, keys, 0)
    stream = client.job(JOB).stream(timeout=10, block_ms=50)
    chunks = [next(stream) for _ in range(PARTS)]  # all of segment 0 read
    publish(r, keys, 1)  # trims most of segment 0, which this reader has read
    chunks += [next(stream) for _ in range(PARTS)]
    publish(r, keys, 2)  # trims segment 1 and the rest of 0: read too
    finish(r, keys)
    chunks += list(stream)
    assert [c.seq for c in chunks] == list(range(3 * PARTS))
    assert r.xlen(keys.results(JOB)) == MAXLEN < int(r.xinfo_stream(keys.results(JOB))["entries-added"])


def test_trimming_what_was_not_read_is_stream_trimmed(client: Client, r: redis.Redis) -> None:
    keys = client.keys
    publish(r, keys, 0)
    stream = client.job(JOB).stream(timeout=10, block_ms=50)
    next(stream)  # the reader holds segment 0; segment 1 is trimmed before it reads it
    publish(r, keys, 1)
    publish(r, keys, 2)
    finish(r, keys)
    started = time.monotonic()
    with pytest.raises(JobError) as exc:
        list(stream)
    assert exc.value.code == STREAM_TRIMMED and "results_maxlen" in exc.value.message
    assert time.monotonic() - started < 5


def test_async_face_says_the_same(settings: Settings, client: Client, r: redis.Redis) -> None:
    keys = client.keys
    publish(r, keys, 0)

    async def run() -> tuple[int, str]:
        seen = 0
        async with AsyncClient.from_url(settings=settings) as aclient:
            try:
                async for _ in (await aclient.job(JOB)).stream(timeout=10, block_ms=50):
                    seen += 1
                    if seen == 1:
                        publish(r, keys, 1)
                        publish(r, keys, 2)
                        finish(r, keys)
            except JobError as exc:
                return seen, exc.code
        return seen, "no error"

    assert asyncio.run(run()) == (PARTS, STREAM_TRIMMED)  # segment 0 was in hand; then the gap


def test_a_stream_whose_adds_were_not_counted_says_the_same(client: Client, r: redis.Redis) -> None:
    """Entries without numbers (workers from before them): the reader finds the gap once the final record came and
    the job's status says it ended."""
    keys = client.keys
    publish(r, keys, 0, counted=False)
    stream = client.job(JOB).stream(timeout=10, block_ms=50)
    assert [next(stream).seq for _ in range(PARTS)] == list(range(PARTS))  # trimming what was read: harmless
    publish(r, keys, 1, counted=False)
    publish(r, keys, 2, counted=False)
    finish(r, keys, counted=False)
    started = time.monotonic()
    with pytest.raises(JobError) as exc:
        list(stream)
    assert exc.value.code == STREAM_TRIMMED and time.monotonic() - started < 5


def test_reads_run_no_script(client: Client, r: redis.Redis) -> None:
    """A read is one XREAD, no script (a script would hash every entry it reads, audio, ~5 us per KB), and a reader
    that keeps up asks nothing else: no status, no length, no range."""
    publish(r, client.keys, 0)
    job = client.job(JOB)  # its total read (and the connection made) before counting
    r.config_resetstat()
    stream = job.stream(timeout=10, block_ms=50)
    assert [next(stream).seq for _ in range(PARTS)] == list(range(PARTS))
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}
    assert "evalsha" not in calls and "eval" not in calls, calls
    assert set(calls) - {"config|resetstat"} == {"xread"}, calls


def test_resume_after_the_head_is_gone(client: Client, r: redis.Redis) -> None:
    keys = client.keys
    for seg in range(3):
        publish(r, keys, seg)
    finish(r, keys)
    with pytest.raises(JobError) as exc:
        list(client.job(JOB).stream(after_seq=2 * PARTS, timeout=10, block_ms=50))
    assert exc.value.code == STREAM_TRIMMED


def test_an_expired_stream_of_a_finished_job(client: Client, r: redis.Redis) -> None:
    r.hset(client.keys.status(JOB), "state", "done")  # no results stream at all: it expired
    started = time.monotonic()
    with pytest.raises(JobError) as exc:
        list(client.job(JOB).stream(timeout=10, block_ms=50))
    assert exc.value.code == STREAM_TRIMMED
    assert time.monotonic() - started < 5


def test_a_job_still_queued_waits_for_its_stream(client: Client) -> None:
    from wire.errors import JobTimeoutError

    with pytest.raises(JobTimeoutError):  # no stream yet and still running: wait (until the timeout)
        list(client.job(JOB).stream(timeout=0.3, block_ms=50))
