"""The SDK reaches the farm's store only through the broker seam (``wire.broker``), on the in-memory stub and on
Redis alike (``backend``).

A recording spy (it passes every call through) wraps the broker handed to the client and notes each client step the
SDK asks for and each IO step it performs. The same calls through the sync and the asyncio face must ask for the
same steps, and perform exactly as many IO steps as they asked for (each step of either broker is one): the core
sends nothing to the store of its own. Faults (a reply lost after the step ran, a store never reachable) are the
same spy raising the wire's ``BrokerUnavailable`` where the store's client library would have failed.

The Redis broker's own steps (claims, repeats, TTLs, what a publish sends) follow, on Redis.
"""

from __future__ import annotations

import ast
import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from pipeline.errors import InputError
from producer.aio import AsyncClient
from producer.client import Client
from wire.broker import Broker, JobBroker, Op, advance, run_blocking
from wire.connect import connect
from wire.errors import JOB_ID_CONFLICT, BrokerUnavailable, JobError, TransientError
from wire.keys import Keys
from wire.records import text_of
from wire.redis.broker import RedisBroker
from wire.redis.lua_admission import CANCEL
from wire.redis.steps import Script
from wire.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
JOB = "seam-job-0001"
CLIENT_STEPS = ("ensure_groups", "admit", "cancel", "job_status", "read_results", "open_job", "append")


class Recording:
    """A broker passed through, noting the client steps asked of it and the IO steps sent through it."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.asked: list[str] = []
        self.sent: list[Any] = []  # IO steps a face performed

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.broker, name)
        if name not in CLIENT_STEPS:
            return attr

        def asked(*args: Any, **kwargs: Any) -> Any:
            self.asked.append(name)
            return attr(*args, **kwargs)
        return asked

    def send(self, step: Any) -> Any:
        self.sent.append(step)
        return self.broker.send(step)


@pytest.fixture(params=["stub", "redis"])
def backend(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Settings]:
    """The farm's settings on the stub (a store of its own) or on the test's Redis (flushed)."""
    if request.param == "stub":
        yield settings.replace(redis={"url": f"memory://seam-{uuid.uuid4().hex}"})
    else:
        redis.Redis.from_url(settings.redis.url).flushdb()
        yield settings


def snapshot(settings: Settings) -> Any:
    """What an operator reads of the farm's queues (``ttsfarm status``)."""
    return connect(settings.redis).queue_snapshot(settings.queue.n_buckets)


def _scenario(client: Any, settle: Callable[[Any], Any], collect: Callable[[Any], list[Any]], worker: Broker,
              settings: Settings) -> dict[str, Any]:
    """submit, job, status, cancel, wait and stream of one job, and what each answered (``settle`` awaits a
    coroutine on the async face, ``collect`` drains a stream); ``worker``: the worker side's broker."""
    job = settle(client.submit("Hello there. A second sentence.", job_id=JOB, lane="bulk"))
    out: dict[str, Any] = {"total": job.total, "again": settle(client.job(JOB)).total,
                           "state": settle(job.status())["state"], "cancelled": settle(job.cancel())}
    try:
        settle(job.wait(timeout=5))
    except JobError as exc:
        out["wait"] = exc.code
    q = settings.queue
    assert worker.finalize(JOB, "cancelled", {}, maxlen=q.results_maxlen, ttl_s=q.job_ttl_s) == 1  # its final record
    try:
        collect(job.stream(timeout=5, block_ms=50))
    except JobError as exc:
        out["stream"] = exc.code
    return out


