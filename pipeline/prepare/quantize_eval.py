"""How far an INT8 voice is from its FP32 original: speed, length agreement, spectral distance, batching.

The spectral distance is a mean log-mel L1 in dB (STFT 1024/256, Hann window, 80 mel bands, plain numpy).
Two waveforms of equal length are compared frame by frame. When the lengths differ, frame-by-frame
comparison would mostly measure the drift in timing, so the frames are first aligned by dynamic time
warping and the L1 is averaged along the warping path; the result says which was used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pipeline.voices.base import PhonemeIds, SynthesisOptions

log = logging.getLogger(__name__)

N_FFT = 1024
HOP = 256
N_MELS = 80
TOP_DB = 80.0
BATCH_SOLO_TOLERANCE = 1e-3

# Held out from configs/calibration_en.txt: no sentence here is used to calibrate.
EVAL_SENTENCES_EN: tuple[str, ...] = (
    "The lighthouse keeper wrote a letter to his sister every Sunday evening.",
    "Yes.",
    "Could you tell me where the nearest train station is?",
    "Forty seven apples were sold before noon, and the rest went to the bakery.",
    "What a wonderful surprise!",
    "She measured the flour twice, then poured it slowly into the bowl.",
    "In the winter of that year, the river froze solid from bank to bank.",
    "Please remember to lock the back door.",
    "Doctor Patel reviewed the results, frowned, and asked for another test.",
    "Thank you.",
    "Thousands of migrating birds crossed the valley in a single afternoon, their calls echoing off the cliffs.",
    "Why would anyone paint a bicycle bright orange?",
)


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(sample_rate: int, n_fft: int = N_FFT, n_mels: int = N_MELS, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """Triangular HTK-scale mel filters, shape (n_mels, n_fft // 2 + 1), each normalized to unit area."""
    fmax = sample_rate / 2.0 if fmax is None else fmax
    freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs[None, :] - lower) / np.maximum(center - lower, 1e-9)
    falling = (upper - freqs[None, :]) / np.maximum(upper - center, 1e-9)
    bank = np.maximum(0.0, np.minimum(rising, falling))
    bank *= (2.0 / np.maximum(upper - lower, 1e-9))  # Slaney-style area normalization
    return bank.astype(np.float64)


def log_mel_db(audio: np.ndarray, sample_rate: int, *, n_fft: int = N_FFT, hop: int = HOP, n_mels: int = N_MELS) -> np.ndarray:
    """Log-mel power spectrogram in dB, shape (frames, n_mels); centred frames, reflect padding."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    pad = n_fft // 2
    x = np.pad(x, pad, mode="reflect" if x.size > pad else "constant")
    frames = 1 + max(0, (x.size - n_fft) // hop)
    index = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spec = np.fft.rfft(x[index] * np.hanning(n_fft + 1)[:-1][None, :], axis=1)
    power = spec.real**2 + spec.imag**2
    mel = power @ mel_filterbank(sample_rate, n_fft, n_mels).T
    return 10.0 * np.log10(np.maximum(mel, 1e-10))


def _dtw_path_cost(cost: np.ndarray) -> tuple[float, int]:
    """Total cost and length of the cheapest monotonic path through ``cost`` (steps: right, down, diagonal)."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    steps = np.zeros((n + 1, m + 1), dtype=np.int64)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        row = cost[i - 1]
        diag, up = acc[i - 1, :-1], acc[i - 1, 1:]
        best_prev = np.where(diag <= up, diag, up)
        best_steps = np.where(diag <= up, steps[i - 1, :-1], steps[i - 1, 1:])
        for j in range(1, m + 1):  # the left neighbour depends on this row: a short scan
            a, s = best_prev[j - 1], best_steps[j - 1]
            if acc[i, j - 1] < a:
                a, s = acc[i, j - 1], steps[i, j - 1]
            acc[i, j] = row[j - 1] + a
            steps[i, j] = s + 1
    return float(acc[n, m]), int(steps[n, m])


def logmel_l1_db(reference: np.ndarray, test: np.ndarray, sample_rate: int, *, top_db: float = TOP_DB) -> tuple[float, bool]:
    """Mean absolute log-mel difference in dB of ``test`` against ``reference``, and whether DTW aligned them.

    Both spectrograms are floored ``top_db`` below the louder one's peak, so silence does not dominate.
    Equal lengths: frame by frame. Different lengths: along the cheapest DTW path.
    """
    ref, tst = log_mel_db(reference, sample_rate), log_mel_db(test, sample_rate)
    floor = max(float(ref.max(initial=-100.0)), float(tst.max(initial=-100.0))) - top_db
    ref, tst = np.maximum(ref, floor), np.maximum(tst, floor)
    if ref.shape == tst.shape:
        return float(np.mean(np.abs(ref - tst))), False
    cost = np.mean(np.abs(ref[:, None, :] - tst[None, :, :]), axis=2)
    total, steps = _dtw_path_cost(cost)
    return total / max(steps, 1), True


@dataclass
class Run:
    """What one model produced for the evaluation texts."""

    solo: list[np.ndarray]
    solo_s: list[float]
    batched: list[np.ndarray] = field(default_factory=list)


class Runner(Protocol):
    """What ``measure_pair`` drives: a model run on a batch of ids (a graph on its own session, or a whole voice)."""

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]: ...


