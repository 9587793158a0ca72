"""The Celery app module of ``scripts/bench_host.py``'s worker: ``celery -A scripts.bench_host_worker worker`` runs
the farm's worker (``workers.app``, unchanged) and counts its Redis round trips (``scripts/round_trips.py``): every
connection of the process, the farm's broker, Celery's own (kombu's polling, task events, heartbeats) and the
health-check PINGs. The count goes to the file named by ``TTSFARM_BENCH_ROUND_TRIPS`` (JSON, rewritten ten times a
second). Production starts ``workers.app``, which never imports this module.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from scripts.round_trips import RoundTrips
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
