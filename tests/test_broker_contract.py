"""The broker contract: every role's steps (``wire.broker``) held to the same assertions on the in-memory stub
(``wire.stub``) and on Redis (``wire.redis``), each built by ``wire.connect`` from its URL, and on a sharded stub
(``wire.shards``). A new broker passes these too (the ``brokers`` fixture's ``params``)."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from pipeline.errors import InputError
from wire.admission import Admission
from wire.broker import AdminBroker, BookBroker, Broker, JobBroker, WorkBroker, run_blocking
from wire.connect import connect
from wire.errors import APPEND_OUT_OF_ORDER, JOB_ID_CONFLICT, JobError, OverloadedError
from wire.keys import Keys
from wire.pieces import FrameClaim, Piece, SegmentEnd
from wire.records import SegmentJob, Submission, chunk_fields, dead_letter_fields, record_type, text_of
from wire.settings import Settings
from wire.shards import ShardedBroker, shard_of

RATE = 16000


@pytest.fixture(params=["stub", "redis", "sharded stub"])
def farm(request: pytest.FixtureRequest, base_settings: Settings, redis_url: str) -> Iterator[tuple[Broker, Settings]]:
    prefix = f"c{uuid.uuid4().hex[:8]}"
    if request.param == "redis":
        redis.Redis.from_url(redis_url).flushdb()
        url, shards = redis_url, ()
    else:
        url, shards = f"memory://{prefix}", (f"memory://{prefix}-1",) if request.param == "sharded stub" else ()
    settings = base_settings.replace(redis={"url": url, "key_prefix": prefix, "shards": shards},
                                     queue={"admission_horizon_s": 4.0, "admission_idle_ahead": 2})
    broker = connect(settings.redis)
    yield broker, settings
    broker.close()


def job_ids(n: int, prefix: str = "contract", *, shard: int = 0) -> list[str]:
    """New job ids, all on one of two shards (the first by default, so a sharded broker's lane holds them all, as one
    node's does)."""
    out: list[str] = []
    while len(out) < n:
        job_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
        if shard_of(job_id, 2) == shard:
            out.append(job_id)
    return out


def submission(settings: Settings, job_id: str, segments: int = 1, *, lane: str = "bulk", est_s: float = 2.0,
               text: str = "One sentence to speak.") -> Submission:
    keys = Keys(settings.redis.key_prefix)
    now = time.time()
    segs = [SegmentJob(job_id=job_id, seg=i, total=segments, text=text, lang="en", voice="joe", request_voice="joe",
                       format="wav", sample_rate=RATE, lane=lane, est_s=est_s, created=now) for i in range(segments)]
    status = {"state": "queued", "total": segments, "done": 0, "voice": "joe", "format": "wav", "sample_rate": RATE,
              "lane": lane, "created": now, "est_seconds": est_s * segments}
    return Submission(job_id, segs, status, [keys.queue(lane, 0)] * segments)


def piece(job_id: str, seg: int, n: int, pcm: bytes, *, total: int = 1, end: bool = False, attempt: str = "a1",
          claim: FrameClaim | None = None, admission: Admission | None = None) -> Piece:
    return Piece(job_id, seg, [chunk_fields(seg, n, end, attempt, RATE, pcm)], n, len(pcm) / 2 / RATE,
                 end=SegmentEnd('[["w"]]', "b#0", "worker-1") if end else None, total=total, claim=claim,
                 admission=admission)


def status(broker: Broker, job_id: str) -> Any:
    return run_blocking(broker, broker.job_status(job_id))


def results(broker: Broker, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    reply = run_blocking(broker, broker.read_results(job_id, "0-0", 1000, 0))
    return [(text_of(i), {text_of(k): v for k, v in f.items()}) for i, f in reply]


def streams(settings: Settings) -> list[str]:
    return Keys(settings.redis.key_prefix).queues(settings.queue.n_buckets)


def test_every_role_is_one_broker(farm: tuple[Broker, Settings]) -> None:
    broker, _ = farm
    for role in (JobBroker, WorkBroker, AdminBroker, BookBroker, Broker):
        assert isinstance(broker, role), role.__name__
    assert broker.reachable()


# -- a client's steps ----------------------------------------------------------------------------------------------
def test_admission_is_idempotent_per_request_and_refuses_another_request_under_the_id(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.ensure_groups(streams(settings)))
    sub = submission(settings, job, 2)
    run_blocking(broker, broker.admit(sub, settings.queue))
    run_blocking(broker, broker.admit(sub, settings.queue))  # a retry after a lost reply: the job that exists
    assert status(broker, job).state == "queued" and status(broker, job).total == 2
    snap = broker.queue_snapshot(settings.queue.n_buckets)
    assert snap.backlog["bulk"].segments == 2 and snap.backlog["bulk"].seconds == pytest.approx(4.0)
    assert sum(b.length for b in snap.buckets) == 2
    with pytest.raises(InputError) as err:
        run_blocking(broker, broker.admit(submission(settings, job, 2, text="Other words."), settings.queue))
    assert err.value.code == JOB_ID_CONFLICT
    assert broker.queue_snapshot(settings.queue.n_buckets).backlog["bulk"].segments == 2


def test_a_full_lane_refuses_and_writes_nothing_but_an_empty_lane_admits_any_job(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    q = settings.replace(queue={"max_backlog_bulk_segments": 3}).queue
    big, refused = job_ids(2)
    run_blocking(broker, broker.admit(submission(settings, big, 5), q))  # larger than the limit: the lane was empty
    assert status(broker, big).total == 5
    with pytest.raises(OverloadedError) as err:
        run_blocking(broker, broker.admit(submission(settings, refused, 1), q))
    assert err.value.retryable and status(broker, refused) is None


def test_a_long_interactive_job_is_staged_and_admitted_as_it_plays(farm: tuple[Broker, Settings]) -> None:
    """Horizon 4 s: of four 3 s segments two enter the queue, two wait; the whole job counts in the backlog."""
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job, 4, lane="interactive", est_s=3.0), settings.queue))
    snap = broker.queue_snapshot(settings.queue.n_buckets)
    assert (snap.backlog["interactive"].segments, snap.backlog["interactive"].staged) == (4, 2)
    assert sum(b.length for b in snap.buckets) == 2
    # the farm has others queued (its two segments): nothing is due before the job's first chunk plays
    assert broker.admit_due(Admission(idle_ahead=2), 10) == 0
    assert broker.cancel_jobs([job]) == [1]  # staged segments go with the job, and their backlog counts
    lane = broker.queue_snapshot(settings.queue.n_buckets).backlog["interactive"]
    assert (lane.segments, lane.seconds, lane.staged) == (2, pytest.approx(6.0), 0)
    assert broker.admit_due(Admission(idle_ahead=2), 10) == -1


