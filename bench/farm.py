"""The farm against its baselines, on the same texts and the same cores: the numbers of docs/lab/cpu-layout-and-throughput.md.

    ttsfarm bench farm --stages ceiling,piper,farm,latency,scaling,length,longrun [--out bench-results/farm]

Stages (each writes ``<out>/<stage>.json`` with the 1-minute load average before and after it):

* ``ceiling``  joe as the workers serve it (its prepared stages) in this process, phoneme ids ready, on every
               segment of the English workload: batch 1/4/8 (items sorted by length) at 1 and 2 intra-op threads,
               and two processes of one thread each; FP32 and INT8. The best row is the ceiling.
* ``piper``    piper-tts's own API, sequential: ``piper.PiperVoice.load`` + ``synthesize`` per job text.
* ``farm``     the farm (own redis-server + workers) on the same jobs, closed loop, batching off (max
               batch 1) and on (max batch 8), FP32 and INT8.
* ``latency``  the mixed workload: saturation first (closed loop), then Poisson arrivals at 70 % of it.
* ``scaling``  saturation throughput with 1, 2 and 4 worker processes.
* ``length``   one bulk job of 1, 4, 16 and 64 paragraphs: time, worker RSS, Redis memory.
* ``longrun``  the soak: ``--longrun-jobs`` short jobs (at most ``--longrun-s`` s) with a short job TTL: worker RSS
               after warm-up, Redis keys (per-job plateau, keys without a TTL, what is left after expiry).
* ``scheduling`` FIFO vs deadline scheduling side by side at 50/70/90/100 % of saturation (``bench.scheduling``).

Audio is compared as *speech* seconds (model output, without the pauses the farm inserts between
segments), so the farm and the in-process baselines count the same thing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.processes import inherited_env
from bench.report import summarize, write_results
from bench.run import (
    PARAGRAPHS_EN,
    BenchConfig,
    ForeignLoad,
    LoadSpec,
    LocalFarm,
    PlannedJob,
    make_jobs,
    run_bench,
    run_load,
    wait_quiet,
    worker_env,
)
from bench.scheduling import add_arguments as scheduling_arguments
from bench.scheduling import stage_scheduling
from wire.settings import Settings, settings_from_environment

log = logging.getLogger(__name__)
WORKLOAD = {"mix": "en", "jobs": 40, "seed": 11}
# the layouts measured here are workers x intra-op threads with one loop each, nothing reserved (the numbers in
# docs/lab/cpu-layout-and-throughput.md were taken so, before the defaults became one loop per core plus a reserved one)
PLAIN: dict[str, Any] = {"inference_threads": 1, "interactive_loops": 0}


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def workload_jobs() -> list[PlannedJob]:
    return make_jobs(WORKLOAD["mix"], WORKLOAD["jobs"], seed=WORKLOAD["seed"])


def workload_ids(settings: Settings, voice: Any) -> list[tuple[int, ...]]:
    from pipeline.synth import plan

    ids = []
    for job in workload_jobs():
        for p in plan(job.text, job.voice, settings):
            ids.append(voice.phonemize(p.segment.text, p.segment.lang).ids)
    return ids


def _voice(settings: Settings, precision: str, threads: int) -> Any:
    """joe as the farm's workers serve it (its prepared stages, ``precision`` asked for), on ``threads`` threads."""
    from pipeline.voices.bank import VoiceBank

    runtime = dataclasses.replace(settings.runtime, device="cpu", intra_op_threads=threads, inter_op_threads=1, warmup=False,
                                  precision=precision)
    return VoiceBank(settings.catalogue, runtime).get("joe")


def warm_up(voice: Any, ids: list[tuple[int, ...]], batch: int) -> None:
    """One batch of the widest items: the sessions' arenas grown before anything is timed."""
    from pipeline.voices.base import SynthesisOptions

    voice.synthesize_batch(sorted(ids, key=len)[-batch:], SynthesisOptions())  # the widest shape


