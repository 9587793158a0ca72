"""The workers' heartbeat records as the wire reads them (``wire.heartbeats``): what the status screen,
``voices reload`` and the gateway's NO_WORKERS check see."""

from __future__ import annotations

import json

from wire import heartbeats
from wire.keys import Keys
from wire.redis.broker import RedisBroker


def test_decode_keeps_json_objects_by_worker_and_skips_the_rest() -> None:
    raw = {b"w1@h:11": json.dumps({"state": "serving", "ts": 100.0}).encode(), "w2@h:12": json.dumps({"state": "stopped"}),
           b"w3@h:13": b"{not json", b"w4@h:14": b"[1, 2]", b"w5@h:15": b"null"}
    assert heartbeats.decode(raw) == {"w1@h:11": {"state": "serving", "ts": 100.0}, "w2@h:12": {"state": "stopped"}}


def test_serving_counts_fresh_serving_workers_only() -> None:
    beats = {"a": {"state": "serving", "ts": 100.0}, "b": {"state": "serving", "ts": 103.0},  # a clock ahead counts
             "c": {"state": "serving", "ts": 80.0},  # stale
             "d": {"state": "loading", "ts": 100.0}, "e": {"state": "serving", "ts": "soon"}, "f": {"state": "serving"}}
    assert heartbeats.serving(beats, now=101.0, fresh_s=5.0) == 2
    assert heartbeats.serving(beats, now=101.0, fresh_s=30.0) == 3
    assert heartbeats.serving({}, now=101.0, fresh_s=5.0) == 0


class _Hash:
    """The one call ``RedisBroker.write_heartbeat`` makes, recorded."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, str]] = {}

    def hset(self, key: str, field: str, value: str) -> None:
        self.data.setdefault(key, {})[field] = value


def test_a_written_heartbeat_reads_back_under_host_and_pid() -> None:
    keys, conn = Keys("hb-test"), _Hash()
    RedisBroker(conn, keys).write_heartbeat("w1@h", 4321, {"state": "serving", "ts": 5.0, "voices": ["joe"]})
    assert list(conn.data) == [keys.workers()]
    assert heartbeats.decode(conn.data[keys.workers()]) == {"w1@h:4321": {"state": "serving", "ts": 5.0, "voices": ["joe"]}}