def test_both_faces_go_through_the_broker(backend: Settings) -> None:
    seen, brokers = {}, {}
    worker = connect(backend.redis)

    brokers["sync"] = Recording(connect(backend.redis))
    with Client(None, backend, broker=brokers["sync"]) as client:
        seen["sync"] = _scenario(client, lambda v: v, list, worker, backend)
    if backend.redis.url.startswith("memory://"):
        backend = backend.replace(redis={"url": f"memory://seam-{uuid.uuid4().hex}"})
        worker = connect(backend.redis)
    else:
        redis.Redis.from_url(backend.redis.url).flushdb()

    loop = asyncio.new_event_loop()
    try:
        def settle(value: Any) -> Any:
            return loop.run_until_complete(value) if asyncio.iscoroutine(value) else value

        async def drain(stream: Any) -> list[Any]:
            return [chunk async for chunk in stream]

        brokers["async"] = Recording(connect(backend.redis, asyncio=True))
        aclient = AsyncClient(None, backend, broker=brokers["async"])
        seen["async"] = _scenario(aclient, settle, lambda stream: settle(drain(stream)), worker, backend)
        settle(aclient.close())
    finally:
        loop.close()

    assert seen["sync"] == seen["async"]
    assert seen["sync"]["total"] == seen["sync"]["again"] >= 1
    assert seen["sync"]["state"] == "queued" and seen["sync"]["cancelled"] is True
    assert seen["sync"]["wait"] == seen["sync"]["stream"] == "JOB_CANCELLED"
    for broker in brokers.values():
        # submit, job, status, cancel, wait, stream: each call's store access is a step asked of the broker
        assert broker.asked == ["ensure_groups", "admit", "job_status", "job_status", "cancel", "job_status",
                                "read_results"]
        # each step is one IO step: a face performed none that the broker was not asked for
        assert len(broker.sent) == len(broker.asked), broker.sent


def test_a_broker_is_handed_in_and_checked(settings: Settings, r: redis.Redis) -> None:
    keys = Keys(settings.redis.key_prefix)
    broker = RedisBroker(r, keys)
    assert isinstance(broker, Broker) and isinstance(broker, JobBroker)
    assert Client(r, settings).broker.keys == keys  # the default: wire.connect's broker on the client's connection
    run_blocking(broker, broker.ensure_groups(keys.queues(2)))  # the workers' way: a blocking connection
    assert all(r.xinfo_groups(s) for s in keys.queues(2))
    assert run_blocking(broker, broker.cancel("no-such-job")) == -1


def test_the_core_names_no_redis_command_or_script() -> None:
    """Redis commands, Lua scripts and redis-py's errors live in the broker; the core only yields its steps."""
    tree = ast.parse((ROOT / "producer/core.py").read_text(encoding="utf-8"))
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in modules if m == "redis" or m.startswith("redis.")}, "producer.core imports redis"
    assert not {m for m in modules if m.startswith("wire.redis")} and "wire.backlog" not in modules


def test_a_book_cancel_is_the_job_cancel_over_its_jobs(settings: Settings, r: redis.Redis, tmp_path: Path) -> None:
    """A book's cancel is one run of the job cancel's script over the book's pending jobs: a job that a worker
    finished since the runner last read it stays done (the script checks and writes each job at once), the
    rest are cancelled."""
    from books import submit_book

    keys = Keys(settings.redis.key_prefix)
    book = tmp_path / "book.txt"
    book.write_text("Chapter 1\n\nThe road was long. We walked all day.\n\nChapter 2\n\nRain fell on the roof.",
                    encoding="utf-8")
    broker = Recording(RedisBroker(redis.Redis.from_url(settings.redis.url), keys))
    with Client(None, settings, broker=broker) as client:
        handle = submit_book(client, book, out=str(tmp_path / "out"), book_id="cancel-book")
        ids = list(handle.jobs)
        assert len(ids) >= 3 and {r.hget(keys.status(j), "state") for j in ids} == {b"queued"}
        ended = ids[0]
        assert broker.finalize(ended, "done", {}, maxlen=10, ttl_s=60) == 1  # a worker's finish, unseen by the runner
        assert handle.state[ended] == "queued"
        broker.sent.clear()
        with pytest.MonkeyPatch.context() as patch:  # the book's cancel: one script run over its jobs
            ran: list[Any] = []
            real = broker.broker.send
            patch.setattr(broker.broker, "send", lambda step: ran.append(step) or real(step))
            assert handle.cancel() == len(ids) - 1
        assert [type(step) for step in ran] == [Script] and ran[0].source == CANCEL
        assert list(ran[0].keys) == [keys.status(j) for j in ids]
        broker.sent.clear()
        assert client.job(ids[1]).cancel() is False  # the job cancel: the same script, over one job (it had ended)
        assert [step.source for step in broker.sent if isinstance(step, Script)] == [CANCEL]
    states = {j: r.hget(keys.status(j), "state") for j in ids}
    assert states[ended] == b"done" and {states[j] for j in ids[1:]} == {b"cancelled"}, states


