"""One load phase of ``ttsfarm bench``: the text mix, what one job went through, and ``run_load``.

Jobs come from a text mix (short interactive English sentences, English paragraphs on the bulk lane,
short Chinese sentences) and are submitted either open loop, at Poisson arrivals of a target rate, or
closed loop, at a fixed number of jobs in flight. One reader thread follows every live job's results
stream with a single multi-key XREAD, so the first chunk of each job is timed as a client would see it.
After a job ends its status record gives the queue time (``started - created``) and the batch of each
segment (``batch:{seg}``).

Latency is measured from each job's *scheduled* arrival, not from when the submitter got round to it,
so a slow submitter cannot hide queueing (no coordinated omission); the submit lag is reported too.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import random
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from pipeline.errors import TTSFarmError
from bench.local import ProcSampler
from producer.reader import ResultsReader
from wire.errors import OverloadedError
from wire.keys import Keys
from wire.records import text_of
from wire.settings import Settings
from wire.status import JobStatus

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
    "zh_short": JobKind("zh_short", "interactive", "default", SHORT_ZH),  # the voice Chinese is routed to (baker when its gate passes)
    "zh_short_baker": JobKind("zh_short_baker", "interactive", "baker", SHORT_ZH),  # the native two-stage voice, named
}
MIXES: dict[str, dict[str, float]] = {
    "mixed": {"en_short": 0.6, "en_paragraph": 0.2, "zh_short": 0.2},
    "en": {"en_short": 0.75, "en_paragraph": 0.25},
    "en_short": {"en_short": 1.0},
    "en_paragraph": {"en_paragraph": 1.0},
    "zh": {"zh_short": 1.0},
    "zh_short_baker": {"zh_short_baker": 1.0},
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
        underrun_count, underrun_s = underruns(self.chunks)
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
            # the first segment's way: waiting in its stream, then in the claiming loop, then its model and publish
            "claim_ms": _ms(float(st["claimed"]) - created) if st.get("claimed") else None,
            "held_ms": _ms(float(started) - float(st["claimed"])) if started and st.get("claimed") else None,
            "model_ms": _ms(float(st["first_chunk"]) - float(started)) if started and st.get("first_chunk") else None,
            "loop": str(st.get("worker") or ""),
            "audio_s": round(self.audio_s, 4), "pause_s": round(self.pause_s, 4), "batches": batches,
            "underruns": underrun_count, "underrun_s": round(underrun_s, 4),
        }


def underruns(chunks: Sequence[tuple[float, float]], *, tolerance_s: float = 0.001) -> tuple[int, float]:
    """The listener's view of one job: it starts to play at its first chunk and plays in real time; whenever the next
    chunk (``(seen at, audio seconds)``, in playing order) comes after everything before it has played, the listener
    had nothing to play (an underrun) and resumes when it comes. Returns (underruns, seconds without audio)."""
    count, silent = 0, 0.0
    play_end: float | None = None
    for seen, seconds in chunks:
        if play_end is None:
            play_end = seen + seconds
            continue
        if seen > play_end + tolerance_s:
            count += 1
            silent += seen - play_end
            play_end = seen
        play_end += seconds
    return count, silent


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
            key = text_of(raw_key)
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
        st = JobStatus.from_fields(rec.job_id, self.r.hgetall(status_key))
        rec.status = st.to_dict() if st else {}
        if self.cleanup:
            self.r.delete(key, status_key)
            if self.storage_dir is not None:
                shutil.rmtree(self.storage_dir / rec.job_id, ignore_errors=True)
        self.on_end(rec)


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
