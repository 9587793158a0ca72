"""`ttsfarm bench`: a load generator against a farm, measuring what a streaming client sees.

Jobs come from a text mix (short interactive English sentences, English paragraphs on the bulk lane,
short Chinese sentences) and are submitted either open loop, at Poisson arrivals of a target rate, or
closed loop, at a fixed number of jobs in flight. One reader thread follows every live job's results
stream with a single multi-key XREAD, so the first chunk of each job is timed as a client would see it.
After a job ends its status record gives the queue time (``started - created``) and the batch of each
segment (``batch:{seg}``); a sampler reads the workers' RSS and CPU time from /proc.

The bench can start its own redis-server and N workers (``producer.local``) or use a running farm
(``--redis URL``). Summaries, JSON and plots are made by ``producer.bench_report``.

Latency is measured from each job's *scheduled* arrival, not from when the submitter got round to it,
so a slow submitter cannot hide queueing (no coordinated omission); the submit lag is reported too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from pipeline.errors import OverloadedError, TTSFarmError
from pipeline.settings import Settings, load_settings
from producer.contract import Keys
from producer.reader import ResultsReader
from producer.status import decode_status

log = logging.getLogger(__name__)

# -- the text mix ----------------------------------------------------------------------------------
SHORT_EN = (
    "Good morning.",
    "Your table is ready.",
    "The meeting starts in five minutes.",
    "Please turn left at the next corner.",
    "Thank you for calling, how can I help you today?",
    "The package was delivered to your front door.",
    "It will rain this afternoon, so take an umbrella.",
    "Can you hear me now?",
    "Your battery is almost empty.",
    "The next train to the airport leaves from platform two.",
    "I found three restaurants near you.",
    "Set a timer for ten minutes.",
    "The store closes at nine tonight.",
    "Your order has shipped and should arrive on Tuesday.",
    "Sorry, I did not catch that.",
    "Traffic is light on the way home.",
    "She smiled and opened the window.",
    "The water is boiling.",
    "Remember to call your sister tomorrow.",
    "All systems are running normally.",
)
PARAGRAPHS_EN = (
    ("The old lighthouse stood at the edge of the cliff for more than a century. Every night its lamp turned slowly, "
    "sweeping the dark water with a pale beam. Sailors far out at sea looked for it and knew they were close to home."),
    ("Our quarterly results were better than expected. Revenue grew in every region, and costs stayed flat. "
    "The board will meet next week to decide how much of the surplus to invest in new equipment."),
    ("To reset the device, hold the power button for ten seconds. Wait until the light blinks twice, then release it. "
    "The device will restart and connect to the network on its own."),
    ("The village market opens early on Saturdays. Farmers bring fresh bread, cheese, apples and honey, and the "
    "square fills with the smell of coffee. By noon most of the stalls are empty and the children play by the fountain."),
    ("Chapter one. It was a cold evening in late November when the letter arrived. Nobody in the house had seen the "
    "handwriting before. Martha turned the envelope over twice before she opened it."),
    ("Scientists have found that regular walks improve sleep and mood. Even twenty minutes a day makes a difference. "
    "The effect is strongest when the walk happens outdoors and in daylight."),
)
SHORT_ZH = (
    "今天天气很好。",
    "会议五分钟后开始。",
    "请在下一个路口左转。",
    "您的包裹已经送到了。",
    "下午可能会下雨，记得带伞。",
    "我没有听清楚，请再说一遍。",
    "下一班火车从二号站台出发。",
    "附近有三家餐厅。",
    "商店晚上九点关门。",
    "谢谢您的耐心等待。",
    "电池电量不足。",
    "明天记得给妈妈打电话。",
)


@dataclass(frozen=True)
class JobKind:
    name: str
    lane: str
    voice: str
    texts: tuple[str, ...]


KINDS = {
    "en_short": JobKind("en_short", "interactive", "joe", SHORT_EN),
    "en_paragraph": JobKind("en_paragraph", "bulk", "joe", PARAGRAPHS_EN),
    "zh_short": JobKind("zh_short", "interactive", "kumo", SHORT_ZH),
}
MIXES: dict[str, dict[str, float]] = {
    "mixed": {"en_short": 0.6, "en_paragraph": 0.2, "zh_short": 0.2},
    "en": {"en_short": 0.75, "en_paragraph": 0.25},
    "en_short": {"en_short": 1.0},
    "en_paragraph": {"en_paragraph": 1.0},
    "zh": {"zh_short": 1.0},
}


@dataclass(frozen=True)
class PlannedJob:
    index: int
    kind: str
    lane: str
    voice: str
    text: str
    at_s: float = 0.0  # scheduled submit time after the start (open loop)


def make_jobs(mix: str | Mapping[str, float], n: int, *, rate: float = 0.0, seed: int = 0) -> list[PlannedJob]:
    """``n`` jobs drawn from the mix; with ``rate`` > 0 each gets a Poisson arrival time."""
    weights = MIXES[mix] if isinstance(mix, str) else dict(mix)
    rng = random.Random(seed)
    names = list(weights)
    at, jobs = 0.0, []
    for i in range(n):
        kind = KINDS[rng.choices(names, weights=[weights[k] for k in names])[0]]
        if rate > 0 and i > 0:
            at += rng.expovariate(rate)
        jobs.append(PlannedJob(i, kind.name, kind.lane, kind.voice, rng.choice(kind.texts), round(at, 6)))
    return jobs


# -- what one job went through -----------------------------------------------------------------------
@dataclass
class JobRecord:
    plan: PlannedJob
    t_sched: float = 0.0  # wall clock (time.time), the job's intended arrival
    t_submit: float = 0.0
    job_id: str = ""
    segments: int = 0
    first_chunk: float | None = None
    last_chunk: float | None = None
    ended: float | None = None
    state: str = "pending"  # pending | running | done | failed | rejected | timeout | error
    error: str = ""
    audio_s: float = 0.0
    pause_s: float = 0.0  # of audio_s, the silence added between segments
    chunks: list[tuple[float, float]] = field(default_factory=list)  # (seen at, audio seconds)
    status: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        st = self.status
        created = float(st.get("created") or self.t_submit or 0.0)
        started = st.get("started")
        batches = [str(st[k]) for k in sorted((k for k in st if k.startswith("batch:")), key=lambda k: int(k[6:]))]
        return {
            "index": self.plan.index, "kind": self.plan.kind, "lane": self.plan.lane, "voice": self.plan.voice,
            "chars": len(self.plan.text), "text": self.plan.text, "job_id": self.job_id, "segments": self.segments, "state": self.state,
            "error": self.error, "t_sched": self.t_sched, "submit_lag_ms": _ms(self.t_submit - self.t_sched),
            "first_chunk_ms": _ms(self.first_chunk - self.t_sched) if self.first_chunk else None,
            "e2e_ms": _ms(self.ended - self.t_sched) if self.ended and self.state == "done" else None,
            "queue_ms": _ms(float(started) - created) if started else None,
            "audio_s": round(self.audio_s, 4), "pause_s": round(self.pause_s, 4), "batches": batches,
        }


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class StreamWatcher(threading.Thread):
    """Follows the results streams of every live job with one XREAD; times chunks as a client sees them."""

    def __init__(self, r: redis.Redis, keys: Keys, *, on_end: Callable[[JobRecord], None], timeout_s: float,
                 cleanup: bool, storage_dir: Path | None) -> None:
        super().__init__(name="bench-reader", daemon=True)
        self.r, self.keys, self.on_end, self.timeout_s = r, keys, on_end, timeout_s
        self.cleanup, self.storage_dir = cleanup, storage_dir
        self.inbox: queue.Queue[JobRecord] = queue.Queue()
        self.live: dict[str, tuple[JobRecord, ResultsReader]] = {}
        self.closing = threading.Event()

    def add(self, rec: JobRecord) -> None:
        self.inbox.put(rec)

    def run(self) -> None:
        while not (self.closing.is_set() and not self.live and self.inbox.empty()):
            try:
                self._take_new(block=not self.live)
                if self.live:
                    self._read_once()
                    self._expire()
            except redis.RedisError as exc:  # keep following: a blip must not lose the run
                log.warning("bench reader: %s", exc)
                time.sleep(0.2)

    def _take_new(self, block: bool) -> None:
        try:
            rec = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self.live[self.keys.results(rec.job_id)] = (rec, ResultsReader(total=rec.segments))
            try:
                rec = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _read_once(self) -> None:
        reply: Any = self.r.xread({k: rd.last_id for k, (_, rd) in self.live.items()}, count=256, block=50)
        now = time.time()
        for raw_key, entries in reply or []:
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            rec, rd = self.live[key]
            for entry_id, fields in entries:
                for chunk in rd.feed(entry_id, fields):
                    seconds = len(chunk.pcm) / 2 / chunk.sample_rate
                    rec.first_chunk = rec.first_chunk or now
                    rec.last_chunk = now
                    rec.audio_s += seconds
                    rec.chunks.append((now, seconds))
            if rd.finished:
                assert rd.final is not None
                state = str(rd.final.get("state", ""))
                self._end(key, "done" if state == "done" else "failed", "" if state == "done" else str(rd.final.get("code", state)), now)

    def _expire(self) -> None:
        now = time.time()
        for key, (rec, _) in list(self.live.items()):
            if now - rec.t_sched > self.timeout_s:
                self._end(key, "timeout", f"not finished after {self.timeout_s:.0f} s", now)

    def _end(self, key: str, state: str, error: str, now: float) -> None:
        rec, _ = self.live.pop(key)
        rec.state, rec.error, rec.ended = state, error, now
        status_key = self.keys.status(rec.job_id)
        rec.status = decode_status(self.r.hgetall(status_key))
        if self.cleanup:
            self.r.delete(key, status_key)
            if self.storage_dir is not None:
                shutil.rmtree(self.storage_dir / rec.job_id, ignore_errors=True)
        self.on_end(rec)


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
        from producer.local import RedisServer, WorkerProcess

        self.server = RedisServer().start()
        full_env = {"TTSFARM_REDIS_URL": self.server.url, "TTSFARM_REDIS_KEY_PREFIX": self.prefix,
                    "TTSFARM_STORAGE_BACKEND": "local", "TTSFARM_STORAGE_LOCAL_DIR": str(self.root / "storage"),
                    "TTSFARM_STORAGE_PREFIX": "ttsfarm", **self.env}
        self.env = full_env
        for i in range(self.workers):
            w = WorkerProcess(f"bench{i}-{os.getpid()}@local", full_env, log_path=self.root / f"worker{i}.log").start()
            self.procs.append(w)
        for w in self.procs:
            w.wait_ready(self.server.url, self.prefix, timeout=timeout)
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
               precision: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``TTSFARM_*`` variables of a worker configuration."""
    env = {"TTSFARM_RUNTIME_DEVICE": "cpu"}
    if threads is not None:
        env["TTSFARM_RUNTIME_INTRA_OP_THREADS"] = str(threads)
    if max_batch is not None:
        env["TTSFARM_QUEUE_MAX_BATCH_CPU"] = str(max_batch)
    if inference_threads is not None:
        env["TTSFARM_QUEUE_INFERENCE_THREADS"] = str(inference_threads)
    if precision is not None:
        env["TTSFARM_RUNTIME_PRECISION"] = precision
    env.update(extra or {})
    return env


