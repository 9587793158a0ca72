"""Do interactive jobs keep their first-chunk latency while a book is made on the same farm?

Runs the same open-loop stream of short interactive English jobs twice on a private farm (redis-server +
workers started here): once alone, once while an English audiobook is being made in the bulk lane. Writes
JSON and prints a Markdown table of first-chunk latency and queue time for the interactive jobs.

    .venv/bin/python scripts/bench_book_interactive.py --workers 2 --rate 1.0 --duration 60
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import threading
import time
from pathlib import Path

from bench.run import LoadSpec, LocalFarm, run_load, wait_quiet, worker_env
from bench.report import summarize
from wire.settings import load_settings

PARAGRAPH = (
    "The farm reads long books in the bulk lane while callers wait for short answers in the interactive lane. "
    "Every sentence of a chapter becomes a job of its own, so a book never blocks the queue for long. "
    "Workers take interactive work first, and give the bulk lane a batch now and then so that it never starves. "
)


def write_book(folder: Path, chapters: int, paragraphs: int) -> Path:
    lines = []
    for c in range(1, chapters + 1):
        lines.append(f"# Chapter {c}\n")
        # every sentence unique: a book's repeated sentences are made once, which would make the book trivial
        lines += [f"In chapter {c}, part {p}: " + PARAGRAPH.replace(". ", f", says voice number {p}. ") + "\n"
                  for p in range(1, paragraphs + 1)]
    path = folder / "book.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def phase(farm: LocalFarm, spec: LoadSpec, book: Path | None, out: Path) -> dict:
    settings = load_settings(env={**farm.env})
    book_state: dict = {}
    thread = None
    if book is not None:
        from books import run_book

        def make() -> None:
            start = time.monotonic()
            result = run_book(settings, book, "joe", str(out), book_id=f"bench{int(time.time())}", timeout=3600)
            book_state.update(seconds=round(time.monotonic() - start, 1), chapters=len(result.chapters),
                              audio_min=round(sum(c.duration_s for c in result.chapters) / 60, 2))

        thread = threading.Thread(target=make, daemon=True)
        thread.start()
        time.sleep(3)  # the book's first segments are queued and running before the interactive load starts
    raw = run_load(settings, spec, pids=farm.pids, storage_dir=farm.storage_dir)
    summary = summarize(raw)
    backlog = farm_backlog(settings)
    book_state["running_when_load_ended"] = thread is not None and thread.is_alive()
    if thread is not None:
        thread.join(3600)
    fc = summary["first_chunk_ms"].get("en_short", {})
    return {"first_chunk_ms": fc, "queue_ms": summary["queue_ms"].get("interactive"), "jobs": summary["jobs"],
            "bulk_backlog_at_end": backlog, "book": book_state}


def farm_backlog(settings) -> dict:  # type: ignore[no-untyped-def]
    import redis

    from wire.keys import Keys

    r = redis.Redis.from_url(settings.redis.url)
    raw = r.hgetall(Keys(settings.redis.key_prefix).backlog("bulk"))
    return {k.decode(): float(v) for k, v in raw.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1.0, help="interactive jobs per second (Poisson)")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--chapters", type=int, default=6)
    ap.add_argument("--paragraphs", type=int, default=8)
    ap.add_argument("--out", default="bench-results/book_interactive.json")
    ap.add_argument("--max-load", type=float, default=0.8)
    ap.add_argument("--loops", type=int, default=1, help="inference loops per worker (queue.inference_threads)")
    ap.add_argument("--interactive-loops", type=int, default=0, help="of those, reserved for the interactive lane")
    ap.add_argument("--bulk-nice", type=int, default=19, help="OS nice of bulk batches (queue.bulk_nice)")
    ap.add_argument("--set", action="append", default=[], metavar="TTSFARM_KEY=VALUE", help="another worker setting")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    quiet = wait_quiet(args.max_load, wait_max_s=900)
    tmp = Path(tempfile.mkdtemp(prefix="ttsfarm-bookbench-"))
    book = write_book(tmp, args.chapters, args.paragraphs)
    env = worker_env(threads=1, inference_threads=args.loops, interactive_loops=args.interactive_loops,
                     extra={"TTSFARM_QUEUE_BULK_NICE": str(args.bulk_nice),
                            **dict(kv.split("=", 1) for kv in args.set)})
    farm = LocalFarm(workers=args.workers, env=env).start()
    try:
        spec = LoadSpec(mix="en_short", rate=args.rate, duration_s=args.duration, seed=7)
        alone = phase(farm, spec, None, tmp / "none")
        (tmp / "out").mkdir()
        with_book = phase(farm, spec, book, tmp / "out")
    finally:
        farm.stop()
    result = {"args": vars(args), "quiet": quiet, "load_after": round(__import__("os").getloadavg()[0], 2),
              "alone": alone, "with_book": with_book}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print("| interactive en_short | first chunk P50 | P95 | P99 | queue P50 | queue P99 | jobs done |")
    print("|---|---|---|---|---|---|---|")
    for name, ph in (("alone", alone), ("while a book is made", with_book)):
        fc, q = ph["first_chunk_ms"], ph["queue_ms"] or {}
        print(f"| {name} | {fc.get('p50')} ms | {fc.get('p95')} ms | {fc.get('p99')} ms | {q.get('p50')} ms | {q.get('p99')} ms "
              f"| {ph['jobs'].get('done')} |")
    print(f"book: {with_book['book']}; load before {quiet['load_1m']}, after {result['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