@pytest.mark.parametrize("end", ["failed", "expired"])
def test_a_job_that_ends_otherwise_than_done_drops_its_staged_segments(farm: tuple[Broker, Settings], end: str) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job, 4, lane="interactive", est_s=3.0), settings.queue))
    assert broker.finalize(job, end, {}, maxlen=100, ttl_s=60) == 1
    lane = broker.queue_snapshot(settings.queue.n_buckets).backlog["interactive"]
    # its two admitted segments leave the counters as workers ack them; the two staged ones left with its end
    assert (lane.segments, lane.seconds, lane.staged) == (2, pytest.approx(6.0), 0)
    assert broker.admit_due(Admission(idle_ahead=2), 10) == -1


def test_the_sweep_admits_due_segments_on_every_shard(farm: tuple[Broker, Settings]) -> None:
    """A job on the second of two shards (on one node: anywhere): before its first chunk, its staged segments fall
    due a moment after the submit, and with fewer than idle_ahead in flight and nothing else queued the sweep
    admits one more."""
    broker, settings = farm
    (job,) = job_ids(1, shard=1)
    run_blocking(broker, broker.admit(submission(settings, job, 4, lane="interactive", est_s=3.0), settings.queue))
    time.sleep(0.3)
    assert broker.admit_due(Admission(idle_ahead=3), 10) == 1
    assert broker.queue_snapshot(settings.queue.n_buckets).backlog["interactive"].staged == 1