def timed_batches(voice: Any, ids: list[tuple[int, ...]], batch: int) -> tuple[float, float]:
    """Seconds and speech seconds of ``ids`` sorted by length, in batches of ``batch`` (as length buckets form them)."""
    from pipeline.voices.base import SynthesisOptions

    opts = SynthesisOptions()
    items = sorted(ids, key=len)
    samples = 0
    start = time.perf_counter()
    for i in range(0, len(items), batch):
        samples += sum(len(a) for a in voice.synthesize_batch(items[i : i + batch], opts))
    return time.perf_counter() - start, samples / voice.sample_rate


def _child(precision: str, threads: int, batch: int, ids: list[tuple[int, ...]], barrier: Any, out: Any) -> None:
    settings = settings_from_environment()
    voice = _voice(settings, precision, threads)
    warm_up(voice, ids, batch)
    barrier.wait()
    t0 = time.perf_counter()
    spent, audio = timed_batches(voice, ids, batch)
    out.put((t0, time.perf_counter(), spent, audio))


def ceiling_row(settings: Settings, precision: str, procs: int, threads: int, batch: int, ids: list[tuple[int, ...]]) -> dict[str, Any]:
    before = loadavg()
    if procs == 1:
        voice = _voice(settings, precision, threads)
        warm_up(voice, ids, batch)
        spent, audio = timed_batches(voice, ids, batch)
        wall = spent
    else:
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(procs), ctx.Queue()
        shares = [sorted(ids, key=len)[i::procs] for i in range(procs)]
        children = [ctx.Process(target=_child, args=(precision, threads, batch, share, barrier, out)) for share in shares]
        for c in children:
            c.start()
        results = [out.get(timeout=900) for _ in children]
        for c in children:
            c.join()
        audio = sum(r[3] for r in results)
        wall = max(r[1] for r in results) - min(r[0] for r in results)  # all started together after warm-up
    row = {"precision": precision, "processes": procs, "threads": threads, "batch": batch, "items": len(ids),
           "speech_s": round(audio, 2), "wall_s": round(wall, 3), "speech_s_per_s": round(audio / wall, 3),
           "load_before": before, "load_after": loadavg()}
    log.info("ceiling %s", row)
    return row


