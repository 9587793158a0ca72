"""Just-in-time admission (wire/admission.py): the rules as pure functions, the Lua that applies them held
against those functions on real Redis, and what a submit, a publish, a sweep and a cancel do to a job's segments."""

from __future__ import annotations

import time

import pytest
import redis

from producer.client import Client
from wire.admission import Admission, admit_another, admitted_at_submit
from wire.keys import Keys
from wire.redis.broker import RedisBroker
from wire.records import SegmentJob
from wire.settings import Settings
from workers.publisher import Publisher, SegmentProgress

LONG = " ".join(f"This is sentence number {i} of a long story that a listener is waiting to hear." for i in range(12))


def test_a_submit_admits_the_first_segments_up_to_the_horizon() -> None:
    assert admitted_at_submit([1.0, 2.0, 3.0, 3.0], "interactive", 4.0) == 3  # 1 + 2 < 4 <= 1 + 2 + 3
    assert admitted_at_submit([5.0, 2.0], "interactive", 4.0) == 1  # at least one, even past the horizon
    assert admitted_at_submit([1.0, 1.0], "interactive", 4.0) == 2  # a short job: all of it
    assert admitted_at_submit([1.0, 2.0, 3.0], "bulk", 4.0) == 3  # no listener: all at once
    assert admitted_at_submit([3.0, 3.0, 3.0], "bulk", 4.0) == 3  # all of it, though its first two reach the horizon
    assert admitted_at_submit([1.0, 2.0, 3.0], "interactive", 0.0) == 3  # the horizon off: all at once


def test_another_segment_is_admitted_under_the_horizon_or_on_an_idle_farm() -> None:
    base = dict(horizon_s=4.0, queued=5, in_flight=2, idle_ahead=3)
    assert admit_another(admitted_s=6.0, played_s=3.0, **base)  # 3 s ahead < 4
    assert not admit_another(admitted_s=8.0, played_s=3.0, **base)  # 5 s ahead
    # nothing of another job queued and fewer than idle_ahead in flight: run ahead anyway
    assert admit_another(admitted_s=8.0, played_s=3.0, **{**base, "queued": 2})
    assert not admit_another(admitted_s=8.0, played_s=3.0, **{**base, "queued": 3, "in_flight": 3})
    # a segment that just ended is done but still queued until acked: not another job's work
    assert not admit_another(admitted_s=8.0, played_s=3.0, **{**base, "queued": 3, "in_flight": 2})
    assert admit_another(admitted_s=8.0, played_s=3.0, **{**base, "queued": 3, "in_flight": 2}, ending=True)


def _staged_job(r: redis.Redis, keys: Keys, job: str, *, n: int, est: float, first_chunk: float, delivered_s: float,
                admitted_n: int, admitted_s: float, done: int, queued: int) -> None:
    """A job as ADMIT leaves it, then moved on: ``n`` staged segments of ``est`` seconds each."""
    r.hset(keys.status(job), mapping={"state": "running", "lane": "interactive", "first_chunk": first_chunk, "horizon_s": 4.0,
                                      "delivered_s": delivered_s, "admitted_n": admitted_n, "admitted_s": admitted_s})
    for seg in range(n):
        fields = SegmentJob(job_id=job, seg=admitted_n + seg, total=admitted_n + n, text="Hello.", lang="en", voice="joe",
                            request_voice="joe", format="pcm", sample_rate=16000, est_s=est).to_fields()
        entry = r.xadd(keys.staging("interactive"), {**fields, "stream": keys.queue("interactive", 0), "est": est})
        r.rpush(keys.staged(job), entry)
    r.hset(keys.status(job), mapping={"done": done, **{f"batch:{seg}": "b#1" for seg in range(done)}})
    r.hset(keys.backlog("interactive"), "q", queued)
    r.zadd(keys.admission_due(), {job: 0})


@pytest.mark.parametrize("played, admitted_s, done, queued, ending", [
    (0.0, 4.0, 0, 2, 0), (2.5, 4.0, 1, 2, 0), (9.0, 6.0, 2, 3, 0), (1.0, 4.0, 2, 2, 0), (1.0, 4.0, 0, 9, 0),
    (30.0, 4.0, 2, 0, 0), (0.5, 6.0, 1, 2, 1), (0.5, 6.0, 1, 2, 0),
])
def test_the_lua_admits_as_many_as_the_rules_say(r: redis.Redis, played: float, admitted_s: float, done: int,
                                                 queued: int, ending: int) -> None:
    keys, admission = Keys("adm"), Admission(idle_ahead=3)
    now = time.time()
    _staged_job(r, keys, "jobadmit01", n=6, est=1.5, first_chunk=now - played, delivered_s=played + 0.5,
                admitted_n=2, admitted_s=admitted_s, done=done, queued=queued)
    expect, a_s, in_flight, q = 0, admitted_s, 2 - done, queued
    for _ in range(6):
        if not admit_another(admitted_s=a_s, played_s=played, horizon_s=4.0, queued=q, in_flight=in_flight, idle_ahead=3,
                             ending=bool(ending)):
            break
        expect, a_s, in_flight, q = expect + 1, a_s + 1.5, in_flight + 1, q + 1
    from wire.redis.steps import Script
    from wire.redis.lua_admission import ADMISSION_FUNCTIONS

    # ``admit_next`` alone, as PUBLISH_PIECES runs it after a job's audio (ARGV: prefix, job, now, idle_ahead, ending)
    admit_next = ADMISSION_FUNCTIONS + "return admit_next(ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))"
    broker = RedisBroker(r, keys)
    added = broker.send(Script(admit_next, [], [keys.prefix, "jobadmit01", now, admission.idle_ahead, ending]))
    assert added == expect
    assert r.xlen(keys.queue("interactive", 0)) == expect
    assert r.llen(keys.staged("jobadmit01")) == 6 - expect and r.xlen(keys.staging("interactive")) == 6 - expect
    assert int(r.hget(keys.backlog("interactive"), "q")) == queued + expect
    due = r.zscore(keys.admission_due(), "jobadmit01")
    if expect == 6:
        assert due is None  # nothing left staged: out of the due set
    else:
        assert due == pytest.approx(now - played + a_s - 4.0, abs=1e-3)  # when its next segment falls due


