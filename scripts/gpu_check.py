"""The one-call device check: what a GPU host really runs, per voice stage, and the farm on it.

    python -m scripts.gpu_check --device cuda --out DIR [--budget-s 330] [--farm-s 90]
    python -m scripts.gpu_check --device cpu --quick --out DIR          # the same code on CPU (a test)

Run from the repository root; usually through ``scripts/gpu_check.sh`` (docs/GPU.md), which installs a carried
onnxruntime-gpu first.
Sections, each recorded in ``DIR/gpu_check.json`` (written after every section, so a run cut short still
leaves what it measured) and summarised in ``DIR/gpu_check.txt``:

1. ``env``: onnxruntime build and providers, both-distributions check, GPU name/driver, torch/CUDA, pinning.
   With ``--device cuda`` and no CUDA provider the check stops here with exit status 2: a GPU host on the
   CPU wheel is an error, not a slow pass.
   ``paths``: the stage's host paths on a generated graph of two float outputs (``scripts/gpu_check_paths.py``):
   pageable and pinned copies equal to ``session.run``, outputs kept across a second call unchanged (``ok``).
2. ``sweep``: for every stage model of every served voice (acoustic, vocoder; or the whole graph of a
   one-graph voice), in FP32, FP16 (converted with I/O kept FP32) and dynamic INT8: items/s, speech
   seconds per second and ms per call at batch 1/2/4/8/16/32 (items of similar length, as the length
   buckets form them), and the output's distance from FP32 (max abs, and log-mel L1 dB for audio).
   The INT8 rows show what the CUDA provider does with ConvInteger/MatMulInteger (they run on CPU).
3. ``transfer``: at batch 8, ``session.run`` with numpy against IO binding from pageable numpy buffers and
   IO binding from a reused pinned pool (torch pinned tensors), output left on the device and copied once;
   for vocoders a fixed-shape window also with a CUDA graph (kept only if it measures faster).
4. ``farm``: redis-server and one worker on this device (``bench.run``): saturation (closed loop),
   then Poisson arrivals at 70 % of it with the mixed load: throughput, mean batch, padding waste, first
   chunk P50/P99, and device memory sampled through the run (flat or not). Before the load, a few jobs'
   audio is compared with this process's own synthesis through plain ``session.run`` (``agreement``,
   ``bench/agreement.py``): a mismatch marks the farm's figures invalid (``figures_valid``), and they are not
   reported. The raw batched ceiling of the same voices in this process is measured beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pipeline.settings import CONFIG_DIR
from scripts.gpu_check_models import LEFT_OUT, StageModel, discover_models, precision_variant
from scripts.gpu_check_paths import paths_section
from scripts.gpu_check_run import (StageRunner, cuda_graph_row, device_memory, device_utilization, process_memory_mb,
                                   quality, time_calls)

log = logging.getLogger("gpu_check")
BATCHES = (1, 2, 4, 8, 16, 32)
PRECISIONS = ("fp32", "fp16", "int8")


class Check:
    """The result document, written after every section."""

    def __init__(self, out: Path, args: argparse.Namespace) -> None:
        self.out = out
        self.started = time.monotonic()
        self.budget_s = args.budget_s
        self.doc: dict[str, Any] = {"command": "python -m scripts.gpu_check " + " ".join(sys.argv[1:]),
                                    "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                                    "device_asked": args.device, "sections": {}, "skipped": [], "errors": []}

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def section(self, name: str, value: Any) -> None:
        self.doc["sections"][name] = value
        self.save()

    def skip(self, what: str) -> None:
        log.warning("skipped: %s", what)
        self.doc["skipped"].append(what)

    def error(self, what: str, exc: BaseException) -> None:
        text = f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        log.error("%s", text)
        self.doc["errors"].append(text)
        self.save()

    def save(self) -> None:
        self.doc["seconds"] = round(time.monotonic() - self.started, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.doc, indent=1, default=str), encoding="utf-8")
        (self.out / "gpu_check.txt").write_text(text_report(self.doc), encoding="utf-8")


def env_section(device: str) -> dict[str, Any]:
    import importlib.metadata as md

    import onnxruntime as ort

    from pipeline.voices.runtime import load_cuda_libraries

    load_cuda_libraries()  # CUDA/cuDNN from the nvidia-* wheels torch brings, as a worker does
    dists = []
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            dists.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    out: dict[str, Any] = {"onnxruntime": ort.__version__, "onnxruntime_file": ort.__file__, "distributions": dists,
                           "providers": ort.get_available_providers(), "python": platform.python_version(),
                           "cpus": os.cpu_count()}
    try:
        out["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out["gpu"] = ""
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_cuda"] = bool(torch.cuda.is_available())
    except ImportError:
        out["torch"], out["torch_cuda"] = None, False
    out["pinned_pool"] = "torch pinned tensors" if out["torch_cuda"] else "numpy (pageable; no torch with CUDA)"
    out["cuda_provider"] = "CUDAExecutionProvider" in out["providers"]
    out["ok"] = out["cuda_provider"] if device == "cuda" else True
    return out


def sweep_section(check: Check, models: list[StageModel], device: str, batches: tuple[int, ...], precisions: tuple[str, ...],
                  work: Path, min_time_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for model in models:
        reference: dict[int, Any] = {}
        for precision in precisions:
            if check.left_s() < 60:
                check.skip(f"sweep {model.label} {precision}: time budget")
                continue
            try:
                path = precision_variant(model.path, precision, work, model.label)
                runner = StageRunner(path, device=device)
            except Exception as exc:  # noqa: BLE001 - a precision that does not build is a finding
                check.error(f"{model.label} {precision}: build", exc)
                rows.append({"stage": model.label, "precision": precision, "error": str(exc).splitlines()[0][:300]})
                continue
            row_q: dict[str, Any] = {}
            try:
                row_q = quality(runner, model, reference, precision)
            except Exception as exc:  # noqa: BLE001
                check.error(f"{model.label} {precision}: quality", exc)
            for batch in batches:
                if batch > model.max_batch:
                    rows.append({"stage": model.label, "precision": precision, "batch": batch,
                                 "error": f"over the stage's max_batch of {model.max_batch} (the graph's or the catalogue's limit)"})
                    break
                if check.left_s() < 45:
                    check.skip(f"sweep {model.label} {precision} batch {batch}: time budget")
                    break
                try:
                    feeds, audio_s = model.feeds(batch)
                    timing = time_calls(lambda: runner.run(feeds), min_time_s=min_time_s)
                except Exception as exc:  # noqa: BLE001
                    check.error(f"{model.label} {precision} batch {batch}", exc)
                    rows.append({"stage": model.label, "precision": precision, "batch": batch, "error": str(exc).splitlines()[0][:300]})
                    break
                rows.append({"stage": model.label, "voice": model.voice, "role": model.role, "precision": precision, "batch": batch,
                             "providers": runner.providers, "cpu_nodes": runner.cpu_nodes, "ms_per_call": timing["ms_p50"],
                             "items_per_s": round(batch / (timing["ms_p50"] / 1000), 2),
                             "speech_s_per_s": round(audio_s / (timing["ms_p50"] / 1000), 1), "calls": timing["calls"], **row_q})
                log.info("%s %s b%d: %.2f ms, %.1f items/s", model.label, precision, batch, timing["ms_p50"], rows[-1]["items_per_s"])
            runner.close()
            check.section("sweep", rows)
    return rows


def transfer_section(check: Check, models: list[StageModel], device: str, min_time_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    modes = ("session.run", "iobinding-pageable", "iobinding-pinned")
    for model in models:
        if check.left_s() < 40:
            check.skip(f"transfer {model.label}: time budget")
            continue
        try:
            runner = StageRunner(model.path, device=device)
            feeds, audio_s = model.feeds(min(8, model.max_batch))
            for mode in modes:
                timing = time_calls(lambda: runner.run(feeds, mode=mode), min_time_s=min_time_s)
                rows.append({"stage": model.label, "mode": mode, "batch": min(8, model.max_batch), "ms_per_call": timing["ms_p50"],
                             "speech_s_per_s": round(audio_s / (timing["ms_p50"] / 1000), 1),
                             "host_allocations": runner.allocations(mode)})
            if model.role == "vocoder" and device == "cuda":
                rows.extend(cuda_graph_row(model, min_time_s=min_time_s))
            runner.close()
        except Exception as exc:  # noqa: BLE001
            check.error(f"transfer {model.label}", exc)
        check.section("transfer", rows)
    return rows


class MemorySampler(threading.Thread):
    """Device memory every second while the farm runs (whole device), and the tail of the worker's log kept
    in the output folder (the bench's farm folder is removed when it stops)."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.samples: list[tuple[float, float | None]] = []
        self.worker: list[tuple[float, float]] = []  # the worker process's own device memory, when nvidia-smi lists it
        self.busy: list[tuple[float, float]] = []  # (wall clock, GPU utilization 0-1) when nvidia-smi reads it
        self._stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self._stop.wait(1.0):
            t = round(time.monotonic() - self.t0, 1)
            self.samples.append((t, device_memory()["used_mb"]))
            mine = process_memory_mb(os.getpid())
            if mine is not None:
                self.worker.append((t, mine))
            busy = device_utilization()
            if busy is not None:
                self.busy.append((time.time(), busy))
            for log_file in Path(tempfile.gettempdir()).glob("ttsfarm-bench-*/worker0.log"):
                try:
                    data = log_file.read_bytes()[-200_000:]
                    (self.out / "worker.log").write_bytes(data)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()


def farm_config_dir(settings: Any, work: Path) -> tuple[Path, bool]:
    """A configs folder whose catalogue holds only the voices this check measures (a bare device has no Kokoro
    packages), the blend's Chinese route kept only if it leads to one of them. Returns (folder, speaks Chinese)."""
    import re

    keep = {name for name, spec in settings.catalogue.voices.items() if spec.engine not in LEFT_OUT}
    out = work / "configs"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONFIG_DIR / "settings.toml", out / "settings.toml")
    lines, drop = [], False
    for line in (CONFIG_DIR / "voices.toml").read_text(encoding="utf-8").splitlines():
        header = re.match(r"\[voices\.([A-Za-z0-9_-]+)", line)
        if header:
            drop = header.group(1) not in keep
        if not drop:
            lines.append(line)
    text = "\n".join(lines) + "\n"

    def zh_route(m: re.Match[str]) -> str:  # zh = "v" or zh = ["v1", "v2"]: keep the voices measured here
        kept = [v for v in re.findall(r'"([^"]+)"', m.group(1)) if v in keep]
        return f'zh = {json.dumps(kept)}' if kept else ""

    text = re.sub(r'zh\s*=\s*(\[[^\]]*\]|"[^"]*")', zh_route, text)
    speaks_zh = bool(re.search(r'zh\s*=\s*\[', text))
    if not speaks_zh:
        text = re.sub(r',\s*(?=\s*})', "", text).replace('languages = ["en", "zh"]', 'languages = ["en"]')
    (out / "voices.toml").write_text(text, encoding="utf-8")
    return out, speaks_zh


