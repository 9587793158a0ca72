"""The GPU check's farm-audio comparison (bench/agreement.py) and what it does to the published figures.

On a device the farm's audio comes through IO binding and the pinned copy-back; scripts/gpu_check.py compares a
few farm jobs with in-process synthesis before reporting farm figures, and a mismatch marks them invalid. Here:
the comparison catches what a broken copy-back delivers (nothing copied, a stale buffer, garbage, a wrong
length) and lets through what legitimately differs (PCM16, a frame's shift); a farm marked invalid has no figures
in either report. The comparison against a real farm is in tests/test_farm_e2e.py and tests/test_gpu_check.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.agreement import compare_audio

RATE = 24000


def _voiced(seconds: float, f0: float = 120.0, seed: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    pitch = f0 + 40 * np.sin(2 * np.pi * 1.5 * t + seed)
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    audio = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t + seed) ** 2)
    return (0.2 * audio).astype(np.float32)


def test_what_the_farm_legitimately_changes_agrees() -> None:
    local = _voiced(2.0)
    pcm16 = np.round(local * 32767).astype(np.int16).astype(np.float32) / 32768.0
    row = compare_audio(pcm16, local, RATE)
    assert row["agree"] and row["logmel_l1_db"] < 0.1 and row["length_diff"] == 0, row
    shifted = np.concatenate([np.zeros(300, np.float32), local])  # one frame longer (a batch moved a duration)
    assert compare_audio(shifted, local, RATE)["agree"]


@pytest.mark.parametrize("broken", ["zeros", "stale", "garbage", "short", "empty"])
def test_what_a_broken_copy_back_delivers_disagrees(broken: str) -> None:
    local = _voiced(2.0)
    farm = {"zeros": np.zeros_like(local),  # a fresh pinned buffer nothing was copied into
            "stale": _voiced(2.0, f0=190.0, seed=3),  # the previous batch's audio left in the reused buffer
            "garbage": np.full_like(local, 32767 / 32768.0),  # 0x7f7f7f7f floats clipped to PCM16 full scale
            "short": local[: len(local) // 2],  # a wrong shape read back
            "empty": np.zeros(0, np.float32)}[broken]
    row = compare_audio(farm, local, RATE)
    assert not row["agree"] and row["why"], row


def _doc(valid: bool) -> dict[str, Any]:
    case = {"voice": "default", "text": "The meeting starts in five minutes.", "agree": valid, "logmel_l1_db": 0.01 if valid else 31.0,
            "why": "" if valid else "log-mel L1 31.00 dB > 1.00 dB"}
    phase = {"jobs": {"done": 40}, "throughput": {"speech_s_per_s": 123.0, "jobs_per_s": 9.0}, "mean_batch": 4.0,
             "padding_waste": None, "first_chunk_ms": {"p50": 55.5, "p99": 99.9}, "batch_sizes": {}}
    farm = {"loops": "default", "saturation": phase, "load": phase, "device_memory_mb": {}, "figures_valid": valid,
            "agreement": {"agree": valid, "cases": [case]}}
    return {"date_utc": "2026-12-01", "device_asked": "cuda", "seconds": 1, "sections": {"farm": farm}, "skipped": [], "errors": []}


@pytest.mark.parametrize("valid", [True, False])
def test_a_farm_whose_audio_disagrees_has_no_figures_in_either_report(valid: bool) -> None:
    from scripts.gpu_check import text_report
    from scripts.gpu_check_report import report

    for text in (text_report(_doc(valid)), report(_doc(valid))):
        assert ("123" in text and "55.5" in text) == valid, text
        assert ("invalid" in text.lower()) == (not valid), text
        if not valid:
            assert "differs from in-process synthesis" in text
