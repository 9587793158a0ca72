"""The one-call device check (scripts/gpu_check.sh) runs on CPU here, so it cannot rot between GPU loans.

The CPU run measures nothing about a GPU; it proves every section of the script executes against the real
voice and a real farm (redis-server, a worker process) and writes the result document the docs quote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_runs_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--quick", "--voices", "joe",
                           "--out", str(out), "--budget-s", "400", "--farm-loops", "0f1"],  # as deploy/ runs GPU workers
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "gpu_check.json").read_text())
    assert (out / "gpu_check.txt").read_text().startswith("gpu_check ")
    assert doc["errors"] == [], doc["errors"]
    env = doc["sections"]["env"]
    assert env["ok"] and "CPUExecutionProvider" in env["providers"]
    assert len(env["distributions"]) == 1, env["distributions"]  # one onnxruntime build installed, not two
    sweep = doc["sections"]["sweep"]
    cells = {(r["stage"], r["precision"], r["batch"]) for r in sweep}
    stages = {s for s, _, _ in cells}
    assert stages, sweep
    for stage in stages:
        for precision in ("fp32", "int8"):
            assert {(stage, precision, 1), (stage, precision, 2)} <= cells
    assert all(r["items_per_s"] > 0 and r["speech_s_per_s"] > 0 for r in sweep)
    int8 = [r for r in sweep if r["precision"] == "int8"]
    assert all("max_abs_vs_fp32" in r or "shape_vs_fp32" in r for r in int8)
    assert doc["sections"]["paths"]["ok"], doc["sections"]["paths"]  # two float outputs, outputs kept (CPU: pageable)
    modes = {r["mode"] for r in doc["sections"]["transfer"]}
    assert {"session.run", "iobinding-pageable"} <= modes
    assert all(v["speech_s_per_s"] > 0 for v in doc["sections"]["ceiling"].values())
    farm = doc["sections"]["farm"]
    # before its figures: the farm's audio against in-process synthesis (two English jobs, one Chinese with baker)
    cases = farm["agreement"]["cases"]
    assert farm["figures_valid"] and farm["agreement"]["agree"], farm["agreement"]
    assert len(cases) == 3 and all(c["logmel_l1_db"] < 0.1 for c in cases), cases
    assert "audio agrees with in-process synthesis on 3 jobs" in (out / "gpu_check.txt").read_text()
    assert farm["load"]["jobs"]["done"] > 0 and farm["load"]["first_chunk_ms"]["p50"] > 0
    assert farm["saturation"]["throughput"]["speech_s_per_s"] > 0
    host = farm["saturation"]["host"]  # the worker's CPU per segment made (on a GPU: the host path's cost)
    assert host["cores"] > 0 and host["cpu_ms_per_segment"] > 0, host
    assert farm["finisher_processes"] == 1 and farm["worker_env"]["TTSFARM_QUEUE_FINISHER_PROCESSES"] == "1"


def test_a_farm_run_is_loops_workers_and_finishers() -> None:
    from scripts.gpu_check import farm_spec

    assert [farm_spec(x) for x in ("0", "6x2", "0f2", "2x3f1")] == [(0, 1, 0), (6, 2, 0), (0, 1, 2), (2, 3, 1)]
    for bad in ("", "x2", "6x0", "6f", "six", "6x2x3"):
        with pytest.raises(ValueError, match="LOOPS"):
            farm_spec(bad)
    proc = subprocess.run([sys.executable, "-m", "scripts.gpu_check", "--device", "cpu", "--farm-loops", "0,6y2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--farm-loops" in proc.stderr, proc.stderr[-2000:]


def test_device_busy_counts_only_the_phase() -> None:
    """The GPU's utilization is averaged over a phase's arrivals (after its first second), not over the run."""
    from scripts.gpu_check import phase_busy

    rows = [{"t_sched": 100.0}, {"t_sched": 110.0}]
    busy = [(95.0, 0.0), (100.5, 0.0), (102.0, 0.8), (105.0, 0.9), (110.0, 1.0), (111.0, 0.0)]
    assert phase_busy(busy, rows) == {"samples": 3, "mean": 0.9}
    assert phase_busy(busy, []) is None and phase_busy([], rows) is None


def test_gpu_check_refuses_a_cpu_build_when_cuda_is_asked(tmp_path: Path) -> None:
    """A GPU host that ended up with the CPU wheel is an error with a clear message, not a slow pass."""
    proc = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cuda", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert "asked for CUDA but onnxruntime has only" in proc.stderr and "docs/GPU.md" in proc.stderr
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert doc["sections"]["env"]["ok"] is False
