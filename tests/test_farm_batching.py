"""How a worker forms batches, end to end: real redis-server, real Celery worker processes, real voices.

The status record of each job says which batch ran its segment (``batch:0``) and when it started; these
tests read them to check the length buckets, the batching window and the two lanes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from producer.client import Job
from producer.submit import prepare_submission
from wire.keys import bucket_of
from tests.conftest import Farm, FarmSpec

pytestmark = pytest.mark.slow

# One sentence each, no commas: one segment per job. CLOSE are within ``tolerance`` of each other,
# FAR within it of each other, and the two groups further apart than ``tolerance_max``; all one bucket.
CLOSE = [
    "The quiet library opened early so the students could study before their morning exams.",
    "The little bakery sold warm bread and sweet rolls to everyone who walked past its door.",
    "The gardener planted tulips and roses along the path that led to the house by the lake.",
]
FAR = [
    "The long road wound through the hills and valleys of the countryside where farmers grew wheat and corn and the old mills still turned.",
    "Every evening the fishermen returned to the harbor with their nets full of silver fish and the whole village gathered there to greet them.",
    "The children ran across the meadow toward the old oak tree where their grandmother waited with a basket of apples and a jug of cold milk.",
]


# Each test's farms: the test starts a farm's worker when it is ready, and the worker runs one inference loop (unless
# a test asks for more), so that which batch takes which job depends on the batcher alone.
ONE_LOOP = FarmSpec(workers=0, env={"TTSFARM_QUEUE_INFERENCE_THREADS": "1", "TTSFARM_QUEUE_INTERACTIVE_LOOPS": "0"})


def _wait_all(jobs: list[Job], timeout: float = 60) -> list[dict[str, Any]]:
    for job in jobs:
        assert job.wait(timeout=timeout).state == "done"
    return [job.status() for job in jobs]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(a, b)


def test_close_lengths_share_a_batch_and_far_ones_do_not(make_farm: Callable[..., Farm]) -> None:
    farm = make_farm(ONE_LOOP, TTSFARM_QUEUE_MAX_BATCH_CPU="4")
    q = farm.settings.queue
    est = {t: prepare_submission(farm.settings, t, voice="joe").segments for t in CLOSE + FAR}
    assert all(len(segs) == 1 for segs in est.values())
    secs = {t: segs[0].est_s for t, segs in est.items()}
    assert len({bucket_of(s, q.bucket_edges_s) for s in secs.values()}) == 1, secs
    assert max(_rel(secs[a], secs[b]) for a in CLOSE for b in CLOSE) <= q.tolerance
    assert max(_rel(secs[a], secs[b]) for a in FAR for b in FAR) <= q.tolerance
    assert min(_rel(secs[a], secs[b]) for a in CLOSE for b in FAR) > q.tolerance_max

    client = farm.client()
    # queued before any worker runs; a far job sits among the close ones, inside the first claim of 4
    order = [CLOSE[0], FAR[0], CLOSE[1], CLOSE[2], FAR[1], FAR[2]]
    jobs = {text: client.submit(text, voice="joe") for text in order}
    farm.start_worker()
    statuses = dict(zip(jobs, _wait_all(list(jobs.values()))))

    batch = {text: st["batch:0"] for text, st in statuses.items()}
    close_batches = {batch[t] for t in CLOSE}
    assert len(close_batches) == 1, batch
    (close_batch,) = close_batches
    assert [t for t in order if batch[t] == close_batch] == CLOSE  # size 3: all the close jobs, nothing else
    assert batch[FAR[1]] == batch[FAR[2]], batch  # claimed together and of one length: one batch of 2
    assert all(batch[t] != close_batch for t in FAR), batch
    assert len({st["worker:0"] for st in statuses.values()}) == 1


@pytest.mark.parametrize("continuous", [False, True])
def test_lone_job_waits_out_the_window_and_no_longer(make_farm: Callable[..., Farm], continuous: bool) -> None:
    """A fixed window (``queue.continuous_batching = false``) is waited out by a lone job; with continuous batching
    (the default) a lone job on an idle device starts at once."""
    # A 1 s window rather than the shipped 200 ms: a slow CI machine's scheduling delay (tens of ms) stays small
    # beside it, so "waits it out and no longer" and "starts at once" keep their meaning there.
    farm = make_farm(ONE_LOOP, TTSFARM_QUEUE_MAX_BATCH_CPU="4",
                     TTSFARM_QUEUE_CONTINUOUS_BATCHING=str(continuous).lower(), TTSFARM_QUEUE_WINDOW_MS="1000")
    window = farm.settings.queue.window_ms / 1000
    assert window == 1.0
    farm.start_worker()
    client = farm.client()
    assert client.submit("Warm up the worker first.", voice="joe").wait(timeout=60).state == "done"
    waits = []
    for text in ("A lone job waits for company.", "Another lone job waits a while.", "A third one waits alone."):
        time.sleep(0.3)  # nothing else queued
        st = _wait_all([client.submit(text, voice="joe")])[0]
        waits.append(st["started"] - st["created"])
    # The window opens at the entry id's time (Redis' clock, the same host as `created` here, and after
    # it): the batch could have grown until then, so the job cannot start before it; and it starts soon after.
    if continuous:
        assert all(w < window / 2 for w in waits), waits
    else:
        assert all(window * 0.9 <= w <= window * 1.25 for w in waits), waits


def test_interactive_job_overtakes_a_bulk_backlog_and_bulk_still_finishes(make_farm: Callable[..., Farm]) -> None:
    farm = make_farm(ONE_LOOP, TTSFARM_QUEUE_MAX_BATCH_CPU="1")
    client = farm.client()
    bulk = [client.submit(f"Bulk job number {i} reads a plain sentence aloud for the archive.", voice="joe", lane="bulk")
            for i in range(12)]
    assert all(j.total == 1 for j in bulk)
    farm.start_worker()
    deadline = time.monotonic() + 60
    while not any("started" in j.status() for j in bulk):
        assert time.monotonic() < deadline, farm.logs()
        time.sleep(0.01)
    urgent = client.submit("Please read this sentence right away.", voice="joe")
    waiting = sum("started" not in j.status() for j in bulk)
    assert waiting >= 3, f"only {waiting} bulk jobs left when the interactive one came: make them longer"

    # (a loaded machine runs the bulk units, at nice 19, several times slower, and the bulk segments the loop already
    # holds between windows go first: the wait is long, the order below is what is asserted)
    st = _wait_all([urgent], timeout=180)[0]
    bulk_st = _wait_all(bulk, timeout=180)  # the backlog still completes: no starvation
    in_between = [b["started"] for b in bulk_st if st["created"] < b["started"] < st["started"]]
    assert len(in_between) <= 1, (st, in_between)
    assert sum(b["started"] > st["started"] for b in bulk_st) >= 2  # bulk resumed after it
