"""Listeners side by side: what several long listeners and short requests among them get from one worker, with
FIFO, deadline scheduling and deadline scheduling with just-in-time admission, in one run.

    ttsfarm bench listeners --out bench-results/listeners [--modes fifo,deadline,jit] [--workers 1]

Modes (one farm of our own each, one after the other; the default worker layout on this machine):
``fifo`` (``scheduling.mode = fifo``, a job's segments all admitted at submit), ``deadline`` (deadline scheduling,
all admitted at submit) and ``jit`` (deadline scheduling with ``queue.admission_horizon_s``: the defaults).

Scenarios, each from a drained farm:
- ``lone``: one long English job alone (41 s of audio): first chunk and time to its last chunk;
- ``four_long``: four such jobs submitted together: each one's first chunk;
- ``long_short``: the four long jobs and six short requests arriving 0.5 s apart from 0.5 s;
- ``capacity`` (``en`` and ``mixed``: half Chinese): N long listeners (25-45 s each) start together (or, ``en@0.5``,
  half a second apart) while short English requests arrive as a Poisson stream; N grows by 2 until a run has an
  underrun or a first chunk P99 over 300 ms: the largest N that passed is the worker's count of concurrent
  real-time listeners;
- ``en_short``: short English requests closed-loop (8 in flight) for the saturation throughput, then Poisson arrivals
  at 70 % of that: first chunk P50/P99.

Every job's first chunk is timed from its scheduled arrival; an underrun is the bench client's player running dry
(``bench.load.underruns``). Writes ``<out>/listeners.json`` and ``<out>/listeners.md`` (the section for
docs/lab/listeners-and-admission.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

from bench.load import PARAGRAPHS_EN, SHORT_EN, SHORT_ZH, LoadSpec, PlannedJob, run_load
from bench.local import LocalFarm, worker_env
from bench.report import pct, summarize
from wire.settings import Settings, load_settings

log = logging.getLogger(__name__)
MODES = {
    "fifo": {"TTSFARM_SCHEDULING_MODE": "fifo", "TTSFARM_QUEUE_ADMISSION_HORIZON_S": "0"},
    "deadline": {"TTSFARM_SCHEDULING_MODE": "deadline", "TTSFARM_QUEUE_ADMISSION_HORIZON_S": "0"},
    "jit": {"TTSFARM_SCHEDULING_MODE": "deadline"},
}
FIRST_CHUNK_GOAL_MS = 300.0


def long_en(i: int) -> str:
    """About 12 sentences, 40 s of speech: four of the bench's paragraphs, rotated per job."""
    return " ".join(PARAGRAPHS_EN[(i + k) % len(PARAGRAPHS_EN)] for k in range(4))


def long_zh(i: int) -> str:
    """About 25-35 s of Mandarin: the bench's short sentences, rotated per job."""
    return "".join(SHORT_ZH[(i + k) % len(SHORT_ZH)] for k in range(len(SHORT_ZH)))


def plan(jobs: list[tuple[str, str, float]]) -> list[PlannedJob]:
    """(kind, text, arrival s) -> planned interactive jobs; voice ``joe`` for English, ``default`` (routed) else."""
    return [PlannedJob(i, kind, "interactive", "joe" if kind.endswith("en") or kind == "short" else "default", text, at)
            for i, (kind, text, at) in enumerate(jobs)]


def run(settings: Settings, farm: LocalFarm, jobs: list[PlannedJob]) -> list[dict[str, Any]]:
    end = max(p.at_s for p in jobs) + 1.0
    raw = run_load(settings, LoadSpec(mix="en_short", rate=1.0, duration_s=end, timeout_s=300, drain_s=300),
                   pids=farm.pids, storage_dir=farm.storage_dir, plans=jobs)
    rows = []
    for rec in raw["records"]:
        s = rec.summary()
        rows.append({"kind": s["kind"], "state": s["state"], "first_chunk_ms": s["first_chunk_ms"], "e2e_ms": s["e2e_ms"],
                     "underruns": s["underruns"], "underrun_s": s["underrun_s"], "audio_s": s["audio_s"],
                     "last_chunk_ms": round((rec.last_chunk - rec.t_sched) * 1000, 1) if rec.last_chunk else None})
    return rows


