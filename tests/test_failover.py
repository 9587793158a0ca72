"""Failover with real processes: a master, a replica and three Sentinels (``bench.processes.SentinelGroup``), a
real Celery worker, jobs streaming through it while nodes die.

- ``test_failover_under_load``: a Sentinel SIGKILLed, then the master SIGKILLed, then the replica (the old master,
  back as a replica) SIGKILLed, each mid-load with ``redis.wait_replicas`` 1. Every acknowledged job ends done
  with one final record, each reader sees every chunk once (its chunks joined are the stored output, byte for
  byte), and the worker's heartbeat, its /metrics and ``ttsfarm status`` show the failover it followed.
- ``test_without_wait_a_failover_loses_acknowledged_jobs``: the variant that fails. A replica that lags (stopped
  behind 32 MB of replication), the master killed: jobs acknowledged without ``WAIT`` are gone on the new master;
  with ``WAIT`` the same submits were refused (``TransientError`` naming the job), so none acknowledged is lost.

Each prints a RESULT line (docs/RELIABILITY.md). Short Sentinel timeouts: a failover takes 2-3 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from producer.client import Client
from bench.processes import SentinelGroup, free_port
from wire.errors import TransientError
from wire.settings import load_settings
from tests.conftest import Farm

pytestmark = pytest.mark.slow
NOISELESS = {"noise_scale": 0.0, "noise_w": 0.0}  # a redone segment is the same audio, byte for byte
ROOT = Path(__file__).resolve().parent.parent


def result(name: str, **measured: object) -> None:
    print(f"\nRESULT {name} {json.dumps(measured)}")


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Load:
    """A producer thread submitting jobs one after another (each under its own id, so a retry is the same job),
    and a reader per acknowledged job streaming it to the end."""

    def __init__(self, client: Client, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.acked: list[str] = []
        self.refused: list[str] = []  # submits that raised TransientError: not acknowledged
        self.readers: dict[str, Future[list[Any]]] = {}
        self.pool = ThreadPoolExecutor(6)
        self.stop = threading.Event()
        self.limit = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def run_until(self, n: int) -> None:
        self.limit = n
        if not self.thread.is_alive():
            self.thread.start()

    def count(self) -> int:
        """Jobs acknowledged so far; the producer's error, if it died, is raised here."""
        if self.error is not None:
            raise self.error
        return len(self.acked)

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:
            self.error = exc

    def _produce(self) -> None:
        i = 0
        while not self.stop.is_set():
            if len(self.acked) >= self.limit:
                time.sleep(0.02)
                continue
            job_id = f"{self.prefix}-{i:04d}"
            i += 1
            try:
                job = self.client.submit(f"Sentence {i} is read while Redis fails over.", voice="joe", format="pcm",
                                         options=NOISELESS, job_id=job_id)
            except TransientError:
                self.refused.append(job_id)
                time.sleep(0.1)
                continue
            self.acked.append(job.id)
            self.readers[job.id] = self.pool.submit(lambda j=job: list(j.stream(timeout=240)))
            time.sleep(0.05)

    def finish(self, wait: bool = True) -> None:
        """Stop submitting; with ``wait``, let every reader finish (a failed test does not wait for them)."""
        self.stop.set()
        self.thread.join(60)
        self.pool.shutdown(wait=wait, cancel_futures=not wait)


def test_failover_under_load(tmp_path: Path) -> None:
    group = SentinelGroup().start()
    port = free_port()
    farm = Farm(group.url, tmp_path, TTSFARM_REDIS_MASTER_NAME=group.name, TTSFARM_REDIS_WAIT_REPLICAS="1",
                TTSFARM_REDIS_WAIT_TIMEOUT_MS="300", TTSFARM_QUEUE_CLAIM_IDLE_MS="3000",
                TTSFARM_WORKER_METRICS_PORT=str(port), TTSFARM_WORKER_METRICS_HOST="127.0.0.1")
    load = None
    try:
        farm.start_worker()
        client = farm.client()
        load = Load(client, "failover")
        load.run_until(8)
        wait_until(lambda: load.count() >= 8, 60, "the first jobs")
        group.guards[0].signal(signal.SIGKILL)  # the first Sentinel of the URL: clients ask the next ones

        load.run_until(20)
        wait_until(lambda: load.count() >= 20, 60, "jobs after a Sentinel died")
        old_master = group.master.port
        group.master.signal(signal.SIGKILL)
        failover_s = group.wait_failover(old_master)
        group.restart_replica()  # the old master comes back as the new master's replica
        load.run_until(35)
        wait_until(lambda: load.count() >= 35, 120, "jobs after the failover")

        group.replica.signal(signal.SIGKILL)  # no replica acknowledges a submit now
        refused_before, acked_before = len(load.refused), load.count()
        load.run_until(42)
        wait_until(lambda: len(load.refused) >= refused_before + 2, 60, "submits refused without a replica")
        acked_without_replica = load.count() - acked_before
        group.restart_replica()
        wait_until(lambda: load.count() >= 42, 120, "jobs once the replica is back")
        load.finish()

        streams = {job_id: future.result(timeout=240) for job_id, future in load.readers.items()}
        results = {job_id: client.job(job_id).wait(timeout=240) for job_id in load.acked}
        keys = client.keys
        lost = [j for j, r in results.items() if r.state != "done"]
        finals = {j: sum(1 for _, f in client.redis.xrange(keys.results(j)) if f.get(b"type") == b"final")
                  for j in load.acked}
        seen_twice = 0
        for job_id, chunks in streams.items():
            seen_twice += len(chunks) - len({c.seq for c in chunks})
            assert [c.seq for c in chunks] == list(range(len(chunks))), job_id
            assert b"".join(c.pcm for c in chunks) == Path(results[job_id].url.removeprefix("file://")).read_bytes(), job_id

        (worker,) = farm.workers
        beat = next(info for name, info in client.workers().items() if info.get("pid") == worker.proc.pid)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        status = subprocess.run([sys.executable, "-m", "cli", "status"], capture_output=True, text=True,
                                timeout=60, cwd=ROOT, env={**os.environ, **farm.env})
        assert status.returncode == 0, status.stderr
        master = f"127.0.0.1:{group.master.port}"
        assert lost == [] and all(n == 1 for n in finals.values()), (lost, finals)
        assert seen_twice == 0
        assert beat["redis_master"] == master and beat["redis_failovers"] == 1, beat
        assert "ttsfarm_redis_master_changes_total 1.0" in metrics
        assert f'ttsfarm_redis_master_info{{address="{master}"}} 1.0' in metrics
        assert acked_without_replica == 0
        assert f"master {master}" in status.stdout and "2/3 sentinels answer" in status.stdout
        assert "failovers followed by workers 1" in status.stdout and "replicas 1" in status.stdout
        result("failover", jobs=len(load.acked), lost=len(lost), duplicate_chunks_seen=seen_twice,
               chunks=sum(len(c) for c in streams.values()), failover_s=round(failover_s, 2),
               submits_refused=len(load.refused), worker_failovers=beat["redis_failovers"])
    finally:
        if load is not None:
            load.finish(wait=False)
        farm.stop()
        group.stop()


