"""Running one stage graph for the device check: sessions, the three ways of feeding it, timing, quality.

Feeding modes (``StageRunner.run``):

* ``session.run``          numpy in, numpy out: onnxruntime copies from pageable memory each call;
* ``iobinding-pageable``   IO binding from the numpy arrays; outputs stay on the device, copied once;
* ``iobinding-pinned``     the serving path (``pipeline.voices.binding.StageBinding``): inputs staged in a reused
                           pinned host pool (torch pinned tensors), outputs copied once from the device into it.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("gpu_check")
CUDA_MEM_LIMIT = 8 << 30


def session(path: Path, device: str, *, profile: bool = False, cuda_graph: bool = False) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"gpucheck-{path.stem}")
    if device == "cuda":
        cuda = {"device_id": 0, "gpu_mem_limit": CUDA_MEM_LIMIT, "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "HEURISTIC", "do_copy_in_default_stream": True}
        if cuda_graph:
            cuda["enable_cuda_graph"] = "1"
        providers: list[Any] = [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers)


def node_placement(path: Path, device: str, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """Nodes run per execution provider, read from one profiled run."""
    sess = session(path, device, profile=True)
    sess.run(None, feeds)
    prof = sess.end_profiling()
    try:
        events = json.loads(Path(prof).read_text())
        counts = Counter(e.get("args", {}).get("provider", "?") for e in events
                         if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"))
        return dict(counts)
    finally:
        Path(prof).unlink(missing_ok=True)


class StageRunner:
    def __init__(self, path: Path, *, device: str) -> None:
        self.path = path
        self.device = device
        self.sess = session(path, device)
        self.providers = self.sess.get_providers()
        self.cpu_nodes: int | str = "-"
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self._pinned: Any = None
        self._binding = self.sess.io_binding()

    def count_cpu_nodes(self, feeds: dict[str, np.ndarray]) -> dict[str, int]:
        placement = node_placement(self.path, self.device, feeds)
        self.cpu_nodes = placement.get("CPUExecutionProvider", 0) if self.device == "cuda" else "-"
        return placement

    def run(self, feeds: dict[str, np.ndarray], mode: str = "session.run") -> list[np.ndarray]:
        if mode == "session.run":
            return self.sess.run(None, feeds)
        if mode == "iobinding-pinned":
            return self.pinned_binding().run(feeds)
        io = self._binding
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        for name, arr in feeds.items():
            io.bind_cpu_input(name, arr)
        for name in self.outputs:
            io.bind_output(name, self.device if self.device == "cuda" else "cpu", 0)
        self.sess.run_with_iobinding(io)
        return io.copy_outputs_to_cpu()

    def pinned_binding(self) -> Any:
        if self._pinned is None:
            from pipeline.voices.binding import StageBinding

            self._pinned = StageBinding(self.sess, device=self.device)
        return self._pinned

    def allocations(self, mode: str) -> int | None:
        return self._pinned.allocations if mode == "iobinding-pinned" and self._pinned is not None else None

    def close(self) -> None:
        del self._binding, self.sess


def time_calls(fn: Callable[[], Any], *, min_time_s: float, max_calls: int = 200) -> dict[str, Any]:
    for _ in range(2):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_time_s and len(times) < max_calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"ms_p50": round(1000 * statistics.median(times), 3), "ms_min": round(1000 * min(times), 3), "calls": len(times)}


def _audio_output(model: Any, outs: list[np.ndarray]) -> np.ndarray | None:
    return outs[0].reshape(-1) if model.role in ("vocoder", "whole") else None


def quality(runner: StageRunner, model: Any, reference: dict[int, Any], precision: str) -> dict[str, Any]:
    """Distance of this precision's batch-1 output from FP32's (the first precision run), and node placement."""
    from pipeline.prepare.quantize_eval import logmel_l1_db

    feeds, _ = model.feeds(1)
    placement = runner.count_cpu_nodes(feeds)
    outs = runner.run(feeds)
    main = np.asarray(outs[0], dtype=np.float32)
    out: dict[str, Any] = {"placement": placement}
    if precision == "fp32":
        reference[0] = main
        return out
    ref = reference.get(0)
    if ref is None:
        return out
    if ref.shape == main.shape:
        out["max_abs_vs_fp32"] = round(float(np.max(np.abs(ref - main))), 5)
    else:
        out["shape_vs_fp32"] = f"{list(main.shape)} vs {list(ref.shape)}"
    audio = _audio_output(model, outs)
    if audio is not None:
        out["logmel_l1_db_vs_fp32"] = round(logmel_l1_db(ref.reshape(-1), audio, model.sample_rate)[0], 3)
    return out


def device_memory() -> dict[str, float | None]:
    """Whole-device memory in use (MB), from torch or nvidia-smi; None without a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info(0)
            return {"used_mb": round((total - free) / 2**20, 1), "total_mb": round(total / 2**20, 1)}
    except Exception:  # noqa: BLE001 - no torch or no driver: try nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout.split(",")
        return {"used_mb": float(out[0]), "total_mb": float(out[1])}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"used_mb": None, "total_mb": None}


