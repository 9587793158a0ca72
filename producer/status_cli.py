"""`ttsfarm status`: the farm on one screen, from Redis alone (no worker is asked anything).

Workers come from their heartbeats (state, age, voices and their versions, batches, segments per
minute), lanes from the backlog counters the producers and workers keep (segments, predicted seconds)
and from XINFO GROUPS on each bucket stream (lag: not yet delivered; pending: claimed, not acked).
Recent errors are the dead-letter stream's tail and the failures the workers' heartbeats list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis

from producer.wire import heartbeats
from producer.wire.keys import GROUP, LANES, Keys
from producer.wire.records import parse_dead_letter

STALE_S = 10.0  # a heartbeat older than this: the worker is gone or stuck (workers beat every 2 s)


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


@dataclass
class Snapshot:
    at: float
    workers: list[dict[str, Any]] = field(default_factory=list)
    lanes: dict[str, dict[str, float]] = field(default_factory=dict)
    buckets: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    dead_letter_count: int = 0
    recent_errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def segments_per_min(self) -> float:
        return sum(float(w.get("segments_per_min") or 0.0) for w in self.workers if w["alive"])


def snapshot(r: redis.Redis, keys: Keys, n_buckets: int, *, dead_letters: int = 5) -> Snapshot:
    now = time.time()
    snap = Snapshot(at=now)
    for worker_id, info in sorted(heartbeats.read(r, keys).items()):
        info["id"] = worker_id
        info["age"] = now - float(info.get("ts") or 0)
        info["alive"] = info.get("state") not in ("stopped",) and info["age"] <= STALE_S
        snap.workers.append(info)
        for err in info.get("recent_errors") or []:
            snap.recent_errors.append({**err, "worker": info["id"]})
    snap.recent_errors.sort(key=lambda e: e.get("ts", 0), reverse=True)

    streams = [(lane, b, keys.queue(lane, b)) for lane in LANES for b in range(n_buckets)]
    pipe = r.pipeline(transaction=False)
    for lane in LANES:
        pipe.hgetall(keys.backlog(lane))
    for _, _, stream in streams:
        pipe.xlen(stream)
        pipe.xinfo_groups(stream)
    pipe.xlen(keys.dead_letters())
    pipe.xrevrange(keys.dead_letters(), count=dead_letters)
    replies = pipe.execute(raise_on_error=False)

    for lane, raw in zip(LANES, replies[: len(LANES)]):
        backlog = {} if isinstance(raw, Exception) else {_s(k): _s(v) for k, v in raw.items()}
        snap.lanes[lane] = {"segments": float(backlog.get("n") or 0), "seconds": float(backlog.get("s") or 0)}
    rest = replies[len(LANES) :]
    for i, (lane, bucket, stream) in enumerate(streams):
        length, groups = rest[2 * i], rest[2 * i + 1]
        group = None if isinstance(groups, Exception) else next((g for g in groups if _s(g.get("name")) == GROUP), None)
        snap.buckets.append({
            "lane": lane, "bucket": bucket, "stream": stream,
            "length": 0 if isinstance(length, Exception) else int(length),
            "lag": None if group is None or group.get("lag") is None else int(group["lag"]),
            "pending": 0 if group is None else int(group.get("pending") or 0),
            "consumers": 0 if group is None else int(group.get("consumers") or 0),
        })
    dlq_len, dlq = rest[-2], rest[-1]
    snap.dead_letter_count = 0 if isinstance(dlq_len, Exception) else int(dlq_len)
    for entry_id, fields in [] if isinstance(dlq, Exception) else dlq:
        d = parse_dead_letter(entry_id, fields)
        snap.dead_letters.append({"id": d.id, "ts": d.ts, "code": d.code, "job": d.job_id, "message": d.message})
    return snap


def _ago(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def render(snap: Snapshot, *, width: int = 100) -> str:
    out: list[str] = []
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.at))
    alive = [w for w in snap.workers if w["alive"]]
    out.append(f"ttsfarm status  {stamp}   workers {len(alive)} up / {len(snap.workers)} known   "
               f"throughput {snap.segments_per_min:.1f} segments/min")
    out.append("")
    out.append("WORKERS")
    out.append(f"  {'worker':<40} {'state':<9} {'age':>5} {'batches':>8} {'segments':>9} {'seg/min':>8}  voices")
    if not snap.workers:
        out.append("  (no heartbeats)")
    for w in snap.workers:
        state = w.get("state", "?") if w["alive"] or w.get("state") == "stopped" else f"{w.get('state', '?')}?"
        versions = w.get("voice_info") or {}
        voices = " ".join(f"{v}" + (f"@v{versions[v]['version']}" if versions.get(v, {}).get("version", 1) > 1 else "")
                          + (f"[{versions[v]['precision']}]" if versions.get(v, {}).get("precision") else "")
                          for v in w.get("voices") or [])  # joe@v2[int8+fp32]: the precision really served
        out.append(f"  {w['id'][:40]:<40} {state:<9} {_ago(w['age']):>5} {w.get('batches', 0):>8} {w.get('segments', 0):>9} "
                   f"{float(w.get('segments_per_min') or 0):>8.1f}  {voices}"[:width + 40])
        served = ", ".join(f"{v} {i.get('precision') or '?'} on {i['provider'].removesuffix('ExecutionProvider')}"
                           for v, i in sorted(versions.items()) if i.get("provider"))
        if served:
            out.append(f"    served: {served}"[:width])
        if w.get("error"):
            out.append(f"    error: {w['error'][:width]}")
        for name, why in sorted((w.get("voices_failed") or {}).items()):
            out.append(f"    not serving {name}: {why}"[:width])
        reload = w.get("reload") or {}
        if reload and not reload.get("ok"):
            out.append(f"    last reload failed: {str(reload.get('error', ''))[:width]}")
    out.append("")
    out.append("LANES")
    for lane in LANES:
        b = snap.lanes.get(lane, {})
        out.append(f"  {lane:<12} backlog {int(b.get('segments', 0)):>7} segments  {b.get('seconds', 0.0):>10.1f} s of audio predicted")
    out.append(f"  {'stream':<32} {'length':>7} {'lag':>7} {'pending':>8} {'consumers':>10}")
    for q in snap.buckets:
        lag = "-" if q["lag"] is None else str(q["lag"])
        out.append(f"  {q['stream']:<32} {q['length']:>7} {lag:>7} {q['pending']:>8} {q['consumers']:>10}")
    out.append("")
    out.append(f"RECENT ERRORS   dead letters: {snap.dead_letter_count}")
    rows = [{**d, "where": "dead-letter"} for d in snap.dead_letters]
    rows += [{**e, "where": e.get("stage", "job")} for e in snap.recent_errors]
    rows.sort(key=lambda e: e.get("ts", 0), reverse=True)
    if not rows:
        out.append("  (none)")
    for e in rows[:10]:
        when = time.strftime("%H:%M:%S", time.localtime(float(e.get("ts") or 0)))
        out.append(f"  {when} {e['where']:<11} {e.get('code', ''):<22} job={e.get('job') or '-':<24} {str(e.get('message', ''))[:48]}")
    return "\n".join(out)


def run(r: redis.Redis, keys: Keys, n_buckets: int, *, watch: float = 0.0, iterations: int = 0) -> int:
    """Print one screen; with ``watch`` seconds, redraw it until interrupted (or ``iterations`` times)."""
    import sys

    n = 0
    while True:
        screen = render(snapshot(r, keys, n_buckets))
        if watch > 0 and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")
        print(screen, flush=True)
        n += 1
        if watch <= 0 or (iterations and n >= iterations):
            return 0
        time.sleep(watch)
        if not sys.stdout.isatty():
            print()
