"""What a listener's reads cost Redis: the SDK's ``Job.stream`` on a private redis-server, reading a job's results
stream as a worker writes it, with Redis's own accounting (``INFO commandstats``: microseconds of the commands the
reads sent, a MULTI's or a script's with the commands it ran, per entry read).

    python scripts/bench_read_cost.py [--entries 200] [--sizes 22050,110250]

Two ways of reading, each on entries of each size (PCM16 at 22.05 kHz: 22,050 bytes are half a second, a vocoder
window; 110,250 bytes 2.5 s, a segment published whole): ``tail``, the listener keeps up (an entry is written, the
reader wakes and reads it: one read per entry), and ``behind``, the entries are all there before the reader starts
(reads of up to 256 entries). The entries are written as the worker's scripts write them (trimmed at the farm's
``results_maxlen``, counted in the status's ``results_entries``); the writer's commands are not counted.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

import redis

from producer.client import Client
from bench.processes import RedisServer
from wire.keys import Keys
from wire.records import chunk_fields, final_fields
from wire.settings import load_settings

INNER = {"xrange", "xlen", "hget", "exists", "xinfo|stream"}  # the reader sends these only in a MULTI or a script
WRITER = {"xadd", "hincrby", "hset", "config|resetstat", "info", "client|setinfo", "client|setname", "hello"}


def write(r: redis.Redis, keys: Keys, job: str, entries: int, size: int, gap_s: float, maxlen: int) -> None:
    pcm = b"\x01\x00" * (size // 2)
    for seg in range(entries):
        r.xadd(keys.results(job), chunk_fields(seg, 0, True, "w/0", 22050, pcm), maxlen=maxlen, approximate=True)
        r.hincrby(keys.status(job), "results_entries", 1)
        if gap_s:
            time.sleep(gap_s)
    r.hset(keys.status(job), "state", "done")
    r.xadd(keys.results(job), final_fields("done"), maxlen=maxlen, approximate=True)
    r.hincrby(keys.status(job), "results_entries", 1)


def measure(client: Client, r: redis.Redis, job: str, entries: int, size: int, *, tail: bool, maxlen: int) -> dict[str, Any]:
    keys = client.keys
    r.delete(keys.results(job), keys.status(job))
    r.hset(keys.status(job), mapping={"state": "running", "total": entries})
    writer = threading.Thread(target=write, args=(r, keys, job, entries, size, 0.004 if tail else 0.0, maxlen))
    if not tail:
        writer.run()
    r.config_resetstat()
    if tail:
        writer.start()
    got = sum(1 for _ in client.job(job).stream(timeout=120, block_ms=1000))
    if tail:
        writer.join()
    stats = {k[len("cmdstat_"):]: v for k, v in r.info("commandstats").items() if k.startswith("cmdstat_")}
    reads = {k: v for k, v in stats.items() if k not in WRITER}
    # EXEC's and EVALSHA's time includes the commands they ran, which Redis also counts under their own names
    inner = sum(v["usec"] for k, v in reads.items() if k in INNER)
    usec = sum(v["usec"] for v in reads.values()) - inner
    assert got == entries, (got, entries)
    return {"usec_per_entry": usec / entries, "commands_per_entry": sum(v["calls"] for v in reads.values()) / entries,
            "calls": {k: v["calls"] for k, v in reads.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=200)
    ap.add_argument("--sizes", default="22050,110250", help="bytes of PCM per entry")
    args = ap.parse_args(argv)
    settings = load_settings()
    server = RedisServer().start()
    try:
        r = redis.Redis.from_url(server.url)
        client = Client.from_url(server.url, settings=settings)
        print("| read | entry | Redis us per entry read | commands per entry | commands |")
        print("|---|---:|---:|---:|---|")
        for tail in (True, False):
            for size in (int(x) for x in args.sizes.split(",")):
                m = measure(client, r, "readcost", args.entries, size, tail=tail, maxlen=settings.queue.results_maxlen)
                calls = ", ".join(f"{k.upper()} {v}" for k, v in sorted(m["calls"].items(), key=lambda kv: -kv[1]))
                print(f"| {'tail' if tail else 'behind'} | {size:,} B | {m['usec_per_entry']:.1f} | "
                      f"{m['commands_per_entry']:.2f} | {calls} |")
        client.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
