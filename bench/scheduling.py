"""FIFO vs deadline scheduling side by side in one run: the ``scheduling`` stage of ``ttsfarm bench farm``.

    ttsfarm bench farm --stages scheduling --out bench-results/scheduling \
        [--sched-mixes en_short,zh_short,book] [--sched-loads 0.5,0.7,0.9,1.0] [--sched-saturate-s 20] [--sched-load-s 30]

Per mix, two farms of our own run at once (one worker each, the default layout; ``scheduling.mode`` fifo on one,
deadline on the other; the idle one only waits on Redis): a closed-loop saturation phase on each, then Poisson
arrivals at each load level, a level's two runs back to back (fifo first at even levels, deadline first at odd
ones, against drift), both at the same offered rate: that fraction of the *FIFO* saturation. Mixes: ``en_short``
and ``zh_short`` (the bench's short interactive mixes), ``book``: short English interactive jobs at the level
while a small English book is made in the bulk lane (submitted as the phase starts; its making time is reported).

Each run gives: first chunk P50/P95/P99 (interactive jobs, from their scheduled arrival), the share of jobs with
any underrun and underrun seconds per audio minute (the bench client plays each job in real time from its first
chunk: bench/load.py ``underruns``), throughput, units published late (the workers' heartbeats). Writes
``<out>/scheduling.json`` (through ``bench.farm``) and ``<out>/scheduling.md`` (the Markdown section for
docs/lab/scheduling-and-first-audio.md); ``ttsfarm bench farm --report`` prints it again.

Time: about (20 s saturation + levels × (30 s + drain)) × 2 modes per mix plus farm starts and the books: about
25 minutes for the defaults on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.load import LoadSpec, run_load
from bench.local import LocalFarm, worker_env
from bench.report import PARTS, summarize
from wire.broker import run_blocking
from wire.connect import connect
from wire.settings import Settings

log = logging.getLogger(__name__)
MODES = ("fifo", "deadline")
INTERACTIVE = {"en_short": "en_short", "zh_short": "zh", "book": "en_short"}  # mix -> the bench's text mix
PARAGRAPH = (
    "The farm reads long books in the bulk lane while callers wait for short answers in the interactive lane. "
    "Every sentence of a chapter becomes a job of its own, so a book never blocks the queue for long. "
    "Workers take interactive work first, and give the bulk lane a batch now and then so that it never starves. "
)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sched-mixes", default="en_short,zh_short,book")
    ap.add_argument("--sched-loads", default="0.5,0.7,0.9,1.0", help="fractions of the FIFO saturation")
    ap.add_argument("--sched-saturate-s", type=float, default=20.0)
    ap.add_argument("--sched-load-s", type=float, default=30.0)
    ap.add_argument("--sched-workers", type=int, default=1)
    ap.add_argument("--sched-book", default="2x4", help="chapters x paragraphs of the book of the book mix")


def stage_scheduling(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    loads = [float(v) for v in args.sched_loads.split(",")]
    doc: dict[str, Any] = {"loads": loads, "load_s": args.sched_load_s, "saturate_s": args.sched_saturate_s,
                           "workers": args.sched_workers, "mixes": {}}
    for mix in [m.strip() for m in args.sched_mixes.split(",") if m.strip()]:
        doc["mixes"][mix] = run_mix(settings, mix, loads, args)
        log.info("scheduling %s: %s", mix, json.dumps(doc["mixes"][mix]["saturation"]))
    md = report(doc)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scheduling.md").write_text(md + "\n", encoding="utf-8")
    print(md, flush=True)
    return doc


def run_mix(settings: Settings, mix: str, loads: list[float], args: argparse.Namespace) -> dict[str, Any]:
    farms = {mode: LocalFarm(workers=args.sched_workers, env=worker_env(extra={"TTSFARM_SCHEDULING_MODE": mode}))
             for mode in MODES}
    out: dict[str, Any] = {"saturation": {}, "runs": []}
    try:
        for farm in farms.values():
            farm.start()
        conf = {mode: settings.replace(redis={"url": farm.url, "key_prefix": farm.prefix}) for mode, farm in farms.items()}
        text_mix = INTERACTIVE[mix]
        for mode, farm in farms.items():
            run_load(conf[mode], LoadSpec(mix=text_mix, concurrency=2, duration_s=600, max_jobs=6, seed=1), storage_dir=farm.storage_dir)
            sat = summarize(run_load(conf[mode], LoadSpec(mix=text_mix, concurrency=8, duration_s=args.sched_saturate_s, seed=2,
                                                          timeout_s=300), pids=farm.pids, storage_dir=farm.storage_dir))
            out["saturation"][mode] = {"throughput": sat["throughput"], "first_chunk_ms": sat["first_chunk_ms"]["all"],
                                       "underruns": sat["underruns"]["all"]}
        capacity = out["saturation"]["fifo"]["throughput"]
        jobs_per_s = capacity["jobs_per_s_drained"] or capacity["jobs_per_s"]
        book = _write_book(args.sched_book) if mix == "book" else None
        for i, level in enumerate(loads):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                rate = round(level * jobs_per_s, 4)
                out["runs"].append(one_run(conf[mode], farms[mode], mode, level, rate, text_mix, args.sched_load_s, book))
                log.info("%s %s at %.0f %%: %s", mix, mode, 100 * level, json.dumps(_short(out["runs"][-1])))
    finally:
        for farm in farms.values():
            farm.stop()
    return out


def one_run(settings: Settings, farm: LocalFarm, mode: str, level: float, rate: float, text_mix: str, load_s: float,
            book: Path | None) -> dict[str, Any]:
    late_before = _late_units(settings)
    book_state: dict[str, Any] = {}
    thread = None
    if book is not None:
        from books import run_book

        def make() -> None:
            start = time.monotonic()
            try:
                result = run_book(settings, book, "joe", tempfile.mkdtemp(prefix="ttsfarm-schedbook-"),
                                  book_id=f"sched{int(time.time() * 1000)}", timeout=1800)
                book_state.update(seconds=round(time.monotonic() - start, 2),
                                  audio_min=round(sum(c.duration_s for c in result.chapters) / 60, 2))
            except Exception as exc:  # the table says so; the run goes on
                book_state.update(error=f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=make, daemon=True)
        thread.start()
    s = summarize(run_load(settings, LoadSpec(mix=text_mix, rate=rate, duration_s=load_s, seed=int(level * 100) + 5, timeout_s=300),
                           pids=farm.pids, storage_dir=farm.storage_dir))
    if thread is not None:
        thread.join(1800)
    return {"mode": mode, "level": level, "rate": rate, "jobs": s["jobs"], "throughput": s["throughput"],
            "first_chunk_ms": s["first_chunk_ms"]["all"], "queue_ms": s["queue_ms"]["all"], "underruns": s["underruns"]["all"],
            "late_units": _late_units(settings) - late_before, "book": book_state, "first_segment": s["first_segment"]}


def _late_units(settings: Settings) -> int:
    """Units the farm's workers published after their deadline so far (from their heartbeats)."""
    broker = connect(settings.redis)
    return sum(int(info.get("late_units") or 0) for info in run_blocking(broker, broker.read_heartbeats()).values())