def farm_section(check: Check, settings: Any, device: str, farm_s: float, max_batch: int, work: Path,
                 loops: int = 0, workers: int = 1, finishers: int = 0) -> dict[str, Any]:
    from bench.run import BenchConfig, LoadSpec, run_bench

    config_dir, speaks_zh = farm_config_dir(settings, work)
    env = {"TTSFARM_RUNTIME_DEVICE": device, "TTSFARM_RUNTIME_CPU_FALLBACK": "false" if device == "cuda" else "true",
           "TTSFARM_QUEUE_MAX_BATCH_CUDA": str(max_batch), "TTSFARM_CONFIG_DIR": str(config_dir)}
    if loops:  # loops sharing the worker's sessions (0: the default, one on CUDA)
        env["TTSFARM_QUEUE_INFERENCE_THREADS"] = str(loops)
    if finishers:  # finished jobs stored from processes of their own, each fed by a thread (as deploy/ runs GPU workers)
        env["TTSFARM_QUEUE_FINISHER_PROCESSES"] = env["TTSFARM_QUEUE_FINISHER_THREADS"] = str(finishers)
    sat_s = max(5.0, farm_s * 0.4)
    mix: Any = "mixed" if speaks_zh else {"en_short": 0.75, "en_paragraph": 0.25}
    load = LoadSpec(mix=mix, duration_s=max(5.0, farm_s - sat_s), seed=5, timeout_s=120)
    # on CUDA the worker batches up to --max-batch; on CPU it keeps its own default (batching does not pay there)
    config = BenchConfig(workers=workers, env=env, load=load, saturate_s=sat_s,
                         saturate_concurrency=4 * max_batch * workers if device == "cuda" else 4 * workers,
                         load_fraction=0.7, warmup_jobs=4, label=f"gpu-check-farm-{device}")
    os.environ["TTSFARM_CONFIG_DIR"] = str(config_dir)  # this entry point's own process submits with the same catalogue
    sampler = MemorySampler(check.out)
    sampler.start()
    try:
        result = run_bench(config, check=lambda farm: agreement(farm, device, speaks_zh))
    finally:
        sampler.stop()
    agreed = result["check"]
    out: dict[str, Any] = {"worker_env": env, "mix": mix, "rate_70pct": result["config"]["load"]["rate"],
                           "agreement": agreed, "figures_valid": bool(agreed.get("agree"))}
    if not out["figures_valid"]:
        check.doc["errors"].append(f"farm figures invalid: the farm's audio differs from in-process synthesis "
                                   f"({agreement_failures(agreed)})")
    for phase, s in result["phases"].items():
        out[phase] = {"jobs": s["jobs"], "throughput": s["throughput"], "mean_batch": s["mean_batch_size_per_segment"],
                      "batch_sizes": s["batch_sizes"], "padding_waste": s.get("padding_waste"),
                      "first_chunk_ms": s["first_chunk_ms"]["all"], "queue_ms": s.get("queue_ms"),
                      "device_busy": phase_busy(sampler.busy, s["per_job"]), "host": host_cpu(s)}
    mem = [m for _, m in sampler.samples if m is not None]
    out["device_memory_mb"] = {"samples": len(mem), "min": min(mem, default=None), "max": max(mem, default=None),
                               "first_10s_max": max((m for t, m in sampler.samples if m is not None and t <= 10), default=None),
                               "last": mem[-1] if mem else None}
    w = [m for _, m in sampler.worker]
    if w:  # flat = after its first 20 s (sessions made, arena grown to the shapes in use) it grows < 5 %
        settled = [m for t, m in sampler.worker if t >= sampler.worker[0][0] + 20] or w
        out["worker_device_memory_mb"] = {"samples": len(w), "first": w[0], "max": max(w), "settled_min": min(settled),
                                          "settled_max": max(settled), "flat": max(settled) <= 1.05 * min(settled)}
    return out


