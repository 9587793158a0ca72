"""Whether a farm makes the audio this process makes: a few jobs, noise off, against in-process synthesis.

A farm figure (throughput, first chunk) is worth publishing only if the farm's audio is right. On CUDA the workers
serve through IO binding (outputs bound on the device, copied once into a pinned host buffer), a path that a
CPU test can only drive through a stand-in; so before scripts/gpu_check.py reports farm figures it submits
``CASES`` to the farm and compares each job's audio with the same text synthesized in its own process through
plain ``session.run`` (``runtime.cuda_io_binding = false``) on the same device and precisions. A copy that did not
happen, a stale buffer or a wrong shape gives audio tens of dB away in log-mel distance, or of another length;
the bounds below leave room for what legitimately differs (a batch against an item alone, windowed vocoding,
the PCM16 the farm streams).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.prepare.quantize_eval import logmel_l1_db
from pipeline.voices.base import SynthesisOptions

# (language, text): one short and one longer English sentence, one Chinese (left out where the farm has no Chinese).
CASES: tuple[tuple[str, str], ...] = (
    ("en", "The meeting starts in five minutes."),
    ("en", "Please turn left at the next corner, then walk straight on to the river."),
    ("zh", "今天天气很好，我们去公园散步吧。"),
)
MAX_LOGMEL_DB = 1.0  # farm vs in-process; FP16 against FP32 measured 0.02-0.04 dB, a missing copy tens of dB
MAX_LENGTH_DIFF = 0.02  # of the in-process length: batching moves durations by a frame at most


def compare_audio(farm: np.ndarray, local: np.ndarray, rate: int, *, max_logmel_db: float = MAX_LOGMEL_DB,
                  max_length_diff: float = MAX_LENGTH_DIFF) -> dict[str, Any]:
    """One case: lengths, log-mel L1 (aligned by DTW when the lengths differ), max abs difference, and ``agree``."""
    farm, local = np.asarray(farm, np.float32).reshape(-1), np.asarray(local, np.float32).reshape(-1)
    length_diff = abs(len(farm) - len(local)) / max(len(local), 1)
    row: dict[str, Any] = {"farm_samples": len(farm), "local_samples": len(local), "length_diff": round(length_diff, 4)}
    if not len(farm) or not len(local):
        return {**row, "logmel_l1_db": None, "agree": False, "why": "no audio"}
    distance, aligned = logmel_l1_db(local, farm, rate)
    row |= {"logmel_l1_db": round(distance, 3), "dtw": aligned,
            "max_abs_diff": round(float(np.max(np.abs(farm - local))), 5) if len(farm) == len(local) else None}
    why = []
    if length_diff > max_length_diff:
        why.append(f"length {len(farm)} vs {len(local)} samples")
    if not distance <= max_logmel_db:  # NaN counts as a mismatch
        why.append(f"log-mel L1 {distance:.2f} dB > {max_logmel_db:.2f} dB")
    return {**row, "agree": not why, "why": "; ".join(why)}


def farm_agreement(client: Any, synthesizer: Any, cases: Sequence[tuple[str | None, str]], *, timeout_s: float = 120.0,
                   **bounds: float) -> dict[str, Any]:
    """Each ``(voice, text)`` submitted to the farm behind ``client`` (noise off) and synthesized by ``synthesizer``
    (a ``pipeline.synth.Synthesizer`` on the reference path) with the same options: one ``compare_audio`` row per
    case, and ``agree`` when every row agrees."""
    opts = SynthesisOptions.noiseless()
    rows = []
    for voice, text in cases:
        job = client.submit(text, voice=voice, options=opts.to_dict())
        pcm, rate = job.audio(timeout=timeout_s)
        farm = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        local = synthesizer.synthesize(text, voice, opts)
        row = {"voice": voice or "default", "text": text, "rate": rate}
        if rate != local.sample_rate:
            rows.append(row | {"agree": False, "why": f"farm rate {rate} Hz vs {local.sample_rate} Hz"})
            continue
        rows.append(row | compare_audio(farm, local.audio, rate, **bounds))
    return {"cases": rows, "agree": bool(rows) and all(r["agree"] for r in rows),
            "bounds": {"max_logmel_db": bounds.get("max_logmel_db", MAX_LOGMEL_DB),
                       "max_length_diff": bounds.get("max_length_diff", MAX_LENGTH_DIFF)}}
