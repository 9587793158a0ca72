"""`ttsfarm bench load` (a bare `ttsfarm bench` too): a load generator against a farm, measuring what a streaming client sees.

Jobs come from a text mix (short interactive English sentences, English paragraphs on the bulk lane,
short Chinese sentences) and are submitted either open loop, at Poisson arrivals of a target rate, or
closed loop, at a fixed number of jobs in flight. One reader thread follows every live job's results
stream with a single multi-key XREAD, so the first chunk of each job is timed as a client would see it.
After a job ends its status record gives the queue time (``started - created``) and the batch of each
segment (``batch:{seg}``); a sampler reads the workers' RSS and CPU time from /proc.

The bench can start its own redis-server and N workers (``bench.processes``) or use a running farm
(``--redis URL``). Summaries, JSON and plots are made by ``bench.report``.

Latency is measured from each job's *scheduled* arrival, not from when the submitter got round to it,
so a slow submitter cannot hide queueing (no coordinated omission); the submit lag is reported too.
"""


from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.load import (
    KINDS,
    MIXES,
    PARAGRAPHS_EN,
    SHORT_EN,
    SHORT_ZH,
    JobKind,
    JobRecord,
    LoadSpec,
    PlannedJob,
    StreamWatcher,
    make_jobs,
    run_load,
)
from bench.local import (
    ForeignLoad,
    LocalFarm,
    ProcSampler,
    farm_worker_pids,
    machine_busy_s,
    own_cpu_s,
    proc_cpu_s,
    proc_rss_mb,
    wait_quiet,
    worker_env,
)
from wire.connect import connect
from wire.settings import Settings, settings_from_environment

__all__ = [
    "KINDS", "MIXES", "PARAGRAPHS_EN", "SHORT_EN", "SHORT_ZH", "BenchConfig", "ForeignLoad", "JobKind", "JobRecord",
    "LoadSpec", "LocalFarm", "PlannedJob", "ProcSampler", "StreamWatcher", "add_arguments", "add_padding_waste", "farm_worker_pids",
    "machine_busy_s", "main", "make_jobs", "own_cpu_s", "proc_cpu_s", "proc_rss_mb", "run_bench", "run_load",
    "wait_quiet", "worker_env",
]

# -- the command -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchConfig:
    redis_url: str = ""  # empty: start a redis-server and workers of our own
    workers: int = 1
    threads: int | None = None
    inference_threads: int | None = None
    interactive_loops: int | None = None
    max_batch: int | None = None
    precision: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    load: LoadSpec = field(default_factory=LoadSpec)
    saturate_s: float = 0.0  # > 0: first find the saturation rate (closed loop), then load at ``load_fraction`` of it
    saturate_concurrency: int = 0
    load_fraction: float = 0.7
    warmup_jobs: int = 4
    label: str = ""


def run_bench(config: BenchConfig, *, base: Settings | None = None,
              check: Callable[[Settings], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One bench: optionally a farm of our own, a warm-up, ``check(settings of the farm)`` if given (its answer is
    the result's ``check``: scripts/gpu_check.py compares the farm's audio with its own there), an optional
    saturation phase, the load phase."""
    from bench.report import summarize

    base = base or settings_from_environment()
    farm: LocalFarm | None = None
    load_before = list(os.getloadavg())
    foreign = ForeignLoad()
    try:
        if config.redis_url:
            settings = base.replace(redis={"url": config.redis_url})
            broker = connect(settings.redis)
            pids: Callable[[], list[int]] = lambda: farm_worker_pids(broker)
            storage_dir = None
        else:
            env = worker_env(threads=config.threads, max_batch=config.max_batch, inference_threads=config.inference_threads,
                             interactive_loops=config.interactive_loops, precision=config.precision, extra=config.env)
            farm = LocalFarm(workers=config.workers, env=env).start()
            settings = base.replace(redis={"url": farm.url, "key_prefix": farm.prefix})
            pids = farm.pids
            storage_dir = farm.storage_dir
        started = time.time()
        if config.warmup_jobs:
            run_load(settings, dataclasses.replace(config.load, rate=0.0, concurrency=2, duration_s=600, max_jobs=config.warmup_jobs,
                                                   mix="mixed" if config.load.mix == "mixed" else config.load.mix),
                     storage_dir=storage_dir)
        checked = check(settings) if check is not None else None
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
        if check is not None:
            result["check"] = checked
    finally:
        if farm is not None:
            farm.stop()
    # after the workers have been waited for, so their CPU time counts as ours
    result["contamination"] = foreign.result()
    return result


def add_padding_waste(summary: dict[str, Any], settings: Settings) -> None:
    """Fill ``padding_waste`` when some batch held more than one segment (phonemizes those segments)."""
    from bench.report import padding_waste

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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``ttsfarm bench load``'s options (a bare ``ttsfarm bench`` takes them too)."""
    p.add_argument("--redis", dest="bench_redis", default=None, help="a running farm's Redis URL (default: start our own)")
    p.add_argument("--workers", type=int, default=1, help="worker processes to start (own farm)")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads per worker (own farm)")
    p.add_argument("--inference-threads", type=int, default=None, help="inference loops per worker sharing one session")
    p.add_argument("--max-batch", type=int, default=None, help="queue.max_batch_cpu of the workers (own farm)")
    p.add_argument("--precision", default=None, choices=["auto", "fp32", "int8"])
    p.add_argument("--set", action="append", metavar="TTSFARM_KEY=VALUE", help="more worker settings (own farm)")
    p.add_argument("--mix", default="mixed", help="mixed | en | en_short | en_paragraph | zh")
    p.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals, jobs/s (0: closed loop at --concurrency)")
    p.add_argument("--concurrency", type=int, default=4, help="jobs in flight (closed loop)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of submitting")
    p.add_argument("--jobs", type=int, default=1_000_000, help="at most this many jobs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--job-timeout", type=float, default=300.0)
    p.add_argument("--saturate", type=float, default=0.0,
                   help="first run closed loop this many seconds to find saturation, then load at --load-fraction of it")
    p.add_argument("--load-fraction", type=float, default=0.7)
    p.add_argument("--warmup-jobs", type=int, default=4)
    p.add_argument("--label", default="")
    p.add_argument("--out", default="bench-results/farm", help="folder for bench.json and the PNG plots")
    p.add_argument("--no-plots", action="store_true")


def main(args: argparse.Namespace) -> int:
    """``ttsfarm bench load`` (``bench.cli`` parses ``args``; ``args.redis`` is ``ttsfarm --redis``)."""
    from bench.report import markdown_summary, write_results

    env = dict(kv.split("=", 1) for kv in args.set or [])
    load = LoadSpec(mix=args.mix, rate=args.rate, concurrency=args.concurrency, duration_s=args.duration,
                    max_jobs=args.jobs, seed=args.seed, timeout_s=args.job_timeout)
    config = BenchConfig(redis_url=args.bench_redis or args.redis or "", workers=args.workers, threads=args.threads,
                         inference_threads=args.inference_threads, max_batch=args.max_batch, precision=args.precision, env=env,
                         load=load, saturate_s=args.saturate, load_fraction=args.load_fraction, warmup_jobs=args.warmup_jobs,
                         label=args.label)
    result = run_bench(config)
    result["command"] = args.command
    out = write_results(result, Path(args.out), plots=not args.no_plots)
    print(markdown_summary(result))
    print(f"results in {out}")
    return 0