def farm_spec(spec: str) -> tuple[int, int, int]:
    """One ``--farm-loops`` value: loops per worker (0: the default), worker processes, finisher processes each."""
    m = re.fullmatch(r"(\d+)(?:x(\d+))?(?:f(\d+))?", spec.strip())
    if m is None or int(m.group(2) or 1) < 1:
        raise ValueError(f"a farm run is LOOPS[xWORKERS][fFINISHERS] (6, 6x2, 0f2), not {spec!r}")
    return int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 0)


def farm_specs(text: str) -> list[tuple[int, int, int]]:
    """``--farm-loops`` read whole before any section runs (argparse turns a ValueError into a usage error)."""
    return [farm_spec(spec) for spec in text.split(",")]


def phase_busy(busy: list[tuple[float, float]], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The GPU's mean utilization (nvidia-smi: the share of time a kernel ran) over a phase's arrivals, from the
    first job's to the last one's: the device busy fraction while the phase offered its load."""
    times = [r["t_sched"] for r in rows if r.get("t_sched")]
    inside = [u for t, u in busy if times and min(times) + 1.0 <= t <= max(times)]
    return {"samples": len(inside), "mean": round(sum(inside) / len(inside), 3)} if inside else None


def host_cpu(summary: dict[str, Any]) -> dict[str, Any]:
    """The worker processes' CPU over the phase: cores in use and ms per segment made."""
    cores = sum(w.get("cpu_util") or 0.0 for w in summary.get("workers", {}).values())
    seg_s = summary["throughput"]["segments_per_s"]
    return {"cores": round(cores, 2), "segments_per_s": seg_s, "cpu_ms_per_segment": round(1000 * cores / seg_s, 2) if seg_s else None}


def agreement(farm: Any, device: str, speaks_zh: bool) -> dict[str, Any]:
    """Before any farm figure: ``bench.agreement.CASES`` through the warmed-up farm against this process's own
    synthesis on the same device and precisions through plain ``session.run`` (IO binding off), so the figures that
    follow come from a path whose audio was looked at. Any failure to compare is a disagreement."""
    from bench.agreement import CASES, farm_agreement
    from pipeline.synth import Synthesizer
    from producer.client import Client
    from wire.settings import load_settings

    reference = load_settings(env={**os.environ, "TTSFARM_RUNTIME_DEVICE": device, "TTSFARM_RUNTIME_CUDA_IO_BINDING": "false"})
    cases = [(None, text) for lang, text in CASES if lang == "en" or speaks_zh]
    try:
        with Client.from_url(settings=farm) as client:
            return farm_agreement(client, Synthesizer(reference), cases)
    except Exception as exc:  # noqa: BLE001 - not compared is not agreed
        log.error("farm agreement: %s: %s", type(exc).__name__, exc)
        return {"agree": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", "cases": []}


def agreement_failures(agreed: dict[str, Any]) -> str:
    return agreed.get("error") or "; ".join(f"{c['voice']} {c['text'][:24]!r}: {c.get('why')}" for c in agreed.get("cases", [])
                                            if not c.get("agree"))


def ceiling_section(models: list[StageModel], device: str, max_batch: int, min_time_s: float) -> dict[str, Any]:
    """The raw batched ceiling: every voice's stages chained in this process at the farm's batch size."""
    out: dict[str, Any] = {}
    by_voice: dict[str, list[StageModel]] = {}
    for m in models:
        by_voice.setdefault(m.voice, []).append(m)
    for voice, stages in by_voice.items():
        total_ms, audio_s = 0.0, stages[0].feeds(max_batch)[1]  # speech seconds one batch of the farm's size makes
        for m in stages:  # a stage whose batch axis is fixed runs the batch's items one call each
            runner = StageRunner(m.path, device=device)
            per_call = min(max_batch, m.max_batch)
            feeds, _ = m.feeds(per_call)
            calls = -(-max_batch // per_call)
            total_ms += calls * time_calls(lambda: runner.run(feeds), min_time_s=min_time_s)["ms_p50"]
            runner.close()
        out[voice] = {"batch": max_batch, "ms_per_batch": round(total_ms, 2), "speech_s_per_s": round(audio_s / (total_ms / 1000), 1)}
    return out


def text_report(doc: dict[str, Any]) -> str:
    lines = [f"gpu_check {doc.get('date_utc')} asked={doc.get('device_asked')} seconds={doc.get('seconds')}"]
    env = doc["sections"].get("env", {})
    if env:
        lines.append(f"onnxruntime {env.get('onnxruntime')} {env.get('distributions')} providers={env.get('providers')}")
        lines.append(f"gpu: {env.get('gpu') or '-'}  torch {env.get('torch')} cuda={env.get('torch_cuda')}  pool: {env.get('pinned_pool')}")
    sweep = doc["sections"].get("sweep", [])
    if sweep:
        lines.append("sweep: stage precision batch -> ms/call items/s speech_s/s [cpu nodes] (quality)")
        for r in sweep:
            if "error" in r:
                lines.append(f"  {r['stage']} {r['precision']} b{r.get('batch', '-')}: ERROR {r['error'][:120]}")
                continue
            q = {k: r[k] for k in ("max_abs_vs_fp32", "logmel_l1_db_vs_fp32") if r.get(k) is not None}
            lines.append(f"  {r['stage']:<24} {r['precision']:<5} b{r['batch']:<3} {r['ms_per_call']:>9.2f} {r['items_per_s']:>9.1f} "
                         f"{r['speech_s_per_s']:>9.1f} [{r['cpu_nodes']}] {q or ''}")
    for r in doc["sections"].get("transfer", []):
        lines.append(f"  transfer {r['stage']} {r['mode']}: {r['ms_per_call']:.2f} ms/call ({r.get('note', '')})")
    for name, farm in doc["sections"].items():
        if not name.startswith("farm"):
            continue
        if not farm.get("figures_valid"):
            lines.append(f"{name}: figures INVALID, not reported: the farm's audio differs from in-process synthesis "
                         f"({agreement_failures(farm.get('agreement') or {})})")
            continue
        cases = (farm.get("agreement") or {}).get("cases", [])
        lines.append(f"{name}: audio agrees with in-process synthesis on {len(cases)} jobs (log-mel L1 max "
                     f"{max(c['logmel_l1_db'] for c in cases):.3f} dB)")
        for phase in ("saturation", "load"):
            if phase in farm:
                p = farm[phase]
                lines.append(f"{name} {phase}: {p['throughput']} mean_batch={p['mean_batch']} first_chunk_ms={p['first_chunk_ms']} "
                             f"device_busy={p.get('device_busy')} host={p.get('host')}")
        lines.append(f"{name} device memory MB: {farm.get('device_memory_mb')} worker: {farm.get('worker_device_memory_mb')}")
    if doc["sections"].get("ceiling"):
        lines.append(f"raw ceiling: {doc['sections']['ceiling']}")
    lines += [f"skipped: {s}" for s in doc.get("skipped", [])]
    lines += [f"error: {e}" for e in doc.get("errors", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-results/gpu_check")))
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting new measurements after this many seconds")
    ap.add_argument("--farm-s", type=float, default=80.0, help="seconds of farm load (0: no farm run)")
    ap.add_argument("--max-batch", type=int, default=8, help="the farm worker's batch cap")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--voices", default="", help="comma-separated voices (default: every served voice with a stage model)")
    ap.add_argument("--min-time-s", type=float, default=0.4, help="time each cell at least this long")
    ap.add_argument("--sections", default="paths,sweep,transfer,ceiling,farm", help="which checks to make")
    ap.add_argument("--farm-loops", default="0", type=farm_specs,
                    help="farm runs, one per value: inference loops per worker (0 = default), LxW for W worker processes "
                         "on the device (6x2: two workers of six loops), a suffix fN for N finisher processes each (0f2)")
    ap.add_argument("--quick", action="store_true", help="batches 1,2, FP32+INT8, a short farm run: the CPU test")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.precisions, args.min_time_s = "1,2", "fp32,int8", 0.05
        args.farm_s = min(args.farm_s, 10.0)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    check = Check(args.out, args)
    env = env_section(args.device)
    check.section("env", env)
    if not env["ok"]:
        print(f"gpu_check: asked for CUDA but onnxruntime has only {env['providers']} ({env['distributions']}): "
              "install onnxruntime-gpu alone (docs/GPU.md, Install)", file=sys.stderr)
        return 2
    from wire.settings import load_settings

    settings = load_settings(env=dict(os.environ))
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    voices = [v for v in args.voices.split(",") if v]
    models = discover_models(settings, voices)
    check.section("models", [dataclasses.asdict(m) | {"path": str(m.path), "items": len(m.items)} for m in models])
    batches = tuple(int(b) for b in args.batches.split(","))
    precisions = tuple(p for p in args.precisions.split(",") if p)
    sections = set(args.sections.split(","))
    if "paths" in sections:  # the host paths on a graph of two float outputs: equal to session.run, outputs kept
        try:
            check.section("paths", paths_section(work, dataclasses.replace(settings.runtime, device=args.device)))
        except Exception as exc:  # noqa: BLE001
            check.error("paths", exc)
    if "sweep" in sections:
        sweep_section(check, models, args.device, batches, precisions, work, args.min_time_s)
    if "transfer" in sections:
        transfer_section(check, models, args.device, args.min_time_s)
    if "ceiling" in sections:
        try:
            check.section("ceiling", ceiling_section(models, args.device, args.max_batch, args.min_time_s))
        except Exception as exc:  # noqa: BLE001
            check.error("ceiling", exc)
    for n, (loops, workers, finishers) in enumerate(args.farm_loops):
        if args.farm_s <= 0 or "farm" not in sections:
            break
        name = "farm" if n == 0 else (f"farm_loops{loops}" + (f"_w{workers}" if workers > 1 else "")
                                      + (f"_f{finishers}" if finishers else ""))
        if check.left_s() < args.farm_s + 30:
            check.skip(f"{name}: {check.left_s():.0f} s left of the budget, {args.farm_s + 30:.0f} s needed")
            continue
        try:
            check.section(name, {"loops": loops or "default", "workers": workers, "finisher_processes": finishers}
                          | farm_section(check, settings, args.device, args.farm_s, args.max_batch, work, loops, workers,
                                         finishers))
        except Exception as exc:  # noqa: BLE001
            check.error(name, exc)
    check.save()
    print(text_report(check.doc))
    return 1 if check.doc["errors"] and not check.doc["sections"].get("sweep") else 0


if __name__ == "__main__":
    sys.exit(main())
