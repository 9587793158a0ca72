"""Redis work per segment and per idle second, counted (not timed), so a change that adds commands or round trips
to the worker's path fails here. One real worker (``celery -A scripts.bench_host_worker worker``: the farm's worker
with its round trips counted) on a private redis-server drains a backlog submitted before it starts, serving the null
voice (the real English frontend and stage shapes, no model cost: ``pipeline/voices/null``). Commands are Redis's
own count (``INFO commandstats``; a script's inner commands count as Redis counts them); round trips the worker's
(``scripts/round_trips.py``). ``scripts/bench_host.py`` measures the same path at scale (docs/BENCHMARKS.md).

Per segment counts the drain's commands less what the worker does by the clock (sweeps, reclaims, heartbeats, idle
reads: the idle phase's rate over the drain's time), so a slow drain on a busy machine does not count more. The
ceilings are today's counts with a little room for what timing moves (how the two loops split a batch, steps that
find nothing new); lower them when a change brings the counts down.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.load import PARAGRAPHS_EN, SHORT_EN
from producer.local import RedisServer, WorkerProcess
from producer.wire.keys import Keys
from producer.wire.redis_broker import RedisBroker
from producer.wire.settings import load_settings
from scripts.bench_host import NULL_VOICE, config_dir, counters_delta, fresh_record, redis_counters, wait_serving

pytestmark = pytest.mark.slow

# ceilings (today's counts, measured 2026-12-01 on this scenario, plus room for timing)
MAX_COMMANDS_PER_SEGMENT = 41.0  # measured 36.5 (before issue 23: 56.6-58.2, background not taken out)
MAX_ROUND_TRIPS_PER_SEGMENT = 5.0  # 4.0 (12.8-13.4)
MAX_IDLE_COMMANDS_PER_S = 22.0  # 14.5-17.8 (88.8-92.8)
MAX_IDLE_ROUND_TRIPS_PER_S = 16.0  # 10.8-13.5 (31.9-33.3)

PREFIX = "counts"


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work_dir = tmp_path_factory.mktemp("counts")
    trips_file, stats_file = work_dir / "round_trips.json", work_dir / "device.json"
    server = RedisServer().start()
    worker: WorkerProcess | None = None
    try:
        env = {"TTSFARM_CONFIG_DIR": str(config_dir(work_dir, "none", stats_file, 8)), "TTSFARM_REDIS_URL": server.url,
               "TTSFARM_REDIS_KEY_PREFIX": PREFIX, "TTSFARM_STORAGE_BACKEND": "local",
               "TTSFARM_STORAGE_LOCAL_DIR": str(work_dir / "storage"), "TTSFARM_RUNTIME_DEVICE": "cpu",
               "TTSFARM_QUEUE_MAX_BATCH_CPU": "8", "TTSFARM_QUEUE_INFERENCE_THREADS": "2"}
        settings = load_settings(env=env)
        from producer.client import Client

        jobs = []
        with Client.from_url(settings=settings) as client:
            for text in [*SHORT_EN[:16], *SHORT_EN[:16]]:
                jobs.append(client.submit(text, voice=NULL_VOICE, lane="interactive", format="wav"))
            for text in PARAGRAPHS_EN[:4]:
                jobs.append(client.submit(text, voice=NULL_VOICE, lane="bulk", format="wav"))
        r = redis.Redis.from_url(server.url)
        keys = Keys(PREFIX)
        worker = WorkerProcess(f"counts-{time.time_ns()}@test", {**env, "TTSFARM_BENCH_ROUND_TRIPS": str(trips_file)},
                               log_path=work_dir / "worker.log", app="scripts.bench_host_worker").start()
        wait_serving(RedisBroker(r, keys), worker)
        rt0, c0 = fresh_record(trips_file, time.time()), redis_counters(r)
        polls = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.1)
            polls += 1
            if all(float(r.hget(keys.backlog(lane), "n") or 0) <= 0 for lane in ("interactive", "bulk")):
                break
        c1, rt1 = redis_counters(r), fresh_record(trips_file, time.time())
        drain = counters_delta(c0, c1, Counter(hget=2 * polls))
        time.sleep(0.5)  # the last job's housekeeping done
        i0, irt0 = redis_counters(r), fresh_record(trips_file, time.time())
        time.sleep(3.0)
        i1, irt1 = redis_counters(r), fresh_record(trips_file, time.time())
        idle = counters_delta(i0, i1, Counter())
        states = [r.hget(keys.status(j.id), "state") for j in jobs]
        segments = sum(j.total for j in jobs)
        idle_trips = (irt1["round_trips"] - irt0["round_trips"]) / (irt1["wall"] - irt0["wall"])
        # what the worker does by the clock (sweeps, reclaims, heartbeats, idle reads) at the idle rate, taken out of
        # the drain: a slow drain on a busy machine would otherwise count more of it per segment
        background = {k: v / idle["wall_s"] * drain["wall_s"] for k, v in idle["calls"].items()}
        work = {k: v - background.get(k, 0.0) for k, v in drain["calls"].items()}
        return {"segments": segments, "jobs": len(jobs), "states": states, "drain": drain, "work": work,
                "round_trips": rt1["round_trips"] - rt0["round_trips"] - idle_trips * (rt1["wall"] - rt0["wall"]),
                "idle": idle, "idle_round_trips_per_s": idle_trips, "log": Path(work_dir / "worker.log")}
    finally:
        if worker is not None:
            worker.stop(timeout=30)
        server.stop()


def test_backlog_drained(counted: dict[str, Any]) -> None:
    assert counted["states"] == [b"done"] * counted["jobs"], counted["log"].read_text()[-3000:]
    assert counted["segments"] > counted["jobs"]  # the paragraphs are several segments each


def test_redis_commands_and_round_trips_per_segment(counted: dict[str, Any]) -> None:
    n = counted["segments"]
    per_segment = sum(counted["work"].values()) / n
    trips = counted["round_trips"] / n
    detail = {k: round(v / n, 2) for k, v in counted["work"].items() if v / n >= 0.01}
    print(f"\n{n} segments: {per_segment:.1f} commands, {trips:.1f} round trips per segment; {detail}")
    assert per_segment <= MAX_COMMANDS_PER_SEGMENT, detail
    assert trips <= MAX_ROUND_TRIPS_PER_SEGMENT


def test_idle_worker_costs_redis_little(counted: dict[str, Any]) -> None:
    idle = counted["idle"]
    per_s = idle["commands"] / idle["wall_s"]
    detail = {k: round(v / idle["wall_s"], 1) for k, v in idle["calls"].items()}
    print(f"\nidle: {per_s:.1f} commands/s, {counted['idle_round_trips_per_s']:.1f} round trips/s; {detail}")
    assert per_s <= MAX_IDLE_COMMANDS_PER_S, detail
    assert counted["idle_round_trips_per_s"] <= MAX_IDLE_ROUND_TRIPS_PER_S