class ReplyLostOnce(Recording):
    """The first admission runs in the store but its reply is lost (the connection drops on the way back), as when
    the store stops right after running the step."""

    admits = 0

    def admit(self, sub: Any, queue: Any) -> Op[None]:
        self.admits += 1
        op, lose = self.broker.admit(sub, queue), self.admits == 1
        finished, step = advance(op, None, None)
        while not finished:
            try:
                reply, error = (yield step), None
            except Exception as exc:
                reply, error = None, exc
            if lose and error is None:
                reply, error, lose = None, BrokerUnavailable("connection lost reading the reply"), False
            finished, step = advance(op, reply, error)
        return step  # type: ignore[no-any-return]


def test_a_submit_whose_reply_was_lost_is_queued_once(backend: Settings) -> None:
    broker = ReplyLostOnce(connect(backend.redis))
    with Client(None, backend, broker=broker) as client:
        job = client.submit("Hello there. A second sentence.", lane="bulk")
        assert broker.admits == 2  # the submit retried the same job after the lost reply
        snap = snapshot(backend)
        assert sum(b.length for b in snap.buckets) == job.total >= 1  # not twice
        assert snap.backlog["bulk"].segments == job.total
        stored = client.job(job.id).status().fields
        again = client.submit("Hello there. A second sentence.", job_id=job.id, lane="bulk")  # the same request
        assert (again.id, again.total) == (job.id, job.total) and broker.admits == 3
        with pytest.raises(InputError) as err:  # other text under an id that exists
            client.submit("Something else entirely.", job_id=job.id, lane="bulk")
        assert err.value.code == JOB_ID_CONFLICT and err.value.detail == {"job_id": job.id}
        assert not err.value.retryable and broker.admits == 4
        snap = snapshot(backend)
        assert sum(b.length for b in snap.buckets) == job.total and snap.backlog["bulk"].segments == job.total
        assert client.job(job.id).status().fields == stored


class NeverReachable(Recording):
    def send(self, step: Any) -> Any:
        raise BrokerUnavailable("Connection refused")


def test_a_submit_gives_up_with_the_job_id_it_tried(backend: Settings) -> None:
    with Client(None, backend, broker=NeverReachable(connect(backend.redis))) as client:
        started = time.monotonic()
        with pytest.raises(TransientError) as err:
            client.submit("Hello there.", job_id="given-up-0001")
        assert 2.5 < time.monotonic() - started < 10  # it retried for about 3 s first
    assert err.value.code == "BACKEND_UNAVAILABLE" and err.value.detail["job_id"] == "given-up-0001"


def _piece(job_id: str, attempt: str, n: int, pcm: bytes, *, end: bool = False, frames: bool = False,
           claim: Any = None, copy: bool = True) -> Any:
    from wire.pieces import Piece, SegmentEnd
    from wire.records import chunk_fields

    return Piece(job_id, 0, [chunk_fields(0, n, end, attempt, 16000, pcm)], n, 0.1,
                 end=SegmentEnd("[]", "b#0", attempt, frames=frames) if end else None, total=1, claim=claim, copy=copy)


def test_a_replayable_claim_keeps_its_plan_in_the_status_and_no_frames(r: redis.Redis) -> None:
    """A voice that makes a segment's frames again from its seed claims with its first window and its replay record
    only: no frames key, no TTL to set; a redo's first window is not written and gets the tag, the record and the
    windows published, and once the segment ended, that it did."""
    from wire.pieces import FrameClaim

    broker = RedisBroker(r, Keys("replay"))
    r.hset(broker.keys.status("rj"), mapping={"state": "running", "total": 1})
    first = broker.publish_pieces([_piece("rj", "w1/1", 0, b"a" * 4, claim=FrameClaim("w1/1", "7,93,250")),
                                   _piece("rj", "w1/1", 1, b"b" * 4)], maxlen=100, ttl_s=60)
    assert [(x.written, x.claim) for x in first] == [(True, None), (True, None)]
    assert r.hget(broker.keys.status("rj"), "claim:0") == b"w1/1|7,93,250"
    assert not r.exists(broker.keys.frames("rj"))
    (redo,) = broker.publish_pieces([_piece("rj", "w2/2", 0, b"z" * 4, claim=FrameClaim("w2/2", "93,93,251"))], maxlen=100, ttl_s=60)
    held = redo.claim
    assert not redo.written and held is not None
    assert (held.attempt, held.replay, held.frames, held.windows, held.ended) == ("w1/1", "7,93,250", b"", 2, False)
    assert r.xlen(broker.keys.results("rj")) == 2 and broker.job_output("rj")[0] == {0: b"a" * 4 + b"b" * 4}  # none of it
    broker.publish_pieces([_piece("rj", "w1/1", 2, b"c" * 4, end=True)], maxlen=100, ttl_s=60)
    (late,) = broker.publish_pieces([_piece("rj", "w3/3", 0, b"y" * 4, claim=FrameClaim("w3/3", "93,93,251"))], maxlen=100, ttl_s=60)
    assert late.claim is not None and (late.written, late.claim.ended) == (False, True)