def test_a_publish_admits_the_next_segments_while_the_farm_is_idle(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job, 4, lane="interactive", est_s=3.0), settings.queue))
    consumer = broker.consumer("w1", streams(settings))
    consumer.ensure_groups()  # as a worker's loop does when it starts
    entries = [e for h in consumer.heads(0) for e in consumer.claim(h.stream, 10)]
    assert [e.job.seg for e in entries] == [0, 1]  # type: ignore[union-attr]
    (reply,) = broker.publish_pieces([piece(job, 0, 0, b"\0\0" * 800, total=4, end=True, admission=Admission(2))],
                                     maxlen=100, ttl_s=60)
    assert reply.written and reply.done == 1
    consumer.ack(entries[:1])
    assert broker.queue_snapshot(settings.queue.n_buckets).backlog["interactive"].staged == 1  # one more in flight


def test_a_cancel_answers_what_it_found(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    job, done = job_ids(2)
    assert run_blocking(broker, broker.cancel(job)) == -1
    for j in (job, done):
        run_blocking(broker, broker.admit(submission(settings, j), settings.queue))
    assert broker.finalize(done, "done", {}, maxlen=100, ttl_s=60) == 1
    assert run_blocking(broker, broker.cancel(done)) == 0
    assert run_blocking(broker, broker.cancel(job)) == 1 and status(broker, job).state == "cancelled"
    (reply,) = broker.publish_pieces([piece(job, 0, 0, b"\1\0" * 100, end=True)], maxlen=100, ttl_s=60)
    assert not reply.written and reply.state == "cancelled" and results(broker, job) == []
    assert broker.finalize(done, "failed", {}, maxlen=100, ttl_s=60) == 0  # it had ended: nothing more


def test_a_cancel_wins_over_a_finish_that_races_it(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job), settings.queue))
    assert broker.cancel_jobs([job]) == [1]
    broker.start_segments([job], "w", [True], [time.time()])
    assert status(broker, job).state == "cancelled"  # a start never overwrites a state written meanwhile
    # the worker's finish of a job a client cancelled meanwhile: the job ends cancelled, with the cancel's record
    assert broker.finalize(job, "done", {}, maxlen=100, ttl_s=60) == 2
    assert status(broker, job).state == "cancelled"
    ((_, final),) = results(broker, job)
    assert record_type(final) == "final" and text_of(final["state"]) == "cancelled"


