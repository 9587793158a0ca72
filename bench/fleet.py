"""A fleet on Redis: several worker processes on one queue and streaming listeners on every job, the way users load
the farm, with what each Redis node spends per segment and per second of streamed speech.

    ttsfarm bench fleet --out bench-results/fleet [--workers 2] [--loops 2] [--listeners 8] [--jobs 160] \
        [--sentences 1] [--shards 1] [--device h200] [--scripts] [--cpu-workers 1 --kill-gpu-at 1.5]

One run: ``--shards`` private redis-servers on free ports (the first is ``redis.url``, the others ``redis.shards``);
``--workers`` worker processes (``celery -A workers.bench_app worker``, ``--loops`` loops each) serving the null voice
(the real English frontend and stage shapes) on a fake device each (``--device``: sleeps calibrated from the H200
sweep); ``--listeners`` callers in client processes of their own (four threads a process), each submitting a job
through the SDK, streaming it to its end (``Job.stream``: the SDK's own listener path), then the next, until ``--jobs``
jobs are done. A job is ``--sentences`` English sentences.

Measured on each node from Redis itself (``INFO commandstats``: commands inside scripts counted as Redis counts them;
``INFO cpu``; ``INFO stats`` bytes), between the workers all serving and the last listener's end:
- per segment and per second of streamed audio: commands, Redis CPU, bytes in and out (out against the PCM16 the
  listeners heard: 1.0 × is each byte of audio read once);
- the background (heartbeats, sweeps, reclaims, heads peeked while idle): the same counters over ``--idle-s`` seconds of
  the serving fleet before the jobs, as a rate, and that rate over the run's time in the totals;
- with ``--scripts``, Redis's own time per script and per command (``SLOWLOG`` with every command logged: the time
  inside the server, without the wait for its core), per segment.
Per caller: first audio after submit (P50/P95/P99) and playback gaps (``bench.load.underruns``; > 100 ms counted).

A mixed fleet (``--cpu-workers K``): K more workers of one loop serving the same voice name with the real model
(``joe``'s catalogue entry and prepared stages) on CPU, on the same queue; ``--kill-gpu-at S`` kills the proxy GPU
workers (SIGKILL) S seconds after the first submit. Then also: who made each job's first segment, the jobs lost (not
done, and not refused as OVERLOADED), and what callers saw by whether they submitted before or after the kill.
Writes ``<out>/fleet.json`` and ``<out>/fleet.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from bench.host import NULL_VOICE, config_dir, counters_delta, per, redis_counters, wait_serving
from bench.load import SHORT_EN, underruns
from bench.processes import RedisServer, WorkerProcess
from bench.report import pct
from pipeline.settings import CONFIG_DIR
from wire.connect import connect_url, script_names
from wire.settings import load_settings

log = logging.getLogger(__name__)

PREFIX = "fleet"
THREADS_PER_PROCESS = 4
GAP_S = 0.1  # a playback gap a caller hears
# full sentences of the English mix: a one-sentence job is one segment
SENTENCES = tuple(s for s in SHORT_EN if len(s.split()) >= 5)


def texts(jobs: int, sentences: int) -> list[str]:
    """The jobs' texts: ``sentences`` sentences each, taken in turn from the mix."""
    n = len(SENTENCES)
    return [" ".join(SENTENCES[(k * sentences + i) % n] for i in range(sentences)) for k in range(jobs)]