def test_frames_a_voice_cannot_make_again_live_until_the_segments_end(r: redis.Redis) -> None:
    from wire.pieces import FrameClaim

    broker = RedisBroker(r, Keys("frames"))
    r.hset(broker.keys.status("fj"), mapping={"state": "running", "total": 1})
    broker.publish_pieces([_piece("fj", "w1/1", 0, b"a" * 4, claim=FrameClaim("w1/1", "7,93,250", b"npz"))], maxlen=100, ttl_s=60)
    assert 0 < r.ttl(broker.keys.frames("fj")) <= 60
    (redo,) = broker.publish_pieces([_piece("fj", "w2/2", 0, b"z" * 4, claim=FrameClaim("w2/2", "7,93,250", b"other"))],
                                    maxlen=100, ttl_s=60)
    assert redo.claim is not None and (redo.claim.attempt, redo.claim.frames, redo.claim.windows) == ("w1/1", b"npz", 1)
    broker.publish_pieces([_piece("fj", "w1/1", 1, b"b" * 4, end=True, frames=True)], maxlen=100, ttl_s=60)
    assert not r.exists(broker.keys.frames("fj"))  # dropped with the segment's end


def test_an_attempts_own_claim_sent_again_is_its_own(r: redis.Redis) -> None:
    """A step retried after a lost reply sends its first window and claim again: the claim is the attempt's own, the
    window a repeat (not sent to readers twice), and the segment goes on."""
    from wire.pieces import FrameClaim

    broker = RedisBroker(r, Keys("own"))
    r.hset(broker.keys.status("oj"), mapping={"state": "running", "total": 1})
    for _ in range(2):
        (reply,) = broker.publish_pieces([_piece("oj", "w1/1", 0, b"a" * 4, claim=FrameClaim("w1/1", "1,2,3"))], maxlen=100, ttl_s=60)
        assert reply.written and reply.claim is None
    assert r.xlen(broker.keys.results("oj")) == 1
    (end,) = broker.publish_pieces([_piece("oj", "w1/1", 1, b"b" * 4, end=True)], maxlen=100, ttl_s=60)
    assert (end.done, end.total, end.output) == (1, 1, None)  # whole; two pieces: the finisher reads the parts
    assert broker.job_output("oj")[0] == {0: b"a" * 4 + b"b" * 4}


def test_a_piece_of_a_job_that_ended_writes_nothing(r: redis.Redis) -> None:
    """A client's cancel lands while a window is made: the publish reads the state and writes nothing (no chunk, no
    part, no clock, no count); the reply says the job was cancelled."""
    broker = RedisBroker(r, Keys("gone"))
    status = broker.keys.status("gj")
    r.hset(status, mapping={"state": "cancelled", "total": 1})
    (reply,) = broker.publish_pieces([_piece("gj", "w1/1", 0, b"a" * 4, end=True)], maxlen=100, ttl_s=60)
    assert (reply.written, reply.state, reply.output) == (False, "cancelled", None)
    assert not r.exists(broker.keys.results("gj")) and not r.exists(broker.keys.parts("gj"))
    assert set(r.hgetall(status)) == {b"state", b"total"}


