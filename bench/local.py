"""The machine side of ``ttsfarm bench``: a farm of our own (``LocalFarm``, ``worker_env``), the pids of a
running farm's workers, the workers' RSS and CPU time from /proc, and whether anyone else is using the machine.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from wire.broker import AdminBroker, run_blocking

log = logging.getLogger(__name__)

# -- worker memory and CPU ---------------------------------------------------------------------------
def proc_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def family(pid: int) -> list[int]:
    """``pid`` and the processes it started, and theirs (a worker's finisher processes), as they are now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except (OSError, ValueError):
                pass
    return out


class ProcSampler(threading.Thread):
    """RSS (MB) and CPU seconds of the given processes every ``every_s``."""

    def __init__(self, pids: Callable[[], list[int]], every_s: float = 1.0) -> None:
        super().__init__(name="bench-rss", daemon=True)
        self.pids, self.every_s = pids, every_s
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def sample(self) -> None:
        rss: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for pid in self.pids():
            mb, sec = proc_rss_mb(pid), proc_cpu_s(pid)
            if mb is not None:
                rss[str(pid)] = round(mb, 2)
            if sec is not None:
                cpu[str(pid)] = round(sec, 2)
        self.samples.append({"t": time.time(), "rss_mb": rss, "cpu_s": cpu})

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)
        self.sample()


