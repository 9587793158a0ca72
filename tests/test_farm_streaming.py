"""Streaming from inside a segment, on a real farm (real Redis, worker processes, the real joe voice).

* A long segment's chunks reach the results stream a window at a time: its first chunk is published by a
  worker that dies before the segment's last window is vocoded (the results stream then holds the first
  window and no last chunk), and the redo continues that attempt (readers see one attempt's chunks, parts
  numbered without gap or repeat, the stream equals the stored output). With the voice's noise on, the redo makes
  the segment's frames again from its seed (nothing of them was stored in Redis), so the audio equals in-process
  synthesis of the whole segment with that seed.
* A cancel mid-segment stops vocoding at the next window (``ttsfarm_vocoder_windows_total`` counted).
* With windowing off, the same segment arrives in one piece (the setting really switches it).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from wire.keys import Keys
from tests.conftest import Farm, FarmSpec
from tests.faults import FAULT_APP, worker_faults

pytestmark = pytest.mark.slow
NOISELESS = {"noise_scale": 0.0, "noise_w": 0.0}
LONG = ("Streaming from inside a sentence means that the listener hears the first words of this rather long "
        "sentence while the zebra words near its end are still being vocoded window after window.")
ONE_PIECE = 5000  # chunk_ms (the most a request may ask): a window fits one chunk, so chunks = windows published


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def chunk_entries(r: redis.Redis, keys: Keys, job_id: str) -> list[dict[str, str]]:
    out = []
    for _, f in r.xrange(keys.results(job_id)):
        if f.get(b"type") == b"chunk":
            out.append({k.decode(): (v if k == b"pcm" else v.decode()) for k, v in f.items()})
    return out


def windows_made(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ttsfarm_vocoder_windows_total{"))


def test_worker_killed_mid_segment_first_chunk_out_then_one_clean_redo(redis_url: str, tmp_path: Path) -> None:
    """With the voice's noise on: the redo continues the dead worker's attempt, making the segment's frames again from
    its seed (they were never stored in Redis), so its windows join the first attempt's seamlessly."""
    import numpy as np

    from pipeline.audio import from_pcm16, to_pcm16
    from pipeline.synth import Synthesizer, finish_segment
    from pipeline.voices.base import SynthesisOptions
    from workers.streaming import noise_seed

    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_CLAIM_IDLE_MS="1500", TTSFARM_STREAMING_WINDOW_MS="400",
                **worker_faults("exitwindow:zebra"))
    try:
        victim = farm.start_worker(app=FAULT_APP)
        client = farm.client()
        keys = Keys(farm.prefix)
        job = client.submit(LONG, voice="joe", lane="bulk", format="pcm", chunk_ms=ONE_PIECE)  # the voice's noise
        assert job.total == 1
        wait_until(lambda: victim.proc.poll() is not None, 120, "the worker to die mid-segment")
        before = chunk_entries(client.redis, keys, job.id)
        # the first window is out, and the segment's last window was never made by that worker
        assert before and all(e["last"] == "0" for e in before), [(e["part"], e["last"]) for e in before]
        assert not client.redis.exists(keys.frames(job.id))  # joe's frames never went to Redis
        assert client.redis.hget(keys.status(job.id), "claim:0")  # its claim did: the attempt and the window plan
        for name in worker_faults(""):
            farm.env.pop(name)
        farm.start_worker()
        chunks = list(client.job(job.id).stream(timeout=120))
        result = client.job(job.id).wait(timeout=120)
        after = chunk_entries(client.redis, keys, job.id)
        assert len({e["attempt"] for e in after}) == 1  # one attempt's chunks, the dead worker's, continued
        assert [int(e["part"]) for e in after] == list(range(len(after)))  # no part twice, none missing
        assert [e["last"] for e in after] == ["0"] * (len(after) - 1) + ["1"] and len(after) > len(before) >= 1
        streamed = b"".join(c.pcm for c in chunks)
        stored = Path(result.url.removeprefix("file://")).read_bytes()
        assert streamed == stored  # the stored output
        assert sum(1 for _, f in client.redis.xrange(keys.results(job.id)) if f.get(b"type") == b"final") == 1
        # the segment made whole in this process from the same seed: the same audio, within PCM16 rounding
        synth = Synthesizer(farm.settings)
        ((piece, ph),) = synth.phonemize(LONG, "joe")
        voice = synth.bank.get(piece.voice)
        (out,) = voice.acoustic_outputs([ph.ids], SynthesisOptions(), [noise_seed(job.id, 0)])  # type: ignore[attr-defined]
        whole = voice.vocode([out.frames])[0]  # type: ignore[attr-defined]
        expected = from_pcm16(to_pcm16(finish_segment(whole, voice.sample_rate, voice.sample_rate, piece.segment.pause_after_s)))
        assert len(expected) == len(stored) // 2
        assert float(np.max(np.abs(expected - from_pcm16(stored)))) <= 2e-3
    finally:
        farm.stop()