def scenario_rows(settings: Settings, farm: LocalFarm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["lone"] = run(settings, farm, plan([("long_en", long_en(0), 0.0)]))
    out["four_long"] = run(settings, farm, plan([("long_en", long_en(i), 0.0) for i in range(4)]))
    shorts = [("short", SHORT_EN[i], 0.5 * (i + 1)) for i in range(6)]
    out["long_short"] = run(settings, farm, plan([("long_en", long_en(i), 0.0) for i in range(4)] + shorts))
    return out


def capacity(settings: Settings, farm: LocalFarm, spec: str, start: int, short_rate: float, seed: int,
             max_n: int = 14) -> dict[str, Any]:
    """Largest N of long listeners (with Poisson short requests among them) with no underrun and first chunk P99
    within the goal; every run tried. ``spec``: the mix, and after an ``@`` the seconds between two listeners'
    starts (none: all at once)."""
    mix, _, gap = spec.partition("@")
    stagger = float(gap or 0)
    tried, best = [], 0
    n = start
    while n <= max_n:
        rng = random.Random(seed + n)
        jobs: list[tuple[str, str, float]] = []
        for i in range(n):
            zh = mix == "mixed" and i % 2 == 1
            jobs.append(("long_zh" if zh else "long_en", long_zh(i) if zh else long_en(i), round(i * stagger, 3)))
        at = rng.expovariate(short_rate)
        while at < 30.0:
            jobs.append(("short", rng.choice(SHORT_EN), round(at, 3)))
            at += rng.expovariate(short_rate)
        rows = run(settings, farm, plan(jobs))
        first = pct(r["first_chunk_ms"] for r in rows)
        underrun = sum(1 for r in rows if r["underruns"])
        failed = sum(1 for r in rows if r["state"] != "done")
        ok = underrun == 0 and failed == 0 and first["p99"] is not None and first["p99"] <= FIRST_CHUNK_GOAL_MS
        tried.append({"listeners": n, "jobs": len(rows), "first_chunk_ms": first, "jobs_with_underrun": underrun,
                      "not_done": failed, "passed": ok,
                      "listener_first_chunk_ms": pct(r["first_chunk_ms"] for r in rows if r["kind"].startswith("long")),
                      # under overload: is the shortfall shared by every listener, or taken by a few?
                      "listener_underrun_s": pct(r["underrun_s"] for r in rows if r["kind"].startswith("long"))})
        log.info("capacity %s N=%d: %s", mix, n, json.dumps(tried[-1]))
        if not ok:
            break
        best = n
        n += 2
    return {"listeners": best, "runs": tried}


def en_short(settings: Settings, farm: LocalFarm, saturate_s: float, load_s: float) -> dict[str, Any]:
    sat = summarize(run_load(settings, LoadSpec(mix="en_short", concurrency=8, duration_s=saturate_s, seed=2, timeout_s=300),
                             pids=farm.pids, storage_dir=farm.storage_dir))
    t = sat["throughput"]
    rate = round(0.7 * (t["jobs_per_s_drained"] or t["jobs_per_s"]), 3)
    load = summarize(run_load(settings, LoadSpec(mix="en_short", rate=rate, duration_s=load_s, seed=7, timeout_s=300),
                              pids=farm.pids, storage_dir=farm.storage_dir))
    return {"saturation": t, "rate_70": rate, "first_chunk_ms_70": load["first_chunk_ms"]["all"],
            "underruns_70": load["underruns"]["all"]}


def overload(settings: Settings, farm: LocalFarm, n: int, stagger: float) -> dict[str, Any]:
    """More listeners than the worker can serve in real time (``n``, starting ``stagger`` s apart, half Chinese):
    who gets the shortfall, every listener a little or a few a lot."""
    jobs = [("long_zh" if i % 2 else "long_en", long_zh(i) if i % 2 else long_en(i), round(i * stagger, 3)) for i in range(n)]
    rows = run(settings, farm, plan(jobs))
    return {"listeners": n, "stagger_s": stagger, "not_done": sum(1 for r in rows if r["state"] != "done"),
            "with_underrun": sum(1 for r in rows if r["underruns"]), "underrun_s": pct(r["underrun_s"] for r in rows),
            "first_chunk_ms": pct(r["first_chunk_ms"] for r in rows)}


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    env = worker_env(extra=MODES[mode])
    farm = LocalFarm(workers=args.workers, env=env)
    try:
        farm.start()
        conf = load_settings(env={**env, "TTSFARM_REDIS_URL": farm.url, "TTSFARM_REDIS_KEY_PREFIX": farm.prefix})
        run(conf, farm, plan([("short", SHORT_EN[0], 0.0), ("long_zh", long_zh(0), 0.0)]))  # warm-up
        out: dict[str, Any] = {}
        if not args.overload_only:
            out["scenarios"] = scenario_rows(conf, farm)
            for mix in args.capacity_mixes.split(","):
                if mix:
                    out[f"capacity_{mix}"] = capacity(conf, farm, mix, args.capacity_start, args.short_rate, seed=11)
            out["en_short"] = en_short(conf, farm, args.saturate_s, args.load_s)
        if args.overload:
            out["overload"] = overload(conf, farm, args.overload, 0.25)
        return out
    finally:
        farm.stop()


def _ms(v: Any) -> str:
    return "–" if v is None else f"{v:,.0f}"


def report_overload(doc: dict[str, Any]) -> str:
    lines = ["| mode | listeners | not done | with an underrun | underrun s P50 / P95 / max | first chunk P50 / P99 ms |",
             "|---|---:|---:|---:|---|---|"]
    for mode, m in doc["modes"].items():
        o = m.get("overload")
        if o:
            u, f = o["underrun_s"], o["first_chunk_ms"]
            lines.append(f"| {mode} | {o['listeners']} ({o['stagger_s']} s apart) | {o['not_done']} | {o['with_underrun']} | "
                         f"{u['p50']:.2f} / {u['p95']:.2f} / {u['max']:.2f} | {_ms(f['p50'])} / {_ms(f['p99'])} |")
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> str:
    modes = list(doc["modes"])
    if all("scenarios" not in m for m in doc["modes"].values()):
        return report_overload(doc)
    lines = [f"One worker process ({doc['workers']} worker), the default layout; {doc['cores']} cores. Times from each job's "
             "scheduled arrival.", ""]
    lines += ["| scenario | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]

    def row(name: str, fn: Any) -> None:
        lines.append(f"| {name} | " + " | ".join(fn(doc["modes"][m]) for m in modes) + " |")

    row("lone long job: first chunk ms", lambda m: _ms(m["scenarios"]["lone"][0]["first_chunk_ms"]))
    row("lone long job: last chunk s", lambda m: f"{m['scenarios']['lone'][0]['last_chunk_ms'] / 1000:.2f}")
    row("four long together: first chunks ms",
        lambda m: ", ".join(_ms(r["first_chunk_ms"]) for r in m["scenarios"]["four_long"]))
    row("four long + six short: long first chunks ms",
        lambda m: ", ".join(_ms(r["first_chunk_ms"]) for r in m["scenarios"]["long_short"] if r["kind"] != "short"))
    row("four long + six short: short first chunks ms",
        lambda m: ", ".join(_ms(r["first_chunk_ms"]) for r in m["scenarios"]["long_short"] if r["kind"] == "short"))
    row("four long + six short: jobs with an underrun",
        lambda m: str(sum(1 for r in m["scenarios"]["long_short"] if r["underruns"])))
    for key in [k for k in doc["modes"][modes[0]] if k.startswith("capacity_")]:
        row(f"concurrent real-time listeners ({key[9:]})", lambda m, k=key: str(m[k]["listeners"]))
    row("en_short saturation speech s/s", lambda m: f"{m['en_short']['saturation']['speech_s_per_s']:.2f}")
    row("en_short at 70 %: first chunk P50 / P99 ms",
        lambda m: f"{_ms(m['en_short']['first_chunk_ms_70']['p50'])} / {_ms(m['en_short']['first_chunk_ms_70']['p99'])}")
    lines += ["", "Capacity runs (mix@S: listeners started S s apart, else together; short English requests as a Poisson "
              "stream for 30 s):", "",
              "| mode | mix | N | jobs | first chunk P50 / P99 ms | listeners' first chunk max ms | jobs with an underrun | "
              "listeners' underrun s P50 / max | passed |",
              "|---|---|---:|---:|---|---:|---:|---|---|"]
    for mode, m in doc["modes"].items():
        for key in [k for k in m if k.startswith("capacity_")]:
            for r in m[key]["runs"]:
                f, lf, u = r["first_chunk_ms"], r["listener_first_chunk_ms"], r["listener_underrun_s"]
                lines.append(f"| {mode} | {key[9:]} | {r['listeners']} | {r['jobs']} | {_ms(f['p50'])} / {_ms(f['p99'])} | "
                             f"{_ms(lf['max'])} | {r['jobs_with_underrun']} | {u['p50']:.2f} / {u['max']:.2f} | "
                             f"{'yes' if r['passed'] else 'no'} |")
    if any("overload" in m for m in doc["modes"].values()):
        lines += ["", "Overload:", "", report_overload(doc)]
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, default=Path("bench-results/listeners"))
    ap.add_argument("--modes", default="fifo,deadline,jit")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--capacity-mixes", default="en,mixed,en@0.5,mixed@0.5",
                    help="mixes of the capacity runs; MIX@S: listeners start S seconds apart (else all at once)")
    ap.add_argument("--capacity-start", type=int, default=4)
    ap.add_argument("--short-rate", type=float, default=0.5, help="short requests per second among the listeners")
    ap.add_argument("--saturate-s", type=float, default=20.0)
    ap.add_argument("--load-s", type=float, default=30.0)
    ap.add_argument("--overload", type=int, default=0, help="also N listeners, 0.25 s apart, past the capacity")
    ap.add_argument("--overload-only", action="store_true", help="only the overload run")
    ap.add_argument("--report", action="store_true", help="print the tables of <out>/listeners.json again")


def main(args: argparse.Namespace) -> int:
    path = args.out / "listeners.json"
    if args.report:
        print(report(json.loads(path.read_text())))
        return 0
    doc: dict[str, Any] = {"workers": args.workers, "cores": len(os.sched_getaffinity(0)), "started": time.time(), "modes": {}}
    for mode in args.modes.split(","):
        doc["modes"][mode] = run_mode(mode, args)
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1))
    md = report(doc)
    (args.out / "listeners.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    return 0
