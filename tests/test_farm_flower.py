"""Flower sees the farm: a real Flower process and a real worker on one private key prefix.

Stream jobs are not Celery tasks; the worker sends the task events itself (``workers.events``), so Flower
lists each job as a ``ttsfarm.synthesize`` task whose uuid is the job id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import NOTHING_TO_SPEAK
from bench.processes import free_port
from wire.keys import Keys
from wire.records import SegmentJob
from tests.conftest import Farm, FarmSpec

pytestmark = pytest.mark.slow

TASK_NAME = "ttsfarm.synthesize"


class Flower:
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--port={self.port}", "--address=127.0.0.1"]
        full_env = {**os.environ, **env, "FLOWER_UNAUTHENTICATED_API": "true", "PYTHONUNBUFFERED": "1"}
        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(cmd, env=full_env, cwd=root, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=10) as reply:
            return json.loads(reply.read())

    def wait_up(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"flower exited with {self.proc.returncode}: {self.log()}")
            try:
                self.get("/api/workers")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flower not up after {timeout} s: {self.log()}") from None
                time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def poll(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """``probe()`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def farm_and_flower(make_farm: Callable[..., Farm]) -> Iterator[tuple[Farm, Flower]]:
    farm = make_farm(FarmSpec(workers=0))  # its worker starts once Flower listens
    flower = Flower(farm.env, farm.root / "flower.log")
    try:
        flower.wait_up()
        farm.start_worker()
        yield farm, flower
    finally:
        flower.stop()


def test_flower_lists_the_worker_and_the_jobs_as_tasks(farm_and_flower: tuple[Farm, Flower]) -> None:
    farm, flower = farm_and_flower
    (worker,) = farm.workers
    name = worker.name  # type: ignore[attr-defined]
    # Flower's own event state sees the worker (its receiver is connected), and inspect answers.
    poll("the worker alive in Flower's events", lambda: flower.get("/api/workers?status=1").get(name))
    listed = poll("the worker in /api/workers", lambda: flower.get("/api/workers?refresh=1").get(name))
    assert "ttsfarm.ping" in listed["registered"]

    client = farm.client()
    good = [client.submit(text, voice="joe") for text in ("Flower sees this job.", "And this one.", "A third job.")]
    keys = Keys(farm.prefix)
    bad = SegmentJob(job_id="badflower-" + "x" * 10, seg=0, total=1, text="...", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=22050)
    client.redis.hset(keys.status(bad.job_id), mapping={"state": "queued", "total": 1, "created": time.time()})
    client.ensure_groups()
    client.redis.xadd(keys.queue("interactive", 0), bad.to_fields())
    urls = {job.id: job.wait(timeout=60).url for job in good}
    with pytest.raises(Exception) as exc:
        client.job(bad.job_id).wait(timeout=60)
    assert getattr(exc.value, "code", None) == NOTHING_TO_SPEAK

    expected = {**{job.id: "SUCCESS" for job in good}, bad.job_id: "FAILURE"}

    def tasks_in_final_state() -> dict[str, Any]:
        tasks = flower.get("/api/tasks")
        done = {uuid: t for uuid, t in tasks.items() if uuid in expected and t["state"] in ("SUCCESS", "FAILURE")}
        return tasks if len(done) == len(expected) else {}

    tasks = poll("the jobs as finished tasks in /api/tasks", tasks_in_final_state)
    for job_id, state in expected.items():
        t = tasks[job_id]
        assert (t["uuid"], t["name"], t["state"]) == (job_id, TASK_NAME, state), t
        assert t["worker"] == name, t

    for job in good:
        info = flower.get(f"/api/task/info/{job.id}")
        assert (info["uuid"], info["name"], info["state"]) == (job.id, TASK_NAME, "SUCCESS"), info
        assert info["worker"] == name
        assert urls[job.id] in str(info["result"])
        assert info["started"] and info["succeeded"] and info["received"]
    info = flower.get(f"/api/task/info/{bad.job_id}")
    assert (info["uuid"], info["name"], info["state"]) == (bad.job_id, TASK_NAME, "FAILURE"), info
    assert NOTHING_TO_SPEAK in info["exception"]
    assert info["failed"] and info["started"]


def test_cancelled_jobs_show_as_revoked(farm_and_flower: tuple[Farm, Flower]) -> None:
    """A job cancelled while it runs (stopped between segments) and one cancelled while still queued (its
    segments skipped) both end REVOKED in Flower, with the task's name."""
    farm, flower = farm_and_flower
    client = farm.client()
    sentences = " ".join(f"Sentence number {i} of a bulk job is read now." for i in range(10))
    running = client.submit(sentences, voice="joe", lane="bulk")
    queued = client.submit(sentences, voice="joe", lane="bulk")  # behind the first in the same bucket
    assert queued.cancel()
    next(iter(running.stream(timeout=60)))
    assert running.cancel()
    expected = {running.id, queued.id}

    def revoked() -> dict[str, Any]:
        tasks = flower.get("/api/tasks")
        return tasks if all(tasks.get(j, {}).get("state") == "REVOKED" for j in expected) else {}

    tasks = poll("both cancelled jobs REVOKED in /api/tasks", revoked)
    for job_id in expected:
        assert (tasks[job_id]["name"], tasks[job_id]["state"]) == (TASK_NAME, "REVOKED"), tasks[job_id]
        info = flower.get(f"/api/task/info/{job_id}")
        assert info["state"] == "REVOKED" and info["revoked"] and info["received"], info
    assert flower.get(f"/api/task/info/{running.id}")["started"]  # it had run before the cancel
    assert not flower.get(f"/api/task/info/{queued.id}")["started"]  # it never ran
