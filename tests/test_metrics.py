"""Worker metrics (workers/metrics.py) and `ttsfarm status` (cli/status.py).

The end-to-end test scrapes a real worker process's endpoint while it serves real jobs and finds every
series the issue lists with sane values; the others check the hooks, multiprocess mode (two processes,
one endpoint, the sum, a hand-over when the serving process exits) and the status screen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from pipeline.errors import TTSFarmError
from pipeline.settings import CONFIG_DIR
from bench.processes import free_port
from cli.status import render, run, snapshot
from wire.keys import GROUP, Keys
from wire.records import SegmentJob
from wire.redis.broker import RedisBroker
from tests.conftest import Farm, FarmSpec
from workers.metrics import WorkerMetrics, metric_names

ROOT = Path(__file__).resolve().parent.parent


def joe_only_config(dest: Path, **joe: Any) -> Path:
    """A configs folder whose catalogue holds Piper ``joe`` alone (fast to load), with ``joe`` overrides."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "settings.toml").write_text((CONFIG_DIR / "settings.toml").read_text())
    entry = {**tomllib.loads((CONFIG_DIR / "voices.toml").read_text())["voices"]["joe"], **joe}
    defaults = entry.pop("defaults", {})
    lines = ['default_voice = "joe"', "", "[voices.joe]", *(f"{k} = {json.dumps(v)}" for k, v in entry.items()),
             "[voices.joe.defaults]", *(f"{k} = {json.dumps(v)}" for k, v in defaults.items())]
    (dest / "voices.toml").write_text("\n".join(lines) + "\n")
    return dest


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
        return reply.read().decode()


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``; there must be one."""
    found = [v for n, lab, v in samples(text) if n == name and labels.items() <= lab.items()]
    assert found, f"no sample {name}{labels}"
    return sum(found)


# The sample names a family of each type exposes (a counter ``x`` as ``x_total``, a histogram as three series).
SERIES_OF_TYPE = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def value_or_zero(text: str, name: str, **labels: str) -> float:
    """As ``value``, but 0 while no sample has ``labels`` yet (a labelled counter before its first increment).
    The series itself must be declared (its family's ``# TYPE`` line, there from the start in a process's own
    registry), and once it has samples they must carry these label names: a renamed metric or label fails here
    instead of reading as 0."""
    from prometheus_client.parser import text_string_to_metric_families

    families = {f"{fam.name}{suffix}": fam for fam in text_string_to_metric_families(text)
                for suffix in SERIES_OF_TYPE.get(fam.type, ("",))}
    assert name in families, f"no series {name} declared (families: {sorted(families)})"
    present = [s for s in families[name].samples if s.name == name]
    for s in present:
        assert set(labels) <= set(s.labels), f"{name} has labels {sorted(s.labels)}, not {sorted(labels)}"
    return sum(s.value for s in present if labels.items() <= s.labels.items())


# -- hooks ---------------------------------------------------------------------------------------
def test_hooks_never_raise_and_keep_the_heartbeat_counters() -> None:
    m = WorkerMetrics(enabled=True)
    m.batch({"voice": "joe"})  # missing keys: logged, not raised
    m.batch({"voice": "joe", "size": 2, "padding_waste": 0.1, "infer_s": 0.2, "audio_s": 2.0,
             "queue_wait_s": [0.5, 0.7], "lanes": ["bulk", "bulk"], "buckets": ["1", "2"]})
    m.segment_published(None, 1.0)  # a broken call: logged, not raised
    m.segment_published(SimpleNamespace(voice="joe", lane="bulk", seg=0, created=time.time() - 1.5), 2.5)
    m.error("NOTHING_TO_SPEAK", job_id="j1", message="nothing")
    m.error("RuntimeError", stage="attempt")
    from prometheus_client import generate_latest

    text = generate_latest(m.registry).decode()
    assert value(text, "ttsfarm_batch_size_count", voice="joe") == 1
    assert value(text, "ttsfarm_real_time_factor_sum", voice="joe") == pytest.approx(0.1)
    assert value(text, "ttsfarm_queue_wait_seconds_count", lane="bulk", bucket="2") == 1
    assert value(text, "ttsfarm_first_chunk_seconds_sum", lane="bulk") == pytest.approx(1.5, abs=0.5)
    assert value(text, "ttsfarm_errors_total", code="NOTHING_TO_SPEAK", stage="job") == 1
    fields = m.heartbeat_fields(10)
    assert fields["errors"] == {"NOTHING_TO_SPEAK": 1, "RuntimeError": 1}
    assert fields["recent_errors"][0]["job"] == "j1"
    off = WorkerMetrics(enabled=False)
    off.batch({"voice": "joe", "size": 1})
    off.error("X")
    assert off.registry is None and off.heartbeat_fields(0)["errors"] == {"X": 1}


def test_value_or_zero_reads_an_absent_label_set_as_zero_and_fails_on_a_missing_series() -> None:
    from prometheus_client import generate_latest

    m = WorkerMetrics(enabled=True)
    text = generate_latest(m.registry).decode()
    assert value_or_zero(text, "ttsfarm_segments_total", lane="bulk") == 0  # declared, no segment yet
    with pytest.raises(AssertionError):
        value(text, "ttsfarm_segments_total", lane="bulk")
    m.segment_published(SimpleNamespace(voice="joe", lane="interactive", seg=1, created=time.time()), 2.0, first_chunk=False)
    m.segment_published(SimpleNamespace(voice="joe", lane="bulk", seg=1, created=time.time()), 2.0, first_chunk=False)
    m.segment_published(SimpleNamespace(voice="joe", lane="bulk", seg=2, created=time.time()), 2.0, first_chunk=False)
    text = generate_latest(m.registry).decode()
    assert value_or_zero(text, "ttsfarm_segments_total", lane="bulk") == 2
    assert value_or_zero(text, "ttsfarm_segments_total", lane="interactive", voice="kumo") == 0
    assert value_or_zero(text, "ttsfarm_queue_wait_seconds_count", lane="bulk") == 0  # a histogram's series
    for name, labels in (("ttsfarm_segments_made_total", {"lane": "bulk"}),  # a renamed metric
                         ("ttsfarm_segments", {"lane": "bulk"}),  # the family's name is not a series
                         ("ttsfarm_segments_total", {"queue": "bulk"})):  # a renamed label
        with pytest.raises(AssertionError):
            value_or_zero(text, name, **labels)


def test_voice_info_says_what_each_voice_is_served_on_and_follows_a_reload() -> None:
    m = WorkerMetrics(enabled=True)
    served = {"joe": {"version": 1, "precision": "fp32", "provider": "CPUExecutionProvider", "model": "joe.onnx",
                      "create_s": 0.5}}
    m.voices_loaded(SimpleNamespace(describe=lambda: served))
    served = {"joe": {**served["joe"], "version": 2, "precision": "int8"}}  # a hot reload changed the precision
    m.voices_loaded(SimpleNamespace(describe=lambda: served))
    from prometheus_client import generate_latest

    text = generate_latest(m.registry).decode()
    assert value(text, "ttsfarm_voice_info", voice="joe", provider="CPUExecutionProvider", precision="int8") == 1
    assert value(text, "ttsfarm_voice_info", voice="joe", precision="fp32") == 0
    assert value(text, "ttsfarm_voice_version", voice="joe") == 2


def test_metric_names_cover_the_listed_series() -> None:
    names = metric_names()
    for name in ("ttsfarm_queue_wait_seconds_bucket", "ttsfarm_batch_size_count", "ttsfarm_padding_waste_ratio_sum",
                 "ttsfarm_inference_seconds_bucket", "ttsfarm_real_time_factor_bucket", "ttsfarm_first_chunk_seconds_bucket",
                 "ttsfarm_audio_seconds_total", "ttsfarm_errors_total", "ttsfarm_backlog_segments",
                 "ttsfarm_backlog_audio_seconds", "ttsfarm_session_create_seconds", "ttsfarm_device_memory_used_bytes",
                 "ttsfarm_voice_stage_info"):
        assert name in names


# -- multiprocess mode ---------------------------------------------------------------------------
_CHILD = r"""
import os, sys, time, types, pathlib
from wire.settings import Settings
from wire.connect import connect_url
from workers.metrics import WorkerMetrics

