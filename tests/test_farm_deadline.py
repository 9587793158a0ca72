"""Deadline scheduling on a real farm (real Redis, a real worker process, the real joe voice): a new caller's first
chunk goes out before the next window of a long job whose listener is seconds ahead, seen in results-stream order
(stream entry ids are Redis server times). With ``scheduling.mode = fifo`` the same loop finishes the long
segment first: the setting really switches the scheduler."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from wire.keys import Keys
from tests.conftest import Farm

pytestmark = pytest.mark.slow
NOISELESS = {"noise_scale": 0.0, "noise_w": 0.0}
LONG = ("Streaming from inside a sentence means that the listener hears the first words of this rather long "
        "sentence while the words near its end are still being vocoded window after window and then it still goes on.")
ONE_PIECE = 5000  # chunk_ms: a window fits one chunk


def _id(raw: bytes) -> tuple[int, int]:
    ms, seq = raw.decode().split("-")
    return int(ms), int(seq)


def chunk_ids(r: redis.Redis, keys: Keys, job_id: str) -> list[tuple[int, int]]:
    return [_id(eid) for eid, f in r.xrange(keys.results(job_id)) if f.get(b"type") == b"chunk"]


@pytest.mark.parametrize("mode", ["deadline", "fifo"])
def test_a_new_callers_first_chunk_goes_before_the_next_window_of_a_job_ahead_of_its_listener(
        redis_url: str, tmp_path: Path, mode: str) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_INFERENCE_THREADS="1", TTSFARM_QUEUE_INTERACTIVE_LOOPS="0",
                TTSFARM_STREAMING_WINDOW_MS="500", TTSFARM_SCHEDULING_MODE=mode,
                # units with slack would run at nice 19: on a machine busy with other tests the long job would then
                # never get ahead of its listener
                TTSFARM_QUEUE_BULK_NICE="0")
    try:
        farm.start_worker()
        client = farm.client()
        keys = Keys(farm.prefix)
        long = client.submit(LONG, voice="joe", options=NOISELESS, chunk_ms=ONE_PIECE)
        assert long.total == 1
        stream = long.stream(timeout=120)
        first = next(stream)
        started = time.time()
        held = len(first.pcm) / 2 / first.sample_rate
        while held - (time.time() - started) < 1.5:  # the listener is at least 1.5 s of audio behind the farm
            chunk = next(stream)
            held += len(chunk.pcm) / 2 / chunk.sample_rate
        assert not chunk.last, "the long segment ended before the caller could come: make it longer"
        sec, usec = client.redis.time()
        arrived = (sec * 1000 + usec // 1000, 0)
        caller = client.submit("Hello, is anyone there?", voice="joe", options=NOISELESS)
        caller.wait(timeout=60)
        rest = list(stream)
        assert rest and rest[-1].last
        caller_first = chunk_ids(client.redis, keys, caller.id)[0]
        long_ids = chunk_ids(client.redis, keys, long.id)
        between = [i for i in long_ids if arrived < i < caller_first]  # long windows made while the caller waited
        after = [i for i in long_ids if i > caller_first]
        if mode == "deadline":
            assert len(between) <= 1, f"{len(between)} windows of the long job went before the caller (1 may be in flight)"
            assert after, "the long job's next window was not after the caller's first chunk"
        else:
            assert not after and len(between) >= 2, "fifo: the loop was expected to finish the long segment first"
        status = client.redis.hgetall(keys.status(long.id))
        assert float(status[b"delivered_s"]) == pytest.approx(held + sum(len(c.pcm) for c in rest) / 2 / first.sample_rate, abs=0.01)
    finally:
        farm.stop()