def test_a_repeated_piece_keeps_the_copy_readers_saw(r: redis.Redis) -> None:
    """Two loops publish the same window of one attempt (a segment reclaimed while its first loop retried a step
    through a failover): the redo's copy differs in rounding. Readers keep the first copy, and so does the job's
    output; the repeat is not sent to readers again and the playback clock counts the audio once."""
    from producer.reader import ResultsReader

    broker = RedisBroker(r, Keys("again"))
    status = broker.keys.status("againjob")
    r.hset(status, mapping={"state": "running", "total": 1})
    broker.publish_pieces([_piece("againjob", "a/1", 0, b"\x01\x00" * 3)], maxlen=100, ttl_s=60)
    repeat = broker.publish_pieces([_piece("againjob", "a/1", 0, b"\xff\xff" * 3)], maxlen=100, ttl_s=60)
    assert repeat[0].delivered_s == pytest.approx(0.1)
    replies = broker.publish_pieces([_piece("againjob", "a/1", 1, b"\x02\x00" * 2, end=True)], maxlen=100, ttl_s=60)
    stored = b"\x01\x00" * 3 + b"\x02\x00" * 2
    assert replies[-1].done == 1 and broker.job_output("againjob")[0] == {0: stored}
    entries = r.xrange(broker.keys.results("againjob"))
    assert len(entries) == 2 and float(r.hget(status, "delivered_s") or 0) == pytest.approx(0.2)
    reader = ResultsReader(total=1, job_id="againjob")
    heard = [c.pcm for entry_id, fields in entries for c in reader.feed(entry_id, fields)]
    assert b"".join(heard) == stored


def test_the_status_counts_every_entry_its_results_stream_was_given(r: redis.Redis) -> None:
    """What a reader tells trimming by (each record's number, from the status's 'results_entries'): that count
    equals Redis's own count of entries added (``XINFO STREAM``'s entries-added), through pieces, a repeat that is
    not sent again, trimming, the final record, and a finish that a client's cancel beat."""
    broker = RedisBroker(r, Keys("counted"))
    node = r.config_get("stream-node-max-entries")["stream-node-max-entries"]
    r.config_set("stream-node-max-entries", 2)  # so that MAXLEN ~ 2 trims (whole nodes only) in a few entries
    try:
        _count_entries(r, broker)
    finally:
        r.config_set("stream-node-max-entries", node)


def _count_entries(r: redis.Redis, broker: RedisBroker) -> None:
    for job, cancel in (("donejob", False), ("racejob", True)):
        status, results = broker.keys.status(job), broker.keys.results(job)
        r.hset(status, mapping={"state": "running", "total": 1})
        for n in range(4):
            broker.publish_pieces([_piece(job, "a/1", n, b"\x01\x00" * 3)], maxlen=2, ttl_s=60)
        broker.publish_pieces([_piece(job, "a/1", 1, b"\x02\x00" * 3)], maxlen=2, ttl_s=60)  # a repeat
        broker.publish_pieces([_piece(job, "a/1", 4, b"\x01\x00" * 3, end=True)], maxlen=2, ttl_s=60)
        if cancel:
            r.hset(status, "state", "cancelled")
        assert broker.finalize(job, "done", {"url": "x"}, maxlen=2, ttl_s=60) == (2 if cancel else 1)
        added = r.xinfo_stream(results)["entries-added"]
        assert int(r.hget(status, "results_entries") or 0) == added == 6, job
        entries = run_blocking(broker, broker.read_results(job, "0-0", 100, 0))
        numbers = [int(f[b"entry"]) for _, f in entries]  # what a reader tells trimming by
        assert numbers == list(range(added - r.xlen(results) + 1, added + 1)) and numbers[0] > 1, job


def test_a_segment_ended_twice_counts_once_and_keeps_its_first_words(r: redis.Redis) -> None:
    """A redo that ends a segment again (its first loop's ack was lost) neither counts it twice, which would end the
    job before its last segment, nor replaces its words: the first end stays, as the first copy of a piece does."""
    from wire.pieces import Piece, SegmentEnd
    from wire.records import chunk_fields

    broker = RedisBroker(r, Keys("twice"))
    status = broker.keys.status("twicejob")
    r.hset(status, mapping={"state": "running", "total": 2})

    def end(seg: int, batch: str, words: str) -> Any:
        return Piece("twicejob", seg, [chunk_fields(seg, 0, True, batch, 16000, bytes([seg + 1, 0]) * 4)], 0, 0.1,
                     end=SegmentEnd(words, batch, "w"), total=2)

    first = broker.publish_pieces([end(0, "b#1", '[[0, 4, 0, 2, "hi", 0, " "]]')], maxlen=100, ttl_s=60)
    again = broker.publish_pieces([end(0, "b#2", '[[0, 4, 0, 2, "ho", 0, " "]]')], maxlen=100, ttl_s=60)
    assert first[0].done == again[0].done == 1 and again[0].output is None
    assert r.hget(status, "batch:0") == b"b#1" and int(r.hget(status, "done") or 0) == broker.segments_done("twicejob") == 1
    last = broker.publish_pieces([end(1, "b#3", "[]")], maxlen=100, ttl_s=60)
    assert last[0].done == 2 and last[0].output is None  # two segments: the finisher reads the parts
    parts, words = broker.job_output("twicejob")
    assert parts == {0: b"\x01\x00" * 4, 1: b"\x02\x00" * 4} and words == {0: [[0, 4, 0, 2, "hi", 0, " "]], 1: []}


