"""The farm end to end: real redis-server, real Celery worker processes, real voices."""

from __future__ import annotations

import time

import numpy as np
import pytest
import soundfile as sf

from pipeline.audio import from_pcm16, to_pcm16
from pipeline.errors import NOTHING_TO_SPEAK, UNKNOWN_VOICE, UNSUPPORTED_FORMAT, InputError
from pipeline.synth import Synthesizer
from pipeline.voices.base import SynthesisOptions
from wire.broker import run_blocking
from wire.errors import JobNotFoundError
from wire.keys import Keys
from wire.connect import connect_url
from wire.redis.broker import RedisBroker
from wire.records import SegmentJob
from tests.conftest import Farm, FarmSpec

pytestmark = pytest.mark.slow

MIXED = [
    "今天天气很好，我们去公园散步吧。Hello from the farm.",
    "Good morning. 早上好！",
    "我在银行工作了三年。I work at a bank.",
    "The meeting starts at 10:30. 会议十点半开始。",
    "请把这本书还给他。Thank you!",
    "This costs $5. 这个五块钱。",
    "你觉得这个主意怎么样？I think it is great.",
    "Welcome to Beijing. 欢迎来到北京。",
    "他长大了，长得很高。",
    "One, two, three. 一二三。",
    "We sell coffee and tea. 我们卖咖啡和茶。",
    "我们一起去吃饭吧。Let's go.",
    "The weather is nice today.",
    "她唱歌唱得很好听。",
    "Please call me at 555-123-4567.",
    "我的电话是13800138000。",
    "Read this chapter aloud, slowly and clearly.",
    "音乐让人快乐。Music makes people happy.",
    "It is 25 degrees outside. 外面二十五度。",
    "晚安，明天见。Good night.",
]


FARM = FarmSpec(env={"TTSFARM_QUEUE_MAX_BATCH_CPU": "4"})


def test_the_gpu_checks_agreement_on_a_real_farm(farm: Farm) -> None:
    """bench/agreement.py as scripts/gpu_check.py runs it before farm figures: the farm's jobs agree with this process's
    synthesis; against a reference that speaks otherwise (its blend reads Chinese with Kokoro `alpha`) they do not."""
    import dataclasses

    from bench.agreement import CASES, farm_agreement
    from pipeline.settings import Catalogue

    cases = [("joe", CASES[0][1]), (None, CASES[2][1])]
    client = farm.client()
    agreed = farm_agreement(client, Synthesizer(farm.settings), cases)
    assert agreed["agree"] and all(c["logmel_l1_db"] < 0.1 for c in agreed["cases"]), agreed
    voices = farm.settings.catalogue.voices
    blend = voices["default"]
    alpha = dataclasses.replace(blend, options={**blend.options, "routes": {**blend.options["routes"], "zh": "alpha"}})
    other = dataclasses.replace(farm.settings, catalogue=Catalogue({**voices, "default": alpha}, "default"))
    differs = farm_agreement(client, Synthesizer(other), cases)
    assert [c["agree"] for c in differs["cases"]] == [True, False] and not differs["agree"], differs
    assert "log-mel" in differs["cases"][1]["why"] or "length" in differs["cases"][1]["why"]


def _read(url: str) -> tuple[np.ndarray, int]:
    assert url.startswith("file://")
    data, rate = sf.read(url[len("file://") :], dtype="float32")
    return data, rate


def test_mixed_jobs_stream_and_equal_offline_say(farm: Farm) -> None:
    client = farm.client()
    noiseless = {"noise_scale": 0.0, "noise_w": 0.0}
    jobs = [client.submit(text, format="wav", options=noiseless) for text in MIXED]
    synth = Synthesizer(farm.settings)
    for text, job in zip(MIXED, jobs):
        chunks = list(job.stream(timeout=180))
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        assert chunks[-1].last and not any(c.last for c in chunks[:-1])
        streamed = from_pcm16(b"".join(c.pcm for c in chunks))
        result = job.wait(timeout=60)
        stored, rate = _read(result.url)
        assert rate == 24000 == chunks[0].sample_rate
        np.testing.assert_array_equal(stored, streamed)
        # what `say` writes: the same audio quantized to PCM16 (and clipped at full scale)
        offline = from_pcm16(to_pcm16(synth.synthesize(text, None, SynthesisOptions.noiseless()).audio))
        assert len(offline) == len(stored), text
        assert np.max(np.abs(offline - stored)) <= 2e-3, text
        assert abs(result.duration_s - len(stored) / rate) < 1e-3