def stage_ceiling(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    ids = workload_ids(settings, _voice(settings, "fp32", 1))
    rows = []
    for precision in ("fp32", "int8"):
        for procs, threads, batch in ((1, 2, 1), (1, 2, 4), (1, 2, 8), (1, 1, 1), (2, 1, 1), (2, 1, 4)):
            rows.append(ceiling_row(settings, precision, procs, threads, batch, ids))
    best = {p: max((r for r in rows if r["precision"] == p), key=lambda r: r["speech_s_per_s"]) for p in ("fp32", "int8")}
    return {"rows": rows, "best": best}


def stage_piper(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from piper import PiperVoice as PiperTTS

    from pipeline.voices.runtime import resolve_resource

    spec = settings.catalogue.get("joe")
    voice = PiperTTS.load(resolve_resource(spec.model), config_path=resolve_resource(str(spec.options["config"])))
    jobs = workload_jobs()
    list(voice.synthesize(jobs[0].text))  # warm-up
    samples, before = 0, loadavg()
    start = time.perf_counter()
    for job in jobs:
        for chunk in voice.synthesize(job.text):
            samples += len(chunk.audio_int16_array)
    wall = time.perf_counter() - start
    audio = samples / voice.config.sample_rate
    return {"what": "piper-tts 1.8.0 PiperVoice.load + synthesize, one job after another, default SessionOptions, FP32 model",
            "jobs": len(jobs), "speech_s": round(audio, 2), "wall_s": round(wall, 3), "speech_s_per_s": round(audio / wall, 3),
            "load_before": before, "load_after": loadavg()}


def farm_saturation(label: str, *, workers: int, threads: int, max_batch: int = 1, precision: str = "fp32",
                    inference_threads: int = 1, interactive_loops: int = 0, concurrency: int = 0, env: dict[str, str] | None = None,
                    out: Path | None = None, mix: str = "en", duration_s: float = 1e9, max_jobs: int | None = None) -> dict[str, Any]:
    """The farm closed loop on the workload jobs (or ``mix`` for ``duration_s``): the throughput side."""
    conc = concurrency or max(4, 2 * workers * inference_threads * max_batch)
    load = LoadSpec(mix=mix, concurrency=conc, duration_s=duration_s, max_jobs=max_jobs or WORKLOAD["jobs"],
                    seed=WORKLOAD["seed"], timeout_s=600)
    config = BenchConfig(workers=workers, threads=threads, max_batch=max_batch, precision=precision,
                         inference_threads=inference_threads, interactive_loops=interactive_loops, env=env or {}, load=load,
                         warmup_jobs=2, label=label)
    result = run_bench(config)
    if out is not None:
        write_results(result, out, name=label)
    s = result["phases"]["load"]
    row = {"label": label, "workers": workers, "threads": threads, "inference_threads": inference_threads,
           "max_batch": max_batch, "precision": precision, "concurrency": conc, "env": env or {},
           "jobs_done": s["jobs"]["done"], **s["throughput"], "mean_batch": s["mean_batch_size_per_segment"],
           "batch_sizes": s["batch_sizes"], "padding_waste": s["padding_waste"],
           "first_chunk_ms": s["first_chunk_ms"]["all"], "queue_ms": s["queue_ms"],
           "worker_rss_mb_max": {p: w["rss_mb_max"] for p, w in s["workers"].items()},
           "worker_cpu_util": {p: w["cpu_util"] for p, w in s["workers"].items()},
           "load_before": result["load_average_before"][0], "load_after": result["load_average_after"][0]}
    log.info("farm %s", {k: row[k] for k in ("label", "speech_s_per_s", "jobs_per_s", "mean_batch", "load_before", "load_after")})
    return row


def stage_farm(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for precision in ("fp32", "int8"):
        for max_batch in args.farm_batches:
            rows.append(farm_saturation(f"farm-{precision}-b{max_batch}", workers=args.workers, threads=args.threads,
                                        max_batch=max_batch, precision=precision, out=args.out))
    return {"layout": f"{args.workers} worker(s) x {args.threads} intra-op thread(s)", "rows": rows}


def stage_latency(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    results = {}
    for mix in args.latency_mixes.split(","):
        load = LoadSpec(mix=mix, duration_s=args.latency_s, seed=5, timeout_s=600)
        config = BenchConfig(workers=args.workers, threads=args.threads, **PLAIN, load=load, saturate_s=args.saturate_s,
                             saturate_concurrency=4 * args.workers, load_fraction=0.7, warmup_jobs=4, label=f"latency-{mix}")
        result = run_bench(config)
        write_results(result, args.out, name=f"latency-{mix}")
        results[mix] = {phase: {k: v for k, v in s.items() if k not in ("per_job", "timeline")} for phase, s in result["phases"].items()}
        results[mix]["load_before"] = result["load_average_before"][0]
        results[mix]["load_after"] = result["load_average_after"][0]
        results[mix]["rate"] = result["config"]["load"]["rate"]
    return results


def stage_scaling(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for workers, threads in ((1, 2), (2, 1), (4, 1)):
        rows.append(farm_saturation(f"scaling-{workers}w", workers=workers, threads=threads, out=args.out,
                                    concurrency=4 * workers))
    return {"rows": rows}


def _redis_used_mb(url: str) -> float:
    import redis

    return round(int(redis.Redis.from_url(url).info("memory")["used_memory"]) / 2**20, 1)


def stage_length(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    farm = LocalFarm(workers=args.workers, env=worker_env(threads=args.threads, **PLAIN, precision="fp32")).start()
    rows = []
    try:
        s = settings.replace(redis={"url": farm.url, "key_prefix": farm.prefix})
        for n in (1, 4, 16, 64):
            text = "\n\n".join(PARAGRAPHS_EN[i % len(PARAGRAPHS_EN)] for i in range(n))
            before, redis_before = loadavg(), _redis_used_mb(farm.url)
            peak = {"redis_mb": redis_before}

            def redis_peak(peak: dict[str, float] = peak) -> list[int]:
                peak["redis_mb"] = max(peak["redis_mb"], _redis_used_mb(farm.url))
                return farm.pids()

            raw = run_load(s, LoadSpec(concurrency=1, duration_s=1e9, timeout_s=3600, drain_s=3600), pids=redis_peak,
                           storage_dir=farm.storage_dir, sample_every_s=0.5,
                           plans=[PlannedJob(0, "en_book", "bulk", "joe", text)])
            summ = summarize(raw)
            job = summ["per_job"][0]
            rows.append({"paragraphs": n, "chars": len(text), "segments": job["segments"], "audio_s": job["audio_s"],
                         "state": job["state"], "first_chunk_ms": job["first_chunk_ms"], "e2e_s": round((job["e2e_ms"] or 0) / 1000, 2),
                         "worker_rss_mb": {p: {"start": w["rss_mb_start"], "max": w["rss_mb_max"], "end": w["rss_mb_end"]}
                                           for p, w in summ["workers"].items()},
                         "redis_used_mb_before": redis_before, "redis_used_mb_peak": peak["redis_mb"],
                         "load_before": before, "load_after": loadavg()})
            log.info("length %s", rows[-1])
    finally:
        farm.stop()
    return {"layout": f"{args.workers} x {args.threads}", "rows": rows}


def stage_longrun(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """The soak: ``--longrun-jobs`` short jobs (or ``--longrun-s`` seconds), closed loop, on the default layout.

    Jobs expire after ``--longrun-ttl-s`` (instead of a day) so the TTL policy's steady state is reached during
    the run: worker RSS after warm-up must stay flat, per-job Redis keys must plateau and be gone once the last
    job has expired, and nothing without a TTL may grow with the job count. The bench reader leaves every key
    to the farm's own expiry (no clean-up of its own)."""
    from bench.local import RedisSampler
    from bench.report import summarize

    ttl = args.longrun_ttl_s
    env = worker_env(threads=args.threads, precision="fp32", extra={"TTSFARM_QUEUE_JOB_TTL_S": str(ttl)})
    farm = LocalFarm(workers=args.workers, env=env).start(timeout=600)  # a busy machine loads voices slowly
    try:
        s = settings.replace(redis={"url": farm.url, "key_prefix": farm.prefix}, queue={"job_ttl_s": ttl})
        run_load(s, LoadSpec(mix="en_short", concurrency=2, duration_s=600, max_jobs=20, seed=8), storage_dir=farm.storage_dir)
        redis_sampler = RedisSampler(farm.url, every_s=args.longrun_redis_every_s)
        redis_sampler.sample()
        redis_sampler.start()
        load = LoadSpec(mix="en_short", concurrency=4 * args.workers, duration_s=args.longrun_s, max_jobs=args.longrun_jobs,
                        seed=9, timeout_s=600)
        progress = lambda n: n % 1000 == 0 and log.info("longrun: %d jobs ended", n)  # noqa: E731
        raw = run_load(s, load, pids=farm.pids, cleanup=False, storage_dir=farm.storage_dir, sample_every_s=5.0,
                       on_progress=progress)
        redis_sampler.stop()
        redis_sampler.sample()
        ended_at = time.time()
        time.sleep(ttl + 15)  # every job's keys have passed their expiry
        redis_sampler.sample()
        summ = summarize(raw)
    finally:
        farm.stop()
    return {"rss_after_warmup": rss_after(summ, args.longrun_warmup_jobs), "jobs_done": summ["jobs"]["done"],
            "jobs_submitted": summ["jobs"]["submitted"], "jobs": summ["jobs"], "seconds": summ["submit_s"],
            "throughput": summ["throughput"], "first_chunk_ms": summ["first_chunk_ms"]["all"], "ttl_s": ttl,
            "workers": {p: {k: v for k, v in w.items() if k != "series"} for p, w in summ["workers"].items()},
            "rss_series": {p: w["series"][:: max(1, len(w["series"]) // 100)] + w["series"][-1:] for p, w in summ["workers"].items()},
            "env": inherited_env("TTSFARM_", "MALLOC_"),
            "redis": redis_verdict(redis_sampler.samples, ended_at, ttl)}


def redis_verdict(samples: list[dict[str, Any]], ended_at: float, ttl: float) -> dict[str, Any]:
    """Keys over the soak: the plateau of per-job keys (halves of the run after one TTL), what has no TTL, the end."""
    during = [x for x in samples if x["t"] <= ended_at]
    t0 = during[0]["t"]
    steady = [x for x in during if x["t"] - t0 >= ttl + 30]
    half = len(steady) // 2
    first, second = steady[:half], steady[half:]
    mean = lambda xs, f: round(sum(f(x) for x in xs) / len(xs), 1) if xs else None  # noqa: E731
    no_ttl = lambda x: sum(x["no_ttl"].values())  # noqa: E731
    return {"samples": len(samples), "keys_start": during[0]["keys"], "keys_max": max(x["keys"] for x in during),
            "steady_keys_mean_first_half": mean(first, lambda x: x["keys"]),
            "steady_keys_mean_second_half": mean(second, lambda x: x["keys"]),
            "used_memory_mb_start": during[0]["used_memory_mb"], "used_memory_mb_max": max(x["used_memory_mb"] for x in during),
            "no_ttl_keys_start": no_ttl(during[0]), "no_ttl_keys_end_of_load": no_ttl(during[-1]),
            "no_ttl_kinds_end_of_load": during[-1]["no_ttl"], "stream_entries_no_ttl_end_of_load": during[-1]["stream_entries_no_ttl"],
            "after_expiry": {k: samples[-1][k] for k in ("keys", "used_memory_mb", "kinds", "no_ttl", "stream_entries_no_ttl")},
            "series": [(round(x["t"] - t0, 1), x["keys"], no_ttl(x), x["used_memory_mb"]) for x in samples]}


def _fc(p: dict[str, Any] | None) -> str:
    return "–" if not p or not p.get("n") else f"{p['p50']:.0f} / {p['p95']:.0f} / {p['p99']:.0f}"


def _load(doc: dict[str, Any]) -> str:
    c = doc.get("contamination") or {}
    return f"{doc['load_average_before'][0]:.2f} → {doc['load_average_after'][0]:.2f}; others {c.get('foreign_cores', '?')} cores"


def report(farm_dir: Path, tune_dir: Path) -> str:
    """Markdown tables of whatever stages have results (for docs/PERFORMANCE.md and docs/lab/)."""
    out: list[str] = []

    def read(folder: Path, stage: str) -> dict[str, Any] | None:
        path = folder / f"{stage}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    if (doc := read(farm_dir, "ceiling")):
        out += [f"ceiling — `{doc['command']}` — load {_load(doc)}", "",
                "| precision | processes × threads | batch | speech s | wall s | speech s/s | load before → after |", "|---|---|---:|---:|---:|---:|---|"]
        out += [f"| {r['precision']} | {r['processes']} × {r['threads']} | {r['batch']} | {r['speech_s']} | {r['wall_s']} | "
                f"**{r['speech_s_per_s']}** | {r['load_before']} → {r['load_after']} |" for r in doc["result"]["rows"]]
        out.append("")
    if (doc := read(farm_dir, "piper")):
        r = doc["result"]
        out += [(f"piper-tts — `{doc['command']}` — load {_load(doc)}: {r['jobs']} jobs, {r['speech_s']} speech s in "
                 f"{r['wall_s']} s = **{r['speech_s_per_s']} speech s/s**"), ""]
    for stage in ("farm", "scaling"):
        if (doc := read(farm_dir, stage)):
            out += [f"{stage} — `{doc['command']}` — load {_load(doc)}", "",
                    ("| run | workers × threads | max batch | precision | speech s/s | jobs/s | mean batch | batch sizes | padding waste | "
                     "first chunk P50/P95/P99 ms | worker RSS max MB | load before → after |"), "|---|---|---:|---|---:|---:|---:|---|---:|---|---|---|"]
            for r in doc["result"]["rows"]:
                pw = (r.get("padding_waste") or {}).get("mean")
                out.append(f"| {r['label']} | {r['workers']} × {r['threads']} | {r['max_batch']} | {r['precision']} | **{r['speech_s_per_s']}** | "
                           f"{r['jobs_per_s']} | {r['mean_batch']} | {r['batch_sizes']} | {'–' if pw is None else pw} | {_fc(r['first_chunk_ms'])} | "
                           f"{', '.join(str(v) for v in r['worker_rss_mb_max'].values())} | {r['load_before']:.2f} → {r['load_after']:.2f} |")
            out.append("")
    if (doc := read(tune_dir, "layouts")):
        out += [f"layouts — `{doc['command']}` — load {_load(doc)}", "",
                ("| layout | saturation speech s/s | saturation jobs/s | 70 %: jobs/s offered | en_short first chunk P50/P95/P99 | zh_short | "
                 "en_paragraph | queue P50 ms interactive / bulk | load before → after |"), "|---|---:|---:|---:|---|---|---|---|---|"]
        for r in doc["result"]["rows"]:
            a, fc = r["at_70pct"], r["at_70pct"]["first_chunk_ms"]
            q = a["queue_ms"]
            out.append(f"| {r['layout']} | **{r['saturation']['speech_s_per_s']}** | {r['saturation']['jobs_per_s']} | {a['rate_jobs_per_s']} | "
                       f"{_fc(fc.get('en_short'))} | {_fc(fc.get('zh_short'))} | {_fc(fc.get('en_paragraph'))} | "
                       f"{(q.get('interactive') or {}).get('p50')} / {(q.get('bulk') or {}).get('p50')} | {r['load_before']:.2f} → {r['load_after']:.2f} |")
        out.append("")
    for stage in ("session", "spinning"):
        if (doc := read(tune_dir, stage)):
            out += [f"{stage} — `{doc['command']}` — load {_load(doc)}", "", "```", json.dumps(doc["result"], indent=1)[:3000], "```", ""]
    if (doc := read(farm_dir, "length")):
        out += [f"length — `{doc['command']}` — load {_load(doc)}", "",
                "| paragraphs | segments | audio s | first chunk ms | end to end s | worker RSS start → max MB | Redis used peak MB |",
                "|---:|---:|---:|---:|---:|---|---:|"]
        for r in doc["result"]["rows"]:
            rss = "; ".join(f"{w['start']} → {w['max']}" for w in r["worker_rss_mb"].values())
            out.append(f"| {r['paragraphs']} | {r['segments']} | {r['audio_s']:.0f} | {r['first_chunk_ms']:.0f} | {r['e2e_s']} | {rss} | {r['redis_used_mb_peak']} |")
        out.append("")
    if (farm_dir / "scheduling.md").exists():
        out += ["scheduling — " + f"`{(read(farm_dir, 'scheduling') or {}).get('command', '')}`", "",
                (farm_dir / "scheduling.md").read_text(encoding="utf-8")]
    if (doc := read(farm_dir, "longrun")):
        r = doc["result"]
        red = {k: v for k, v in r.get("redis", {}).items() if k != "series"}
        out += [(f"longrun — `{doc['command']}` — load {_load(doc)}: {r['jobs_done']} of {r['jobs_submitted']} jobs in {r['seconds']} s; "
                 f"{r['throughput']}; first chunk {_fc(r['first_chunk_ms'])}"), "", "```", json.dumps(r["workers"], indent=1),
                json.dumps(r.get("rss_after_warmup"), indent=1), json.dumps(red, indent=1), "```"]
    return "\n".join(out)


def rss_after(summary: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Each worker's RSS when ``jobs`` jobs had ended and at the end: growth after warm-up, in %."""
    ends = sorted(r["t_sched"] + r["e2e_ms"] / 1000 for r in summary["per_job"] if r["e2e_ms"] is not None)
    if len(ends) < jobs:
        return {}
    t0 = min(r["t_sched"] for r in summary["per_job"])
    at = ends[jobs - 1] - t0
    out: dict[str, Any] = {"after_jobs": jobs, "at_s": round(at, 1), "jobs_after": len(ends) - jobs}
    for pid, w in summary["workers"].items():
        series = w["series"]
        start = min(series, key=lambda p: abs(p[0] - at))[1]
        end = series[-1][1]
        out[pid] = {"rss_mb_then": start, "rss_mb_end": end, "growth_pct": round(100 * (end - start) / start, 2),
                    "rss_mb_first": series[0][1]}
    return out


STAGES = {"ceiling": stage_ceiling, "piper": stage_piper, "farm": stage_farm, "latency": stage_latency,
          "scaling": stage_scaling, "length": stage_length, "longrun": stage_longrun, "scheduling": stage_scheduling}


Stages = Mapping[str, Callable[[Settings, argparse.Namespace], dict[str, Any]]]


def run_stages(stages: Stages, args: argparse.Namespace, **doc: Any) -> None:
    """Each stage of ``args.stages`` in turn (after a quiet machine, with ``--max-load``), its result in
    ``<out>/<stage>.json`` with the command, the load average before and after and the other tenants' CPU (``doc``:
    more fields for every stage's file)."""
    settings = settings_from_environment()
    args.out.mkdir(parents=True, exist_ok=True)
    for stage in [s.strip() for s in args.stages.split(",") if s.strip()]:
        quiet = wait_quiet(args.max_load, idle_cores=args.idle_cores, wait_max_s=args.wait_max_s) if args.max_load > 0 else None
        before = list(os.getloadavg())
        start = time.time()
        foreign = ForeignLoad()
        result = stages[stage](settings, args)
        record = {"stage": stage, "command": args.command, **doc, "cores": os.cpu_count(), "load_average_before": before,
                  "load_average_after": list(os.getloadavg()), "quiet_wait": quiet, "contamination": foreign.result(),
                  "seconds": round(time.time() - start, 1), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "result": result}
        (args.out / f"{stage}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False), encoding="utf-8")
        log.info("stage %s done in %.0f s (load %.2f -> %.2f)", stage, record["seconds"], before[0], record["load_average_after"][0])


def add_quiet_arguments(ap: argparse.ArgumentParser) -> None:
    """``--max-load`` and what goes with it: wait for a quiet machine before each stage."""
    ap.add_argument("--max-load", type=float, default=0.0, help="wait (up to --wait-max-s) for the load average to fall below this")
    ap.add_argument("--wait-max-s", type=float, default=2400.0)
    ap.add_argument("--idle-cores", type=float, default=0.1,
                    help="... or until fewer than this many cores were busy for 10 s (0: the load average alone decides)")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--stages", default=",".join(s for s in STAGES if s != "scheduling"))
    ap.add_argument("--out", type=Path, default=Path("bench-results/farm"))
    ap.add_argument("--workers", type=int, default=2, help="farm layout of the farm/latency/length/longrun stages")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--farm-batches", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8],
                    help="the farm stage's batch caps (comma-separated)")
    ap.add_argument("--latency-mixes", default="mixed")
    ap.add_argument("--latency-s", type=float, default=60.0)
    ap.add_argument("--saturate-s", type=float, default=40.0)
    ap.add_argument("--longrun-s", type=float, default=600.0)
    ap.add_argument("--longrun-jobs", type=int, default=10_000)
    ap.add_argument("--longrun-warmup-jobs", type=int, default=1000, help="RSS growth is measured from when this many jobs had ended")
    ap.add_argument("--longrun-ttl-s", type=int, default=120, help="job TTL during the soak (the default is a day)")
    ap.add_argument("--longrun-redis-every-s", type=float, default=15.0, help="Redis key census interval")
    add_quiet_arguments(ap)
    ap.add_argument("--jobs", type=int, default=WORKLOAD["jobs"], help="jobs in the English workload")
    ap.add_argument("--report", action="store_true", help="print Markdown tables of the results in --out (and --tune-out)")
    ap.add_argument("--tune-out", type=Path, default=Path("bench-results/tune"))
    scheduling_arguments(ap)


def main(args: argparse.Namespace) -> int:
    WORKLOAD["jobs"] = args.jobs
    if args.report:
        print(report(args.out, args.tune_out))
        return 0
    run_stages(STAGES, args, workload=WORKLOAD)
    return 0