def test_results_live_a_ttl_after_the_end_set_once_for_a_short_job(r: redis.Redis) -> None:
    """The first chunk sets the results stream's expiry RESULTS_SLACK_S past the TTL; a job that ends soon after
    keeps it (FINALIZE sets no TTL of its own, one command fewer per job), one whose expiry no longer covers a TTL
    after its end gets it set again, and a job that ends without a chunk gets its TTL from FINALIZE."""
    from wire.redis.lua import RESULTS_SLACK_S

    broker = RedisBroker(r, Keys("ttl"))
    ttl = 1000
    for job in ("short", "long"):
        r.hset(broker.keys.status(job), mapping={"state": "running", "total": 1})
        broker.publish_pieces([_piece(job, "w1/1", 0, b"a" * 4, end=True)], maxlen=100, ttl_s=ttl)
        assert ttl + RESULTS_SLACK_S - 5 <= r.ttl(broker.keys.results(job)) <= ttl + RESULTS_SLACK_S
    # as if the long job's first chunk went out more than half the slack before now
    r.hset(broker.keys.status("long"), "results_expire", time.time() + ttl + RESULTS_SLACK_S // 2 - 10)
    for job in ("short", "long"):
        assert broker.finalize(job, "done", {"url": "x"}, maxlen=100, ttl_s=ttl) == 1
    assert r.ttl(broker.keys.results("short")) > ttl + RESULTS_SLACK_S // 2
    assert ttl - 5 <= r.ttl(broker.keys.results("long")) <= ttl
    r.hset(broker.keys.status("failed"), mapping={"state": "running", "total": 1})
    assert broker.finalize("failed", "failed", {"error_code": "X", "error_message": "y"}, maxlen=100, ttl_s=ttl) == 1
    assert ttl - 5 <= r.ttl(broker.keys.results("failed")) <= ttl


def test_an_ack_deletes_its_entries_and_counts_each_xack_once(settings: Settings, r: redis.Redis) -> None:
    """Entries of one stream are deleted together; an entry acked before (by another worker) leaves the lane's
    counters once, with that ack, not again with this one. The lane holds two more entries than are acked, so the
    counters' floor at zero cannot hide a second release."""
    from wire.keys import GROUP

    keys = Keys(settings.redis.key_prefix)
    client = Client(r, settings)
    for i in range(5):
        client.submit("Hello there.", job_id=f"ack-job-{i:04d}", lane="bulk")
    streams = keys.queues(settings.queue.n_buckets)
    consumer = RedisBroker(r, keys).consumer("c1", streams)
    (stream,) = [s for s in streams if r.xlen(s)]
    entries = consumer.claim(stream, 3)
    assert len(entries) == 3 and all(e.job is not None for e in entries)
    backlog = keys.backlog("bulk")
    n, s, q = (float(x or 0) for x in r.hmget(backlog, "n", "s", "q"))
    est = entries[1].job.est_s if entries[1].job else 0
    r.xack(stream, GROUP, entries[1].entry_id)  # acked elsewhere first: its count went with that ack
    r.hset(backlog, mapping={"n": n - 1, "s": s - est, "q": q - 1})
    consumer.ack(entries)
    assert r.xlen(stream) == 2  # the two entries not claimed
    assert n - 3 > 0 and s - sum(e.job.est_s for e in entries if e.job) > 0
    assert [float(x or 0) for x in r.hmget(backlog, "n", "s", "q")] == pytest.approx([n - 3, s - sum(
        e.job.est_s for e in entries if e.job), q - 3])


def test_a_dead_letter_two_operators_read_is_requeued_once(r: redis.Redis) -> None:
    """Two operators read the same dead letter, then both requeue it: the second requeue finds it gone in the step
    itself (its read came before the first requeue), so the segment is queued and counted once."""
    from wire.records import SegmentJob, dead_letter_fields

    broker = RedisBroker(r, Keys("dl"))
    job = SegmentJob(job_id="dead-letter-0001", seg=0, total=1, text="Hello.", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=16000, lane="bulk")
    stream = broker.keys.queue("bulk", 0)
    broker.dead_letter(dead_letter_fields(stream, "1-1", "SEGMENT_FAILED", "boom", 3, job.to_fields()))
    (read,) = broker.dead_letters(1)
    broker.requeue_dead_letter(read.id)
    broker.find_dead_letter = lambda entry_id: read  # type: ignore[method-assign]  # the other operator's read
    with pytest.raises(KeyError):
        broker.requeue_dead_letter(read.id)
    assert r.xlen(stream) == 1 and int(r.hget(broker.keys.backlog("bulk"), "n")) == 1


def test_a_job_of_one_piece_is_not_read_back(r: redis.Redis) -> None:
    """A job whose one segment is one piece ends with that piece: its output is what was sent, not read back, and its
    PCM, sent without a parts copy as the publisher sends a one-segment job's (``Piece.copy``), is not copied into the
    parts hash (the results stream holds it: ``job_output``, for a redo that ends the job again, reads it there and
    gets the same). A job of two pieces is read by its finisher with a plain HGETALL: the
    publish script reads no parts (every byte a script reads becomes a Lua string, hashed whole)."""
    broker = RedisBroker(r, Keys("one"))

    def hgetalls() -> int:
        return int(r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))

    for job, n in (("onejob", 1), ("twojob", 2)):
        r.hset(broker.keys.status(job), mapping={"state": "running", "total": 1})
        before = hgetalls()
        replies = broker.publish_pieces([_piece(job, "w1/1", i, bytes([i + 1, 0]) * 4, end=i == n - 1, copy=n > 1)
                                         for i in range(n)], maxlen=100, ttl_s=60)
        assert hgetalls() == before and replies[-1].done == replies[-1].total == 1
        copied = sorted(text_of(k) for k in r.hkeys(broker.keys.parts(job)))
        assert copied == (["words:0"] if n == 1 else ["0:0", "0:1", "words:0"]), copied
        stored = broker.job_output(job)
        assert stored[0] == {0: b"".join(bytes([i + 1, 0]) * 4 for i in range(n))}
        assert replies[-1].output == (stored if n == 1 else None)


