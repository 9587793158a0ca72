"""``queue.finisher_processes``: a finished job's assembly, encoding, storage and end run in processes of their own
(``workers.finisher.StoreProcesses``), outside the loops' interpreter; one that dies loses no job."""

from __future__ import annotations

import os
import signal
import time

import redis

from wire.keys import Keys
from wire.redis.broker import RedisBroker
from wire.records import SegmentJob
from wire.settings import Settings
from wire.storage import storage_from_settings
from workers.finisher import Finisher
from workers.publisher import Publisher

RATE = 16000


def published(settings: Settings, r: redis.Redis, n: int) -> tuple[SegmentJob, Publisher]:
    """A one-segment job whose segment a loop has just published: what is left is its end."""
    job = SegmentJob(job_id=f"finisherproc{n:04d}", seg=0, total=1, text="One two three.", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=RATE, lane="interactive")
    pub = Publisher.of(settings, RedisBroker(r, Keys(settings.redis.key_prefix)), storage_from_settings(settings.storage))
    out = pub.publish_segment(job, bytes(range(256)) * 25, attempt="w/1", batch_id="b#1", worker="w")
    assert out.done == 1
    return job, pub


def ended(settings: Settings, r: redis.Redis, job: SegmentJob, url: str | None) -> bool:
    status = r.hgetall(Keys(settings.redis.key_prefix).status(job.job_id))
    stored = storage_from_settings(settings.storage).path(f"{job.job_id}/audio.wav")
    return bool(url) and status.get(b"state") == b"done" and status.get(b"url", b"").decode() == url and stored.stat().st_size > 44


def test_a_job_is_stored_and_ended_by_a_finisher_process_and_one_that_dies_loses_nothing(settings: Settings,
                                                                                            r: redis.Redis) -> None:
    finisher = Finisher(1, 1, settings)
    assert finisher.processes is not None
    try:
        deadline = time.monotonic() + 60
        while not finisher.processes.pids and time.monotonic() < deadline:
            time.sleep(0.05)
        (pid,) = finisher.processes.pids
        assert pid != os.getpid()
        job, pub = published(settings, r, 1)
        url, cancelled = finisher.store(pub, job, None)
        assert ended(settings, r, job, url) and not cancelled
        assert finisher.describe() | {"pending": 0} == {"threads": 1, "pending": 0, "done": 0, "inline": 0, "processes": 1,
                                                       "stored_in_processes": 1, "process_restarts": 0}
        os.kill(pid, signal.SIGKILL)
        job, pub = published(settings, r, 2)
        url, _ = finisher.store(pub, job, None)  # the pool broke: this one is stored here, and the pool starts again
        assert ended(settings, r, job, url)
        assert finisher.describe()["process_restarts"] == 1 and finisher.describe()["stored_in_processes"] == 1
        job, pub = published(settings, r, 3)
        url, _ = finisher.store(pub, job, None)
        assert ended(settings, r, job, url) and finisher.describe()["stored_in_processes"] == 2
        assert finisher.processes.pids and pid not in finisher.processes.pids
    finally:
        assert finisher.close(timeout=30)


def test_without_finisher_processes_the_end_runs_in_the_worker(settings: Settings, r: redis.Redis) -> None:
    finisher = Finisher(1, 0, settings)
    job, pub = published(settings, r, 4)
    url, _ = finisher.store(pub, job, None)
    assert finisher.processes is None and ended(settings, r, job, url)
    assert "stored_in_processes" not in finisher.describe()
