"""Markdown tables of a device check's result, for the lab notes (docs/lab/gpu-h200.md holds the H200 runs).

    python -m scripts.gpu_check_report DIR/gpu_check.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    batches = sorted({r["batch"] for r in rows if "batch" in r and "error" not in r})
    out = ["| stage | precision | " + " | ".join(f"b{b} items/s" for b in batches) + " | b8 / b1 | CPU nodes | vs FP32 |",
           "|---|---|" + "---|" * len(batches) + "---|---|---|"]
    keys = []
    for r in rows:
        if (r["stage"], r["precision"]) not in keys:
            keys.append((r["stage"], r["precision"]))
    for stage, precision in keys:
        cells = {r["batch"]: r for r in rows if r["stage"] == stage and r["precision"] == precision and "error" not in r}
        errors = [r["error"] for r in rows if r["stage"] == stage and r["precision"] == precision and "error" in r]
        if not cells:
            out.append(f"| {stage} | {precision} | " + " | ".join("–" for _ in batches) + f" | – | – | error: {errors[0][:80] if errors else ''} |")
            continue
        ratio = cells[8]["items_per_s"] / cells[1]["items_per_s"] if 8 in cells and 1 in cells else None
        first = next(iter(cells.values()))
        q = first.get("logmel_l1_db_vs_fp32")
        quality = (f"log-mel L1 {q:.2f} dB" if q is not None else
                   f"max abs {first['max_abs_vs_fp32']:.4f}" if first.get("max_abs_vs_fp32") is not None else first.get("shape_vs_fp32", "–"))
        out.append(f"| {stage} | {precision} | " + " | ".join(_fmt(cells[b]["items_per_s"]) if b in cells else "–" for b in batches)
                   + f" | {_fmt(ratio)}× | {first.get('cpu_nodes', '–')} | {quality if precision != 'fp32' else '(reference)'} |")
    return out


def latency_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| stage | precision | " + " | ".join(f"b{b} ms" for b in sorted({r['batch'] for r in rows if 'batch' in r})) + " |",
           "|---|---|" + "---|" * len({r['batch'] for r in rows if 'batch' in r})]
    batches = sorted({r["batch"] for r in rows if "batch" in r})
    seen = []
    for r in rows:
        key = (r["stage"], r["precision"])
        if key in seen or "error" in r:
            continue
        seen.append(key)
        cells = {x["batch"]: x for x in rows if (x["stage"], x["precision"]) == key and "error" not in x}
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(_fmt(cells[b]["ms_per_call"]) if b in cells else "–" for b in batches) + " |")
    return out


def report(doc: dict[str, Any]) -> str:
    s = doc["sections"]
    env = s.get("env", {})
    lines = [f"Device: {env.get('gpu') or '?'}; onnxruntime {env.get('onnxruntime')} ({', '.join(env.get('distributions', []))}), "
             f"providers {', '.join(env.get('providers', []))}; torch {env.get('torch')} (CUDA {env.get('torch_cuda')}); "
             f"host pool: {env.get('pinned_pool')}; run {doc.get('date_utc')} UTC, {doc.get('seconds')} s.", ""]
    if s.get("sweep"):
        lines += ["Throughput per stage (items/s; items of similar length, as a length bucket forms them):", ""]
        lines += sweep_table(s["sweep"]) + ["", "Latency per call:", ""] + latency_table(s["sweep"]) + [""]
    if s.get("transfer"):
        lines += ["| stage | feeding | ms per call | speech s/s | note |", "|---|---|---|---|---|"]
        for r in s["transfer"]:
            lines.append(f"| {r['stage']} | {r['mode']} | {_fmt(r['ms_per_call'])} | {_fmt(r.get('speech_s_per_s'))} | {r.get('note', '')} |")
        lines.append("")
    if s.get("ceiling"):
        lines.append("Raw batched ceiling (stages chained in-process at the farm's batch): "
                     + "; ".join(f"{v}: {c['speech_s_per_s']} speech s/s ({c['ms_per_batch']} ms per batch of {c['batch']})"
                                 for v, c in s["ceiling"].items()))
        lines.append("")
    farms = {k: v for k, v in s.items() if k.startswith("farm") and v.get("figures_valid")}
    for name, farm in s.items():  # figures from a farm whose audio was not shown right are not published
        if name.startswith("farm") and not farm.get("figures_valid"):
            lines += [f"{name}: figures invalid, not reported: the farm's audio differs from in-process synthesis "
                      f"({(farm.get('agreement') or {}).get('error') or 'see agreement in gpu_check.json'}).", ""]
    if farms:
        lines += ["Farm audio against in-process synthesis (noise off, IO binding off in-process): "
                  + "; ".join(f"{name}: {len(f['agreement']['cases'])} jobs agree, log-mel L1 max "
                              f"{max(c['logmel_l1_db'] for c in f['agreement']['cases']):.3f} dB" for name, f in farms.items()), ""]
        lines += ["| farm run | loops | phase | jobs done | speech s/s | jobs/s | mean batch | padding waste | first chunk P50 / P99 ms |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, farm in farms.items():
            for phase in ("saturation", "load"):
                p = farm.get(phase)
                if p:
                    fc = p["first_chunk_ms"]
                    waste = p.get("padding_waste") or {}
                    lines.append(f"| {name} | {farm.get('loops', 'default')} | {phase} | {p['jobs'].get('done')} | "
                                 f"{_fmt(p['throughput'].get('speech_s_per_s'))} | {_fmt(p['throughput'].get('jobs_per_s'))} | "
                                 f"{_fmt(p['mean_batch'])} | {_fmt(waste.get('mean') if isinstance(waste, dict) else waste)} | "
                                 f"{_fmt(fc.get('p50'))} / {_fmt(fc.get('p99'))} |")
        lines.append("")
        for name, farm in farms.items():
            mem, worker = farm.get("device_memory_mb", {}), farm.get("worker_device_memory_mb")
            lines.append(f"- {name}: whole device {mem.get('min')}–{mem.get('max')} MB over {mem.get('samples')} samples"
                         + (f"; the worker alone {worker}" if worker else "; the worker's own memory was not readable"))
        lines.append("")
    for k in ("skipped", "errors"):
        if doc.get(k):
            lines += [f"{k.capitalize()}:", ""] + [f"- {x}" for x in doc[k]] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(json.loads(Path(sys.argv[1]).read_text())))
