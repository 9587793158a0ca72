"""Summaries, JSON and plots of `ttsfarm bench` runs (matplotlib loads only when plots are drawn).

Percentiles are numpy's linear interpolation between order statistics. Throughput is counted over a
steady window: from 10 % into the submitting period (at most 10 s) to the moment submitting stopped, as
audio seconds the client received per wall second. ``speech_s_per_s`` leaves out the pauses the farm adds
between segments, so it compares directly with a voice run in-process.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PERCENTILES = (50, 95, 99)


def pct(values: Iterable[float | None]) -> dict[str, float | int | None]:
    vals = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not len(vals):
        return {"n": 0, "p50": None, "p95": None, "p99": None, "mean": None, "max": None}
    out: dict[str, float | int | None] = {"n": len(vals)}
    for p in PERCENTILES:
        out[f"p{p}"] = round(float(np.percentile(vals, p)), 2)
    out["mean"] = round(float(vals.mean()), 2)
    out["max"] = round(float(vals.max()), 2)
    return out


def _by(rows: Sequence[dict[str, Any]], group: str, value: str) -> dict[str, Any]:
    groups: dict[str, list[float | None]] = defaultdict(list)
    for row in rows:
        groups[row[group]].append(row[value])
    return {"all": pct(row[value] for row in rows), **{k: pct(v) for k, v in sorted(groups.items())}}


def window(raw: dict[str, Any]) -> tuple[float, float]:
    t0, t_stop = raw["t0"], raw["t_stop_submit"]
    skip = min(10.0, 0.1 * (t_stop - t0))
    return t0 + skip, max(t_stop, t0 + skip + 1e-3)


def batch_sizes(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, int], float]:
    """Histogram {size: batches} from the segments' ``batch:{seg}`` ids, and the mean size per segment."""
    members = Counter(b for row in rows for b in row["batches"])
    hist = Counter(members.values())
    segments = sum(members.values())
    per_segment = sum(n * n for n in members.values()) / segments if segments else 0.0
    return {str(k): hist[k] for k in sorted(hist)}, round(per_segment, 3)


