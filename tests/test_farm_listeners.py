"""Listeners side by side on a real farm (real Redis, real worker processes, the real joe voice): with just-in-time
admission every long job's first chunk goes out before any job's third segment starts (results-stream entry ids are
Redis server times); a worker killed mid-run leaves every job done exactly once; a cancelled job leaves nothing
queued or staged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from wire.keys import Keys
from wire.records import SegmentJob
from tests.conftest import Farm

pytestmark = pytest.mark.slow
NOISELESS = {"noise_scale": 0.0, "noise_w": 0.0}
# Sentences of about one length (one length bucket), the first one too: without just-in-time admission a later job's
# first segment waits in the same bucket stream behind every segment of the jobs before it.
SENTENCES = ("The old lighthouse stood at the edge of the cliff for years.", "Every night its lamp turned slowly over the dark water.",
             "Sailors far out at sea looked for it and knew they were home.", "The keeper climbed the long stairs twice in every day.",
             "He wound the clock and wrote the weather in a thick book.", "In winter the storms came from the north across the bay.",
             "The waves broke over the rocks below with a heavy sound.", "In spring the gulls came back and nested on the ledges.",
             "Children from the village walked up the hill to visit.", "They brought him bread and apples and the latest news.")


def long_text(i: int) -> str:
    return f"This is story number {i}, told on a quiet evening. " + " ".join(SENTENCES)


def first_chunk_of_segment(r: redis.Redis, keys: Keys, job_id: str) -> dict[int, tuple[int, int]]:
    """Each segment's first chunk, as the results-stream entry id (server ms, sequence)."""
    out: dict[int, tuple[int, int]] = {}
    for eid, f in r.xrange(keys.results(job_id)):
        if f.get(b"type") == b"chunk":
            seg = int(f[b"seg"])
            ms, seq = eid.decode().split("-")
            out.setdefault(seg, (int(ms), int(seq)))
    return out


def queued_per_job(r: redis.Redis, keys: Keys, n_buckets: int) -> dict[str, int]:
    """Entries of each job in the bucket streams (claimed or not, until acked)."""
    counts: dict[str, int] = {}
    for stream in keys.queues(n_buckets):
        for _, f in r.xrange(stream):
            job = SegmentJob.from_fields(f)
            counts[job.job_id] = counts.get(job.job_id, 0) + 1
    return counts


def queued_or_staged(r: redis.Redis, keys: Keys, n_buckets: int) -> int:
    return sum(int(r.xlen(s)) for s in keys.queues(n_buckets)) + sum(int(r.xlen(keys.staging(lane))) for lane in ("interactive", "bulk"))


def test_long_listeners_all_start_before_any_gets_its_third_segment(redis_url: str, tmp_path: Path) -> None:
    # One loop: which unit runs next is then the scheduler's choice alone (with more loops, a shared loop runs a
    # later segment while the reserved one serves a first: by design, but a race to assert on). Units with slack
    # run at nice 19 by default: on a machine busy with other tests the jobs would then fall behind their listeners.
    # Two segments in flight when nothing else waits (the default six would let a job that finds the others' streams
    # empty run six ahead): the bound below is then the horizon's two segments and those two.
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_INFERENCE_THREADS="1", TTSFARM_QUEUE_INTERACTIVE_LOOPS="0",
                TTSFARM_QUEUE_BULK_NICE="0", TTSFARM_QUEUE_ADMISSION_IDLE_AHEAD="2")
    try:
        client = farm.client()
        keys = Keys(farm.prefix)
        # submitted together: all four before the worker starts (a slow machine's submits would otherwise let the
        # first job run its two segments ahead before the last one exists)
        jobs = [client.submit(long_text(i), voice="joe", options=NOISELESS) for i in range(4)]
        assert all(job.total >= 8 for job in jobs)
        farm.start_worker()
        # the streams hold a few seconds of each job, never its whole backlog (a later job's first segment is a head)
        most_queued = 0
        while not all(job.status().state == "done" for job in jobs):
            most_queued = max(most_queued, max(queued_per_job(client.redis, keys, farm.settings.queue.n_buckets).values(),
                                               default=0))
            time.sleep(0.05)
        assert 1 <= most_queued <= 4, most_queued
        firsts = {job.id: first_chunk_of_segment(client.redis, keys, job.id) for job in jobs}
        last_start = max(segs[0] for segs in firsts.values())
        earliest_third = min(segs[2] for segs in firsts.values())
        assert last_start < earliest_third, {j: (s[0], s[2]) for j, s in firsts.items()}
        assert queued_or_staged(client.redis, keys, farm.settings.queue.n_buckets) == 0
        assert int(client.redis.hget(keys.backlog("interactive"), "n") or 0) == 0
    finally:
        farm.stop()


def test_a_worker_killed_mid_run_leaves_every_long_job_done_once_and_a_cancel_leaves_nothing(redis_url: str,
                                                                                            tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_CLAIM_IDLE_MS="1500", TTSFARM_QUEUE_MAX_DELIVERIES="20")
    try:
        victim = farm.start_worker()
        client = farm.client()
        keys = Keys(farm.prefix)
        jobs = [client.submit(long_text(i), voice="joe", options=NOISELESS) for i in range(3)]
        cancelled = client.submit(long_text(9), voice="joe", options=NOISELESS)
        assert int(cancelled.status()["staged"]) > 0
        assert cancelled.cancel()
        deadline = time.monotonic() + 60
        while not any(int(job.status().get("done", 0)) >= 1 for job in jobs):
            assert time.monotonic() < deadline, "no segment done"
            time.sleep(0.05)
        victim.kill()
        farm.start_worker()
        for job in jobs:
            assert job.wait(timeout=180).state == "done"
        for job in jobs:  # a reader sees each segment once: one last chunk per segment, numbered parts in order
            chunks = list(job.stream(timeout=30))
            assert [c.seg for c in chunks] == sorted(c.seg for c in chunks)
            assert sorted({c.seg for c in chunks}) == list(range(job.total))
            assert chunks[-1].last
            final = [eid for eid, f in client.redis.xrange(keys.results(job.id)) if f.get(b"type") == b"final"]
            assert len(final) == 1
        assert cancelled.status()["state"] == "cancelled"
        # an entry the victim held whose segment it had published (so its job could end) is acked by the reclaim
        # that redoes it: claim_idle_ms, then the process's next reclaim (every 2 s); it must go, not stay
        deadline = time.monotonic() + 30
        while queued_or_staged(client.redis, keys, farm.settings.queue.n_buckets) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert queued_or_staged(client.redis, keys, farm.settings.queue.n_buckets) == 0
        backlog = client.redis.hgetall(keys.backlog("interactive"))
        assert int(backlog.get(b"n", 0)) == 0 and int(backlog.get(b"q", 0)) == 0
    finally:
        farm.stop()
