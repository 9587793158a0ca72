"""What ``redis.wait_replicas`` costs a submit: the same submits to a local Sentinel group (a master, a replica,
three Sentinels: ``bench.processes.SentinelGroup``) with no wait and with WAIT 1.

    python scripts/bench_submit_wait.py [--jobs 300]

Per setting: submit latency p50 / p95 (the whole ``Client.submit``: text frontend, admission, and the WAIT where it
is on), round trips per submit (redis-py connection sends, counted), and commands per submit on the master (its
INFO commandstats). No worker runs: the jobs only queue. Prints a table for docs/BENCHMARKS.md, "Failover".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from producer.client import Client  # noqa: E402
from bench.processes import SentinelGroup  # noqa: E402
from wire.redis.steps import Command  # noqa: E402
from wire.settings import load_settings  # noqa: E402


def commands(client: Client) -> int:
    """Commands the master has run so far (INFO commandstats, summed)."""
    stats = client.broker.send(Command("info", ("commandstats",)))
    return sum(int(v["calls"]) for v in stats.values())


def measure(group: SentinelGroup, wait: int, jobs: int) -> dict[str, float]:
    env = {**group.env, "TTSFARM_REDIS_KEY_PREFIX": f"wait{wait}", "TTSFARM_REDIS_WAIT_REPLICAS": str(wait)}
    client = Client.from_url(settings=load_settings(env=env))
    for i in range(20):  # warm-up: connections, scripts, the frontend
        client.submit(f"Warm-up sentence number {i}.", voice="joe")
    conn = client.redis.connection_pool.get_connection()
    client.redis.connection_pool.release(conn)
    sends = [0]
    original = type(conn).send_packed_command

    def counted(self: object, *args: object, **kwargs: object) -> object:
        sends[0] += 1
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    type(conn).send_packed_command = counted  # type: ignore[method-assign]
    try:
        before, latencies = commands(client), []
        sends[0] = 0
        for i in range(jobs):
            t0 = time.perf_counter()
            client.submit(f"Sentence number {i} is queued and then read aloud.", voice="joe")
            latencies.append((time.perf_counter() - t0) * 1000)
        trips = sends[0]
        after = commands(client) - 1  # less the INFO that reads it
    finally:
        type(conn).send_packed_command = original  # type: ignore[method-assign]
    q = statistics.quantiles(latencies, n=20)
    return {"p50": statistics.median(latencies), "p95": q[18], "trips": trips / jobs, "commands": (after - before) / jobs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    args = ap.parse_args()
    group = SentinelGroup().start()
    try:
        rows = {wait: measure(group, wait, args.jobs) for wait in (0, 1)}
    finally:
        group.stop()
    print("| redis.wait_replicas | submit p50 ms | submit p95 ms | round trips per submit | commands per submit |")
    print("|---|---|---|---|---|")
    for wait, m in rows.items():
        print(f"| {wait} | {m['p50']:.2f} | {m['p95']:.2f} | {m['trips']:.2f} | {m['commands']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
