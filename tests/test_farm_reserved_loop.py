"""A loop reserved for the interactive lane serves a caller while the other loop is inside a bulk segment."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import Farm
from workers.layout import usable_cores

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


def _nice(pid: int, tid: int) -> int:
    """A thread's nice, from /proc (field 19 of its stat line)."""
    return int(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])


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
        shared = next(loop for loop in loops if loop["lanes"] == "all")
        # the reserved loop runs its own session with a thread per core; the shared one keeps its single thread
        assert (reserved["intra_op_threads"], shared["intra_op_threads"]) == (usable_cores(), 1)
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
        # submit the caller's job just as a bulk job starts, so that one is surely running beside it
        nxt = next(job for job in bulk if "started" not in job.status())
        while "started" not in nxt.status() and time.monotonic() < deadline + 60:
            time.sleep(0.005)
        interactive = client.submit("Are you there?", voice="joe")
        assert interactive.wait(timeout=60).state == "done"
        for job in bulk:
            assert job.wait(timeout=120).state == "done"  # and bulk still flows on the general loop
        st, bulk_st = interactive.status(), [job.status() for job in bulk]
        # the caller's job ran beside a bulk segment, not after it (the general loop runs one job at a time)...
        beside = [b for b in bulk_st if float(b["started"]) < float(st["started"]) < float(b["finished"])]
        assert beside, (st["started"], [(b["started"], b["finished"]) for b in bulk_st])
        assert st["worker"] == reserved["consumer"] != beside[0]["worker"]  # ...on the reserved loop
        # bulk batches ran on the general loop's helper thread at nice 19, so they yield the cores at once;
        # the loops' own threads keep nice 0 for interactive work
        loops = _loops(client)
        shared = next(loop for loop in loops if loop["lanes"] == "all")
        assert shared["bulk_nice"] == 19 and _nice(shared["pid"], shared["bulk_tid"]) == 19, shared
        for loop in loops:
            assert loop["nice"] == 0 and _nice(loop["pid"], loop["tid"]) == 0, loop
    finally:
        farm.stop()