def test_unknown_voice_and_format_are_rejected_at_submit(farm: Farm) -> None:
    client = farm.client()
    with pytest.raises(InputError) as exc:
        client.submit("hello", voice="nobody")
    assert exc.value.code == UNKNOWN_VOICE
    with pytest.raises(InputError) as exc:
        client.submit("hello", format="wma")
    assert exc.value.code == UNSUPPORTED_FORMAT


def test_frontend_failure_in_worker_fails_the_job_with_its_code(farm: Farm) -> None:
    client = farm.client()
    keys = Keys(farm.prefix)
    job = SegmentJob(job_id="badjob-" + "x" * 10, seg=0, total=1, text="...", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=22050)
    client.redis.hset(keys.status(job.job_id), mapping={"state": "queued", "total": 1, "created": time.time()})
    client.ensure_groups()
    client.redis.xadd(keys.queue("interactive", 0), job.to_fields())
    handle = client.job(job.job_id)
    with pytest.raises(Exception) as exc:
        list(handle.stream(timeout=30))
    assert getattr(exc.value, "code", None) == NOTHING_TO_SPEAK
    st = handle.status()
    assert st["state"] == "failed" and st["error_code"] == NOTHING_TO_SPEAK
    last = client.redis.xrevrange(keys.results(job.job_id), count=1)[0][1]
    assert last[b"type"] == b"final" and NOTHING_TO_SPEAK.encode() in last[b"info"]


def test_unknown_voice_written_straight_into_a_stream_fails_its_job_at_once(farm: Farm) -> None:
    client = farm.client()
    keys = Keys(farm.prefix)
    job = SegmentJob(job_id="novoice-" + "y" * 10, seg=0, total=1, text="Hello.", lang="en", voice="nobody",
                     request_voice="nobody", format="wav", sample_rate=22050)
    client.redis.hset(keys.status(job.job_id), mapping={"state": "queued", "total": 1, "created": time.time()})
    client.ensure_groups()
    client.redis.xadd(keys.queue("interactive", 0), job.to_fields())
    with pytest.raises(Exception) as exc:
        client.job(job.job_id).wait(timeout=30)
    assert getattr(exc.value, "code", None) == UNKNOWN_VOICE


@pytest.mark.parametrize(
    "fields",
    [
        {"nothing": "here"},
        {"v": "99", "job": "{}"},
        {"v": "1", "job": "{not json"},
        {"v": "1", "job": '{"job_id": "x"}'},
        {"v": b"\xff\xfe", "job": b"\x00\x81garbage"},
        {"v": "1", "job": '{"job_id": "../../../etc/x", "seg": 0, "total": 1, "text": "hi", "lang": "en", "voice": "joe", '
                          '"request_voice": "joe", "format": "wav", "sample_rate": 22050}'},
        {"v": "1", "job": '{"job_id": "abcdefgh12", "seg": 3, "total": 1, "text": "hi", "lang": "en", "voice": "joe", '
                          '"request_voice": "joe", "format": "wav", "sample_rate": 22050}'},
        {"v": "1", "job": '{"job_id": "abcdefgh12", "seg": 0, "total": 1, "text": "hi", "lang": "en", "voice": "joe", '
                          '"request_voice": "joe", "format": "wav", "sample_rate": -5}'},
        {"v": "1", "job": '{"job_id": "abcdefgh12", "seg": 0, "total": 1, "text": "hi", "lang": "en", "voice": "joe", '
                          '"request_voice": "joe", "format": "wav", "sample_rate": 22050, "lane": "vip"}'},
        {"v": "1", "job": '{"job_id": "abcdefgh12", "seg": 0, "total": 1, "text": "", "lang": "en", "voice": "joe", '
                          '"request_voice": "joe", "format": "wav", "sample_rate": 22050}'},
        {"v": "1", "job": '{"job_id": "abcdefgh12", "seg": 0, "total": 1, "text": "hi", "lang": "en", "voice": "joe", '
                          '"request_voice": "joe", "format": "wav", "sample_rate": 22050, "chunk_ms": 999999}'},
        {"v": "1", "job": '[1, 2, 3]'},
    ],
)
def test_malformed_entries_are_dead_lettered_and_the_worker_keeps_serving(farm: Farm, fields: dict) -> None:
    client = farm.client()
    keys = Keys(farm.prefix)
    client.ensure_groups()
    before = client.redis.xlen(keys.dead_letters())
    client.redis.xadd(keys.queue("interactive", 1), fields)
    deadline = time.monotonic() + 30
    while client.redis.xlen(keys.dead_letters()) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    (_, rec), = client.redis.xrevrange(keys.dead_letters(), count=1)
    assert rec[b"code"] == b"MALFORMED_JOB"
    job = client.submit("Still serving.", voice="joe")
    assert job.wait(timeout=60).state == "done"


