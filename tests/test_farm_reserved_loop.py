"""A loop reserved for the interactive lane serves a caller while the other loop is inside a bulk segment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import Farm

pytestmark = pytest.mark.slow

LONG = ("The keeper of the lighthouse wrote long letters to his sister every winter evening, describing the storms, "
        "the ships that passed in the night, and the birds that rested on the rail before flying on to the south")


def test_interactive_job_starts_while_a_bulk_segment_is_running(redis_url: str, tmp_path: Path) -> None:
    farm = Farm(redis_url, tmp_path, TTSFARM_QUEUE_INFERENCE_THREADS="2", TTSFARM_QUEUE_INTERACTIVE_LOOPS="1",
                TTSFARM_RUNTIME_INTRA_OP_THREADS="1")
    try:
        farm.start_worker()
        client = farm.client()
        bulk = [client.submit(f"{LONG}, part {i}.", voice="joe", lane="bulk") for i in range(3)]
        deadline = time.monotonic() + 60
        while "started" not in bulk[0].status() and time.monotonic() < deadline:
            time.sleep(0.01)
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
    finally:
        farm.stop()
