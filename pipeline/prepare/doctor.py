"""`ttsfarm doctor`: what this install will serve on, and a loud failure when a host would end up on the wrong build.

It reports the onnxruntime build (which distribution installed the ``onnxruntime`` package folder), its
providers, the provider a real session gets (a tiny model is built and run with the providers the voices
would ask for), whether torch sees CUDA, and whether a GPU is visible (``/dev/nvidia0``, ``nvidia-smi -L``,
torch). It fails when:

* two distributions own the ``onnxruntime`` package folder (``onnxruntime`` and ``onnxruntime-gpu`` install
  the same files, so what runs is whichever was written last);
* ``runtime.device = cuda``, or a GPU is visible and the device is not forced to ``cpu``, and the voices
  would not get ``CUDAExecutionProvider`` (the CPU wheel, or CUDA libraries missing).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.settings import RuntimeSettings

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
# Both builds out first: they share files, so removing one of two breaks the other.
CPU_INSTALL = "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime"
GPU_INSTALL = ("pip uninstall -y onnxruntime onnxruntime-gpu && pip install 'onnxruntime-gpu[cuda,cudnn]>=1.27' "
               "(docs/GPU.md, Install)")


@dataclass
class Report:
    device: str
    distributions: list[tuple[str, str]] = field(default_factory=list)  # (name, version) owning onnxruntime/
    ort_version: str = ""
    providers: list[str] = field(default_factory=list)
    session_provider: str = ""  # what a session built like the voices' sessions runs on
    session_error: str = ""
    torch: str = "not installed"
    gpu: list[str] = field(default_factory=list)  # how a GPU was seen; empty: none
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        dists = ", ".join(f"{n} {v}" for n, v in self.distributions) or "none"
        out = [f"onnxruntime:       {self.ort_version or 'cannot import'} (installed by: {dists})",
               f"  providers:       {', '.join(self.providers) or '-'}",
               f"  a session gets:  {self.session_provider or '-'}" + (f" ({self.session_error})" if self.session_error else ""),
               f"torch:             {self.torch}",
               f"GPU visible:       {'; '.join(self.gpu) or 'no'}",
               f"runtime.device:    {self.device}"]
        return out + [f"FAIL: {p}" for p in self.problems] + (["OK"] if self.ok else [])


def onnxruntime_distributions() -> list[tuple[str, str]]:
    """Every installed distribution whose files include ``onnxruntime/__init__.py``."""
    found = []
    for dist in importlib.metadata.distributions():
        files = dist.files or []
        if any(str(f).replace("\\", "/") == "onnxruntime/__init__.py" for f in files):
            found.append((str(dist.metadata["Name"]), str(dist.version)))
    return sorted(set(found))


def visible_gpus() -> list[str]:
    """How this host shows an NVIDIA GPU, if it does: the device node and ``nvidia-smi -L``."""
    seen = []
    if os.path.exists("/dev/nvidia0"):
        seen.append("/dev/nvidia0")
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            log.debug("nvidia-smi failed: %s", exc)
        else:
            gpus = [line.strip() for line in listed.stdout.splitlines() if line.startswith("GPU ")]
            if listed.returncode == 0 and gpus:
                seen.append(f"nvidia-smi: {gpus[0]}" + (f" (+{len(gpus) - 1})" if len(gpus) > 1 else ""))
    return seen


def torch_cuda() -> tuple[str, bool]:
    """torch's version and whether it sees a CUDA device (torch is optional: the ``gpu`` extra)."""
    if importlib.util.find_spec("torch") is None:
        return "not installed", False
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
        name = f", {torch.cuda.get_device_name(0)}" if cuda else ""
        return f"{torch.__version__} (CUDA {'available' + name if cuda else 'not available'})", cuda
    except Exception as exc:  # a broken torch install is reported, not raised
        return f"import failed: {exc}", False