def measure_pair(
    fp32: Runner, int8: Runner, items: Sequence[PhonemeIds], opts: SynthesisOptions, *, repeats: int = 3
) -> tuple[Run, Run]:
    """Both models on the same items: each warmed up, then every item alone ``repeats`` times (the FP32
    and INT8 passes interleaved, so a busy machine slows both alike; median seconds kept), then all items
    as one padded batch."""
    runners = (fp32, int8)
    for runner in runners:
        runner.run([items[0]], opts)
    solo: list[list[np.ndarray]] = [[], []]
    seconds: list[list[list[float]]] = [[[] for _ in items] for _ in runners]
    for _ in range(max(1, repeats)):
        for r, runner in enumerate(runners):
            for k, ids in enumerate(items):
                start = time.perf_counter()
                (out,) = runner.run([ids], opts)
                seconds[r][k].append(time.perf_counter() - start)
                if len(solo[r]) < len(items):
                    solo[r].append(out)
    runs = []
    for r, runner in enumerate(runners):
        median = [float(np.median(s)) for s in seconds[r]]
        runs.append(Run(solo=solo[r], solo_s=median, batched=runner.run(list(items), opts)))
    return runs[0], runs[1]


def batch_solo(run: Run) -> dict[str, Any]:
    """Whether each batched item equals its solo output: same length and within the tolerance."""
    length_diffs = sum(len(b) != len(s) for b, s in zip(run.batched, run.solo))
    diffs = [float(np.max(np.abs(b - s))) for b, s in zip(run.batched, run.solo) if len(b) == len(s) and len(b)]
    return {
        "items": len(run.batched),
        "length_differs": int(length_diffs),
        "max_abs_diff": max(diffs) if diffs else None,
        "value_differs": int(sum(d > BATCH_SOLO_TOLERANCE for d in diffs)),
        "tolerance": BATCH_SOLO_TOLERANCE,
        "identical": bool(length_diffs == 0 and all(d <= BATCH_SOLO_TOLERANCE for d in diffs)),
    }


def compare(fp32: Run, int8: Run, sample_rate: int, texts: Sequence[str]) -> dict[str, Any]:
    """All measures of INT8 against FP32 (without the verdict)."""
    audio_fp32 = sum(len(a) for a in fp32.solo) / sample_rate
    audio_int8 = sum(len(a) for a in int8.solo) / sample_rate
    rtf_fp32 = sum(fp32.solo_s) / max(audio_fp32, 1e-9)
    rtf_int8 = sum(int8.solo_s) / max(audio_int8, 1e-9)
    items: list[dict[str, Any]] = []
    for text, ref, test in zip(texts, fp32.solo, int8.solo):
        dist, aligned = logmel_l1_db(ref, test, sample_rate)
        items.append({"text": text, "fp32_samples": len(ref), "int8_samples": len(test), "logmel_l1_db": round(dist, 3), "dtw": aligned})
    mismatched = sum(i["fp32_samples"] != i["int8_samples"] for i in items)
    dists = [float(i["logmel_l1_db"]) for i in items]
    return {
        "items": len(items),
        "rtf_fp32": round(rtf_fp32, 4),
        "rtf_int8": round(rtf_int8, 4),
        "xrealtime_fp32": round(1.0 / max(rtf_fp32, 1e-9), 2),
        "xrealtime_int8": round(1.0 / max(rtf_int8, 1e-9), 2),
        "speedup": round(rtf_fp32 / max(rtf_int8, 1e-9), 3),
        "length_mismatch": round(mismatched / max(len(items), 1), 4),
        "length_mismatch_items": int(mismatched),
        "max_length_diff_samples": max((abs(i["fp32_samples"] - i["int8_samples"]) for i in items), default=0),
        "logmel_l1_db": round(float(np.mean(dists)), 3) if dists else 0.0,
        "logmel_l1_db_max": round(float(np.max(dists)), 3) if dists else 0.0,
        "batch_solo_int8": batch_solo(int8),
        "batch_solo_fp32": batch_solo(fp32) if fp32.batched else None,
        "per_item": items,
    }


def verdict(measures: dict[str, Any], gate: Any) -> tuple[bool, str]:
    """Apply ``QualityGateSettings``: passed, and a sentence saying why (every failed bound, or all held)."""
    failed = []
    if measures["logmel_l1_db"] > gate.max_logmel_l1_db:
        failed.append(f"log-mel L1 {measures['logmel_l1_db']:.2f} dB > {gate.max_logmel_l1_db:.2f} dB")
    if measures["length_mismatch"] > gate.max_length_mismatch:
        failed.append(
            f"{measures['length_mismatch_items']} of {measures['items']} items differ in length from FP32 "
            f"({measures['length_mismatch']:.0%} > {gate.max_length_mismatch:.0%})"
        )
    bs = measures["batch_solo_int8"]
    if gate.require_batch_solo_identical and not bs["identical"]:
        parts = []
        if bs["length_differs"]:
            parts.append(f"{bs['length_differs']} of {bs['items']} lengths differ")
        if bs["value_differs"]:
            parts.append(f"{bs['value_differs']} of {bs['items']} differ by more than {BATCH_SOLO_TOLERANCE:g}, max {bs['max_abs_diff']:.2g}")
        failed.append(f"batched INT8 differs from solo ({'; '.join(parts)})")
    if failed:
        return False, "; ".join(failed)
    return True, (
        f"log-mel L1 {measures['logmel_l1_db']:.2f} dB <= {gate.max_logmel_l1_db:.2f} dB, lengths agree with FP32, "
        f"batched INT8 equals solo"
    )
