"""The FP16 vocoder a two-stage voice serves on CUDA, built and judged at preparation time.

Why (the GPU check's sweep measures it: docs/GPU.md): in FP16 (FP32 inputs and outputs,
``pipeline/prepare/precision.py``) the vocoders run faster at the farm's batch and sound the same as in FP32, while
the acoustic stages are not faster and move their frames (so they stay FP32).
Serving picks the FP16 vocoder only where sessions run on CUDA and this gate passed
(``pipeline/voices/prepared.py: wanted_precision``).

The gate runs here on the CPU provider (ONNX Runtime runs the half-precision graph there too, slowly): the FP32
acoustic stage's frames for a few held-out sentences, vocoded in FP32 and in FP16, must agree in length and
within the log-mel ceiling of the quality gate (``quality_gate.max_logmel_l1_db``).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.prepare.precision import to_fp16
from pipeline.prepare.quantize_eval import logmel_l1_db
from pipeline.settings import PipelineSettings
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.runtime import SessionFactory, StageSession

log = logging.getLogger(__name__)
FP16_FILE = "vocoder.fp16.onnx"


def fp16_vocoder(voice: Any, work: Path, settings: PipelineSettings, texts: Sequence[str], lang: str) -> tuple[str | None, dict[str, Any]]:
    """(file name if the FP16 vocoder passed, its verdict). ``voice`` is the FP32 two-stage voice being prepared,
    its vocoder file ``work/vocoder.fp32.onnx``."""
    ceiling = settings.quality_gate.max_logmel_l1_db
    dst = work / FP16_FILE
    try:
        to_fp16(work / "vocoder.fp32.onnx", dst)
        runtime = dataclasses.replace(settings.runtime, device="cpu", warmup=False)
        half = copy.copy(voice.vocoder)
        half.session = StageSession(SessionFactory(runtime), dst, voice=voice.name, stage="vocoder", precision="fp16")
        opts = SynthesisOptions.noiseless()
        frames = [out.frames for out in voice.acoustic_outputs([voice.phonemize(t, lang).ids for t in texts], opts)]
        full = [voice.vocoder.run([f])[0] for f in frames]
        halves = [half.run([f])[0] for f in frames]
    except Exception as exc:  # noqa: BLE001 - a graph the converter or the CPU provider cannot take is a verdict, not a crash
        dst.unlink(missing_ok=True)
        reason = f"FP16 not built: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        log.warning("voice %s: %s", voice.name, reason)
        return None, {"stage": "vocoder", "precision": "fp16", "attempted": True, "passed": False, "reason": reason}
    lengths_equal = all(len(a) == len(b) for a, b in zip(full, halves, strict=True))
    distance = max(logmel_l1_db(a, b, voice.sample_rate)[0] for a, b in zip(full, halves, strict=True))
    passed = lengths_equal and distance <= ceiling
    reason = (f"log-mel L1 {distance:.2f} dB {'<=' if distance <= ceiling else '>'} {ceiling:.2f} dB, lengths "
              f"{'equal' if lengths_equal else 'differ'} on {len(texts)} sentences; served where sessions run on CUDA")
    if not passed:
        dst.unlink(missing_ok=True)
    return (FP16_FILE if passed else None), {"stage": "vocoder", "precision": "fp16", "attempted": True, "passed": passed,
                                             "reason": reason, "lengths_equal": lengths_equal,
                                             "spectral": {"metric": "logmel_l1_db", "value": round(distance, 4),
                                                          "ceiling": ceiling, "passed": passed}}