def session_provider(runtime: RuntimeSettings) -> tuple[str, str]:
    """The provider a session made by the voices' own factory (its fallbacks included) runs a tiny model on, and
    the error if there is none."""
    import numpy as np
    from onnx import TensorProto, helper, save_model

    from pipeline.voices.runtime import SessionFactory

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "doctor",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    with tempfile.TemporaryDirectory(prefix="ttsfarm-doctor-") as tmp:
        path = Path(tmp) / "relu.onnx"
        # IR 8 (onnxruntime >= 1.10): onnx writes its newest IR by default, which older runtimes refuse.
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
        save_model(model, str(path))
        try:
            session, info = SessionFactory(runtime).create(path)
            y = session.run(None, {"x": np.array([[-1, 0, 1, 2]], dtype=np.float32)})[0]
        except Exception as exc:  # a provider that cannot start raises several unrelated classes
            return "", str(exc).splitlines()[0] if str(exc) else repr(exc)
    if not np.array_equal(y, [[0, 0, 1, 2]]):
        return info.providers[0], f"wrong result {y.tolist()}"
    return info.providers[0], ""


def examine(runtime: RuntimeSettings, *, gpus: list[str] | None = None) -> Report:
    """Everything above, with the problems found. ``gpus``: how a GPU was seen (default: look)."""
    report = Report(device=runtime.device)
    report.distributions = onnxruntime_distributions()
    report.torch, torch_sees_cuda = torch_cuda()
    report.gpu = visible_gpus() if gpus is None else list(gpus)
    if torch_sees_cuda:
        report.gpu.append("torch.cuda")
    if len(report.distributions) > 1:
        names = " and ".join(n for n, _ in report.distributions)
        report.problems.append(f"{names} are both installed and share the onnxruntime package folder; keep one: "
                               + (GPU_INSTALL if report.gpu else CPU_INSTALL))
    try:
        import onnxruntime as ort

        report.ort_version = str(ort.__version__)
        report.providers = list(ort.get_available_providers())
    except Exception as exc:
        report.problems.append(f"onnxruntime does not import: {exc}")
        return report
    # With the fallback on, a session that cannot get CUDA says what it got instead of raising.
    report.session_provider, report.session_error = session_provider(dataclasses.replace(runtime, cpu_fallback=True))
    wants_cuda = runtime.device == "cuda" or (bool(report.gpu) and runtime.device != "cpu")
    if wants_cuda and report.session_provider != CUDA:
        why = (f"runtime.device = {runtime.device}" if runtime.device == "cuda" else
               f"a GPU is visible ({'; '.join(report.gpu)})")
        if CUDA not in report.providers:
            report.problems.append(f"{why} but this onnxruntime has no {CUDA} (the CPU build); the voices would run "
                                   f"on CPU. Install the GPU build: {GPU_INSTALL}")
        else:
            report.problems.append(f"{why} and onnxruntime lists {CUDA}, but a session could not start on it "
                                   f"({report.session_error or 'it fell back to ' + report.session_provider}): "
                                   "check the CUDA and cuDNN libraries (docs/GPU.md, Install)")
    elif report.session_error:
        report.problems.append(f"a session could not run: {report.session_error}")
    return report


def versions() -> str:
    """The versions that matter, for the top of the report."""
    out = []
    for name in ("ttsfarm", "piper-tts", "misaki"):
        try:
            out.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} not installed")
    return ", ".join(out)


def main(runtime: RuntimeSettings, device: str | None = None) -> int:
    """`ttsfarm doctor [--device D]`: print the report; 1 when this host would not serve as configured."""
    if device:
        runtime = dataclasses.replace(runtime, device=device)
    report = examine(runtime)
    print(versions())
    print("\n".join(report.lines()))
    if not report.ok:
        print(f"ttsfarm doctor: {len(report.problems)} problem(s); this install would not serve as configured",
              file=sys.stderr)
    return 0 if report.ok else 1
