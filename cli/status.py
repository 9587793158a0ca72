"""`ttsfarm status`: the farm on one screen, from the broker alone (no worker is asked anything).

Workers come from their heartbeats (state, age, voices and their versions, batches, segments per minute),
lanes and recent dead letters from the broker's queue snapshot (``wire.snapshot``: the backlog
counters the producers and workers keep, each bucket stream's lag (not yet delivered) and pending count
(claimed, not acked)). Recent errors are the dead-letter stream's tail and the failures the workers'
heartbeats list.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cli.common import client_of
from wire.broker import AdminBroker, run_blocking
from wire.snapshot import QueueSnapshot

STALE_S = 10.0  # a heartbeat older than this: the worker is gone or stuck (workers beat every 2 s)


def add_commands(sub: Any) -> None:
    p = sub.add_parser("status", help="workers, lanes and backlog, throughput and recent errors on one screen")
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=0.0, metavar="SECONDS",
                   help="redraw every SECONDS (default 2) until interrupted")
    p.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    client = client_of(args)
    return run(client.broker, client.settings.queue.n_buckets, watch=args.watch, iterations=args.iterations)


@dataclass
class Snapshot:
    at: float
    queues: QueueSnapshot
    workers: list[dict[str, Any]] = field(default_factory=list)
    recent_errors: list[dict[str, Any]] = field(default_factory=list)
    redis: dict[str, Any] = field(default_factory=dict)  # the broker's ``topology``

    @property
    def segments_per_min(self) -> float:
        return sum(float(w.get("segments_per_min") or 0.0) for w in self.workers if w["alive"])


def snapshot(broker: AdminBroker, n_buckets: int, *, dead_letters: int = 5) -> Snapshot:
    """The heartbeats and the queue snapshot (with the newest ``dead_letters``), two reads."""
    beats = run_blocking(broker, broker.read_heartbeats())
    now = time.time()
    snap = Snapshot(at=now, queues=broker.queue_snapshot(n_buckets, dead_letters=dead_letters), redis=broker.topology())
    for worker_id, info in sorted(beats.items()):
        info["id"] = worker_id
        info["age"] = now - float(info.get("ts") or 0)
        info["alive"] = info.get("state") not in ("stopped",) and info["age"] <= STALE_S
        snap.workers.append(info)
        for err in info.get("recent_errors") or []:
            snap.recent_errors.append({**err, "worker": info["id"]})
    snap.recent_errors.sort(key=lambda e: e.get("ts", 0), reverse=True)
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
    out.append(_redis_line(snap))
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
        if w.get("redis_master"):
            out.append(f"    redis master {w['redis_master']}, failovers followed {w.get('redis_failovers', 0)}")
        reload = w.get("reload") or {}
        if reload and not reload.get("ok"):
            out.append(f"    last reload failed: {str(reload.get('error', ''))[:width]}")
    out.append("")
    out.append("LANES")
    for lane, b in snap.queues.backlog.items():
        out.append(f"  {lane:<12} backlog {int(b.segments):>7} segments  {b.seconds:>10.1f} s of audio predicted"
                   f"  ({b.staged} staged)")
    out.append(f"  {'stream':<32} {'length':>7} {'lag':>7} {'pending':>8} {'consumers':>10}")
    for q in snap.queues.buckets:
        lag = "-" if q.lag is None else str(q.lag)
        out.append(f"  {q.stream:<32} {q.length:>7} {lag:>7} {q.pending:>8} {q.consumers:>10}")
    out.append("")
    out.append(f"RECENT ERRORS   dead letters: {snap.queues.dead_letter_count}")
    rows = [{"id": d.id, "ts": d.ts, "code": d.code, "job": d.job_id, "message": d.message, "where": "dead-letter"}
            for d in snap.queues.dead_letters]
    rows += [{**e, "where": e.get("stage", "job")} for e in snap.recent_errors]
    rows.sort(key=lambda e: e.get("ts", 0), reverse=True)
    if not rows:
        out.append("  (none)")
    for e in rows[:10]:
        when = time.strftime("%H:%M:%S", time.localtime(float(e.get("ts") or 0)))
        out.append(f"  {when} {e['where']:<11} {e.get('code', ''):<22} job={e.get('job') or '-':<24} {str(e.get('message', ''))[:48]}")
    return "\n".join(out)


def _redis_line(snap: Snapshot) -> str:
    """REDIS: the master and its replicas; for a Sentinel group its name, Sentinels answering, and the failovers
    the live workers followed."""
    r = snap.redis
    line = f"REDIS  master {r.get('master', '?')}  replicas {r.get('replicas', '?')}"
    if "group" in r:
        followed = max((int(w.get("redis_failovers") or 0) for w in snap.workers if w["alive"]), default=0)
        line += (f"  sentinel group {r['group']!r}: {r['guards_up']}/{r['guards']} sentinels answer, "
                 f"failovers followed by workers {followed}")
    if r.get("error"):
        line += f"  error: {r['error']}"
    if "shards" in r:  # redis.shards: the first shard's line above, then every shard's node
        line += f"\n       shards {len(r['shards'])}: " + ", ".join(
            f"{s.get('master', '?')}" + (f" (error: {s['error']})" if s.get("error") else "") for s in r["shards"])
    return line


def run(broker: AdminBroker, n_buckets: int, *, watch: float = 0.0, iterations: int = 0) -> int:
    """Print one screen; with ``watch`` seconds, redraw it until interrupted (or ``iterations`` times). An interrupt
    (Ctrl-C, SIGINT) while watching ends the loop at its next step with 130; a second one stops at once."""
    interrupted = threading.Event()
    previous = _on_interrupt(interrupted) if watch > 0 else None
    try:
        n = 0
        while not interrupted.is_set():
            screen = render(snapshot(broker, n_buckets))
            if watch > 0 and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            print(screen, flush=True)
            n += 1
            if watch <= 0 or (iterations and n >= iterations):
                return 0
            if interrupted.wait(watch):
                break
            if not sys.stdout.isatty():
                print()
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _on_interrupt(interrupted: threading.Event) -> Any:
    """Let SIGINT set ``interrupted`` instead of raising KeyboardInterrupt wherever the main thread is: raised inside
    a finalizer (a connection's ``__del__`` run by the collector) Python reports and drops it, and the watch would
    go on. The second SIGINT gets the handler that was there before. None where signals cannot be set (not the
    main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler set from C: Python's own stands in for it
        previous = signal.default_int_handler

    def handler(signum: int, frame: object) -> None:
        interrupted.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, handler)
    return previous