port, url, n, stop = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), pathlib.Path(sys.argv[4])
factory = types.SimpleNamespace(providers=lambda: ["CPUExecutionProvider"], fell_back_to_cpu=False)
farm = types.SimpleNamespace(state="serving", last_beat=time.time(), broker=connect_url(url, key_prefix="mp"),
                             settings=Settings(), bank=types.SimpleNamespace(factory=factory))
m = WorkerMetrics(enabled=True, port=port, host="127.0.0.1", multiproc_dir=os.environ["PROMETHEUS_MULTIPROC_DIR"])
job = types.SimpleNamespace(voice="joe", lane="bulk", seg=1, created=0)
for _ in range(n):
    m.segment_published(job, 1.5)
m.error("NOTHING_TO_SPEAK")
said = None
while not stop.exists():
    farm.last_beat = time.time()
    state = "serving" if m.serve(farm) else "waiting"
    if state != said:
        print(state, flush=True)
        said = state
    time.sleep(0.05)
m.close()
"""


def test_multiprocess_mode_serves_the_sum_of_all_processes(tmp_path: Path, redis_url: str) -> None:
    mp = tmp_path / "prom"
    mp.mkdir()
    port = free_port()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp), "PYTHONPATH": str(ROOT)}
    procs = []

    def child(n: int) -> tuple[subprocess.Popen[str], Path]:
        stop = tmp_path / f"stop{len(procs)}"
        p = subprocess.Popen([sys.executable, "-c", _CHILD, str(port), redis_url, str(n), str(stop)], env=env,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
        procs.append(p)
        return p, stop

    try:
        a, stop_a = child(2)
        assert a.stdout is not None and a.stdout.readline().strip() == "serving"
        b, stop_b = child(3)
        assert b.stdout is not None and b.stdout.readline().strip() == "waiting"
        text = scrape(port)
        assert value(text, "ttsfarm_segments_total", voice="joe", lane="bulk") == 5
        assert value(text, "ttsfarm_audio_seconds_total", voice="joe") == pytest.approx(7.5)
        assert value(text, "ttsfarm_errors_total", code="NOTHING_TO_SPEAK") == 2
        assert value(text, "ttsfarm_backlog_segments", lane="bulk") == 0  # the collector runs in the serving process
        stop_a.touch()
        a.wait(10)
        assert b.stdout.readline().strip() == "serving"  # b takes the port over
        text = scrape(port)
        assert value(text, "ttsfarm_segments_total", voice="joe", lane="bulk") == 5  # a's counts outlive it
        stop_b.touch()
        b.wait(10)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


# -- ttsfarm status ------------------------------------------------------------------------------
def test_status_screen_shows_workers_lanes_and_errors(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    keys = Keys("st")
    now = time.time()
    beat = {"state": "serving", "ts": now, "pid": 11, "voices": ["joe", "kumo"], "batches": 7, "segments": 9,
            "segments_per_min": 42.0, "voice_info": {"joe": {"version": 2, "precision": "int8+fp32", "provider": "CPUExecutionProvider"},
                                         "kumo": {"version": 1}},
            "recent_errors": [{"ts": now - 5, "code": "NOTHING_TO_SPEAK", "stage": "job", "job": "jobA", "message": "x"}]}
    r.hset(keys.workers(), "w1@h:11", json.dumps(beat))
    r.hset(keys.workers(), "w2@h:12", json.dumps({**beat, "ts": now - 120, "pid": 12, "segments_per_min": 5.0}))
    for stream in keys.queues(5):
        r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    for _ in range(3):
        r.xadd(keys.queue("bulk", 2), {"v": "1", "job": "{}"})
    r.xreadgroup(GROUP, "c1", {keys.queue("bulk", 2): ">"}, count=1)
    r.hset(keys.backlog("bulk"), mapping={"n": 3, "s": 12.5})
    job = SegmentJob(job_id="deadjob-123456", seg=0, total=1, text="hi", lang="en", voice="joe", request_voice="joe",
                     format="wav", sample_rate=22050)
    r.xadd(keys.dead_letters(), {"stream": keys.queue("bulk", 0), "entry_id": "1-0", "code": "TOO_MANY_FAILURES",
                                 "message": "boom", "deliveries": 5, "fields": json.dumps(job.to_fields())})
    broker = RedisBroker(r, keys)
    snap = snapshot(broker, 5)
    assert [w["alive"] for w in snap.workers] == [True, False]
    assert snap.segments_per_min == 42.0  # the stale worker does not count
    (b2,) = [q for q in snap.queues.buckets if q.lane == "bulk" and q.bucket == 2]
    assert (b2.length, b2.lag, b2.pending, b2.consumers) == (3, 2, 1, 1)
    screen = render(snap)
    assert "workers 1 up / 2 known" in screen and "42.0 segments/min" in screen
    assert "joe@v2[int8+fp32]" in screen and "serving?" in screen and "served: joe int8+fp32 on CPU" in screen
    assert "bulk         backlog       3 segments        12.5 s" in screen
    assert "TOO_MANY_FAILURES" in screen and "job=deadjob-123456" in screen and "NOTHING_TO_SPEAK" in screen
    assert run(broker, 5, watch=0.01, iterations=2) == 0  # --watch redraws
    assert capsys.readouterr().out.count("ttsfarm status ") == 2


# -- a real worker -------------------------------------------------------------------------------
FARM = FarmSpec(configs=joe_only_config, metrics=True, env={"TTSFARM_QUEUE_MAX_BATCH_CPU": "4"})


@pytest.fixture(scope="module")
def metered(farm: Farm) -> tuple[Farm, int]:
    return farm, farm.settings.worker.metrics_port


@pytest.mark.slow
def test_worker_endpoint_has_every_series_with_sane_values(metered: tuple[Farm, int], monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    farm, port = metered
    client = farm.client()
    keys = Keys(farm.prefix)
    assert scrape(port, "/readyz") == "ok\n" and scrape(port, "/livez") == "ok\n"
    bulk_text = " ".join(f"This is bulk sentence number {i}, read at an even pace." for i in range(4))
    bulk = [client.submit(bulk_text, voice="joe", lane="bulk") for _ in range(4)]
    early = scrape(port)  # the queue is full now: the backlog is read from Redis at scrape time
    assert value(early, "ttsfarm_backlog_segments", lane="bulk") > 0
    assert value(early, "ttsfarm_backlog_audio_seconds", lane="bulk") > 0
    assert sum(v for n, lab, v in samples(early) if n == "ttsfarm_queue_lag_entries" and lab["lane"] == "bulk") > 0
    interactive = [client.submit(f"Interactive job {i}. It has two sentences.", voice="joe") for i in range(3)]
    bad = SegmentJob(job_id="badmetrics-" + "x" * 8, seg=0, total=1, text="...", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=22050)
    client.redis.hset(keys.status(bad.job_id), mapping={"state": "queued", "total": 1, "created": time.time()})
    client.redis.xadd(keys.queue("interactive", 0), bad.to_fields())
    results = [job.wait(timeout=120) for job in bulk + interactive]
    with pytest.raises(TTSFarmError) as failed:
        client.job(bad.job_id).wait(timeout=30)
    assert failed.value.code == "NOTHING_TO_SPEAK"
    segments = sum(job.total for job in bulk + interactive)

    # A batch's stats are recorded just after its items are published, a failure's just after the job
    # ends: let the last ones land.
    def settled(text: str) -> bool:
        batched = [v for n, lab, v in samples(text) if n == "ttsfarm_batch_size_sum"]
        failed = [v for n, lab, v in samples(text) if n == "ttsfarm_errors_total" and lab["code"] == "NOTHING_TO_SPEAK"]
        return sum(batched) >= segments and sum(failed) >= 1

    deadline = time.monotonic() + 10
    while not settled(text := scrape(port)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {n for n, _, _ in samples(text)} - metric_names() <= {
        n for n, _, _ in samples(text) if n.endswith("_created")}
    # queue wait, per lane and bucket
    waits = [(lab, v) for n, lab, v in samples(text) if n == "ttsfarm_queue_wait_seconds_count"]
    assert {lab["lane"] for lab, v in waits if v > 0} == {"interactive", "bulk"}
    assert sum(v for _, v in waits) == segments
    assert all(lab["bucket"] in {"0", "1", "2", "3", "4"} for lab, _ in waits)
    mean_wait = value(text, "ttsfarm_queue_wait_seconds_sum") / value(text, "ttsfarm_queue_wait_seconds_count")
    assert 0 <= mean_wait < 120
    # batches
    n_batches = value(text, "ttsfarm_batch_size_count", voice="joe")
    assert 0 < n_batches <= segments
    assert value(text, "ttsfarm_batch_size_sum", voice="joe") == segments
    assert 1 <= segments / n_batches <= 4  # max_batch_cpu = 4
    waste = value(text, "ttsfarm_padding_waste_ratio_sum", voice="joe") / value(text, "ttsfarm_padding_waste_ratio_count", voice="joe")
    assert 0 <= waste < 1
    assert value(text, "ttsfarm_inference_seconds_count", voice="joe") == n_batches
    assert value(text, "ttsfarm_inference_seconds_sum", voice="joe") > 0
    rtf = value(text, "ttsfarm_real_time_factor_sum", voice="joe") / value(text, "ttsfarm_real_time_factor_count", voice="joe")
    assert 0 < rtf < 10
    # first chunk: one per job that ran, per lane
    assert value(text, "ttsfarm_first_chunk_seconds_count", lane="bulk") == len(bulk)
    assert value(text, "ttsfarm_first_chunk_seconds_count", lane="interactive") == len(interactive)
    first = value(text, "ttsfarm_first_chunk_seconds_sum", lane="interactive") / len(interactive)
    assert 0 < first < 60
    # audio produced = what the jobs' stored outputs hold
    assert value(text, "ttsfarm_audio_seconds_total", voice="joe") == pytest.approx(sum(r.duration_s for r in results), abs=0.01)
    assert value(text, "ttsfarm_segments_total", voice="joe", lane="bulk") == sum(j.total for j in bulk)
    assert value(text, "ttsfarm_errors_total", code="NOTHING_TO_SPEAK", stage="job") == 1
    # deadline scheduling: a slack for every unit of audio published (here every window), the late ones counted
    slack_n = sum(v for n, lab, v in samples(text) if n == "ttsfarm_publish_slack_seconds_count")
    assert slack_n == value(text, "ttsfarm_vocoder_windows_total", voice="joe") >= segments
    assert {lab["lane"] for n, lab, v in samples(text) if n == "ttsfarm_publish_slack_seconds_count" and v > 0} == {"interactive", "bulk"}
    assert 0 <= sum(v for n, lab, v in samples(text) if n == "ttsfarm_late_units_total") <= slack_n
    assert [v for n, lab, v in samples(text) if n == "ttsfarm_underrun_risk_jobs"]  # set by the deadline-scheduled loops
    # drained: the backlog gauges read zero again
    assert value(text, "ttsfarm_backlog_segments", lane="bulk") == 0
    assert value(text, "ttsfarm_queue_pending_entries", lane="bulk") == 0
    # the model session and the voice version
    (create,) = [(lab, v) for n, lab, v in samples(text) if n == "ttsfarm_session_create_seconds"]
    assert create[0]["model"].endswith(".onnx") and 0 < create[1] < 120
    assert value(text, "ttsfarm_voice_version", voice="joe") == 1
    (served,) = [(lab, v) for n, lab, v in samples(text) if n == "ttsfarm_voice_info"]
    assert served[0]["voice"] == "joe" and served[0]["provider"] == "CPUExecutionProvider" and served[1] == 1
    assert set(served[0]["precision"].split("+")) <= {"fp32", "int8"}  # a two-stage voice: one per stage
    stages = {lab["stage"]: lab for n, lab, v in samples(text) if n == "ttsfarm_voice_stage_info" and v == 1}
    assert set(stages) == {"acoustic", "vocoder"} and stages["vocoder"]["model"] == "vocoder.fp32.onnx"
    assert {s["precision"] for s in stages.values()} <= {"fp32", "int8"}
    # CPU: no device memory series
    assert not [n for n, _, _ in samples(text) if n.startswith("ttsfarm_device_memory")]

    # the status screen sees the same farm
    monkeypatch.setenv("TTSFARM_REDIS_URL", farm.redis_url)
    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", farm.prefix)
    from cli import main

    deadline = time.monotonic() + 3 * 2.0  # the screen reads the heartbeat, written every HEARTBEAT_S (2 s)
    while True:
        assert main(["status"]) == 0
        screen = capsys.readouterr().out
        if ("serving" in screen and "NOTHING_TO_SPEAK" in screen) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    (worker,) = farm.workers
    assert f"{worker.name}:{worker.proc.pid}"[:40] in screen  # type: ignore[attr-defined]
    assert "serving" in screen and "NOTHING_TO_SPEAK" in screen
