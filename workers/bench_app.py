"""The Celery app module of the benches' counted worker: ``celery -A workers.bench_app worker`` runs the farm's
worker (``workers.app``, unchanged) and counts its Redis round trips (``wire.redis.round_trips``): every connection
of the process, the farm's broker, Celery's own (kombu's polling, task events, heartbeats) and the health-check PINGs.
The count goes to the file named by ``TTSFARM_BENCH_ROUND_TRIPS`` (JSON, rewritten ten times a second).

Only benches and tests start it, by name (``ttsfarm bench host``, tests/test_redis_counts.py); production starts
``workers.app``, and no module imports this one (tests/test_structure.py checks).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from wire.redis.round_trips import RoundTrips
from workers.app import app

__all__ = ["app"]


def _report(path: Path, trips: RoundTrips) -> None:
    while True:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"round_trips": trips.total, "wall": time.time()}))
        tmp.replace(path)
        time.sleep(0.1)


_out = os.environ.get("TTSFARM_BENCH_ROUND_TRIPS")
if _out:
    threading.Thread(target=_report, args=(Path(_out), RoundTrips()), name="bench-round-trips", daemon=True).start()
