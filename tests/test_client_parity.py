"""The sync and asyncio SDK faces answer alike: the same scenarios through both, on a real redis-server.

No worker runs: the tests write the records a worker would (status hash, results stream), so each case is
exact. Each scenario runs once per face (``Face``: the sync ``Client`` called directly, the
``AsyncClient`` on an event loop of its own thread) and returns what it saw, values and errors (class,
code, message); the two must be equal, and equal to what the scenario expects. Both faces are thin
over ``producer.core``; these tests are what keeps them so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from pipeline.errors import BAD_OPTION, MALFORMED_JOB, TTSFarmError
from producer.aio import AsyncClient, AsyncJob
from producer.client import Client, Job
from bench.processes import RedisServer
from wire.errors import BACKEND_AUTH_FAILED
from wire.keys import Keys
from wire.records import Chunk, JobResult, chunk_fields, final_fields
from wire.settings import Settings

RATE = 16000
JOB = "parity-job-0001"


@dataclass(frozen=True)
class Err:
    """An error a call raised, as the caller sees it."""

    kind: str
    code: str | None
    message: str


class Face:
    """The sync face: calls go straight through."""

    name = "sync"

    def __init__(self, settings: Settings) -> None:
        self.client: Any = Client.from_url(settings=settings)

    def handle(self, job_id: str, total: int) -> Any:
        return Job(self.client, job_id, total)

    def settle(self, value: Any) -> Any:
        return value

    def chunks(self, stream: Any) -> list[Chunk]:
        return list(stream)

    def close(self) -> None:
        self.client.close()

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` settled (awaited on the async face); a farm or Redis error as ``Err``."""
        try:
            return self.settle(fn(*args, **kwargs))
        except TTSFarmError as exc:  # the broker's errors too: never redis-py's own
            return Err(type(exc).__name__, exc.code, exc.message)

    def stream(self, job: Any, **kwargs: Any) -> list[Chunk] | Err:
        """All of ``job.stream(**kwargs)``, or the error it ended with (bad arguments raise at the call)."""
        return self.call(lambda: self.chunks(job.stream(**kwargs)))  # type: ignore[no-any-return]