def device_utilization() -> float | None:
    """The GPU's utilization (0-1: the share of the last sample period in which a kernel ran), from nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout.split()
        return float(out[0]) / 100.0
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def process_memory_mb(exclude_pid: int) -> float | None:
    """Device memory of the other processes on the GPU (the farm's worker), from nvidia-smi; None if unreadable."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    used = [float(mb) for pid, _, mb in (line.partition(",") for line in out.splitlines() if "," in line)
            if pid.strip() != str(exclude_pid) and mb.strip().replace(".", "", 1).isdigit()]
    return sum(used) if used else None


def cuda_graph_row(model: Any, *, min_time_s: float, window: int = 96, batch: int = 8) -> list[dict[str, Any]]:
    """A fixed-shape vocoder window batch with and without a captured CUDA graph (device-resident I/O)."""
    import onnxruntime as ort

    frames = [f[:window] if f.shape[0] >= window else np.pad(f, ((0, window - f.shape[0]), (0, 0))) for f in model.items[:batch]]
    while len(frames) < batch:
        frames.append(frames[0])
    from scripts.gpu_check_models import build_feeds

    feeds = build_feeds(model.inputs, frames, model.layout)
    rows = []
    for graph in (False, True):
        try:
            sess = session(model.path, "cuda", cuda_graph=graph)
            shape_out = sess.run(None, feeds)[0].shape
            io = sess.io_binding()
            for name, arr in feeds.items():
                io.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(arr, "cuda", 0))
            out_name = sess.get_outputs()[0].name
            io.bind_ortvalue_output(out_name, ort.OrtValue.ortvalue_from_shape_and_type(list(shape_out), np.float32, "cuda", 0))
            for other in sess.get_outputs()[1:]:
                io.bind_output(other.name, "cuda", 0)
            timing = time_calls(lambda: sess.run_with_iobinding(io), min_time_s=min_time_s)
            rows.append({"stage": model.label, "mode": f"fixed window {window} frames x{batch}, cuda graph {'on' if graph else 'off'}",
                         "batch": batch, "ms_per_call": timing["ms_p50"],
                         "speech_s_per_s": round(batch * window * model.hop / model.sample_rate / (timing["ms_p50"] / 1000), 1)})
        except Exception as exc:  # noqa: BLE001 - a graph that cannot be captured is a finding
            rows.append({"stage": model.label, "mode": f"cuda graph {'on' if graph else 'off'}", "batch": batch,
                         "ms_per_call": float("nan"), "note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
    if len(rows) == 2 and rows[0]["ms_per_call"] == rows[0]["ms_per_call"] and rows[1]["ms_per_call"] == rows[1]["ms_per_call"]:
        rows[1]["note"] = "kept (faster)" if rows[1]["ms_per_call"] < rows[0]["ms_per_call"] else "not kept (no faster)"
    return rows