def test_an_open_job_takes_its_text_in_order_and_a_late_close_queues_a_closer(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    q, keys = settings.queue, Keys(settings.redis.key_prefix)
    stream = keys.queue("interactive", 0)
    consumer = broker.consumer("w1", [stream])
    consumer.ensure_groups()
    named = consumer.streams[0]  # as the consumer names it (a sharded one: its shard's tag)
    open_status = {"state": "queued", "total": 0, "done": 0, "voice": "joe", "lane": "interactive", "created": 1.0}
    run_blocking(broker, broker.open_job(job, open_status, q))
    run_blocking(broker, broker.open_job(job, open_status, q))  # the same request again
    one = submission(settings, job, 1, lane="interactive").segments[0]
    seg = dataclasses.replace(one, total=0)
    run_blocking(broker, broker.append(job, [seg], [stream], 0, close=False, last=None, queue=q))
    run_blocking(broker, broker.append(job, [seg], [stream], 0, close=False, last=None, queue=q))  # a retry
    with pytest.raises(JobError) as err:
        run_blocking(broker, broker.append(job, [seg], [stream], 5, close=False, last=None, queue=q))
    assert err.value.code == APPEND_OUT_OF_ORDER
    assert status(broker, job).total == 0
    (entry,) = consumer.claim(named, 10)
    (reply,) = broker.publish_pieces([piece(job, 0, 0, b"\0\0" * 100, total=0, end=True)], maxlen=100, ttl_s=60)
    assert reply.done == 1 and reply.total == 0  # not whole: the job is open
    run_blocking(broker, broker.append(job, [], [], 1, close=True, last=(seg, stream), queue=q))
    assert status(broker, job).total == 1
    (closer,) = consumer.claim(named, 10)  # every segment was done: a closer finishes the job
    assert closer.job is not None and closer.job.closing and closer.job.total == 1
    with pytest.raises(JobError):
        run_blocking(broker, broker.append(job, [seg], [stream], 1, close=False, last=None, queue=q))


# -- a worker's steps ----------------------------------------------------------------------------------------------
def test_heads_claims_and_acks_count_each_entry_once(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    ids = job_ids(3)
    for j in ids:
        run_blocking(broker, broker.admit(submission(settings, j, est_s=1.5), settings.queue))
    consumer = broker.consumer("w1", streams(settings))
    consumer.ensure_groups()
    heads = consumer.heads(0)
    assert heads and consumer.undelivered == 3
    head = heads[0]
    assert head.lane == "bulk" and head.est_s == 1.5 and head.first_behind
    claimed = consumer.claim(head.stream, 2)
    assert len(claimed) == 2 and claimed[0].job is not None and claimed[0].job.job_id == head.job_id
    assert len(consumer.heads(0)) == 1 and consumer.undelivered == 1
    consumer.ack(claimed[:1])
    consumer.ack(claimed[:1])  # a second ack of the same entry does not count again (other entries in the lane)
    backlog = broker.queue_snapshot(settings.queue.n_buckets).backlog["bulk"]
    assert backlog.segments == 2 and backlog.seconds == pytest.approx(3.0)
    consumer.ack(claimed)  # the first entry again, with the second: only the second counts
    backlog = broker.queue_snapshot(settings.queue.n_buckets).backlog["bulk"]
    assert backlog.segments == 1 and backlog.seconds == pytest.approx(1.5)


def test_a_jobs_end_acks_the_entry_that_ended_it_in_the_same_step(farm: tuple[Broker, Settings]) -> None:
    """``finalize(..., ack=[entry])``: the end and the ack of the entry whose segment ended the job are one step; the
    entry is acked and deleted and leaves its lane's backlog once, also where the job had ended already."""
    broker, settings = farm
    first, second = job_ids(2)
    for j in (first, second):
        run_blocking(broker, broker.admit(submission(settings, j, est_s=1.5), settings.queue))
    consumer = broker.consumer("w1", streams(settings))
    consumer.ensure_groups()
    entries = {e.job.job_id: e for e in consumer.claim(consumer.heads(0)[0].stream, 2) if e.job is not None}

    def queue() -> tuple[int, int, float]:
        snapshot = broker.queue_snapshot(settings.queue.n_buckets)
        return (sum(b.pending for b in snapshot.buckets), sum(b.length for b in snapshot.buckets),
                snapshot.backlog["bulk"].seconds)

    assert queue() == (2, 2, pytest.approx(3.0))
    assert broker.finalize(first, "done", {}, maxlen=100, ttl_s=60, ack=[entries[first]]) == 1
    assert queue() == (1, 1, pytest.approx(1.5)) and status(broker, first).state == "done"
    assert broker.finalize(first, "done", {}, maxlen=100, ttl_s=60, ack=[entries[first]]) == 0  # counted once
    assert queue() == (1, 1, pytest.approx(1.5))
    assert broker.finalize(second, "failed", {}, maxlen=100, ttl_s=60) == 1  # ended elsewhere, its entry still held
    assert broker.finalize(second, "done", {}, maxlen=100, ttl_s=60, ack=[entries[second]]) == 0
    assert queue() == (0, 0, 0.0) and status(broker, second).state == "failed"


def test_a_dead_consumers_entries_are_reclaimed_unless_touched(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    one, two = job_ids(2)
    for j in (one, two):
        run_blocking(broker, broker.admit(submission(settings, j), settings.queue))
    dead, live, other = (broker.consumer(n, streams(settings)) for n in ("dead", "live", "other"))
    dead.ensure_groups()
    (head,) = {h.stream: h for h in dead.heads(0)}.values()
    taken = dead.claim(head.stream, 1) + live.claim(head.stream, 1)
    time.sleep(0.25)
    live.touch(taken[1:])
    back = other.reclaim(200)
    assert [(e.job.job_id, e.deliveries) for e in back] == [(taken[0].job.job_id, 2)]  # type: ignore[union-attr]
    other.requeue(back)  # given back: on the queue again, the backlog unchanged
    assert [h.job_id for h in other.heads(0)] == [taken[0].job.job_id]  # type: ignore[union-attr]
    assert broker.queue_snapshot(settings.queue.n_buckets).backlog["bulk"].segments == 2
    time.sleep(0.25)
    assert other.prune(100_000) == 0 and other.prune(200) == 1  # the dead one: nothing pending, idle that long


def test_a_reclaim_leaves_what_the_callers_process_holds_and_counts_no_delivery_for_it(farm: tuple[Broker, Settings]) -> None:
    """A loop's stage call may keep an entry idle past ``claim_idle_ms``: a sibling loop reclaiming for the process
    passes what the process holds as ``keep``, and those stay with their loop, their delivery count untouched."""
    broker, settings = farm
    ids = job_ids(2)
    for j in ids:
        run_blocking(broker, broker.admit(submission(settings, j), settings.queue))
    sibling, reclaimer = (broker.consumer(n, streams(settings)) for n in ("sibling", "reclaimer"))
    sibling.ensure_groups()
    (head,) = {h.stream: h for h in sibling.heads(0)}.values()
    running, left = sibling.claim(head.stream, 2)
    time.sleep(0.25)
    back = reclaimer.reclaim(200, keep={(running.stream, running.entry_id)})
    assert [(e.job.job_id, e.deliveries) for e in back] == [(left.job.job_id, 2)]  # type: ignore[union-attr]
    sibling.touch([running, left])  # the kept one is still the sibling's; the taken one is not taken back
    time.sleep(0.25)
    again = reclaimer.reclaim(200, keep={(left.stream, left.entry_id)})  # (the reclaimer holds that one itself now)
    assert [(e.entry_id, e.deliveries) for e in again] == [(running.entry_id, 2)]


def test_a_batch_start_marks_each_jobs_first_start_once(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    job, late = job_ids(2)
    for j in (job, late):
        run_blocking(broker, broker.admit(submission(settings, j), settings.queue))
    assert broker.start_segments([job, late], "w1", [True, False], [1.0, 2.0]) == [("queued", True), ("queued", False)]
    assert broker.start_segments([job], "w2", [True], [3.0]) == [("running", False)]
    st = status(broker, job)
    assert st.state == "running" and st["worker"] == "w1" and st["claimed"] == 1.0
    assert broker.job_states([job, late, "no-such-job-x"]) == ["running", "queued", ""]


def test_a_published_piece_is_read_once_and_a_repeat_keeps_the_first_copy(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job, 2), settings.queue))
    first = broker.publish_pieces([piece(job, 0, 0, b"\1\0" * 1600, total=2)], maxlen=100, ttl_s=60)[0]
    again = broker.publish_pieces([piece(job, 0, 0, b"\2\0" * 1600, total=2)], maxlen=100, ttl_s=60)[0]
    assert first.written and again.written and first.first_chunk > 0 and first.delivered_s == pytest.approx(0.1)
    assert again.delivered_s == pytest.approx(0.1)  # the repeat moved no clock
    (end,) = broker.publish_pieces([piece(job, 0, 1, b"\3\0" * 800, total=2, end=True)], maxlen=100, ttl_s=60)
    (twice,) = broker.publish_pieces([piece(job, 0, 1, b"\3\0" * 800, total=2, end=True)], maxlen=100, ttl_s=60)
    assert end.done == twice.done == 1 and end.output is None
    entries = results(broker, job)
    assert len(entries) == 2 and all(record_type(f) == "chunk" for _, f in entries)
    parts, words = broker.job_output(job)
    assert parts == {0: b"\1\0" * 1600 + b"\3\0" * 800} and words == {0: [["w"]]}
    assert broker.segments_done(job) == 1
    clock = broker.playback_clocks([job])[job]
    assert float(clock[0]) == pytest.approx(first.first_chunk) and float(clock[1]) == pytest.approx(0.15)


def test_a_job_of_one_piece_gets_its_output_back_and_its_end_is_written_once(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job), settings.queue))
    (reply,) = broker.publish_pieces([piece(job, 0, 0, b"\5\0" * 400, end=True)], maxlen=100, ttl_s=60)
    assert reply.done == reply.total == 1 and reply.output == ({0: b"\5\0" * 400}, {0: [["w"]]})
    # what a redo that ends the job again reads (its worker died before the end): the same, from the results stream,
    # and not the redo's own audio (its piece is a repeat: not written, its end not counted)
    assert broker.job_output(job) == reply.output and reply.counted
    (redo,) = broker.publish_pieces([piece(job, 0, 0, b"\6\0" * 400, end=True, attempt="a2")], maxlen=100, ttl_s=60)
    assert redo.written and not redo.counted and redo.output is None and redo.done == 1
    assert broker.job_output(job) == reply.output
    assert broker.finalize(job, "done", {"duration": 0.025}, maxlen=100, ttl_s=60, drop_work=True, duration=0.025) == 1
    assert broker.finalize(job, "failed", {}, maxlen=100, ttl_s=60) == 0
    st = status(broker, job)
    assert st.state == "done" and st["duration"] == 0.025 and st["results_entries"] == 2
    assert [record_type(f) for _, f in results(broker, job)] == ["chunk", "final"]
    assert broker.job_output(job) == ({}, {})  # its work was dropped with its end


