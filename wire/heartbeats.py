"""The workers' heartbeats: one JSON record per worker process in the hash ``Keys.workers()`` (field
``host:pid``), rewritten every 2 s by ``workers/farm.py``: ``state`` (``serving``, ``stopped``, ...), ``ts``,
the voices loaded and their versions, batches and segments done, the last reload and recent errors.

Encoded (``encode``) and decoded (``decode``) here, and stored and read only through the broker's steps
(``Broker.write_heartbeat``, ``Broker.read_heartbeats``; the SDK's ``workers()``): by ``ttsfarm status``,
``ttsfarm voices reload`` (which waits for each worker's reload report), the local launcher (``bench.processes``:
is the worker it started serving?) and a front end's "is any worker serving?" (``serving``: the gateway's 503
NO_WORKERS).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wire.records import text_of


def encode(hostname: str, pid: int, info: Mapping[str, Any]) -> tuple[str, str]:
    """One worker process's record as stored: its field (``host:pid``) and its value (JSON)."""
    return f"{hostname}:{pid}", json.dumps(info)


def decode(raw: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    """Each worker's record by its field (``host:pid``); a field that is not a JSON object is skipped."""
    beats: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        try:
            info = json.loads(value)
        except (ValueError, TypeError):
            continue
        if isinstance(info, dict):
            beats[text_of(name)] = info
    return beats


def serving(beats: Mapping[str, Mapping[str, Any]], now: float, fresh_s: float) -> int:
    """How many workers say ``serving`` in a heartbeat at most ``fresh_s`` old (either way: clocks differ)."""
    fresh = 0
    for info in beats.values():
        try:
            ts = float(info.get("ts") or 0)
        except (ValueError, TypeError):
            continue
        if info.get("state") == "serving" and abs(now - ts) <= fresh_s:
            fresh += 1
    return fresh
