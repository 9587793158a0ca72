"""What one peek of the queue's heads costs inside Redis (``lua.HEADS``, the script ``RedisConsumer.heads`` runs), by
what it finds, on a private redis-server with the farm's ten bucket streams (two lanes of five buckets) and queue
entries of a one-sentence job's size.

    python -m bench.lab peeks [--calls 2000] [--text-chars 300]

Rows (microseconds per call, Redis's own ``INFO commandstats``): a full peek (every stream asked for its group's id,
as every ``FULL_PEEK_S``), a peek where two streams hold undelivered entries, and a peek where nothing moved since
the consumer's last look (one ``XREAD`` over the streams). Then what the parts cost inside a script of their own:
reading two entries of two streams into Lua (``XRANGE``), ``XINFO GROUPS`` of two streams, an ``XREAD`` over the ten
streams that finds nothing. Why (docs/lab/host-and-redis-path.md, "Where a worker's peeks come from"): every entry a
script reads becomes Lua strings (~1.5 us per KB), so a peek that finds heads costs more than one that finds none.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import redis

from bench.processes import RedisServer
from wire.keys import GROUP, Keys
from wire.redis.lua import HEADS


def _usec(r: redis.Redis, name: str) -> float:
    return float(r.info("commandstats").get(f"cmdstat_{name}", {}).get("usec", 0))


def timed(r: redis.Redis, source: str, keys: Sequence[str], argv: Sequence[str], calls: int) -> float:
    """Microseconds per call of ``source`` (Redis's time for the EVALSHA, inner commands included)."""
    sha = r.script_load(source)
    before = _usec(r, "evalsha")
    for _ in range(calls):
        r.evalsha(sha, len(keys), *keys, *argv)
    return (_usec(r, "evalsha") - before) / calls


def measure(calls: int, text_chars: int) -> dict[str, float]:
    server = RedisServer().start()
    try:
        r = redis.Redis.from_url(server.url)
        streams = Keys("peeks").queues(5)
        for s in streams:
            r.xgroup_create(s, GROUP, id="0", mkstream=True)
        job = json.dumps({"job_id": "j" * 32, "seg": 0, "total": 1, "voice": "joe", "lane": "interactive",
                          "text": "x" * text_chars})
        for s in streams[:2]:  # a consumer took and acked earlier entries, as the farm does: the group's id moved on
            for _ in range(50):
                eid = r.xadd(s, {"v": 1, "job": job})
                r.xreadgroup(GROUP, "c", {s: ">"}, count=1)
                r.xack(s, GROUP, eid)
                r.xdel(s, eid)
            for _ in range(2):  # two undelivered entries each
                r.xadd(s, {"v": 1, "job": job})
        out = {"full peek (every stream asked)": timed(r, HEADS, streams, [GROUP, *[""] * len(streams)], calls)}
        ids = [i.decode() if i else "" for i in r.evalsha(r.script_load(HEADS), len(streams), *streams, GROUP,
                                                           *[""] * len(streams))[0]]
        out["two streams with heads, the rest unmoved"] = timed(r, HEADS, streams, [GROUP, *ids], calls)
        for s in streams[:2]:
            for eid, _ in r.xreadgroup(GROUP, "c", {s: ">"}, count=5)[0][1]:
                r.xack(s, GROUP, eid)
                r.xdel(s, eid)
        ids = [i.decode() if i else "" for i in r.evalsha(r.script_load(HEADS), len(streams), *streams, GROUP,
                                                           *[""] * len(streams))[0]]
        out["nothing moved"] = timed(r, HEADS, streams, [GROUP, *ids], calls)
        for s in streams[:2]:
            r.xadd(s, {"v": 1, "job": job})
            r.xadd(s, {"v": 1, "job": job})
        out["part: XRANGE of two entries, two streams"] = timed(
            r, "redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 2) redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 2)",
            streams, [], calls)
        out["part: XINFO GROUPS, two streams"] = timed(
            r, "redis.call('XINFO', 'GROUPS', KEYS[1]) redis.call('XINFO', 'GROUPS', KEYS[2])", streams, [], calls)
        out["part: XREAD of ten streams, nothing after"] = timed(
            r, "local a = {'XREAD', 'COUNT', 2, 'STREAMS'} for _, k in ipairs(KEYS) do a[#a + 1] = k end "
               "for _ in ipairs(KEYS) do a[#a + 1] = '99999999999999-0' end redis.call(unpack(a))", streams, [], calls)
        out["part: an empty script"] = timed(r, "return 1", streams, [], calls)
        return out
    finally:
        server.stop()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--text-chars", type=int, default=300, help="the queued sentence's length")


def main(args: argparse.Namespace) -> int:
    for name, us in measure(args.calls, args.text_chars).items():
        print(f"{name:48s} {us:7.1f} us")
    return 0
