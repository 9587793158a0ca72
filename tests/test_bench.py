"""`ttsfarm bench`: its stages, the job mix, the summaries, a tiny real run (own redis-server + 1 worker), and what a
listener's reads of a results stream get."""

from __future__ import annotations

import itertools
import json
import threading
import time
from argparse import Namespace
from pathlib import Path

import pytest
import redis

from bench.cli import STAGES, stage_parser
from bench.lab import LAB
from bench.lab.__main__ import main as lab_main
from bench.report import batch_sizes, markdown_summary, pct, summarize, write_results
from bench.run import KINDS, MIXES, BenchConfig, JobRecord, LoadSpec, PlannedJob, make_jobs, run_bench
from cli import main as ttsfarm, parse_args
from producer.client import Client
from wire.keys import Keys
from wire.records import chunk_fields, final_fields
from wire.settings import Settings


def test_make_jobs_follows_the_mix_and_the_rate() -> None:
    jobs = make_jobs("mixed", 2000, rate=10.0, seed=1)
    kinds = {k: sum(j.kind == k for j in jobs) / len(jobs) for k in MIXES["mixed"]}
    for kind, weight in MIXES["mixed"].items():
        assert abs(kinds[kind] - weight) < 0.05
        assert all(j.lane == KINDS[kind].lane and j.voice == KINDS[kind].voice for j in jobs if j.kind == kind)
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(jobs)]
    assert all(g >= 0 for g in gaps)
    assert abs(sum(gaps) / len(gaps) - 0.1) < 0.01  # Poisson at 10 jobs/s: mean gap 100 ms
    assert make_jobs("en", 5, seed=3) == make_jobs("en", 5, seed=3)
    assert all(j.at_s == 0.0 for j in make_jobs("zh", 5))  # closed loop: no schedule


def test_percentiles_and_batch_histogram() -> None:
    p = pct([10.0, 20.0, None, 30.0, 40.0])
    assert p["n"] == 4 and p["p50"] == 25.0 and p["max"] == 40.0
    assert pct([])["p50"] is None
    rows = [{"batches": ["a", "b"]}, {"batches": ["a"]}, {"batches": ["c"]}]
    hist, mean = batch_sizes(rows)
    assert hist == {"1": 2, "2": 1}
    assert mean == pytest.approx((2 * 2 + 1 + 1) / 4)


def test_summary_counts_audio_inside_the_window_only() -> None:
    t0 = 1000.0
    recs = []
    for i in range(10):
        rec = JobRecord(plan=PlannedJob(i, "en_short", "interactive", "joe", "Hi."), t_sched=t0 + i, t_submit=t0 + i,
                        job_id=f"job{i:08d}", segments=1, state="done", first_chunk=t0 + i + 0.1, ended=t0 + i + 0.2,
                        audio_s=2.0, pause_s=0.5, status={"created": t0 + i, "started": t0 + i + 0.05, "batch:0": f"b{i}"})
        rec.chunks = [(t0 + i + 0.1, 2.0)]
        recs.append(rec)
    raw = {"t0": t0, "t_stop_submit": t0 + 10, "t_end": t0 + 11, "records": recs, "proc_samples": [],
           "closed_loop": True, "spec": {"mix": "en_short", "rate": 0.0, "concurrency": 1}}
    s = summarize(raw)
    assert s["throughput"]["window_s"] == 9.0  # the first 10 % (1 s) is left out
    assert s["throughput"]["audio_s_per_s"] == pytest.approx(9 * 2.0 / 9.0)
    assert s["throughput"]["speech_s_per_s"] == pytest.approx(9 * 1.5 / 9.0)
    assert s["first_chunk_ms"]["en_short"]["p50"] == pytest.approx(100.0, abs=0.01)
    assert s["queue_ms"]["interactive"]["p50"] == pytest.approx(50.0, abs=0.01)
    assert s["batch_sizes"] == {"1": 10}


def test_cli_has_a_bench_command() -> None:
    """`ttsfarm bench ARGS` hands ARGS to the bench's own parsers (bench/cli.py); its load stage reads these."""
    argv = ["--workers", "2", "--threads", "1", "--max-batch", "8", "--rate", "3", "--redis", "redis://h:1/0",
            "--set", "TTSFARM_RUNTIME_ALLOW_SPINNING=false"]
    assert parse_args(["bench", *argv]).passed == argv
    args = stage_parser("load").parse_args(argv)
    assert args.workers == 2 and args.threads == 1 and args.max_batch == 8 and args.rate == 3.0
    assert args.bench_redis == "redis://h:1/0" and args.set == ["TTSFARM_RUNTIME_ALLOW_SPINNING=false"]


def test_bench_help_lists_the_stages_and_each_stage_has_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(STAGES) == {"load", "host", "farm", "listeners", "memory", "idle", "fleet", "shards", "grpc",
                           "conversations"}
    assert ttsfarm(["bench", "--help"]) == 0
    listed = capsys.readouterr().out
    assert "Without a STAGE: load" in listed
    assert all(f"  {name} " in listed for name in STAGES), listed
    for name in STAGES:
        with pytest.raises(SystemExit) as done:
            ttsfarm(["bench", name, "--help"])
        assert done.value.code == 0, name
        assert f"usage: ttsfarm bench {name} " in capsys.readouterr().out
    assert lab_main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in LAB), listed
    for name in LAB:
        with pytest.raises(SystemExit) as done:
            lab_main([name, "--help"])
        assert done.value.code == 0, name
        assert f"usage: python -m bench.lab {name} " in capsys.readouterr().out
    assert lab_main(["no-such-bench"]) == 2  # the lab has no default


