"""What the trim check costs a live reader: publish-to-yield latency of ``Job.stream`` (a blocking XREAD to wait,
then one ``MULTI`` read that also tells the trimmed count from the status's ``results_entries``) against the plain
blocking XREAD loop it replaced, side by side on one redis-server. The records are written as the worker's scripts
write them (counted in the status). Not a test: ``.venv/bin/python -m tests.bench_reader_latency``.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import redis

from producer.client import Client
from bench.processes import RedisServer
from producer.reader import ResultsReader
from wire.keys import Keys
from wire.records import chunk_fields, final_fields
from wire.settings import load_settings

SEGMENTS = 300
GAP_S = 0.02


def publish(r: redis.Redis, keys: Keys, job: str, sent: dict[int, float]) -> None:
    time.sleep(0.2)
    for seg in range(SEGMENTS):
        sent[seg] = time.perf_counter()
        r.xadd(keys.results(job), chunk_fields(seg, 0, True, "w/0", 24000, b"\x00" * 9600), maxlen=4000)
        r.hincrby(keys.status(job), "results_entries", 1)
        time.sleep(GAP_S)
    r.hset(keys.status(job), "state", "done")
    r.xadd(keys.results(job), final_fields("done"), maxlen=4000)
    r.hincrby(keys.status(job), "results_entries", 1)


def plain_xread(client: Client, job: str) -> dict[int, float]:
    """The reader loop before the trim check: XREAD BLOCK straight into the reader."""
    reader, key, got = ResultsReader(total=SEGMENTS), client.keys.results(job), {}
    while not reader.finished:
        reply = client.redis.xread({key: reader.last_id}, count=256, block=500)
        for entry_id, fields in reply[0][1] if reply else ():
            for chunk in reader.feed(entry_id, fields):
                got[chunk.seg] = time.perf_counter()
    return got


def job_stream(client: Client, job: str) -> dict[int, float]:
    return {chunk.seg: time.perf_counter() for chunk in client.job(job).stream(timeout=60)}


def run(name: str, client: Client, read: object, n: int) -> list[float]:
    job = f"bench-{name}-{n:04d}"
    client.redis.hset(client.keys.status(job), mapping={"state": "running", "total": SEGMENTS})
    sent: dict[int, float] = {}
    writer = threading.Thread(target=publish, args=(client.redis, client.keys, job, sent))
    writer.start()
    got = read(client, job)  # type: ignore[operator]
    writer.join()
    return [(got[s] - sent[s]) * 1000 for s in range(SEGMENTS)]


def main() -> int:
    server = RedisServer().start()
    try:
        settings = load_settings().replace(redis={"url": server.url})
        client = Client.from_url(settings=settings)
        results: dict[str, list[float]] = {"plain XREAD loop (before)": [], "Job.stream with trim check": []}
        for n in range(3):  # interleaved rounds, so both see the same machine load
            results["plain XREAD loop (before)"] += run("plain", client, plain_xread, n)
            results["Job.stream with trim check"] += run("stream", client, job_stream, n)
        for name, ms in results.items():
            ms.sort()
            print(f"{name:28s} n={len(ms)}  median {statistics.median(ms):.3f} ms  p95 {ms[int(0.95 * len(ms))]:.3f} ms  "
                  f"max {ms[-1]:.3f} ms")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