class AsyncFace(Face):
    """The asyncio face: its coroutines run on an event loop in a thread of its own, so a scenario (and
    a second thread of it) can call them the same way."""

    name = "async"

    def __init__(self, settings: Settings) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = self.settle(self._make(settings))

    @staticmethod
    async def _make(settings: Settings) -> AsyncClient:
        return AsyncClient.from_url(settings=settings)

    def handle(self, job_id: str, total: int) -> Any:
        return AsyncJob(self.client, job_id, total)

    def settle(self, value: Any) -> Any:
        if asyncio.iscoroutine(value):
            return asyncio.run_coroutine_threadsafe(value, self.loop).result()
        return value

    def chunks(self, stream: Any) -> list[Chunk]:
        async def collect() -> list[Chunk]:
            return [chunk async for chunk in stream]

        return self.settle(collect())  # type: ignore[no-any-return]

    def close(self) -> None:
        self.settle(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def both(settings: Settings, scenario: Callable[[Face], Any], reset: Callable[[], Any] | None = None) -> Any:
    """What ``scenario`` saw, the same through both faces (``reset`` runs before each)."""
    seen = {}
    for make in (Face, AsyncFace):
        if reset:
            reset()
        face = make(settings)
        try:
            seen[face.name] = scenario(face)
        finally:
            face.close()
    assert seen["sync"] == seen["async"], f"the faces differ:\nsync  {seen['sync']!r}\nasync {seen['async']!r}"
    return seen["sync"]


def publish(r: redis.Redis, keys: Keys, seg: int, parts: int = 2, words: list[list[Any]] | None = None) -> None:
    for part in range(parts):
        pcm = bytes([seg, part]) * 8
        r.xadd(keys.results(JOB), chunk_fields(seg, part, part == parts - 1, "w/0", RATE, pcm, words if part == 0 else ()))


def finish(r: redis.Redis, keys: Keys, state: str = "done", **status: Any) -> None:
    r.hset(keys.status(JOB), mapping={"state": state, "finished": 1002.0, **status})
    info = {"code": status["error_code"], "message": status["error_message"]} if "error_code" in status else {}
    r.xadd(keys.results(JOB), final_fields(state, **info))


def running(r: redis.Redis, keys: Keys, total: int = 2) -> None:
    r.hset(keys.status(JOB), mapping={"state": "running", "total": total, "created": 1000.0, "started": 1000.5})


# --- scenarios -------------------------------------------------------------------------------------------


def test_bad_input_types_answer_the_same_codes_and_write_nothing(settings: Settings, r: redis.Redis) -> None:
    def scenario(face: Face) -> list[Any]:
        job = face.handle(JOB, 1)
        return [face.call(face.client.submit, None), face.call(face.client.submit, 12345),
                face.call(face.client.submit, "Hello.", voice=12345), face.call(face.client.submit, "Hello.", nope=1),
                face.call(face.client.job, None), face.call(face.client.job, 12345),
                face.stream(job, after_seq=None), face.stream(job, block_ms=0), face.stream(job, timeout="1"),
                face.call(job.wait, timeout="1"), face.call(job.wait, poll_s=None)]

    seen = both(settings, scenario, r.flushdb)
    assert [e.code for e in seen] == [MALFORMED_JOB, MALFORMED_JOB] + [BAD_OPTION] * 9
    assert all(e.kind == "InputError" for e in seen)
    assert "not NoneType" in seen[0].message and "not int" in seen[1].message
    assert r.dbsize() == 0, "a refused call wrote to Redis"


def test_an_unknown_job_is_job_not_found_from_every_call(settings: Settings, r: redis.Redis) -> None:
    def scenario(face: Face) -> list[Any]:
        job = face.handle("no-such-job-0001", 1)
        return [face.call(face.client.job, "no-such-job-0001"), face.call(job.status), face.call(job.cancel),
                face.call(job.wait, timeout=5), face.stream(job, timeout=5, block_ms=50)]

    seen = both(settings, scenario, r.flushdb)
    assert {(e.kind, e.code) for e in seen} == {("JobNotFoundError", "JOB_NOT_FOUND")}
    assert {e.message for e in seen} == {"no job 'no-such-job-0001' (unknown or expired)"}


def test_submit_then_cancel(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)

    def scenario(face: Face) -> dict[str, Any]:
        job = face.call(face.client.submit, "Hello there. This is a second sentence.", job_id=JOB, lane="bulk")
        queued = face.call(job.status)
        again = face.call(face.client.job, JOB)
        out = {"repr": repr(job).replace("AsyncJob", "Job"), "total": job.total, "again": again.total,
               "queued": {k: queued[k] for k in ("state", "total", "done", "voice", "format", "sample_rate", "lane")},
               "entries": sum(r.xlen(q) for q in keys.queues(settings.queue.n_buckets)),
               "cancel": face.call(job.cancel), "cancel_again": face.call(job.cancel),
               "state": face.call(job.status)["state"],
               "wait": face.call(job.wait, timeout=5), "stream": face.stream(job, timeout=5, block_ms=50)}
        return out

    seen = both(settings, scenario, r.flushdb)
    assert seen["total"] == seen["again"] == seen["entries"] >= 1
    assert seen["queued"]["state"] == "queued" and seen["queued"]["lane"] == "bulk"
    assert (seen["cancel"], seen["cancel_again"], seen["state"]) == (True, False, "cancelled")
    assert seen["wait"].code == seen["stream"].code == "JOB_CANCELLED"
    assert seen["repr"] == f"Job({JOB!r}, segments={seen['total']})"


def test_a_job_id_admits_one_request(settings: Settings, r: redis.Redis) -> None:
    """The same request again under a job id is that job (nothing queued twice); other text or another option
    under it is JOB_ID_CONFLICT, an input error naming the id, and writes nothing."""
    keys = Keys(settings.redis.key_prefix)
    text = "Hello there. This is a second sentence. And a third one here."

    def written() -> tuple[Any, ...]:
        streams = [*keys.queues(settings.queue.n_buckets), keys.staging("bulk")]
        return (sorted(r.keys()), r.hgetall(keys.status(JOB)), r.hgetall(keys.backlog("bulk")),
                [r.xrange(s) for s in streams])

    def scenario(face: Face) -> dict[str, Any]:
        job = face.call(face.client.submit, text, job_id=JOB, lane="bulk")
        before = written()
        again = face.call(face.client.submit, text, job_id=JOB, lane="bulk")  # later: its own ``created``
        same = written() == before
        conflicts = [face.call(face.client.submit, "Hello.", job_id=JOB, lane="bulk"),
                     face.call(face.client.submit, text, job_id=JOB, lane="bulk", format="flac"),
                     face.call(face.client.submit, text, job_id=JOB, lane="bulk", options={"speed": 1.5})]
        return {"total": job.total, "again": (again.id, again.total), "same": same, "conflicts": conflicts,
                "unchanged": written() == before}

    seen = both(settings, scenario, r.flushdb)
    assert seen["total"] == 3 and seen["again"] == (JOB, 3) and seen["same"] and seen["unchanged"]
    assert {(e.kind, e.code) for e in seen["conflicts"]} == {("InputError", "JOB_ID_CONFLICT")}
    assert all(JOB in e.message for e in seen["conflicts"])


def test_a_done_job_streams_waits_and_joins_alike(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)
    words = [{"text": "Hi", "start_s": 0.0, "end_s": 0.001, "char_start": 0, "char_end": 2, "approx": False}]

    def reset() -> None:
        r.flushdb()
        running(r, keys)
        publish(r, keys, 0, words=[[0, 16, 0, 2, "Hi"]])
        publish(r, keys, 1, parts=3)
        finish(r, keys, url="file:///out/parity.wav", duration=0.05, words=json.dumps(words), info=json.dumps({"voice": "x"}))

    def scenario(face: Face) -> dict[str, Any]:
        job = face.call(face.client.job, JOB)
        return {"stream": face.stream(job, timeout=10, block_ms=50),
                "resumed": face.stream(job, after_seq=2, timeout=10, block_ms=50),
                "audio": face.call(job.audio, timeout=10), "wait": face.call(job.wait, timeout=10)}

    seen = both(settings, scenario, reset)
    chunks: list[Chunk] = seen["stream"]
    assert [(c.seq, c.seg, c.last) for c in chunks] == [(0, 0, False), (1, 0, False), (2, 1, False), (3, 1, False),
                                                        (4, 1, True)]
    assert [w.text for w in chunks[0].words] == ["Hi"] and chunks[1].words == ()
    assert [c.seq for c in seen["resumed"]] == [3, 4]
    assert seen["audio"] == (b"".join(c.pcm for c in chunks), RATE)
    result: JobResult = seen["wait"]
    assert (result.state, result.url, result.duration_s, result.info) == ("done", "file:///out/parity.wav", 0.05, {"voice": "x"})
    assert [w.text for w in result.words] == ["Hi"] and result.timings == {"started": 0.5, "finished": 2.0}


def test_a_failed_job_raises_its_code_from_stream_and_wait(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)

    def reset() -> None:
        r.flushdb()
        running(r, keys)
        publish(r, keys, 0)
        finish(r, keys, "failed", error_code="MODEL_FAILED", error_message="the model fell over")

    def scenario(face: Face) -> list[Any]:
        job = face.handle(JOB, 2)
        return [face.stream(job, timeout=10, block_ms=50), face.call(job.wait, timeout=10)]

    stream_err, wait_err = both(settings, scenario, reset)
    assert stream_err.code == wait_err.code == "MODEL_FAILED"
    assert "the model fell over" in stream_err.message and wait_err.message == "the model fell over"


def test_timeouts(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)

    def reset() -> None:
        r.flushdb()
        running(r, keys)

    def scenario(face: Face) -> list[Any]:
        job = face.handle(JOB, 2)
        return [face.call(job.wait, timeout=0.3), face.stream(job, timeout=0.3, block_ms=50)]

    seen = both(settings, scenario, reset)
    assert [(e.kind, e.code) for e in seen] == [("JobTimeoutError", "JOB_TIMEOUT")] * 2
    assert seen[0].message == f"job {JOB} did not finish within 0.3 s (state running)"


def test_the_workers_heartbeats_read_alike(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)
    beat = {"state": "serving", "ts": 1000.0, "pid": 11, "voices": ["joe"]}
    r.hset(keys.workers(), mapping={"w1@h:11": json.dumps(beat), "w2@h:12": "{not json"})

    def scenario(face: Face) -> Any:
        return face.call(face.client.workers)

    assert both(settings, scenario) == {"w1@h:11": beat}  # a record that is not a JSON object is skipped


@pytest.fixture
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer(password="parity-secret").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("password", ["wrong", ""])
def test_refused_credentials_are_backend_auth_failed_from_every_call(settings: Settings, locked_redis: RedisServer,
                                                                     password: str) -> None:
    auth = f":{password}@" if password else ""
    refused = settings.replace(redis={"url": f"redis://{auth}127.0.0.1:{locked_redis.port}/0"})

    def scenario(face: Face) -> list[Any]:
        job = face.handle(JOB, 1)
        started = time.monotonic()
        seen = [face.call(face.client.submit, "Refused.", job_id=JOB), face.call(face.client.job, JOB),
                face.call(job.status), face.call(job.cancel), face.call(job.wait, timeout=20),
                face.stream(job, timeout=20, block_ms=50), face.call(face.client.workers)]
        return [(e.kind, e.code) for e in seen] + [time.monotonic() - started < 10]  # never retried until the timeout

    seen = both(refused, scenario)
    assert seen == [("BrokerRefused", BACKEND_AUTH_FAILED)] * 7 + [True]  # a TTSFarmError of that code
    assert "parity-secret" not in repr(seen)


@pytest.fixture
def restartable_redis() -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True, appendfsync="always").start()
    try:
        yield server
    finally:
        server.stop()


