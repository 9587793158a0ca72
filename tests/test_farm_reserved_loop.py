"""A loop reserved for the interactive lane serves a caller while the other loop is inside a bulk segment."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import Farm

pytestmark = pytest.mark.slow

LONG = ("The keeper of the lighthouse wrote long letters to his sister every winter evening, describing the storms, "
        "the ships that passed in the night, and the birds that rested on the rail before flying on to the south")


def _loops(client) -> list[dict]:  # type: ignore[no-untyped-def]
    """The inference loops the workers' heartbeats describe (empty until the voices are loaded)."""
    beats = [json.loads(v) for v in client.redis.hvals(client.keys.workers())]
    return [{**loop, "pid": beat["pid"]} for beat in beats for loop in beat.get("loops", [])]


def _cpu_s(loop: dict) -> float:
    """CPU time the loop's thread has used (Linux; the workers run on this machine)."""
    fields = Path(f"/proc/{loop['pid']}/task/{loop['tid']}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_interactive_job_starts_while_a_bulk_segment_is_running(redis_url: str, tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_INFERENCE_THREADS="2", TTSFARM_QUEUE_INTERACTIVE_LOOPS="1",
                TTSFARM_RUNTIME_INTRA_OP_THREADS="1")
    try:
        farm.start_worker()
        client = farm.client()
        deadline = time.monotonic() + 30
        while sum(1 for loop in _loops(client) if loop["tid"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        loops = _loops(client)
        assert sorted(str(loop["lanes"]) for loop in loops) == ["['interactive']", "all"]
        reserved = next(loop for loop in loops if loop["lanes"] == ["interactive"])
        bulk = [client.submit(f"{LONG}, part {i}.", voice="joe", lane="bulk") for i in range(8)]
        deadline = time.monotonic() + 60
        while "started" not in bulk[0].status() and time.monotonic() < deadline:
            time.sleep(0.01)
        # bulk work waits in the queue: the reserved loop, which may not take it, blocks instead of spinning
        before = _cpu_s(reserved)
        time.sleep(1.0)
        spent = _cpu_s(reserved) - before
        assert "started" not in bulk[-1].status()  # (the queue held bulk work the whole second)
        assert spent < 0.1, f"the reserved loop used {spent:.2f} s of CPU in 1 s while only bulk work was queued"
        interactive = client.submit("Are you there?", voice="joe")
        interactive.wait(timeout=60)
        first_bulk = bulk[0].wait(timeout=120)
        st, bst = interactive.status(), bulk[0].status()
        assert first_bulk.state == "done"
        # the caller's job ran beside the bulk segment, not after it
        assert st["started"] < bst["finished"], (st["started"], bst["finished"])
        assert st["worker"] != bst["worker"]  # ...on the reserved loop
        for job in bulk[1:]:
            assert job.wait(timeout=120).state == "done"  # and bulk still flows on the general loop
        # the general loop yields the cores to the reserved one: its OS thread runs at nice 19
        for loop in loops:
            want = 0 if loop["lanes"] == ["interactive"] else 19
            assert loop["nice"] == want and os.getpriority(os.PRIO_PROCESS, loop["tid"]) == want, loop
    finally:
        farm.stop()