def test_a_one_segment_job_keeps_its_pieces_in_its_results_stream_only(farm: tuple[Broker, Settings]) -> None:
    """Pieces published without a parts copy (``Piece.copy``: the job is this one segment) are read back from the
    results stream, joined in order, with the words the segment's end wrote."""
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job), settings.queue))
    first, last = (dataclasses.replace(piece(job, 0, 0, b"\1\0" * 300), copy=False),
                   dataclasses.replace(piece(job, 0, 1, b"\2\0" * 200, end=True), copy=False))
    broker.publish_pieces([first], maxlen=100, ttl_s=60)
    (reply,) = broker.publish_pieces([last], maxlen=100, ttl_s=60)
    assert reply.done == reply.total == 1 and reply.counted and reply.output is None
    assert broker.job_output(job) == ({0: b"\1\0" * 300 + b"\2\0" * 200}, {0: [["w"]]})


def test_a_claim_held_by_another_attempt_writes_nothing_and_says_who_holds_it(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job, 2), settings.queue))
    mine = FrameClaim("a1", "16,40,200", b"frames")
    assert broker.publish_pieces([piece(job, 0, 0, b"\1\0" * 10, total=2, claim=mine)], maxlen=100, ttl_s=60)[0].written
    assert broker.publish_pieces([piece(job, 0, 0, b"\1\0" * 10, total=2, claim=mine)], maxlen=100, ttl_s=60)[0].written
    (lost,) = broker.publish_pieces([piece(job, 0, 0, b"\x09\0" * 10, total=2, attempt="a2",
                                           claim=FrameClaim("a2", "16,40,200"))], maxlen=100, ttl_s=60)
    assert not lost.written and lost.claim is not None
    assert (lost.claim.attempt, lost.claim.replay, lost.claim.frames, lost.claim.windows, lost.claim.ended) == \
        ("a1", "16,40,200", b"frames", 1, False)