FARM = FarmSpec(metrics=True, env={"TTSFARM_STREAMING_WINDOW_MS": "300"})  # the module's farm; a test that kills
# its worker or changes its settings makes its own


@pytest.fixture(scope="module")
def metered(farm: Farm) -> tuple[Farm, int]:
    return farm, farm.settings.worker.metrics_port


def test_a_long_segment_arrives_window_by_window(metered: tuple[Farm, int]) -> None:
    farm, port = metered
    client = farm.client()
    start = windows_made(port)
    job = client.submit(LONG, voice="joe", lane="bulk", options=NOISELESS, chunk_ms=ONE_PIECE)
    chunks = list(job.stream(timeout=120))
    made = windows_made(port) - start
    entries = chunk_entries(client.redis, Keys(farm.prefix), job.id)
    assert len(entries) == len(chunks) == made >= 8  # one chunk per window, as each window was made
    assert all(c.seg == 0 for c in chunks) and [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]


def test_chinese_on_baker_streams_too(metered: tuple[Farm, int]) -> None:
    farm, port = metered
    client = farm.client()
    start = windows_made(port)
    job = client.submit("流式合成让这一句很长的话在最后一个窗口做完之前就开始播放", voice="baker", lane="bulk", format="pcm",
                        options=NOISELESS, chunk_ms=ONE_PIECE)
    assert job.total == 1
    chunks = list(job.stream(timeout=120))
    result = job.wait(timeout=60)
    assert len(chunks) == windows_made(port) - start >= 3  # window by window
    assert b"".join(c.pcm for c in chunks) == Path(result.url.removeprefix("file://")).read_bytes()


def test_cancel_mid_segment_stops_vocoding(metered: tuple[Farm, int]) -> None:
    farm, port = metered
    client = farm.client()
    start = windows_made(port)
    whole = client.submit(LONG, voice="joe", lane="bulk", options=NOISELESS)
    whole.wait(timeout=120)
    full = windows_made(port) - start
    assert full >= 8
    job = client.submit(LONG, voice="joe", lane="bulk", options=NOISELESS)
    stream = job.stream(timeout=120)
    next(stream)  # the first window is out
    job.cancel()
    at_cancel = windows_made(port)  # read after the cancel: a stall of this process between the two counts nothing
    wait_until(lambda: client.redis.hget(Keys(farm.prefix).status(job.id), "final") is not None, 30, "the job to end")
    time.sleep(0.5)
    after = windows_made(port) - at_cancel
    assert after <= 2, f"{after} windows made after the cancel (the one in flight may finish)"
    assert windows_made(port) - start - full < full  # the cancelled segment was not vocoded to its end
    assert client.redis.hget(Keys(farm.prefix).status(job.id), "state") == b"cancelled"


def test_windowing_off_publishes_the_segment_whole(redis_url: str, tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_STREAMING_WINDOWED="false")
    try:
        farm.start_worker()
        client = farm.client()
        job = client.submit(LONG, voice="joe", lane="bulk", options=NOISELESS, chunk_ms=ONE_PIECE)
        chunks = list(job.stream(timeout=120))
        step = chunks[0].sample_rate * ONE_PIECE // 1000 * 2
        assert len(chunks) >= 2 and all(len(c.pcm) == step for c in chunks[:-1])  # cut at chunk_ms, not at windows
    finally:
        farm.stop()


def test_a_bulk_segment_yields_to_an_interactive_job_between_windows(redis_url: str, tmp_path: Path) -> None:
    """One loop, no reserved one: a caller's job that arrives while a book's long segment is being vocoded is
    done before that segment's last window (whole-segment work could only serve it after)."""
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_INFERENCE_THREADS="1", TTSFARM_QUEUE_INTERACTIVE_LOOPS="0",
                TTSFARM_STREAMING_WINDOW_MS="300")
    try:
        farm.start_worker()
        client = farm.client()
        keys = Keys(farm.prefix)
        book = client.submit(LONG, voice="joe", lane="bulk", options=NOISELESS, chunk_ms=ONE_PIECE)
        stream = book.stream(timeout=120)
        next(stream)  # the bulk segment is being vocoded
        caller = client.submit("Hello, is anyone there?", voice="joe", options=NOISELESS)
        caller.wait(timeout=60)
        bulk_now = chunk_entries(client.redis, keys, book.id)
        assert bulk_now and not any(e["last"] == "1" for e in bulk_now), "the caller waited for the whole bulk segment"
        rest = list(stream)
        assert rest[-1].last
    finally:
        farm.stop()