def test_lone_job_starts_within_the_window(farm: Farm) -> None:
    client = farm.client()
    time.sleep(0.5)  # nothing else queued
    job = client.submit("A lone job waits for company no longer than the window.", voice="joe")
    job.wait(timeout=60)
    st = job.status()
    waited = st["started"] - st["created"]
    assert waited <= farm.settings.queue.window_ms / 1000 + 0.15, waited


def test_the_worker_gives_freed_heap_back_on_the_shipped_period(farm: Farm) -> None:
    """The worker's periodic ``malloc_trim``, on by default (docs/lab/memory.md, "What did not flatten it"), seen in the
    heartbeat of a real worker process."""
    runtime = farm.settings.runtime
    assert runtime.malloc_trim_every_s > 0
    farm.client().submit("Memory goes back to the system.", voice="joe").wait(timeout=60)
    broker = connect_url(farm.redis_url, key_prefix=farm.prefix)
    deadline = time.monotonic() + 2 * runtime.malloc_trim_every_s + 10
    while True:
        beats = run_blocking(broker, broker.read_heartbeats())
        heap = next(info["heap"] for info in beats.values() if info.get("state") == "serving")
        if heap["trims"] >= 1 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert heap["glibc"] is True and heap["every_s"] == runtime.malloc_trim_every_s
    assert heap["trims"] >= 1


def test_cancelled_job_is_skipped(farm: Farm, redis_url: str) -> None:
    client = farm.client()
    job = client.submit("First sentence here. " * 30, voice="joe", lane="bulk")
    assert job.cancel()
    with pytest.raises(Exception) as exc:
        job.wait(timeout=30)
    assert "CANCELLED" in str(getattr(exc.value, "code", exc.value))


def test_a_cancel_is_never_undone_by_a_segment_starting(farm: Farm, redis_url: str) -> None:
    """A worker reads a job's state and marks it started in one step (``start_segments``): a cancel landing before it
    stands, and the job is not marked started or running."""
    import secrets

    import redis

    from producer.client import Client

    r = redis.Redis.from_url(redis_url)
    keys = Keys(f"tc{secrets.token_hex(4)}")  # a prefix no worker reads
    client = Client(r, farm.settings.replace(redis={"key_prefix": keys.prefix}))
    status = keys.status("cancelrace1")
    r.hset(status, mapping={"state": "queued", "total": 2, "created": time.time()})
    job = client.job("cancelrace1")
    assert job.cancel() is True
    broker = RedisBroker(r, keys)
    assert broker.start_segments(["cancelrace1"], "w@test", [True], [time.time()]) == [("cancelled", False)]
    assert r.hget(status, "state") == b"cancelled" and r.hget(status, "started") is None
    r.hset(status, mapping={"state": "queued"})  # the same step on a job still queued: marked, running
    assert broker.start_segments(["cancelrace1"], "w@test", [True], [time.time()]) == [("queued", True)]
    assert r.hget(status, "state") == b"running" and r.hget(status, "worker") == b"w@test"
    r.hset(status, mapping={"state": "cancelled"})
    assert job.cancel() is False
    r.delete(status)  # expired meanwhile
    with pytest.raises(JobNotFoundError):
        job.cancel()


def test_job_stream_resumes_after_seq(farm: Farm) -> None:
    client = farm.client()
    job = client.submit("Resume from here. Then read the second sentence. And a third one.", voice="joe",
                        options={"noise_scale": 0.0, "noise_w": 0.0})
    full = list(job.stream(timeout=60))
    again = list(client.job(job.id).stream(after_seq=1, timeout=60))
    assert [c.seq for c in again] == [c.seq for c in full[2:]]
    assert b"".join(c.pcm for c in again) == b"".join(c.pcm for c in full[2:])


def test_asyncio_client_streams_and_waits(farm: Farm) -> None:
    import asyncio

    from producer.aio import AsyncClient

    async def go() -> tuple[int, str, int]:
        async with AsyncClient.from_url(settings=farm.settings) as client:
            job = await client.submit("Asynchronous clients stream too. 异步也可以。")
            chunks = [c async for c in job.stream(timeout=120)]
            result = await job.wait(timeout=30)
            return len(chunks), result.state, sum(len(c.pcm) for c in chunks)

    n, state, nbytes = asyncio.run(go())
    assert n >= 2 and state == "done" and nbytes > 24000


def test_importing_the_sdk_loads_no_model_runtime() -> None:
    import subprocess
    import sys

    code = "import sys, producer; from producer.client import Client; print(any(m in sys.modules for m in ('onnxruntime', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
