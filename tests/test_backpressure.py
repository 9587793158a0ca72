"""Backpressure: a full lane refuses new work with a typed, retryable error, and drains back."""

from __future__ import annotations

import dataclasses

import pytest
import redis

from producer.client import Client
from wire.errors import OverloadedError
from wire.keys import GROUP, Keys
from wire.records import SegmentJob
from wire.settings import Settings
from wire.redis.broker import RedisBroker


def test_submit_beyond_the_lane_limit_is_refused_and_ack_drains(settings: Settings, r: redis.Redis) -> None:
    s = settings.replace(queue={"max_backlog_interactive_segments": 3, "max_backlog_bulk_segments": 100})
    client = Client(r, s)
    for _ in range(3):
        client.submit("One sentence.", voice="joe")
    with pytest.raises(OverloadedError) as exc:
        client.submit("One more.", voice="joe")
    assert exc.value.code == "OVERLOADED" and exc.value.retryable
    assert exc.value.detail["queued_segments"] == 3
    client.submit("The bulk lane has its own limit.", voice="joe", lane="bulk")

    keys = Keys(s.redis.key_prefix)
    q = RedisBroker(r, keys).consumer("tester", keys.queues(s.queue.n_buckets))
    taken = [e for stream in q.streams if ":interactive:" in stream for e in q.claim(stream, 10)]
    assert len(taken) == 3
    q.ack(taken[:2])
    q.ack(taken[:2])  # a second ack of the same entries releases nothing more
    assert int(r.hget(keys.backlog("interactive"), "n")) == 1
    client.submit("Room again.", voice="joe")


def test_finished_entries_leave_their_stream_and_requeued_ones_are_replaced(settings: Settings, r: redis.Redis) -> None:
    """The group is a queue's only reader: an acked entry is deleted, so queue streams do not grow with the
    job count (the soak found every finished entry kept)."""
    client = Client(r, settings)
    for text in ("One sentence.", "Another one.", "A third."):
        client.submit(text, voice="joe")
    keys = Keys(settings.redis.key_prefix)
    q = RedisBroker(r, keys).consumer("tester", keys.queues(settings.queue.n_buckets))
    taken = [e for stream in q.streams for e in q.claim(stream, 10)]
    assert len(taken) == 3
    total = lambda: sum(int(r.xlen(stream)) for stream in q.streams)  # noqa: E731
    assert total() == 3
    q.ack(taken[:1])
    assert total() == 2
    q.requeue(taken[1:2])  # given back: re-added once, the claimed copy gone
    assert total() == 2 and r.xpending(taken[1].stream, GROUP)["pending"] == 1
    again = [e for stream in q.streams for e in q.claim(stream, 10)]
    assert [e.job.job_id for e in again] == [taken[1].job.job_id]
    q.ack(again + taken[2:])
    assert total() == 0 and int(r.hget(keys.backlog("interactive"), "n")) == 0


def test_seconds_limit(settings: Settings, r: redis.Redis) -> None:
    s = settings.replace(queue={"max_backlog_interactive_seconds": 5.0})
    client = Client(r, s)
    client.submit("A first sentence that is not very long.", voice="joe")
    with pytest.raises(OverloadedError):
        client.submit("Another sentence of some length, " * 6, voice="joe")


def test_an_empty_lane_admits_a_job_larger_than_the_limit(settings: Settings, r: redis.Redis) -> None:
    s = settings.replace(queue={"max_backlog_interactive_segments": 2})
    job = Client(r, s).submit("One. Two. Three. Four. Five.", voice="joe")
    assert job.total == 5
    assert int(r.hget(Keys(s.redis.key_prefix).backlog("interactive"), "n")) == 5


@pytest.mark.parametrize("job_id", ["../../etc/passwd", "jobs/../../x", "job.0001.wav", "back\\slash01", "short"])
def test_job_ids_that_could_escape_a_storage_prefix_are_malformed(job_id: str) -> None:
    job = SegmentJob(job_id=job_id, seg=0, total=1, text="x", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=22050)
    with pytest.raises(ValueError):
        SegmentJob.from_fields(job.to_fields())
    fine = SegmentJob.from_fields(dataclasses.replace(job, job_id="job_0001-ok").to_fields())
    assert fine.job_id == "job_0001-ok"