# -- the callers (in processes of their own) ---------------------------------------------------------------------
def caller(env: dict[str, str], work: list[tuple[int, str]], out: str, submitted: Any = None) -> None:
    """One client process: ``THREADS_PER_PROCESS`` callers, each taking the next job of ``work``, submitting it and
    streaming it to its end. Writes a JSON list of the jobs' records to ``out``; sets ``submitted`` (an event) once a
    job is submitted."""
    from producer.client import Client
    from wire.settings import load_settings

    settings = load_settings(env=env)
    lock, todo, records = threading.Lock(), list(work), []

    def listen(client: Client) -> None:
        while True:
            with lock:
                if not todo:
                    return
                _, text = todo.pop(0)
            t0 = time.time()
            rec: dict[str, Any] = {"state": "done", "first_s": None, "bytes": 0, "segments": 0, "chunks": [], "t0": t0,
                                   "id": None, "code": ""}
            try:
                job = client.submit(text, voice=NULL_VOICE, lane="interactive", format="wav")
                rec["segments"], rec["id"] = job.total, job.id
                if submitted is not None:
                    submitted.set()
                for chunk in job.stream(timeout=120):
                    seen = time.time()
                    if rec["first_s"] is None:
                        rec["first_s"] = seen - t0
                    rec["bytes"] += len(chunk.pcm)
                    rec["chunks"].append((seen, len(chunk.pcm) / 2 / chunk.sample_rate))
            except Exception as exc:  # a caller's failure is a figure of the run, not the end of it
                rec["state"], rec["code"] = f"{type(exc).__name__}: {exc}", str(getattr(exc, "code", ""))
            with lock:
                records.append(rec)

    with Client.from_url(settings=settings) as client:
        threads = [threading.Thread(target=listen, args=(client,)) for _ in range(THREADS_PER_PROCESS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    Path(out).write_text(json.dumps(records))


# -- a mixed fleet: CPU workers serving the same voice name with the real model ---------------------------------------
def cpu_config(work: Path) -> dict[str, str]:
    """Settings of a CPU worker whose ``null-en`` is the real ``joe`` (its shipped catalogue entry, its prepared stages
    through a model cache that names them so): the same voice as the proxy GPU workers', made for real on CPU."""
    out = work / "cpu-configs"
    out.mkdir()
    shutil.copy(CONFIG_DIR / "settings.toml", out / "settings.toml")
    lines, keep = [], False
    for line in (CONFIG_DIR / "voices.toml").read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            keep = line.startswith("[voices.joe]") or line.startswith("[voices.joe.")
        if keep:
            lines.append(line.replace("[voices.joe", f"[voices.{NULL_VOICE}", 1))
    (out / "voices.toml").write_text(f'default_voice = "{NULL_VOICE}"\n\n' + "\n".join(lines) + "\n", encoding="utf-8")
    real = load_settings().runtime.cache_dir
    cache = work / "cpu-cache"
    (cache / "prepared").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "prepared":
            (cache / entry.name).symlink_to(entry)
    (cache / "prepared" / NULL_VOICE).symlink_to(real / "prepared" / "joe")
    return {"TTSFARM_CONFIG_DIR": str(out), "TTSFARM_RUNTIME_MODEL_CACHE_DIR": str(cache),
            "TTSFARM_QUEUE_INFERENCE_THREADS": "1"}


def served_by(r: redis.Redis, records: list[dict[str, Any]]) -> list[str]:
    """Per job, the worker that made its first segment (the status's ``worker:0``), '' where none did."""
    pipe = r.pipeline(transaction=False)
    for rec in records:
        pipe.hget(f"{PREFIX}:job:{rec['id']}", "worker:0")
    return [(w or b"").decode() for w in pipe.execute()]


# -- Redis's own time per script -----------------------------------------------------------------------------------
def slowlog_on(r: redis.Redis) -> None:
    r.config_set("slowlog-max-len", 1_000_000)
    r.config_set("slowlog-log-slower-than", 0)
    r.slowlog_reset()


def slowlog_times(r: redis.Redis, names: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Calls and microseconds inside the server per script (by name) and per plain command since ``slowlog_on``."""
    calls: Counter[str] = Counter()
    usec: Counter[str] = Counter()
    for entry in r.slowlog_get(1_000_000):
        command = entry["command"]
        args = (command.decode(errors="replace") if isinstance(command, bytes) else str(command)).split(" ", 2)
        verb = args[0].upper()
        if verb in ("SLOWLOG", "CONFIG", "INFO"):
            continue
        name = names.get(args[1], "script?") if verb == "EVALSHA" and len(args) > 1 else verb
        calls[name] += 1
        usec[name] += int(entry["duration"])
    r.config_set("slowlog-log-slower-than", 10_000)
    return {k: (calls[k], usec[k]) for k in sorted(usec, key=lambda k: -usec[k])}


# -- the run -----------------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="ttsfarm-bench-fleet-"))
    servers = [RedisServer().start() for _ in range(args.shards)]
    workers: list[WorkerProcess] = []
    try:
        env = {"TTSFARM_CONFIG_DIR": str(config_dir(work, args.device, work / "device.{pid}.json", args.max_batch)),
               "TTSFARM_REDIS_URL": servers[0].url, "TTSFARM_REDIS_SHARDS": ",".join(s.url for s in servers[1:]),
               "TTSFARM_REDIS_KEY_PREFIX": PREFIX, "TTSFARM_STORAGE_BACKEND": "local",
               "TTSFARM_STORAGE_LOCAL_DIR": str(work / "storage"), "TTSFARM_RUNTIME_DEVICE": "cpu",
               "TTSFARM_QUEUE_MAX_BATCH_CPU": str(args.max_batch), "TTSFARM_QUEUE_INFERENCE_THREADS": str(args.loops),
               **({"TTSFARM_QUEUE_FIRST_SEGMENTS_JOIN": "any"} if args.device != "none" else {})}
        nodes = [redis.Redis.from_url(s.url) for s in servers]
        broker = connect_url(servers[0].url, key_prefix=PREFIX)
        for k in range(args.workers):
            workers.append(WorkerProcess(f"fleet{k}-{os.getpid()}@bench",
                                         {**env, "TTSFARM_BENCH_ROUND_TRIPS": str(work / f"round_trips.{k}.json")},
                                         log_path=work / f"worker.{k}.log", app="workers.bench_app").start())
        cpu_env = cpu_config(work) if args.cpu_workers else {}
        for k in range(args.cpu_workers):
            workers.append(WorkerProcess(f"cpu{k}-{os.getpid()}@bench", {**env, **cpu_env},
                                         log_path=work / f"cpu-worker.{k}.log").start())
        for w in workers:
            wait_serving(broker, w)
        time.sleep(1.0)  # past the start's own steps

        # the background: the serving fleet with nothing to do
        i0 = [redis_counters(r) for r in nodes]
        time.sleep(args.idle_s)
        idle = [counters_delta(a, redis_counters(r), Counter()) for a, r in zip(i0, nodes)]

        # the callers
        names = script_names()
        if args.scripts:
            for r in nodes:
                slowlog_on(r)
        planned = list(enumerate(texts(args.jobs, args.sentences)))
        procs = max(1, -(-args.listeners // THREADS_PER_PROCESS))
        ctx = multiprocessing.get_context("spawn")
        outs = [work / f"callers.{p}.json" for p in range(procs)]
        c0 = [redis_counters(r) for r in nodes]
        t0 = time.time()
        submitted = ctx.Event()
        children = [ctx.Process(target=caller, args=(env, planned[p::procs], str(outs[p]), submitted)) for p in range(procs)]
        for child in children:
            child.start()
        killed_at = None
        if args.kill_gpu_at is not None:  # counted from the first submit
            submitted.wait(120)
            time.sleep(args.kill_gpu_at)
            for w in workers[:args.workers]:
                w.kill()
            killed_at = time.time()
        for child in children:
            child.join()
        wall = time.time() - t0
        c1 = [redis_counters(r) for r in nodes]
        scripts = [slowlog_times(r, names) for r in nodes] if args.scripts else []
        alive = workers[args.workers:] if killed_at is not None else workers
        if any(w.proc is None or w.proc.poll() is not None for w in alive):
            raise RuntimeError("a worker exited during the run")
        records = [rec for out in outs for rec in json.loads(out.read_text())]
        res = report(args, records, wall, [counters_delta(a, b, Counter()) for a, b in zip(c0, c1)], idle, scripts)
        if args.cpu_workers:
            res["mixed"] = mixed(records, served_by(nodes[0], records) if args.shards == 1 else [], t0, killed_at)
        return res
    finally:
        for w in workers:
            w.stop(timeout=30)
        for s in servers:
            s.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log.info("kept %s", work)


def report(args: argparse.Namespace, records: list[dict[str, Any]], wall: float, deltas: list[dict[str, Any]],
           idle: list[dict[str, Any]], scripts: list[dict[str, tuple[int, int]]]) -> dict[str, Any]:
    done = [rec for rec in records if rec["state"] == "done"]
    segments = sum(rec["segments"] for rec in done)
    heard = sum(rec["bytes"] for rec in done)
    audio_s = heard / 2 / 22050
    gaps = [underruns([(seen, s) for seen, s in rec["chunks"]], tolerance_s=GAP_S) for rec in done]
    nodes = []
    for k, (d, i) in enumerate(zip(deltas, idle)):
        bg_cmds, bg_cpu = i["commands"] / i["wall_s"] * wall, i["cpu_s"] / i["wall_s"] * wall
        nodes.append({
            "node": k, "commands": d["commands"], "cpu_s": round(d["cpu_s"], 3),
            "commands_per_segment": per(d["commands"], segments), "cpu_ms_per_segment": per(1000 * d["cpu_s"], segments, 3),
            "cpu_ms_per_audio_s": per(1000 * d["cpu_s"], audio_s, 3),
            "bytes_in_vs_heard": per(d["net_in"], heard), "bytes_out_vs_heard": per(d["net_out"], heard),
            "background_commands_per_s": per(i["commands"], i["wall_s"]), "background_cpu_ms_per_s": per(1000 * i["cpu_s"], i["wall_s"], 3),
            "background_share_of_commands": per(bg_cmds, d["commands"]), "background_share_of_cpu": per(bg_cpu, d["cpu_s"]),
            "calls_per_segment": {c: round(v / max(segments, 1), 2) for c, v in d["calls"].items() if v / max(segments, 1) >= 0.05},
            **({"script_usec_per_segment": {name: [round(n / max(segments, 1), 2), round(us / max(segments, 1), 1)]
                                            for name, (n, us) in scripts[k].items()}} if scripts else {}),
        })
    total_cmds, total_cpu = sum(n["commands"] for n in nodes), sum(n["cpu_s"] for n in nodes)
    firsts = [1000 * rec["first_s"] for rec in done if rec["first_s"] is not None]
    return {
        "config": {k: getattr(args, k) for k in ("workers", "loops", "listeners", "jobs", "sentences", "shards", "device", "max_batch",
                                                 "cpu_workers", "kill_gpu_at")},
        "jobs_done": len(done), "jobs_failed": [rec["state"] for rec in records if rec["state"] != "done"][:5],
        "segments": segments, "wall_s": round(wall, 2), "segments_per_s": per(segments, wall),
        "audio_s_per_s": per(audio_s, wall),
        "commands_per_segment": per(total_cmds, segments), "cpu_ms_per_segment": per(1000 * total_cpu, segments, 3),
        "cpu_ms_per_audio_s": per(1000 * total_cpu, audio_s, 3),
        "bytes_out_vs_heard": per(sum(d["net_out"] for d in deltas), heard),
        "first_audio_ms": pct(firsts), "callers_with_gap": sum(1 for n, _ in gaps if n),
        "nodes": nodes, "load_1m": round(os.getloadavg()[0], 2),
    }


def mixed(records: list[dict[str, Any]], makers: list[str], t0: float, killed_at: float | None) -> dict[str, Any]:
    """What callers saw before and after the GPU workers were killed (by when they submitted), and who made what."""
    cut = killed_at if killed_at is not None else float("inf")
    phases: dict[str, Any] = {}
    for name, chosen in (("before", [r for r in records if r["t0"] < cut]), ("after", [r for r in records if r["t0"] >= cut])):
        done = [r for r in chosen if r["state"] == "done"]
        gaps = [underruns(r["chunks"], tolerance_s=GAP_S) for r in done]
        phases[name] = {"jobs": len(chosen), "done": len(done), "first_audio_ms": pct(1000 * r["first_s"] for r in done if r["first_s"]),
                        "with_gap": sum(1 for n, _ in gaps if n), "longest_gap_s": round(max((s for _, s in gaps), default=0.0), 2),
                        "errors": dict(Counter(r["code"] or r["state"][:60] for r in chosen if r["state"] != "done"))}
    kinds = Counter("gpu" if m.startswith("fleet") else "cpu" if m.startswith("cpu") else "none" for m in makers)
    return {"killed_after_s": round(cut - t0, 2) if killed_at is not None else None, "phases": phases,
            "first_segments_made_by": dict(kinds), "lost": sum(1 for r in records if r["state"] != "done" and r["code"] != "OVERLOADED")}


def markdown(res: dict[str, Any], command: str) -> str:
    c, fa = res["config"], res["first_audio_ms"]
    lines = [f"Fleet ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {c['workers']} workers × {c['loops']} loops on fake "
             f"`{c['device']}` devices, {c['listeners']} listeners, {c['jobs']} jobs of {c['sentences']} sentence(s), "
             f"{c['shards']} node(s), load 1 min {res['load_1m']}):", "", "```bash", command, "```", "",
             "| node | commands / segment | Redis CPU ms / segment | ms / s of audio | bytes out × heard | background (share of CPU) |",
             "|---|---|---|---|---|---|"]
    for n in res["nodes"]:
        lines.append(f"| {n['node']} | {n['commands_per_segment']} | {n['cpu_ms_per_segment']} | {n['cpu_ms_per_audio_s']} | "
                     f"{n['bytes_out_vs_heard']} | {n['background_cpu_ms_per_s']} ms/s ({n['background_share_of_cpu']}) |")
    lines += ["", f"All nodes: {res['commands_per_segment']} commands and {res['cpu_ms_per_segment']} ms of Redis CPU per segment "
              f"({res['cpu_ms_per_audio_s']} ms per second of audio), bytes out {res['bytes_out_vs_heard']} × heard; "
              f"{res['segments_per_s']} segments/s, {res['audio_s_per_s']} s of audio per s; first audio P50/P95/P99 "
              f"{fa.get('p50')}/{fa.get('p95')}/{fa.get('p99')} ms; callers with a gap over {int(GAP_S * 1000)} ms: "
              f"{res['callers_with_gap']} of {res['jobs_done']}."]
    if "mixed" in res:
        m = res["mixed"]
        lines.append(f"\nMixed fleet ({res['config']['cpu_workers']} CPU workers with the real voice; GPU workers killed "
                     f"{m['killed_after_s']} s in): first segments made by {m['first_segments_made_by']}; lost {m['lost']}.")
        for name, ph in m["phases"].items():
            fa = ph["first_audio_ms"]
            lines.append(f"- submitted {name} the kill: {ph['done']} of {ph['jobs']} done, first audio P50/P95/max "
                         f"{fa.get('p50')}/{fa.get('p95')}/{fa.get('max')} ms, {ph['with_gap']} with a gap over "
                         f"{int(GAP_S * 1000)} ms (longest {ph['longest_gap_s']} s), errors {ph['errors'] or 'none'}")
    for n in res["nodes"]:
        top = ", ".join(f"{k.upper()} {v}" for k, v in list(n["calls_per_segment"].items())[:12])
        lines.append(f"\nNode {n['node']} commands per segment: {top}.")
        if "script_usec_per_segment" in n:
            top = ", ".join(f"{k} {us} µs ({calls} calls)" for k, (calls, us) in list(n["script_usec_per_segment"].items())[:10])
            lines.append(f"Node {n['node']} time inside Redis per segment: {top}.")
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, default=Path("bench-results/fleet"))
    ap.add_argument("--workers", type=int, default=2, help="worker processes, a fake device each")
    ap.add_argument("--loops", type=int, default=2, help="loops per worker process")
    ap.add_argument("--listeners", type=int, default=8, help="callers streaming at once (four per client process)")
    ap.add_argument("--jobs", type=int, default=160)
    ap.add_argument("--sentences", type=int, default=1, help="sentences per job")
    ap.add_argument("--shards", type=int, default=1, help="Redis nodes")
    ap.add_argument("--device", default="h200", help="fake device profile (pipeline/voices/null/device.py)")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--idle-s", type=float, default=3.0, help="seconds of the idle fleet measured first (the background)")
    ap.add_argument("--scripts", action="store_true", help="Redis's own time per script and command (SLOWLOG)")
    ap.add_argument("--cpu-workers", type=int, default=0,
                    help="a mixed fleet: this many CPU workers (one loop each) serving the same voice with the real model (joe)")
    ap.add_argument("--kill-gpu-at", type=float, default=None, metavar="S",
                    help="kill the proxy GPU workers (SIGKILL) this many seconds after the first job is submitted")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (worker logs)")


def main(args: argparse.Namespace) -> int:
    for name in ("workers", "loops", "listeners", "jobs", "sentences", "shards"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1")
    res = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps(res, indent=2))
    block = markdown(res, args.command)
    (args.out / "fleet.md").write_text(block + "\n")
    print(block)
    return 0