def _client(group: SentinelGroup, prefix: str, wait_replicas: int) -> Client:
    env = {**group.env, "TTSFARM_REDIS_KEY_PREFIX": prefix, "TTSFARM_REDIS_WAIT_REPLICAS": str(wait_replicas),
           "TTSFARM_REDIS_WAIT_TIMEOUT_MS": "300"}
    return Client.from_url(settings=load_settings(env=env))


def test_without_wait_a_failover_loses_acknowledged_jobs() -> None:
    group = SentinelGroup().start()
    try:
        unsafe, safe = _client(group, "nowait", 0), _client(group, "wait", 1)
        before = [safe.submit(f"Kept {i}.", voice="joe", job_id=f"kept-{i:03d}").id for i in range(3)]
        group.replica.signal(signal.SIGSTOP)  # the replica stops reading; the master queues what it must send
        unsafe.redis.set("ballast", b"x" * (32 << 20))  # more than the sockets' buffers hold: the rest waits
        acked_unsafe = [unsafe.submit(f"Lost {i}.", voice="joe", job_id=f"lost-{i:03d}").id for i in range(5)]
        refused = 0
        for i in range(2):
            with pytest.raises(TransientError) as caught:
                safe.submit(f"Refused {i}.", voice="joe", job_id=f"refused-{i:03d}")
            assert caught.value.detail["job_id"] == f"refused-{i:03d}"
            refused += 1
        old_master = group.master.port
        group.master.signal(signal.SIGKILL)
        group.replica.signal(signal.SIGCONT)
        failover_s = group.wait_failover(old_master)
        gone = [j for j in acked_unsafe if not _exists(unsafe, j)]
        kept = [j for j in before if _exists(safe, j)]
        assert kept == before  # acknowledged after WAIT: all there
        assert gone == acked_unsafe  # acknowledged without WAIT: every one lost with the master
        result("failover_without_wait", acked_without_wait=len(acked_unsafe), lost_without_wait=len(gone),
               acked_with_wait=len(before), lost_with_wait=len(before) - len(kept), refused_with_wait=refused,
               failover_s=round(failover_s, 2))
    finally:
        group.stop()


def _exists(client: Client, job_id: str) -> bool:
    for _ in range(100):  # the first commands after a failover may still meet the switch
        try:
            client.job(job_id).status()
            return True
        except TransientError:
            time.sleep(0.1)
        except LookupError:
            return False
        except Exception as exc:
            if type(exc).__name__ in ("ConnectionError", "TimeoutError", "MasterNotFoundError"):
                time.sleep(0.1)
                continue
            raise
    raise AssertionError(f"could not read job {job_id} after the failover")


def test_the_asyncio_client_follows_the_failover_with_wait() -> None:
    """The asyncio face (the gateway's): its admission waits for the replica in the same round trip, and it reads
    the job through the new master after the old one is killed."""
    import asyncio

    from producer.aio import AsyncClient

    group = SentinelGroup().start()

    async def scenario() -> tuple[str, str, int]:
        env = {**group.env, "TTSFARM_REDIS_KEY_PREFIX": "aio", "TTSFARM_REDIS_WAIT_REPLICAS": "1"}
        async with AsyncClient.from_url(settings=load_settings(env=env)) as client:
            job = await client.submit("Read through the new master.", voice="joe", job_id="aio-job-0001")
            before = (await job.status()).state
            first = client.broker.master()
            old = group.master.port
            assert first == f"127.0.0.1:{old}"
            group.master.signal(signal.SIGKILL)
            await asyncio.to_thread(group.wait_failover, old)
            for _ in range(100):
                try:
                    after = (await (await client.job(job.id)).status()).state
                    break
                except TransientError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("the job could not be read after the failover")
            assert client.broker.master() == f"127.0.0.1:{group.master.port}"
            return before, after, client.broker.master_changes

    try:
        before, after, changes = asyncio.run(scenario())
        assert before == after == "queued"
        assert changes == 1
    finally:
        group.stop()