def worker_stats(samples: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    pids = sorted({pid for s in samples for pid in s["rss_mb"]})
    out: dict[str, Any] = {}
    for pid in pids:
        series = [(s["t"] - t0, s["rss_mb"][pid]) for s in samples if pid in s["rss_mb"]]
        cpu = [(s["t"], s["cpu_s"][pid]) for s in samples if pid in s.get("cpu_s", {})]
        rss = [v for _, v in series]
        # growth: the last 10 % of samples against the first 10 % (after warm-up), as a percentage
        k = max(1, len(rss) // 10)
        head, tail = float(np.median(rss[:k])), float(np.median(rss[-k:]))
        out[pid] = {
            "rss_mb_start": round(rss[0], 1), "rss_mb_end": round(rss[-1], 1), "rss_mb_max": round(max(rss), 1),
            "rss_growth_pct": round(100.0 * (tail - head) / head, 2) if head else None,
            "cpu_s": round(cpu[-1][1] - cpu[0][1], 2) if len(cpu) > 1 else None,
            "cpu_util": round((cpu[-1][1] - cpu[0][1]) / max(1e-9, cpu[-1][0] - cpu[0][0]), 3) if len(cpu) > 1 else None,
            "series": [[round(t, 2), v] for t, v in series],
        }
    return out


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one load phase (``bench.run.run_load``'s output)."""
    records = raw["records"]
    rows = [rec.summary() for rec in records]
    states = Counter(row["state"] for row in rows)
    start, end = window(raw)
    span = end - start
    audio = speech = 0.0
    for rec in records:
        speech_frac = 1.0 - rec.pause_s / rec.audio_s if rec.audio_s > 0 else 1.0
        for seen, seconds in rec.chunks:
            if start <= seen < end:
                audio += seconds
                speech += seconds * speech_frac
    done_in = [rec for rec in records if rec.state == "done" and rec.ended and start <= rec.ended < end]
    ends = [rec.ended for rec in records if rec.ended]
    # Every submitted job over the time until the last one ended: no survivor bias from short jobs finishing
    # inside a window while long ones are still running (a little low, as the tail drains with fewer in flight).
    drained = (len(records) / (max(ends) - raw["t0"])) if records and len(ends) == len(records) and max(ends) > raw["t0"] else None
    timeline = Counter(int(seen - raw["t0"]) for rec in records for seen, _ in rec.chunks)
    audio_timeline: dict[int, float] = defaultdict(float)
    for rec in records:
        for seen, seconds in rec.chunks:
            audio_timeline[int(seen - raw["t0"])] += seconds
    hist, mean_batch = batch_sizes([r for r in rows if r["state"] == "done"])
    lanes: dict[str, list[float | None]] = defaultdict(list)
    for row in rows:
        lanes[row["lane"]].append(row["queue_ms"])
    spec = raw["spec"]
    return {
        "closed_loop": raw["closed_loop"],
        "mix": spec["mix"],
        "offered_jobs_per_s": None if raw["closed_loop"] else spec["rate"],
        "concurrency": spec["concurrency"] if raw["closed_loop"] else None,
        "submit_s": round(raw["t_stop_submit"] - raw["t0"], 2),
        "jobs": {"submitted": len(rows), **{k: states.get(k, 0) for k in ("done", "failed", "rejected", "timeout", "error")}},
        "throughput": {
            "window_s": round(span, 2),
            "audio_s_per_s": round(audio / span, 3),
            "speech_s_per_s": round(speech / span, 3),
            "jobs_per_s": round(len(done_in) / span, 3),
            "jobs_per_s_drained": None if drained is None else round(drained, 3),
            "segments_per_s": round(sum(r.segments for r in done_in) / span, 3),
        },
        "first_chunk_ms": _by(rows, "kind", "first_chunk_ms"),
        "underruns": underrun_summary(rows),
        "e2e_ms": _by(rows, "kind", "e2e_ms"),
        "queue_ms": {"all": pct(r["queue_ms"] for r in rows), **{lane: pct(v) for lane, v in sorted(lanes.items())}},
        "submit_lag_ms": pct(r["submit_lag_ms"] for r in rows),
        "first_segment": first_segment_path(rows),
        "batch_sizes": hist,
        "mean_batch_size_per_segment": mean_batch,
        "padding_waste": raw.get("padding_waste"),
        "workers": worker_stats(raw["proc_samples"], raw["t0"]),
        "timeline": {"second": sorted(timeline), "chunks": [timeline[k] for k in sorted(timeline)],
                     "audio_s": [round(audio_timeline[k], 3) for k in sorted(timeline)]},
        "per_job": rows,
    }


PARTS = ("claim_ms", "held_ms", "model_ms")  # a first segment's way: in its stream, in the loop that claimed it, model + publish


def first_segment_path(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where each job's first chunk spent its time (``JobRecord.summary``: created → claimed → started → first
    chunk), by the loop that claimed its first segment (``<pid>:<index>`` of the consumer name), and over the slowest
    5 % of first chunks (``tail``: the mean of each part there, so the part that makes a tail shows)."""
    done = [r for r in rows if r.get("loop") and r.get("first_chunk_ms") is not None]
    loops: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in done:
        loops[_loop_of(r)].append(r)
    by_loop = {loop: {"jobs": len(group), **{part: pct(r.get(part) for r in group) for part in PARTS}}
               for loop, group in sorted(loops.items())}
    slow = sorted(done, key=lambda r: r["first_chunk_ms"])[int(len(done) * 0.95):]
    tail = {"jobs": len(slow), "first_chunk_ms": _mean(r["first_chunk_ms"] for r in slow),
            **{part: _mean(r.get(part) for r in slow) for part in PARTS},
            "loops": dict(Counter(_loop_of(r) for r in slow))}
    return {"by_loop": by_loop, "tail": tail}


def _loop_of(row: dict[str, Any]) -> str:
    """``<pid>:<index>`` of the consumer name (``<host>:<pid>:<index>:<tag>``) that claimed a job's first segment."""
    parts = str(row["loop"]).split(":")
    return ":".join(parts[1:3]) if len(parts) >= 3 else str(row["loop"])


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(sum(vals) / len(vals), 1) if vals else None


def underrun_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the listeners heard, over the jobs that finished (all and by kind): the share of jobs with any underrun,
    underruns per job, and seconds without audio per minute of audio delivered."""

    def one(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        done = [r for r in group if r["state"] == "done"]
        audio_min = sum(r["audio_s"] for r in done) / 60
        silent = sum(r.get("underrun_s") or 0.0 for r in done)
        hit = sum(1 for r in done if r.get("underruns"))
        return {"jobs": len(done), "jobs_with_any": hit, "share": round(hit / len(done), 4) if done else None,
                "underruns": sum(r.get("underruns") or 0 for r in done), "seconds": round(silent, 3),
                "seconds_per_audio_min": round(silent / audio_min, 4) if audio_min else None,
                "seconds_per_job": pct(r.get("underrun_s") for r in done)}

    kinds = sorted({r["kind"] for r in rows})
    return {"all": one(rows), **{k: one([r for r in rows if r["kind"] == k]) for k in kinds}}


def padding_waste(rows: Sequence[dict[str, Any]], lengths: dict[tuple[str, int], int]) -> dict[str, Any]:
    """Padding fraction of every batch of more than one segment, from each segment's phoneme count.

    ``lengths`` maps (job_id, seg) to the number of model ids (computed after the run by phonemizing)."""
    members: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        for seg, batch in enumerate(row["batches"]):
            if (row["job_id"], seg) in lengths:
                members[batch].append(lengths[(row["job_id"], seg)])
    wastes = [1.0 - sum(v) / (max(v) * len(v)) for v in members.values() if len(v) > 1]
    return {"batches": len(wastes), "mean": round(float(np.mean(wastes)), 4) if wastes else None,
            "max": round(float(max(wastes)), 4) if wastes else None,
            "note": "computed after the run from the phoneme ids of each batch's segments (measured jobs only)"}


# -- output -----------------------------------------------------------------------------------------
def write_results(result: dict[str, Any], out_dir: Path, *, plots: bool = True, name: str = "bench") -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    if plots:
        for phase, summary in result.get("phases", {}).items():
            plot_phase(summary, out_dir / f"{name}-{phase}.png", title=f"{result.get('label') or name}: {phase}")
    return out_dir


def plot_phase(summary: dict[str, Any], path: Path, *, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0][0]
    kinds = sorted({r["kind"] for r in summary["per_job"]})
    for kind in kinds:
        vals = np.sort([r["first_chunk_ms"] for r in summary["per_job"] if r["kind"] == kind and r["first_chunk_ms"] is not None])
        if len(vals):
            ax.plot(vals, np.arange(1, len(vals) + 1) / len(vals), label=f"{kind} (n={len(vals)})")
    ax.set_xscale("log")
    ax.set_xlabel("first-chunk latency (ms, log)")
    ax.set_ylabel("fraction of jobs")
    ax.axvline(100, color="grey", ls=":", lw=1)
    ax.axvline(250, color="grey", ls="--", lw=1)
    ax.legend(fontsize=8)
    ax.set_title("first chunk, from scheduled arrival")

    ax = axes[0][1]
    for pid, w in summary["workers"].items():
        s = np.array(w["series"]) if w["series"] else np.zeros((0, 2))
        if len(s):
            ax.plot(s[:, 0], s[:, 1], label=f"pid {pid}")
    ax.set_xlabel("s since start")
    ax.set_ylabel("RSS (MB)")
    ax.set_title("worker RSS")
    if summary["workers"]:
        ax.legend(fontsize=8)

    ax = axes[1][0]
    hist = summary["batch_sizes"]
    ax.bar([int(k) for k in hist], list(hist.values()))
    ax.set_xlabel("batch size (segments)")
    ax.set_ylabel("batches")
    ax.set_title(f"batch sizes (mean per segment {summary['mean_batch_size_per_segment']})")

    ax = axes[1][1]
    tl = summary["timeline"]
    ax.plot(tl["second"], tl["audio_s"], lw=1)
    ax.set_xlabel("s since start")
    ax.set_ylabel("audio s delivered per s")
    ax.set_title(f"throughput ({summary['throughput']['audio_s_per_s']} audio s/s in the window)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def markdown_summary(result: dict[str, Any]) -> str:
    lines = ["| phase | jobs done | audio s/s | speech s/s | jobs/s | first chunk P50/P95/P99 ms (by kind) | queue P50 ms by lane | mean batch |",
             "|---|---:|---:|---:|---:|---|---|---:|"]
    for phase, s in result.get("phases", {}).items():
        fc = "; ".join(f"{k} {v['p50']}/{v['p95']}/{v['p99']}" for k, v in s["first_chunk_ms"].items() if k != "all" and v["n"])
        q = "; ".join(f"{k} {v['p50']}" for k, v in s["queue_ms"].items() if k != "all" and v["n"])
        t = s["throughput"]
        lines.append(f"| {phase} | {s['jobs']['done']}/{s['jobs']['submitted']} | {t['audio_s_per_s']} | {t['speech_s_per_s']} | "
                     f"{t['jobs_per_s']} | {fc} | {q} | {s['mean_batch_size_per_segment']} |")
    return "\n".join(lines)
