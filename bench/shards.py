"""Shards (``redis.shards``): the same backlog drained by one real worker over 1, 2 and 3 local Redis nodes.

    ttsfarm bench shards [--jobs 240] [--nodes 1 2 3] [--doc docs/lab/shards.md]

Per node count: that many private redis-servers on free ports (the first is ``redis.url``, the others
``redis.shards``); ``--jobs`` one-sentence English jobs (``joe``) submitted through the SDK before any worker runs
(they spread over the shards by id); then one ``celery -A workers.app worker`` starts and drains them. Measured:
segments/s over the drain (the first segment's start to the last job's end, from the jobs' status records), and for
each node its Redis CPU (``INFO cpu`` user + sys) and commands (``INFO commandstats``) from the worker's start to the
drained end, per segment of the whole run (the worker's startup and the bench's polls, one queue snapshot a second,
are in it). Prints a Markdown table; with ``--doc``, the table replaces the one under "## Shards" in that file.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench.processes import RedisServer, WorkerProcess
from producer.client import Client
from wire.settings import load_settings

SENTENCES = ["The morning train left the station on time.", "Please bring the blue folder to the meeting.",
             "Rain is expected later in the afternoon.", "She read the letter twice before answering.",
             "The garden needs water after a dry week.", "Our guests arrive at half past seven tonight."]


def node_stats(servers: list[RedisServer]) -> list[tuple[float, int]]:
    """Each node's Redis CPU seconds so far and commands run so far (asked on a connection of the bench's own)."""
    out = []
    for server in servers:
        r = redis.Redis.from_url(server.url)
        try:
            cpu = r.info("cpu")
            calls = sum(int(v["calls"]) for v in r.info("commandstats").values())
        finally:
            r.close()
        out.append((float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls))
    return out


def run(n: int, jobs: int, root: Path) -> dict[str, Any]:
    servers = [RedisServer().start() for _ in range(n)]
    env = {"TTSFARM_REDIS_URL": servers[0].url, "TTSFARM_REDIS_SHARDS": ",".join(s.url for s in servers[1:]),
           "TTSFARM_REDIS_KEY_PREFIX": f"shards{n}", "TTSFARM_STORAGE_LOCAL_DIR": str(root / f"storage{n}")}
    worker = None
    try:
        settings = load_settings(env=env)
        client = Client.from_url(settings=settings)
        ids = [client.submit(SENTENCES[i % len(SENTENCES)], voice="joe").id for i in range(jobs)]
        before = node_stats(servers)
        worker = WorkerProcess(f"bench-shards{n}@bench", env, log_path=root / f"worker{n}.log").start()
        while True:
            time.sleep(1.0)
            snap = client.broker.queue_snapshot(settings.queue.n_buckets)
            if sum(b.segments for b in snap.backlog.values()) == 0:
                break
            if worker.proc is not None and worker.proc.poll() is not None:
                raise RuntimeError(f"the worker exited: see {root / f'worker{n}.log'}")
        rows = client.broker.job_fields(ids, ("state", "started", "finished"))
        after = node_stats(servers)
        assert all(r[0] == "done" for r in rows), [r for r in rows if r[0] != "done"][:3]
        drain = max(float(r[2] or 0) for r in rows) - min(float(r[1] or 0) for r in rows)
        per_node = [((a[0] - b[0]) * 1000 / jobs, (a[1] - b[1]) / jobs) for a, b in zip(after, before)]
        client.close()
        return {"nodes": n, "segments": jobs, "drain_s": drain, "per_node": per_node}
    finally:
        if worker is not None:
            worker.stop()
        for s in servers:
            s.stop()


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| nodes | segments | drain (s) | segments/s | Redis CPU per segment, each node (ms) | all nodes (ms) | "
             "commands per segment, each node | all nodes |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        cpu = [c for c, _ in r["per_node"]]
        cmds = [k for _, k in r["per_node"]]
        lines.append(f"| {r['nodes']} | {r['segments']} | {r['drain_s']:.1f} | {r['segments'] / r['drain_s']:.1f} | "
                     f"{' / '.join(f'{c:.2f}' for c in cpu)} | {sum(cpu):.2f} | {' / '.join(f'{k:.0f}' for k in cmds)} | "
                     f"{sum(cmds):.0f} |")
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jobs", type=int, default=240)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--doc", default="", help="write the table into this file's '## Shards' section")


def main(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    results = []
    for n in args.nodes:
        results.append(run(n, args.jobs, root))
        print(f"{n} node(s): {results[-1]}", flush=True)
    out = (f"```bash\n{args.command}\n```\n\nRun {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
           f"{os.cpu_count()} cores shared with other work; one worker, default settings.\n\n{table(results)}\n")
    print(out)
    if args.doc:
        doc = Path(args.doc)
        text = doc.read_text(encoding="utf-8")
        block = f"<!-- bench_shards -->\n{out}<!-- end bench_shards -->"
        if "<!-- bench_shards -->" in text:
            text = re.sub(r"<!-- bench_shards -->.*?<!-- end bench_shards -->", lambda _: block, text, flags=re.S)
        else:
            text = text.rstrip("\n") + f"\n\n## Shards (issue 26)\n\n{block}\n"
        doc.write_text(text, encoding="utf-8")
    return 0