def test_the_results_stream_says_how_much_trimming_took(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job, 1), settings.queue))
    for n in range(300):
        broker.publish_pieces([piece(job, 0, n, b"\1\0" * 4)], maxlen=100, ttl_s=60)
    entries = results(broker, job)
    numbers = [int(f["entry"]) for _, f in entries]  # each record's number: the first says what trimming took
    assert numbers == list(range(numbers[0], 301)) and len(entries) <= 200 and numbers[0] > 100


def test_a_listener_blocks_until_a_record_comes(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job), settings.queue))
    assert run_blocking(broker, broker.read_results(job, "0-0", 10, 50)) == []
    later = threading.Timer(0.2, lambda: broker.publish_pieces([piece(job, 0, 0, b"\1\0")], maxlen=100, ttl_s=60))
    later.start()
    started = time.monotonic()
    (entry,) = run_blocking(broker, broker.read_results(job, "0-0", 10, 5000))
    assert record_type(entry[1]) == "chunk"
    assert 0.1 < time.monotonic() - started < 4
    later.join()


def test_failures_dead_letters_and_their_requeue(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    (job,) = job_ids(1)
    run_blocking(broker, broker.admit(submission(settings, job), settings.queue))
    consumer = broker.consumer("w1", streams(settings))
    consumer.ensure_groups()
    (entry,) = [e for h in consumer.heads(0) for e in consumer.claim(h.stream, 1)]
    assert broker.count_failure(job, 0) == 1 and broker.count_failure(job, 0) == 2
    stream = entry.stream
    broker.dead_letter(dead_letter_fields(stream, entry.entry_id, "SEGMENT_FAILED", "boom", 2, entry.fields))
    consumer.ack([entry])
    broker.finalize(job, "failed", {"code": "SEGMENT_FAILED"}, maxlen=100, ttl_s=60)
    (dl,) = broker.dead_letters(10)
    assert dl.code == "SEGMENT_FAILED" and dl.deliveries == 2 and dl.job_id == job
    assert broker.find_dead_letter(dl.id) == dl and broker.find_dead_letter("1-1") is None
    assert broker.queue_snapshot(settings.queue.n_buckets, dead_letters=5).dead_letter_count == 1
    broker.requeue_dead_letter(dl.id)
    with pytest.raises(KeyError):
        broker.requeue_dead_letter(dl.id)  # requeued once only
    assert status(broker, job).state == "queued" and [record_type(f) for _, f in results(broker, job)] == []
    assert [h.job_id for h in consumer.heads(0)] == [job]
    broker.dead_letter(dead_letter_fields(stream, "1-1", "X", "y", 1, {"v": "1"}))
    assert broker.purge_dead_letters() == 1 and broker.dead_letters(10) == []


def test_heartbeats_are_written_and_read(farm: tuple[Broker, Settings]) -> None:
    broker, _ = farm
    broker.write_heartbeat("host", 42, {"state": "serving", "pid": 42})
    broker.write_heartbeat("host", 42, {"state": "stopping", "pid": 42})
    assert run_blocking(broker, broker.read_heartbeats()) == {"host:42": {"state": "stopping", "pid": 42}}


# -- books' steps --------------------------------------------------------------------------------------------------
def test_a_books_segments_are_queued_once_and_its_run_and_replies_kept(farm: tuple[Broker, Settings]) -> None:
    broker, settings = farm
    a, b_, c = job_ids(3, "book")
    subs = [submission(settings, j) for j in (a, b_, c)]
    assert broker.admit_book_segments(subs, settings.queue, force=False) == ["submitted"] * 3
    assert broker.admit_book_segments(subs[:1], settings.queue, force=False) == ["queued"]
    broker.finalize(b_, "done", {}, maxlen=10, ttl_s=60, duration=1.5)
    assert broker.admit_book_segments(subs[1:2], settings.queue, force=False) == ["done"]
    assert broker.job_fields([a, b_], ["state", "duration"]) == [["queued", None], ["done", "1.5"]]
    assert broker.admit_book_segments(subs[1:2], settings.queue, force=True) == ["submitted"]
    full = settings.replace(queue={"max_backlog_bulk_segments": 1}).queue
    late = submission(settings, job_ids(1, "book")[0])
    assert broker.admit_book_segments([late], full, force=False) == ["full"]
    broker.keep_jobs([a, b_], 120)
    broker.drop_results([b_])
    run = broker.start_book_run("the-book", "run-1", 60)
    assert broker.book_run(run) == "run-1" and broker.book_run(run + "x") == ""
    reply = Keys(settings.redis.key_prefix).book_reply("the-book", "t1")
    broker.reply_to_book(reply, '{"ok": true}', 60)
    assert broker.book_replies([reply, reply]) == ['{"ok": true}', None]


# -- shards --------------------------------------------------------------------------------------------------------
def test_a_sharded_broker_routes_each_job_to_its_shard_and_adds_the_shards_up(base_settings: Settings) -> None:
    name = uuid.uuid4().hex[:8]
    settings = base_settings.replace(redis={"url": f"memory://{name}-0", "shards": (f"memory://{name}-1",),
                                            "key_prefix": "s"})
    broker = connect(settings.redis)
    assert isinstance(broker, ShardedBroker)
    ids = [f"spread-{n:04d}" for n in range(12)]
    assert {shard_of(j, 2) for j in ids} == {0, 1}
    for j in ids:
        run_blocking(broker, broker.admit(submission(settings, j), settings.queue))
    for j in ids:  # each job is on the shard its id names, and only there
        on = [run_blocking(s, s.job_status(j)) is not None for s in broker.shards]
        assert on == [shard_of(j, 2) == i for i in range(2)]
    assert broker.job_states(ids) == ["queued"] * 12
    assert broker.queue_snapshot(settings.queue.n_buckets).backlog["bulk"].segments == 12
    consumer = broker.consumer("w", streams(settings))
    consumer.ensure_groups()
    heads = consumer.heads(0)
    assert {h.stream.split("@")[0] for h in heads} == {"0", "1"}
    taken = [e for h in heads for e in consumer.claim(h.stream, 20)]
    assert sorted(e.job.job_id for e in taken) == sorted(ids)  # type: ignore[union-attr]
    consumer.ack(taken)
    assert broker.queue_snapshot(settings.queue.n_buckets).backlog["bulk"].segments == 0
