"""What one peek of the queue's heads costs inside Redis (the script a worker's consumer runs: ``Consumer.heads``
without waiting), by what it finds, on a private redis-server with the farm's ten bucket streams (two lanes of five
buckets) and queue entries of a one-sentence job.

    python -m bench.lab peeks [--calls 2000]

Rows (microseconds per call, Redis's own ``INFO commandstats`` for ``EVALSHA``): a full peek (a consumer's first,
every stream asked for its group's id, as every ``FULL_PEEK_S``), a peek where two streams hold undelivered entries
(the same consumer again), and a peek where nothing moved since its last look (one ``XREAD`` over the streams in the
script). Why (docs/lab/host-and-redis-path.md, "Where a worker's peeks come from"): every entry a script reads
becomes Lua strings (~1.5 us per KB), so a peek that finds heads costs more than one that finds none.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import redis

from bench.processes import RedisServer
from producer.client import Client
from wire.connect import connect_url
from wire.keys import Keys
from wire.settings import load_settings

PREFIX = "peeks"


def timed(r: redis.Redis, peek: Callable[[], object], calls: int) -> float:
    """Microseconds of Redis per call of ``peek`` (its scripts, inner commands included)."""
    def usec() -> float:
        return float(r.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))

    before = usec()
    for _ in range(calls):
        peek()
    return (usec() - before) / calls


def measure(calls: int) -> dict[str, float]:
    server = RedisServer().start()
    try:
        r = redis.Redis.from_url(server.url)
        broker = connect_url(server.url, key_prefix=PREFIX)
        settings = load_settings(env={"TTSFARM_REDIS_URL": server.url, "TTSFARM_REDIS_KEY_PREFIX": PREFIX})
        streams = Keys(PREFIX).queues(settings.queue.n_buckets)
        client = Client.from_url(settings=settings)
        client.ensure_groups()
        for i, lane in enumerate(("interactive", "bulk") * 2):  # two undelivered entries on each of two streams
            client.submit("The quick brown fox jumps over the lazy dog near the quiet river bank.",
                          job_id=f"peeks-job-{i:04d}", lane=lane)
        out = {"full peek (a consumer's first: every stream asked)":
               timed(r, lambda: broker.consumer("full", streams).heads(0), calls)}
        same = broker.consumer("same", streams)
        same.heads(0)
        out["two streams with heads, the rest unmoved"] = timed(r, lambda: same.heads(0), calls)
        taker = broker.consumer("taker", streams)
        for head in taker.heads(0):
            taker.ack(taker.claim(head.stream, 10))
        same.heads(0)
        out["nothing moved since its last look"] = timed(r, lambda: same.heads(0), calls)
        client.close()
        return out
    finally:
        server.stop()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--calls", type=int, default=2000)


def main(args: argparse.Namespace) -> int:
    for name, us in measure(args.calls).items():
        print(f"{name:52s} {us:7.1f} us")
    return 0
