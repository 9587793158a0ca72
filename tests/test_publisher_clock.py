"""The playback clock the publisher keeps in a job's status hash (real Redis): ``first_chunk`` once, ``delivered_s``
summed over every piece published (by any worker), and each piece told the clock as it found it; and the claim a
deadline-scheduled loop keeps on the segments it holds between windows (``Consumer.touch``)."""

from __future__ import annotations

import time

import pytest
import redis

from wire.keys import Keys
from wire.redis.broker import RedisBroker
from wire.records import SegmentJob
from workers.publisher import Publisher, SegmentProgress

RATE = 16000


def _job(seg: int) -> SegmentJob:
    return SegmentJob(job_id="clockjob1234", seg=seg, total=2, text="Hello.", lang="en", voice="joe", request_voice="joe",
                      format="pcm", sample_rate=RATE, lane="interactive")


def _pcm(seconds: float) -> bytes:
    return b"\0\0" * int(seconds * RATE)


def test_the_clock_starts_at_the_first_chunk_and_counts_audio_from_every_publisher(r: redis.Redis) -> None:
    keys = Keys("clock")
    one = Publisher(RedisBroker(r, keys), storage=None, chunk_ms=500, maxlen=100, ttl_s=60)
    other = Publisher(RedisBroker(r, keys), storage=None, chunk_ms=500, maxlen=100, ttl_s=60)  # another worker
    before = time.time()
    seg0 = SegmentProgress(_job(0), "w1/1")
    assert one.publish_piece(seg0, _pcm(0.3), last=False, batch_id="b", worker="w1") is None
    assert seg0.delivered_before_s == 0.0 and before <= seg0.started <= time.time()
    started = seg0.started
    seg1 = SegmentProgress(_job(1), "w2/1")
    out1 = other.publish_piece(seg1, _pcm(1.5), last=True, batch_id="c", worker="w2")
    assert out1 is not None and out1.started == started and out1.delivered_before_s == pytest.approx(0.3)
    out0 = one.publish_piece(seg0, _pcm(1.0), last=True, batch_id="b", worker="w1")
    assert out0 is not None and out0.started == started and out0.delivered_before_s == pytest.approx(1.8)
    status = r.hgetall(keys.status("clockjob1234"))
    assert float(status[b"delivered_s"]) == pytest.approx(2.8)
    assert float(status[b"first_chunk"]) == started  # set once, by the job's first chunk


def test_a_redo_of_a_published_window_does_not_count_twice(r: redis.Redis) -> None:
    keys = Keys("clock2")
    pub = Publisher(RedisBroker(r, keys), storage=None, chunk_ms=500, maxlen=100, ttl_s=60)
    seg = SegmentProgress(_job(0), "w1/1")
    pub.publish_piece(seg, _pcm(0.5), last=False, batch_id="b", worker="w1", publish=False)  # published by a dead attempt
    assert r.hget(keys.status("clockjob1234"), "delivered_s") is None
    pub.publish_piece(seg, _pcm(0.25), last=False, batch_id="b", worker="w1")
    assert float(r.hget(keys.status("clockjob1234"), "delivered_s")) == pytest.approx(0.25)


def test_touching_held_entries_keeps_them_ours_and_never_takes_one_back(r: redis.Redis) -> None:
    """A segment held between its windows (deadline scheduling) is touched so that it does not look idle; one another
    consumer reclaimed meanwhile stays with that consumer."""
    from wire.keys import GROUP
    from wire.redis.broker import RedisBroker

    keys = Keys("touch")
    mine = RedisBroker(r, keys).consumer("mine", keys.queues(1, ("interactive",)))
    mine.ensure_groups()
    stream = keys.queue("interactive", 0)
    for seg in range(2):
        r.xadd(stream, _job(seg).to_fields())
    held = mine.claim(stream, 2)
    assert len(held) == 2
    time.sleep(0.3)
    r.xclaim(stream, GROUP, "other", 0, [held[1].entry_id])  # another worker took the second over
    time.sleep(0.3)
    mine.touch(held)  # untouched, the first would read >= 600 ms idle
    pending = {p["message_id"].decode(): p for p in r.xpending_range(stream, GROUP, min="-", max="+", count=10)}
    first, second = pending[held[0].entry_id], pending[held[1].entry_id]
    assert first["consumer"] == b"mine" and first["time_since_delivered"] < 300 and first["times_delivered"] == 1
    assert second["consumer"] == b"other"