def test_wait_and_stream_survive_redis_restarting(settings: Settings, restartable_redis: RedisServer) -> None:
    """Redis goes away mid-wait and mid-stream (a restart or a failover to a replica at the same address)
    and comes back with its data: both calls carry on and end as if nothing happened."""
    server = restartable_redis
    local = settings.replace(redis={"url": server.url})
    keys = Keys(local.redis.key_prefix)
    r = redis.Redis.from_url(server.url)

    def reset() -> None:
        r.flushdb()
        running(r, keys)
        publish(r, keys, 0)

    def scenario(face: Face) -> dict[str, Any]:
        job = face.handle(JOB, 2)
        first = face.call(job.status)  # the connection is made before the outage
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            waited = pool.submit(face.call, job.wait, timeout=60)
            streamed = pool.submit(face.stream, job, timeout=60, block_ms=50)
            time.sleep(0.3)
            server.halt()
            time.sleep(1.5)
            assert not waited.done() and not streamed.done(), "a call gave up while Redis was away"
            server.start()
            back = redis.Redis.from_url(server.url)
            publish(back, keys, 1)
            finish(back, keys, url="file:///out/restart.wav", duration=0.02)
            back.close()
            result, chunks = waited.result(60), streamed.result(60)
        return {"first": first["state"], "wait": (result.state, result.url) if isinstance(result, JobResult) else result,
                "chunks": [(c.seq, c.seg, c.last) for c in chunks] if isinstance(chunks, list) else chunks}

    seen = both(local, scenario, reset)
    r.close()
    assert seen == {"first": "running", "wait": ("done", "file:///out/restart.wav"),
                    "chunks": [(0, 0, False), (1, 0, False), (2, 1, False), (3, 1, True)]}