def farm_worker_pids(r: redis.Redis, keys: Keys) -> list[int]:
    """Pids of serving workers from their heartbeats (readable here only for workers on this host)."""
    pids = []
    for value in r.hgetall(keys.workers()).values():
        info = json.loads(value)
        if info.get("state") == "serving" and time.time() - float(info.get("ts", 0)) < 30:
            pids.append(int(info["pid"]))
    return [p for p in pids if Path(f"/proc/{p}").exists()]


# -- one load phase --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadSpec:
    mix: str = "mixed"
    rate: float = 0.0  # jobs/s, Poisson; 0 = closed loop
    concurrency: int = 4  # jobs in flight (closed loop)
    duration_s: float = 60.0  # stop submitting after this
    max_jobs: int = 1_000_000
    seed: int = 0
    timeout_s: float = 300.0  # a job not finished this long after its arrival counts as timed out
    drain_s: float = 300.0


def run_load(settings: Settings, spec: LoadSpec, *, pids: Callable[[], list[int]] = list, cleanup: bool = True,
             storage_dir: Path | None = None, sample_every_s: float = 1.0, plans: list[PlannedJob] | None = None,
             on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Submit jobs as ``spec`` says (or exactly ``plans``), follow them to the end, return the raw measurements."""
    from producer.client import Client

    client = Client.from_url(settings=settings)
    keys = Keys(settings.redis.key_prefix)
    reader_conn = redis.Redis.from_url(settings.redis.url, socket_timeout=30)
    closed = spec.rate <= 0
    n = spec.max_jobs if closed else min(spec.max_jobs, max(1, int(spec.rate * spec.duration_s * 1.5) + 10))
    plans = plans if plans is not None else make_jobs(spec.mix, n, rate=spec.rate, seed=spec.seed)
    slots = threading.Semaphore(max(1, spec.concurrency))
    pause_cache: dict[tuple[str, str], float] = {}

    def pauses(p: PlannedJob) -> float:
        """Seconds of silence the farm adds between the job's segments (not model output)."""
        key = (p.text, p.voice)
        if key not in pause_cache:
            from pipeline.synth import plan

            pause_cache[key] = sum(s.segment.pause_after_s for s in plan(p.text, p.voice, settings))
        return pause_cache[key]

    records: list[JobRecord] = []
    ended: list[JobRecord] = []

    def on_end(rec: JobRecord) -> None:
        ended.append(rec)
        if closed:
            slots.release()
        if on_progress:
            on_progress(len(ended))

    watcher = StreamWatcher(reader_conn, keys, on_end=on_end, timeout_s=spec.timeout_s, cleanup=cleanup, storage_dir=storage_dir)
    sampler = ProcSampler(pids, sample_every_s)
    watcher.start()
    sampler.sample()
    sampler.start()
    t0 = time.time()
    for p in plans:
        if closed:
            got = False
            while not got and time.time() - t0 < spec.duration_s:
                got = slots.acquire(timeout=0.2)
            if not got:
                break
            sched = time.time()
        else:
            if p.at_s >= spec.duration_s:
                break
            sched = t0 + p.at_s
            delay = sched - time.time()
            if delay > 0:
                time.sleep(delay)
        rec = JobRecord(plan=p, t_sched=sched, t_submit=time.time(), pause_s=pauses(p))
        records.append(rec)
        try:
            job = client.submit(p.text, voice=p.voice, lane=p.lane, format="wav")
        except OverloadedError as exc:
            rec.state, rec.error = "rejected", exc.code
            on_end(rec)
            continue
        except TTSFarmError as exc:
            rec.state, rec.error = "error", f"{exc.code}: {exc.message}"
            on_end(rec)
            continue
        rec.job_id, rec.segments, rec.state = job.id, job.total, "running"
        watcher.add(rec)
    t_stop = time.time()
    watcher.closing.set()
    watcher.join(spec.drain_s)
    sampler.stop()
    client.close()
    return {"t0": t0, "t_stop_submit": t_stop, "t_end": time.time(), "records": records, "proc_samples": sampler.samples,
            "closed_loop": closed, "spec": dataclasses.asdict(spec)}


# -- the command -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchConfig:
    redis_url: str = ""  # empty: start a redis-server and workers of our own
    workers: int = 1
    threads: int | None = None
    inference_threads: int | None = None
    max_batch: int | None = None
    precision: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    load: LoadSpec = field(default_factory=LoadSpec)
    saturate_s: float = 0.0  # > 0: first find the saturation rate (closed loop), then load at ``load_fraction`` of it
    saturate_concurrency: int = 0
    load_fraction: float = 0.7
    warmup_jobs: int = 4
    label: str = ""


def run_bench(config: BenchConfig, *, base: Settings | None = None) -> dict[str, Any]:
    """One bench: optionally a farm of our own, a warm-up, an optional saturation phase, the load phase."""
    from producer.bench_report import summarize

    base = base or load_settings(env=dict(os.environ))
    farm: LocalFarm | None = None
    load_before = list(os.getloadavg())
    foreign = ForeignLoad()
    try:
        if config.redis_url:
            settings = base.replace(redis={"url": config.redis_url})
            r = redis.Redis.from_url(config.redis_url)
            keys = Keys(settings.redis.key_prefix)
            pids: Callable[[], list[int]] = lambda: farm_worker_pids(r, keys)
            storage_dir = None
        else:
            env = worker_env(threads=config.threads, max_batch=config.max_batch, inference_threads=config.inference_threads,
                             precision=config.precision, extra=config.env)
            farm = LocalFarm(workers=config.workers, env=env).start()
            settings = base.replace(redis={"url": farm.url, "key_prefix": farm.prefix})
            pids = farm.pids
            storage_dir = farm.storage_dir
        started = time.time()
        if config.warmup_jobs:
            run_load(settings, dataclasses.replace(config.load, rate=0.0, concurrency=2, duration_s=600, max_jobs=config.warmup_jobs,
                                                   mix="mixed" if config.load.mix == "mixed" else config.load.mix),
                     storage_dir=storage_dir)
        phases: dict[str, Any] = {}
        load = config.load
        if config.saturate_s > 0:
            conc = config.saturate_concurrency or max(4, 3 * config.workers * (config.inference_threads or 1) * (config.max_batch or 1))
            sat_spec = dataclasses.replace(load, rate=0.0, concurrency=conc, duration_s=config.saturate_s, seed=load.seed + 1)
            sat = summarize(run_load(settings, sat_spec, pids=pids, storage_dir=storage_dir))
            phases["saturation"] = sat
            capacity = sat["throughput"]["jobs_per_s_drained"] or sat["throughput"]["jobs_per_s"]
            load = dataclasses.replace(load, rate=round(config.load_fraction * capacity, 4))
        phases["load"] = summarize(run_load(settings, load, pids=pids, storage_dir=storage_dir))
        for summary in phases.values():
            add_padding_waste(summary, settings)
        result = {
            "label": config.label,
            "config": {**dataclasses.asdict(config), "load": dataclasses.asdict(load)},
            "worker_env": dict(farm.env) if farm else {},
            "farm": "local" if farm else config.redis_url.split("@")[-1],
            "elapsed_s": round(time.time() - started, 2),
            "load_average_before": load_before,
            "load_average_after": list(os.getloadavg()),
            "phases": phases,
        }
    finally:
        if farm is not None:
            farm.stop()
    # after the workers have been waited for, so their CPU time counts as ours
    result["contamination"] = foreign.result()
    return result


def add_padding_waste(summary: dict[str, Any], settings: Settings) -> None:
    """Fill ``padding_waste`` when some batch held more than one segment (phonemizes those segments)."""
    from producer.bench_report import padding_waste

    if not any(int(size) > 1 for size in summary["batch_sizes"]):
        summary["padding_waste"] = {"batches": 0, "mean": None, "note": "no batch held more than one segment"}
        return
    from collections import Counter

    from pipeline.synth import plan
    from pipeline.voices.bank import VoiceBank

    rows = [r for r in summary["per_job"] if r["state"] == "done"]
    shared = {b for b, n in Counter(b for r in rows for b in r["batches"]).items() if n > 1}
    bank = VoiceBank(settings.catalogue, settings.runtime)
    texts = {r["job_id"]: r for r in rows if shared.intersection(r["batches"])}
    lengths: dict[tuple[str, int], int] = {}
    for job_id, row in texts.items():
        for seg, planned in enumerate(plan(row["text"], row["voice"], settings)):
            if row["batches"][seg] in shared:
                voice = bank.get(planned.voice, load=False)
                lengths[(job_id, seg)] = len(voice.phonemize(planned.segment.text, planned.segment.lang).ids)
    summary["padding_waste"] = padding_waste(rows, lengths)


def main(args: Any) -> int:
    """Entry of ``ttsfarm bench`` (producer/cli.py builds ``args``)."""
    from producer.bench_report import markdown_summary, write_results

    env = dict(kv.split("=", 1) for kv in args.set or [])
    load = LoadSpec(mix=args.mix, rate=args.rate, concurrency=args.concurrency, duration_s=args.duration,
                    max_jobs=args.jobs, seed=args.seed, timeout_s=args.job_timeout)
    config = BenchConfig(redis_url=args.bench_redis or args.redis or "", workers=args.workers, threads=args.threads,
                         inference_threads=args.inference_threads, max_batch=args.max_batch, precision=args.precision, env=env,
                         load=load, saturate_s=args.saturate, load_fraction=args.load_fraction, warmup_jobs=args.warmup_jobs,
                         label=args.label)
    result = run_bench(config)
    result["command"] = "ttsfarm " + " ".join(args.argv)
    out = write_results(result, Path(args.out), plots=not args.no_plots)
    print(markdown_summary(result))
    print(f"results in {out}")
    return 0
