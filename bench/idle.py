"""First chunk of short English jobs one at a time on an idle private farm, split into its stages.

Each job is submitted, streamed to its first chunk and then waited out before the next (0.5 s apart), so
nothing queues: what is left is the submit call, the hand-over to a worker loop (status ``started``) and
the model plus publishing (``started`` to the first chunk seen by the client).

    ttsfarm bench idle [--jobs 30] [--set TTSFARM_KEY=VALUE ...] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.local import LocalFarm, worker_env
from producer.client import Client
from wire.settings import load_settings

TEXTS = ("Are you there?", "Please hold the line.", "Your order has shipped.", "Good morning, how can I help?",
         "Thank you for calling.")
SKIP = 3  # the first jobs after start-up are left out


def idle_first_chunk(settings: list[str], jobs: int, *, voice: str = "joe", texts: tuple[str, ...] = TEXTS,
                     number: str = " Number {i}.") -> dict[str, dict[str, float]]:
    """P50 and max (ms) of each stage of the first chunk, over ``jobs`` jobs on a farm of one worker."""
    farm = LocalFarm(workers=1, env=worker_env(extra=dict(kv.split("=", 1) for kv in settings))).start()
    try:
        client = Client.from_url(settings=load_settings(env={**farm.env}))
        rows = []
        for i in range(jobs):
            t0 = time.time()
            job = client.submit(f"{texts[i % len(texts)]}{number.format(i=i)}", voice=voice, format="pcm")
            t1 = time.time()
            first = None
            for _ in job.stream(timeout=30):
                first = first or time.time()
            started = float(job.status()["started"])
            rows.append({"submit": t1 - t0, "to_started": started - t1, "to_first_chunk": first - started, "total": first - t0})
            time.sleep(0.5)
    finally:
        farm.stop()
    summary = {}
    for key in ("submit", "to_started", "to_first_chunk", "total"):
        ms = sorted(r[key] * 1000 for r in rows[SKIP:])
        summary[key] = {"p50": round(ms[len(ms) // 2], 1), "max": round(ms[-1], 1)}
    return summary


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--set", action="append", default=[], metavar="TTSFARM_KEY=VALUE", help="a worker setting")
    ap.add_argument("--out", type=Path)


def main(args: argparse.Namespace) -> int:
    summary = idle_first_chunk(args.set, args.jobs)
    for key, row in summary.items():
        print(f"{key:15s} P50 {row['p50']:7.1f} ms   max {row['max']:7.1f} ms")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"settings": args.set, "jobs": args.jobs - SKIP, "summary": summary}, indent=2))
    return 0