class RedisSampler(threading.Thread):
    """The farm's Redis every ``every_s``: key count, memory, keys without a TTL (by kind), stream lengths.

    Keys are grouped into kinds by replacing each job id with ``<id>`` (``bench:results:<id>``), so a soak
    shows whether the per-job keys plateau once the TTL policy expires them and whether anything grows
    without an expiry (queue streams, dead letters, registries)."""

    def __init__(self, url: str, every_s: float = 10.0) -> None:
        super().__init__(name="bench-redis", daemon=True)
        self.r = redis.Redis.from_url(url, socket_timeout=30)
        self.every_s = every_s
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def sample(self) -> None:
        info = self.r.info("memory")
        kinds: dict[str, int] = {}
        no_ttl: dict[str, int] = {}
        streams: dict[str, int] = {}
        batch: list[bytes] = []

        def flush() -> None:
            pipe = self.r.pipeline(transaction=False)
            for k in batch:
                pipe.ttl(k)
                pipe.type(k)
            res = pipe.execute()
            for k, ttl, kind in zip(batch, res[0::2], res[1::2]):
                name = _key_kind(k.decode(errors="replace"))
                kinds[name] = kinds.get(name, 0) + 1
                if ttl == -1:
                    no_ttl[name] = no_ttl.get(name, 0) + 1
                    if kind == b"stream":
                        streams[name] = streams.get(name, 0) + int(self.r.xlen(k))
            batch.clear()

        for key in self.r.scan_iter(count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                flush()
        if batch:
            flush()
        self.samples.append({"t": time.time(), "keys": sum(kinds.values()), "used_memory_mb": round(info["used_memory"] / 2**20, 2),
                             "kinds": kinds, "no_ttl": no_ttl, "stream_entries_no_ttl": streams})

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            try:
                self.sample()
            except redis.RedisError as exc:  # the server going away at the end of a run is not a finding
                log.warning("redis sample failed: %s", exc)

    def stop(self) -> None:
        self.stopped.set()
        self.join(60)


_ID = re.compile(r"[A-Za-z0-9_-]{16,}")


def _key_kind(key: str) -> str:
    """``bench:results:Zx3…`` -> ``bench:results:<id>``: job, book and run ids are 16+ URL-safe characters."""
    return ":".join("<id>" if _ID.fullmatch(part) else part for part in key.split(":"))


# -- is anyone else using the machine? -----------------------------------------------------------------
def machine_busy_s() -> float:
    """CPU seconds all cores have spent busy since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for (our workers, redis)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class ForeignLoad:
    """CPU time spent during a measurement by processes that are not ours: contamination, in core-seconds."""

    def __init__(self) -> None:
        self.machine0, self.own0, self.t0 = machine_busy_s(), own_cpu_s(), time.monotonic()

    def result(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        foreign = max(0.0, (machine_busy_s() - self.machine0) - (own_cpu_s() - self.own0))
        return {"wall_s": round(wall, 1), "foreign_cpu_s": round(foreign, 1), "foreign_cores": round(foreign / max(wall, 1e-9), 3)}


def wait_quiet(max_load: float = 0.8, *, idle_cores: float = 0.1, wait_max_s: float = 2400.0, poll_s: float = 30.0) -> dict[str, Any]:
    """Wait (bounded) until the 1-minute load average is below ``max_load`` or, when our own previous run
    is what keeps it up, until the machine has been nearly idle (< ``idle_cores`` busy) for 10 s."""
    start = time.monotonic()
    while True:
        busy0 = machine_busy_s()
        time.sleep(10)
        busy = (machine_busy_s() - busy0) / 10
        load = os.getloadavg()[0]
        if load < max_load or busy < idle_cores:
            return {"waited_s": round(time.monotonic() - start), "load_1m": round(load, 2), "busy_cores_10s": round(busy, 3), "quiet": True}
        if time.monotonic() - start > wait_max_s:
            return {"waited_s": round(time.monotonic() - start), "load_1m": round(load, 2), "busy_cores_10s": round(busy, 3), "quiet": False}
        log.info("machine busy (load %.2f, %.2f cores busy): waiting", load, busy)
        time.sleep(max(0.0, poll_s - 10))


# -- an S3 server of our own ----------------------------------------------------------------------------
@dataclass
class MotoServer:
    """A private moto S3 server on a free port, for benches that store as a deployment does (``stop`` ends it).
    Its objects live in its memory. Its server (werkzeug's) closes every connection after one request, so a client
    pays a TCP connect per object (~0.1 ms), where S3 would keep it open but charge TLS."""

    port: int = 0
    proc: Any = None
    bucket: str = "ttsfarm-bench"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The ``TTSFARM_*`` and AWS settings a worker stores into it with (create the bucket with ``start``)."""
        return {"TTSFARM_STORAGE_BACKEND": "s3", "TTSFARM_STORAGE_S3_BUCKET": self.bucket,
                "TTSFARM_STORAGE_S3_ENDPOINT_URL": self.url, "TTSFARM_STORAGE_S3_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self, timeout: float = 30.0) -> MotoServer:
        from bench.processes import free_port

        self.port = self.port or free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the moto S3 server did not start on port {self.port}") from None
                time.sleep(0.1)
        import boto3  # only a bench that stores into S3 loads it

        boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench").client(
            "s3", endpoint_url=self.url, region_name="us-east-1").create_bucket(Bucket=self.bucket)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - a server that will not end is killed
                self.proc.kill()


# -- a farm of our own ---------------------------------------------------------------------------------
@dataclass
class LocalFarm:
    """A private redis-server and ``workers`` Celery worker processes with the given ``TTSFARM_*`` env."""

    workers: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ttsfarm-bench-")))
    prefix: str = "bench"

    def __post_init__(self) -> None:
        self.server: Any = None
        self.procs: list[Any] = []

    @property
    def storage_dir(self) -> Path:
        return self.root / "storage" / "ttsfarm"

    def start(self, timeout: float = 180.0) -> LocalFarm:
        from bench.processes import RedisServer, WorkerProcess

        self.server = RedisServer().start()
        full_env = {"TTSFARM_REDIS_URL": self.server.url, "TTSFARM_REDIS_KEY_PREFIX": self.prefix,
                    "TTSFARM_STORAGE_BACKEND": "local", "TTSFARM_STORAGE_LOCAL_DIR": str(self.root / "storage"),
                    "TTSFARM_STORAGE_PREFIX": "ttsfarm", **self.env}
        self.env = full_env
        try:
            for i in range(self.workers):
                w = WorkerProcess(f"bench{i}-{os.getpid()}@local", full_env, log_path=self.root / f"worker{i}.log").start()
                self.procs.append(w)
            for w in self.procs:
                w.wait_ready(self.server.url, self.prefix, timeout=timeout)
        except BaseException:  # a worker that never served: nothing of this farm outlives the failed start
            self.stop()
            raise
        return self

    @property
    def url(self) -> str:
        return str(self.server.url)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.procs if w.proc is not None]

    def stop(self) -> None:
        for w in self.procs:
            w.stop(timeout=30)
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def worker_env(*, threads: int | None = None, max_batch: int | None = None, inference_threads: int | None = None,
               interactive_loops: int | None = None, precision: str | None = None,
               extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``TTSFARM_*`` variables of a worker configuration (None: the setting's default)."""
    env = {"TTSFARM_RUNTIME_DEVICE": "cpu"}
    if threads is not None:
        env["TTSFARM_RUNTIME_INTRA_OP_THREADS"] = str(threads)
    if max_batch is not None:
        env["TTSFARM_QUEUE_MAX_BATCH_CPU"] = str(max_batch)
    if inference_threads is not None:
        env["TTSFARM_QUEUE_INFERENCE_THREADS"] = str(inference_threads)
    if interactive_loops is not None:
        env["TTSFARM_QUEUE_INTERACTIVE_LOOPS"] = str(interactive_loops)
    if precision is not None:
        env["TTSFARM_RUNTIME_PRECISION"] = precision
    env.update(extra or {})
    return env


def farm_worker_pids(broker: AdminBroker) -> list[int]:
    """Pids of serving workers from their heartbeats (readable here only for workers on this host)."""
    pids = []
    for info in run_blocking(broker, broker.read_heartbeats()).values():
        if info.get("state") == "serving" and time.time() - float(info.get("ts", 0)) < 30:
            pids.append(int(info["pid"]))
    return [p for p in pids if Path(f"/proc/{p}").exists()]
