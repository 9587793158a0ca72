"""CPU tuning on this machine: worker processes x intra-op threads, and onnxruntime session options.

    python -m bench.lab tune --stages layouts,session [--mix mixed] [--out bench-results/tune]

* ``layouts``  the farm (own redis-server + workers) as 1 process x 2 threads, 2 processes x 1 thread,
               and 1 process x 1 thread with 2 inference loops sharing its session
               (``queue.inference_threads = 2``): saturation throughput (closed loop), then first-chunk
               latency under Poisson arrivals at 70 % of that layout's own saturation.
* ``session``  the Piper voice in this process (2 intra-op threads, batch 1, the English workload):
               graph optimization level, CPU memory arena and thread spinning, one at a time against
               the defaults, each measured ``--repeats`` times taking turns.
* ``spinning`` the farm's best two-thread layout with spinning on and off (spinning threads busy-wait
               for work and take a core from whoever else needs it).

Each writes ``<out>/<stage>.json`` with the load average before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from bench.farm import add_quiet_arguments, run_stages, timed_batches, warm_up, workload_ids
from bench.report import write_results
from bench.run import BenchConfig, LoadSpec, run_bench
from wire.settings import Settings

log = logging.getLogger(__name__)
# workers, intra-op threads, inference loops (0, 0: the "auto" layout, workers.layout.resolve_loops)
LAYOUTS = {"1x2": (1, 2, 1), "2x1": (2, 1, 1), "1x1-2loops": (1, 1, 2), "auto": (1, 0, 0)}
# the fixed layouts have no loop reserved for the interactive lane; "auto" is measured as the defaults give it
RESERVED = {"auto": 1}
SESSION_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "opt-extended": {"graph_optimization": "extended"},
    "opt-basic": {"graph_optimization": "basic"},
    "no-arena": {"cpu_mem_arena": False},
    "no-spinning": {"allow_spinning": False},
}


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def farm_layout(label: str, workers: int, threads: int, loops: int, args: argparse.Namespace, env: dict[str, str] | None = None) -> dict[str, Any]:
    load = LoadSpec(mix=args.mix, duration_s=args.load_s, seed=5, timeout_s=600)
    env = env or {}
    in_flight = 4 * workers * (loops or os.cpu_count() or 1)
    config = BenchConfig(workers=workers, threads=threads, inference_threads=loops, interactive_loops=RESERVED.get(label, 0),
                         precision=args.precision, env=env, load=load, saturate_s=args.saturate_s,
                         saturate_concurrency=in_flight, load_fraction=0.7, warmup_jobs=4, label=label)
    result = run_bench(config)
    write_results(result, args.out, name=label)
    sat, lo = result["phases"]["saturation"], result["phases"]["load"]
    row = {"layout": label, "workers": workers, "intra_op_threads": threads, "inference_threads": loops, "env": env,
           "saturation": {**sat["throughput"], "first_chunk_ms": sat["first_chunk_ms"]},
           "at_70pct": {"rate_jobs_per_s": result["config"]["load"]["rate"], **lo["throughput"],
                        "first_chunk_ms": lo["first_chunk_ms"], "e2e_ms": lo["e2e_ms"], "queue_ms": lo["queue_ms"],
                        "jobs": lo["jobs"], "submit_lag_ms": lo["submit_lag_ms"]},
           "workers_rss_mb_max": {p: w["rss_mb_max"] for p, w in lo["workers"].items()},
           "load_before": result["load_average_before"][0], "load_after": result["load_average_after"][0]}
    log.info("%s: saturation %.2f speech s/s, %.3f jobs/s; at 70%% first chunk P50 %s ms (load %.2f -> %.2f)", label,
             sat["throughput"]["speech_s_per_s"], sat["throughput"]["jobs_per_s"], lo["first_chunk_ms"]["all"]["p50"],
             row["load_before"], row["load_after"])
    return row


def stage_layouts(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    names = [n for n in args.layouts.split(",") if n]
    return {"mix": args.mix, "rows": [farm_layout(n, *LAYOUTS[n], args) for n in names]}


def stage_spinning(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for spin in ("true", "false"):
        rows.append(farm_layout(f"1x2-spinning-{spin}", 1, 2, 1, args, env={"TTSFARM_RUNTIME_ALLOW_SPINNING": spin}))
    return {"mix": args.mix, "rows": rows}


def stage_session(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.voices.piper.voice import PiperVoice
    from pipeline.voices.runtime import SessionFactory

    voices = {}
    for name, change in SESSION_VARIANTS.items():
        runtime = dataclasses.replace(settings.runtime, device="cpu", intra_op_threads=2, inter_op_threads=1, warmup=False, **change)
        voices[name] = PiperVoice(settings.catalogue.get("joe"), SessionFactory(runtime), precision=args.precision)
        voices[name].load()
    ids = workload_ids(settings, next(iter(voices.values())))
    runs: dict[str, list[float]] = {name: [] for name in voices}
    before = loadavg()
    for name, v in voices.items():
        warm_up(v, ids, 1)
    for _ in range(args.repeats):  # taking turns, so drifting load from elsewhere hits every variant alike
        for name, v in voices.items():
            spent, audio = timed_batches(v, ids, 1)
            runs[name].append(audio / spent)
    rows = [{"variant": name, "change": SESSION_VARIANTS[name], "speech_s_per_s_runs": [round(x, 3) for x in r],
             "speech_s_per_s_median": round(sorted(r)[len(r) // 2], 3)} for name, r in runs.items()]
    return {"threads": 2, "batch": 1, "precision": args.precision, "items": len(ids), "rows": rows,
            "load_before": before, "load_after": loadavg()}


STAGES = {"layouts": stage_layouts, "session": stage_session, "spinning": stage_spinning}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--stages", default="layouts,session")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--mix", default="mixed")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--saturate-s", type=float, default=30.0)
    ap.add_argument("--load-s", type=float, default=45.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench-results/tune"))
    add_quiet_arguments(ap)


def main(args: argparse.Namespace) -> int:
    run_stages(STAGES, args)
    return 0