def _write_book(shape: str) -> Path:
    """A Markdown book of ``chapters x paragraphs`` (``--sched-book``) in a folder of its own."""
    chapters, paragraphs = (int(v) for v in shape.split("x"))
    lines = []
    for c in range(1, chapters + 1):
        lines.append(f"# Chapter {c}\n")
        # every sentence unique: a book's repeated sentences are made once, which would make the book trivial
        lines += [f"In chapter {c}, part {p}: " + PARAGRAPH.replace(". ", f", says voice number {p}. ") + "\n"
                  for p in range(1, paragraphs + 1)]
    path = Path(tempfile.mkdtemp(prefix="ttsfarm-schedbook-")) / "book.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _short(run: dict[str, Any]) -> dict[str, Any]:
    return {"rate": run["rate"], "first_chunk_ms": {k: run["first_chunk_ms"].get(k) for k in ("p50", "p95", "p99")},
            "underrun_share": run["underruns"]["share"], "late": run["late_units"], "book": run["book"]}


def _pct(d: dict[str, Any] | None) -> str:
    return "–" if not d or not d.get("n") else f"{d['p50']:.0f} / {d['p95']:.0f} / {d['p99']:.0f}"


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def report(doc: dict[str, Any]) -> str:
    """The Markdown section for docs/lab/scheduling-and-first-audio.md."""
    lines = [f"Loads as fractions of each mix's FIFO saturation, {doc['load_s']:.0f} s of Poisson arrivals per run; "
             f"{doc['workers']} worker(s), the default layout.", "",
             "| mix | mode | saturation jobs/s | speech s/s | vs FIFO |", "|---|---|---:|---:|---:|"]
    for mix, m in doc["mixes"].items():
        fifo = m["saturation"]["fifo"]["throughput"]["speech_s_per_s"]
        for mode, sat in m["saturation"].items():
            t = sat["throughput"]
            lines.append(f"| {mix} | {mode} | {_num(t['jobs_per_s_drained'] or t['jobs_per_s'])} | {t['speech_s_per_s']:.2f} | "
                         f"{_num(100 * (t['speech_s_per_s'] / fifo - 1) if fifo else None, '{:+.1f} %')} |")
    lines += ["", "| mix | load | mode | offered jobs/s | first chunk P50 / P95 / P99 ms | jobs with an underrun | "
              "underrun s per audio min | speech s/s | late units | book made in |", "|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for mix, m in doc["mixes"].items():
        for run in sorted(m["runs"], key=lambda r: (r["level"], r["mode"])):
            u, book = run["underruns"], run.get("book") or {}
            lines.append(f"| {mix} | {100 * run['level']:.0f} % | {run['mode']} | {run['rate']:.2f} | {_pct(run['first_chunk_ms'])} | "
                         f"{_num(100 * u['share'] if u['share'] is not None else None, '{:.1f} %')} | {_num(u['seconds_per_audio_min'], '{:.3f}')} | "
                         f"{run['throughput']['speech_s_per_s']:.2f} | {run['late_units']} | "
                         f"{_num(book.get('seconds'), '{:.1f} s') if 'error' not in book else book['error'][:40]} |")
    lines += ["", "Where the first chunk's time went, by the loop that claimed the job's first segment: in its stream (created → "
              "claimed), held claimed in the loop (claimed → started), model and publish (started → first chunk); P50 / P99 ms. "
              "Tail: the slowest 5 % of first chunks, mean ms of each part.", "",
              "| mix | load | mode | loop | jobs | in stream | held in loop | model + publish |", "|---|---:|---|---|---:|---|---|---|"]
    for mix, m in doc["mixes"].items():
        for run in sorted(m["runs"], key=lambda r: (r["level"], r["mode"])):
            path = run.get("first_segment") or {}
            head = f"| {mix} | {100 * run['level']:.0f} % | {run['mode']} "
            for loop, row in (path.get("by_loop") or {}).items():
                lines.append(head + f"| {loop} | {row['jobs']} | " + " | ".join(_p50_99(row[part]) for part in PARTS) + " |")
            tail = path.get("tail") or {}
            if tail.get("jobs"):
                lines.append(head + f"| tail ({tail['first_chunk_ms']:.0f} ms; loops {tail['loops']}) | {tail['jobs']} | "
                             + " | ".join(_num(tail[part], "{:.0f}") for part in PARTS) + " |")
    return "\n".join(lines)


def _p50_99(d: dict[str, Any]) -> str:
    return "–" if not d or not d.get("n") else f"{d['p50']:.0f} / {d['p99']:.0f}"