def test_a_bare_bench_command_is_the_load_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `ttsfarm bench [options]` meant before it had stages, it still means: `ttsfarm bench load [options]`."""
    seen: list[Namespace] = []
    monkeypatch.setattr("bench.run.main", lambda args: seen.append(args) or 0)
    assert ttsfarm(["bench", "--workers", "2", "--mix", "en"]) == 0
    assert ttsfarm(["--redis", "redis://h:1/0", "bench", "load", "--workers", "3"]) == 0
    bare, named = seen
    assert (bare.workers, bare.mix, bare.redis) == (2, "en", None)
    assert bare.command == "ttsfarm bench --workers 2 --mix en"
    assert (named.workers, named.redis) == (3, "redis://h:1/0")


@pytest.mark.slow
def test_tiny_bench_run_writes_every_field(tmp_path: Path) -> None:
    config = BenchConfig(workers=1, threads=2, max_batch=4, warmup_jobs=1,
                         load=LoadSpec(mix="mixed", concurrency=3, duration_s=60, max_jobs=8, seed=2, timeout_s=120))
    start = time.time()
    result = run_bench(config)
    assert time.time() - start < 240
    out = write_results(result, tmp_path / "res")
    data = json.loads((out / "bench.json").read_text())
    assert (out / "bench-load.png").stat().st_size > 10_000
    for key in ("config", "worker_env", "load_average_before", "load_average_after", "phases"):
        assert key in data
    assert data["worker_env"]["TTSFARM_QUEUE_MAX_BATCH_CPU"] == "4"
    s = data["phases"]["load"]
    assert s["jobs"]["submitted"] == 8 and s["jobs"]["done"] == 8
    t = s["throughput"]
    assert 0 < t["speech_s_per_s"] <= t["audio_s_per_s"] < 200 and t["jobs_per_s"] > 0
    for field in ("first_chunk_ms", "e2e_ms"):
        p = s[field]["all"]
        assert p["n"] == 8 and 0 < p["p50"] <= p["p95"] <= p["p99"] <= p["max"] < 120_000
    for row in s["per_job"]:
        assert row["state"] == "done" and row["audio_s"] > 0.3
        assert 0 < row["first_chunk_ms"] <= row["e2e_ms"]
        assert row["queue_ms"] is not None and row["queue_ms"] >= 0
        assert len(row["batches"]) == row["segments"]
    assert set(s["queue_ms"]) >= {"all", "interactive"}
    assert sum(int(k) * v for k, v in s["batch_sizes"].items()) >= sum(r["segments"] for r in s["per_job"])
    assert s["padding_waste"] is not None and "note" in s["padding_waste"]
    (worker,) = s["workers"].values()
    assert 100 < worker["rss_mb_start"] < 4000 and worker["rss_mb_max"] >= worker["rss_mb_start"]
    assert worker["series"] and worker["cpu_s"] > 0
    assert "| load |" in markdown_summary(data)


def _write_as_a_worker(r: redis.Redis, keys: Keys, job: str, entries: int, size: int, gap_s: float, maxlen: int) -> None:
    """A job's results entries as the worker's scripts write them: trimmed at the farm's ``results_maxlen``, counted
    in the status's ``results_entries`` and numbered by it, the final entry last."""
    pcm = b"\x01\x00" * (size // 2)
    for seg in range(entries):
        entry = r.hincrby(keys.status(job), "results_entries", 1)
        r.xadd(keys.results(job), {"entry": entry, **chunk_fields(seg, 0, True, "w/0", 22050, pcm)}, maxlen=maxlen,
               approximate=True)
        if gap_s:
            time.sleep(gap_s)
    r.hset(keys.status(job), "state", "done")
    entry = r.hincrby(keys.status(job), "results_entries", 1)
    r.xadd(keys.results(job), {"entry": entry, **final_fields("done")}, maxlen=maxlen, approximate=True)


@pytest.mark.parametrize("tail", [True, False], ids=["tail", "behind"])
def test_a_listener_reads_every_entry_written_or_already_there(r: redis.Redis, settings: Settings, tail: bool) -> None:
    """The SDK's ``Job.stream`` reads every entry of a job's results stream, whether it keeps up with the worker
    writing them (``tail``: an entry is written, the reader wakes and reads it) or starts when they are all there
    (``behind``: reads of many entries at once)."""
    entries, job = 5, "readall"
    with Client.from_url(settings=settings) as client:
        keys = client.keys
        r.hset(keys.status(job), mapping={"state": "running", "total": entries})
        writer = threading.Thread(target=_write_as_a_worker, args=(r, keys, job, entries, 2000, 0.004 if tail else 0.0,
                                                                   settings.queue.results_maxlen))
        if tail:
            writer.start()
        else:
            writer.run()
        got = sum(1 for _ in client.job(job).stream(timeout=120, block_ms=1000))
        if tail:
            writer.join()
    assert got == entries