def test_a_long_interactive_job_is_staged_and_a_cancel_drops_what_is_staged(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)
    client = Client(r, settings)
    job = client.submit(LONG, voice="joe")
    st = job.status()
    in_streams = sum(int(r.xlen(s)) for s in keys.queues(settings.queue.n_buckets))
    assert job.total == 12 and 1 <= in_streams < 12
    assert st["staged"] == str(12 - in_streams) and r.xlen(keys.staging("interactive")) == 12 - in_streams
    assert float(st["admitted_s"]) >= settings.queue.admission_horizon_s or in_streams == 12
    backlog = r.hgetall(keys.backlog("interactive"))
    assert int(backlog[b"n"]) == 12 and int(backlog[b"q"]) == in_streams  # the whole job counts; q: in the streams
    lane = RedisBroker(r, keys).queue_snapshot(settings.queue.n_buckets).backlog["interactive"]  # ttsfarm status
    assert lane.segments == 12 and lane.staged == 12 - in_streams
    assert job.cancel()
    assert r.llen(keys.staged(job.id)) == 0 and r.xlen(keys.staging("interactive")) == 0
    assert r.zscore(keys.admission_due(), job.id) is None
    assert int(r.hget(keys.backlog("interactive"), "n")) == in_streams  # the admitted ones leave as workers ack them


def test_a_bulk_job_is_admitted_whole(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)
    job = Client(r, settings).submit(LONG, voice="joe", lane="bulk")
    assert sum(int(r.xlen(s)) for s in keys.queues(settings.queue.n_buckets)) == job.total
    assert r.exists(keys.staged(job.id)) == 0


def test_publishing_admits_the_next_segments_and_the_sweep_keeps_up_with_playback(settings: Settings,
                                                                                   r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)
    s = settings.replace(queue={"admission_horizon_s": 4.0, "admission_idle_ahead": 0})  # no running ahead here
    client = Client(r, s)
    job = client.submit(LONG, voice="joe")
    first_n = 12 - int(job.status()["staged"])
    streams = keys.queues(s.queue.n_buckets)
    entries = [SegmentJob.from_fields(f) for st in streams for _, f in r.xrange(st)]
    seg0 = next(e for e in entries if e.seg == 0)
    pub = Publisher(RedisBroker(r, keys), storage=None, chunk_ms=500, maxlen=100, ttl_s=60,  # type: ignore[arg-type]
                    admission=Admission.of(s.queue))
    # the first chunk: nothing has played yet, the admitted audio still covers the horizon
    pub.publish_piece(SegmentProgress(seg0, "w/1"), b"\0\0" * 1600, last=False, batch_id="b", worker="w")
    assert int(job.status()["admitted_n"]) == first_n
    # a listener far into the job (its first chunk 10 s ago, 10 s delivered): the next publish admits more
    r.hset(keys.status(job.id), mapping={"first_chunk": time.time() - 10, "delivered_s": 10})
    pub.publish_piece(SegmentProgress(seg0, "w/1"), b"\0\0" * 1600, last=False, batch_id="b", worker="w")
    after_publish = int(job.status()["admitted_n"])
    assert after_publish > first_n
    assert float(job.status()["admitted_s"]) - 10.0 >= 4.0 or after_publish == 12
    # playback goes on without a publish: the sweep admits what fell due
    if after_publish < 12:
        due = r.zscore(keys.admission_due(), job.id)
        assert due is not None and due > time.time() - 10  # scored by when playback reaches the horizon
        # 50 s later, as the sweep would see it: the clock moved on, and the job's score fell due
        r.hset(keys.status(job.id), mapping={"first_chunk": time.time() - 60, "delivered_s": 60})
        r.zadd(keys.admission_due(), {job.id: time.time() - 1})
        assert RedisBroker(r, keys).admit_due(Admission.of(s.queue)) > 0
        assert int(job.status()["admitted_n"]) > after_publish


def test_an_idle_farm_lets_a_job_run_ahead(settings: Settings, r: redis.Redis) -> None:
    """Nothing else queued: the sweep admits up to idle_ahead segments in flight, though the horizon is covered."""
    keys = Keys(settings.redis.key_prefix)
    s = settings.replace(queue={"admission_horizon_s": 4.0, "admission_idle_ahead": 3})
    job = Client(r, s).submit(LONG, voice="joe")
    first_n = 12 - int(job.status()["staged"])
    broker = RedisBroker(r, keys)
    for stream in keys.queues(s.queue.n_buckets):  # a worker takes and finishes what is queued
        for entry_id, _ in r.xrange(stream):
            r.xdel(stream, entry_id)
    r.hset(keys.backlog("interactive"), "q", 0)
    r.hset(keys.status(job.id), mapping={"done": first_n, **{f"batch:{seg}": "b#1" for seg in range(first_n)}})  # counted as a publish does
    assert broker.admit_due(Admission.of(s.queue)) == min(3, 12 - first_n)
    assert int(job.status()["admitted_n"]) == first_n + min(3, 12 - first_n)