def test_a_publish_hands_its_pcm_and_frames_to_the_packer_as_views(redis_url: str) -> None:
    """The pieces' PCM and a claim's frames travel as ``memoryview``s, which the wire's packer sends without copying
    them (``redis_connect.WholePacker``); what lands in Redis is the same bytes."""
    from wire.pieces import FrameClaim
    from wire.redis.connect import WholePacker

    seen: list[list[type]] = []

    class Recording(WholePacker):
        def pack(self, *args: Any) -> list[bytes]:
            seen.append([type(a) for a in args])
            return super().pack(*args)

    client = redis.Redis.from_url(redis_url, command_packer=Recording())
    broker = RedisBroker(client, Keys("views"))
    client.hset(broker.keys.status("vj"), mapping={"state": "running", "total": 1})
    pcm = [bytes([i]) * 3000 for i in range(3)]
    pieces = [_piece("vj", "w1/1", 0, pcm[0], claim=FrameClaim("w1/1", "7,93,250", b"npz-frames")),
              _piece("vj", "w1/1", 1, pcm[1]), _piece("vj", "w1/1", 2, pcm[2], end=True, frames=True)]
    seen.clear()
    assert all(x.written for x in broker.publish_pieces(pieces, maxlen=100, ttl_s=60))
    publish = max(seen, key=len)
    assert publish.count(memoryview) == 4  # three pieces' PCM and the frames
    assert broker.job_output("vj")[0] == {0: b"".join(pcm)}
    assert [bytes(f[b"pcm"]) for _, f in client.xrange(broker.keys.results("vj"))] == pcm
    client.close()
