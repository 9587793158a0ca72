"""The Piper voice on CUDA: batch 1 against batch 8, through the IO-binding path (pipeline/voices/gpu.py).

    python scripts/bench_gpu.py [--out bench-results/gpu.json] [--repeats 3] [--budget-s 200]

Needs a CUDA machine with onnxruntime-gpu instead of onnxruntime (see docs/BENCHMARKS.md, "GPU path",
for the wheels), and torch with CUDA for pinned staging buffers (without it the buffers are plain
numpy and the JSON says so). Stops with an error if the session does not come up on CUDA.

For each precision (FP32; INT8 too when ``ttsfarm quantize joe`` has left a passing INT8 model in the
model cache) and each path (IO binding, and the plain ``session.run`` for comparison):
* batch 1: every segment of the English workload alone; throughput (speech s per s) and the per-segment
  time, which is the first-chunk latency of a job whose first segment it is (queueing aside);
* batch 8: the segments sorted by length in groups of 8; throughput, and the per-batch time, which is
  what every item of the batch waits before its first chunk.
Device memory (nvidia-smi, this process) is read after the warm-up and after every configuration, to
show it stays flat. Each configuration runs ``--repeats`` times; the median pass is reported. The whole
script keeps within ``--budget-s`` (skipping what would not fit) so it fits in a short device session.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench_gpu")


def device_memory_mb() -> float | None:
    """This process's device memory from nvidia-smi (None where it cannot be read)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return float(used)
    return None


def segment_ids(settings: Any, voice: Any) -> list[tuple[int, ...]]:
    from pipeline.synth import plan
    from producer.bench import PARAGRAPHS_EN, SHORT_EN

    ids = []
    for text in (*SHORT_EN, *PARAGRAPHS_EN):
        for p in plan(text, "joe", settings):
            ids.append(voice.phonemize(p.segment.text, p.segment.lang).ids)
    return ids


def one_pass(voice: Any, items: list[tuple[int, ...]], batch: int, opts: Any) -> dict[str, Any]:
    times, samples = [], 0
    for i in range(0, len(items), batch):
        t0 = time.perf_counter()
        outs = voice.synthesize_batch(items[i : i + batch], opts)
        times.append(time.perf_counter() - t0)
        samples += sum(len(a) for a in outs)
    total = sum(times)
    audio = samples / voice.sample_rate
    return {"speech_s": round(audio, 3), "infer_s": round(total, 4), "speech_s_per_s": round(audio / total, 2),
            "call_ms_p50": round(1000 * sorted(times)[len(times) // 2], 2),
            "call_ms_p95": round(1000 * sorted(times)[min(len(times) - 1, int(0.95 * len(times)))], 2),
            "call_ms_max": round(1000 * max(times), 2), "calls": len(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "gpu.json"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--cpu-dry-run", action="store_true", help="run the same code on the CPU provider (checks the script, not the GPU)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.monotonic()

    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # CUDA/cuDNN from the nvidia-* wheels (or torch's)
    from pipeline.settings import load_settings
    from pipeline.voices.base import SynthesisOptions
    from pipeline.voices.gpu import IoBindingRunner, ShapePolicy, cuda_pinning_available
    from pipeline.voices.piper import PiperVoice
    from pipeline.voices.runtime import SessionFactory

    base = load_settings(env=dict(os.environ))
    opts = SynthesisOptions()
    result: dict[str, Any] = {
        "command": "python scripts/bench_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "onnxruntime": ort.__version__, "providers_available": ort.get_available_providers(),
        "python": platform.python_version(), "pinned_staging": cuda_pinning_available(),
        "cuda_mem_limit_mb": base.runtime.cuda_mem_limit_mb, "arena_extend_strategy": base.runtime.cuda_arena_extend_strategy,
        "width_multiple": base.runtime.cuda_width_multiple, "batch_sizes": list(base.runtime.cuda_batch_sizes),
        "device": "cpu (dry run: not a GPU measurement)" if args.cpu_dry_run else "cuda", "rows": [], "skipped": [],
    }
    try:
        result["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        result["gpu"] = ""
    ids: list[tuple[int, ...]] = []
    for precision in ("fp32", "int8"):
        for io_binding in (True, False):
            if time.monotonic() - started > args.budget_s:
                result["skipped"].append(f"{precision} io_binding={io_binding}: over the time budget")
                continue
            device = "cpu" if args.cpu_dry_run else "cuda"
            runtime = dataclasses.replace(base.runtime, device=device, cpu_fallback=False, cuda_io_binding=io_binding, warmup=False)
            voice = PiperVoice(base.catalogue.get("joe"), SessionFactory(runtime), precision=precision)
            if voice.precision != precision:
                result["skipped"].append(f"{precision}: no INT8 model that passed its quality gate in the model cache "
                                         "(run `ttsfarm quantize joe` first)")
                break
            voice.load()
            assert voice.info is not None
            if args.cpu_dry_run and io_binding:
                voice._runner = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy.from_settings(runtime))
            elif not args.cpu_dry_run and voice.info.providers[0] != "CUDAExecutionProvider":
                raise SystemExit(f"session came up on {voice.info.providers}, not CUDA: install onnxruntime-gpu")
            if io_binding and voice._runner is None:
                raise SystemExit("CUDA session but no IO-binding runner")
            ids = ids or segment_ids(base, voice)
            items = sorted(ids, key=len)
            for batch in (1, 8):  # warm-up: every rounded shape the passes will use
                one_pass(voice, items, batch, opts)
            mem_warm = device_memory_mb()
            for batch in (1, 8):
                if time.monotonic() - started > args.budget_s:
                    result["skipped"].append(f"{precision} io_binding={io_binding} batch {batch}: over the time budget")
                    continue
                passes = [one_pass(voice, items, batch, opts) for _ in range(args.repeats)]
                median = sorted(passes, key=lambda p: p["speech_s_per_s"])[len(passes) // 2]
                row = {"precision": precision, "io_binding": io_binding, "batch": batch, "items": len(items), **median,
                       "speech_s_per_s_runs": [p["speech_s_per_s"] for p in passes],
                       "device_mem_mb_after_warmup": mem_warm, "device_mem_mb_after": device_memory_mb(),
                       "shapes_seen": len(voice._runner.shapes_seen) if voice._runner else None,
                       "host_allocations": sum(p.allocations for p in voice._runner.pools) if voice._runner else None}
                result["rows"].append(row)
                log.info("%s", row)
            del voice
    result["seconds"] = round(time.monotonic() - started, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result["rows"], indent=1))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
