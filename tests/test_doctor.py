"""`ttsfarm doctor`: passes on a CPU host set to cpu/auto; fails loudly (non-zero, a message naming the fix) when
the device is cuda or a GPU is visible and the voices would not get CUDA, or when two onnxruntime builds share
the package folder. The GPU and the second build are made visible the way the check looks for them: an
``nvidia-smi`` on PATH, a distribution's metadata on the import path."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.prepare.doctor import CUDA, examine, onnxruntime_distributions, visible_gpus
from pipeline.settings import RuntimeSettings

ROOT = Path(__file__).resolve().parent.parent
HAS_CUDA = False
try:
    import onnxruntime

    HAS_CUDA = CUDA in onnxruntime.get_available_providers()
except ImportError:
    pass
cpu_build_only = pytest.mark.skipif(HAS_CUDA, reason="this host's onnxruntime has the CUDA provider")


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TTSFARM_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "cli", "doctor", *args], capture_output=True, text=True,
                          cwd=ROOT, env=full, timeout=120)


def test_cpu_is_always_fine_and_the_report_names_build_and_provider() -> None:
    report = examine(RuntimeSettings(device="cpu"))
    assert report.ok, report.problems
    assert report.session_provider == "CPUExecutionProvider"
    assert [name for name, _ in report.distributions] in (["onnxruntime"], ["onnxruntime-gpu"])
    assert "CPUExecutionProvider" in report.providers and report.ort_version


@pytest.mark.skipif(bool(visible_gpus()), reason="a GPU is visible on this host")
def test_auto_without_a_gpu_passes() -> None:
    done = doctor()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a session gets:  CPUExecutionProvider" in done.stdout and done.stdout.rstrip().endswith("OK")
    assert "ttsfarm " in done.stdout and "piper-tts 1.8.0" in done.stdout


@cpu_build_only
def test_device_cuda_on_the_cpu_build_fails_loudly() -> None:
    done = doctor(env={"TTSFARM_RUNTIME_DEVICE": "cuda"})
    assert done.returncode == 1
    assert f"FAIL: runtime.device = cuda but this onnxruntime has no {CUDA}" in done.stdout
    assert "onnxruntime-gpu" in done.stdout and "problem(s)" in done.stderr
    assert doctor("--device", "cuda").returncode == 1  # the flag says the same
    assert examine(RuntimeSettings(device="cuda")).problems


@cpu_build_only
def test_a_visible_gpu_with_the_cpu_build_fails(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n")
    smi.chmod(0o755)
    path = f"{tmp_path}{os.pathsep}{os.environ['PATH']}"
    done = doctor(env={"PATH": path})
    assert done.returncode == 1
    assert "a GPU is visible (nvidia-smi: GPU 0: NVIDIA H200" in done.stdout and CUDA in done.stdout
    assert doctor("--device", "cpu", env={"PATH": path}).returncode == 0  # serving on CPU on purpose
    report = examine(dataclasses.replace(RuntimeSettings(), device="auto"), gpus=["/dev/nvidia0"])
    assert not report.ok and "/dev/nvidia0" in report.problems[0]


def test_two_onnxruntime_builds_fail(tmp_path: Path) -> None:
    other = "onnxruntime_gpu" if onnxruntime_distributions()[0][0] == "onnxruntime" else "onnxruntime"
    info = tmp_path / f"{other}-1.31.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {other.replace('_', '-')}\nVersion: 1.31.1\n")
    (info / "RECORD").write_text(f"onnxruntime/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    done = doctor("--device", "cpu", env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})
    assert done.returncode == 1, done.stdout
    assert "onnxruntime and onnxruntime-gpu are both installed" in done.stdout
    assert "onnxruntime-gpu 1.31.1" in done.stdout
