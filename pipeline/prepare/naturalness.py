"""Naturalness: DNSMOS, Microsoft's non-intrusive MOS predictor, on a voice's held-out sentences.

DNSMOS (Reddy et al., ICASSP 2022) predicts from 16 kHz audio alone what listeners would score: P.808 overall quality
(``model_v8.onnx``, on a log-mel spectrogram) and the P.835 signal, background and overall scores
(``sig_bak_ovr.onnx``, on the waveform). The ONNX models come from the ``speechmos`` package (MIT; 11 MB; it declares
no dependencies), read in place with ``resolve_resource``; its own ``run`` is not used because it imports librosa
(with numba, llvmlite, scipy and scikit-learn: about 370 MB) for one mel spectrogram, written here in numpy as librosa
computes it (``melspec_db``: Slaney mel filters, a periodic Hann window, centred frames with zero padding,
``power_to_db(ref=max, top_db=80)``).

Each clip is resampled to 16 kHz and peak-normalized (a voice's loudness is not what is judged), repeated to the
model's 9.01 s input as DNSMOS does for a short clip, scored per 9.01 s window (1 s hop) and averaged; a voice's
figure is the mean over its held-out sentences. The gate (``quality_gate.min_p808_mos``) is on P.808: a broken vocoder
(noise, coarse quantization) scores well under a clean one (docs/VOICES.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.audio import resample
from pipeline.voices.runtime import SessionFactory, resolve_resource

RATE = 16000
INPUT_SECONDS = 9.01
P808_MODEL = "pkg:speechmos/dnsmos_models/model_v8.onnx"
P835_MODEL = "pkg:speechmos/dnsmos_models/sig_bak_ovr.onnx"
# DNSMOS's mapping of the P.835 model's raw outputs to MOS (the non-personalized fit of Microsoft's dnsmos_local.py).
P835_FIT = {"sig": (-0.08397278, 1.22083953, 0.0052439), "bak": (-0.13166888, 1.60915514, -0.39604546),
            "ovrl": (-0.06766283, 1.11546468, 0.04602535)}
N_FFT, HOP, N_MELS = 321, 160, 120
METRIC = "dnsmos_p808"


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear to 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    mel = hz / (200.0 / 3)
    log_part = hz >= 1000.0
    return np.where(log_part, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), mel * (200.0 / 3))


@lru_cache(maxsize=2)
def mel_filters(sr: int = RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels): triangular, Slaney-normalized, [n_mels, n_fft//2+1]."""
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sr / 2.0)), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]


def melspec_db(audio: np.ndarray) -> np.ndarray:
    """DNSMOS's P.808 input: the mel power spectrogram in dB (``(power_to_db(S, ref=max) + 40) / 40``), [frames, mels]."""
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann, as scipy's get_window
    padded = np.pad(audio.astype(np.float64), N_FFT // 2)
    count = 1 + (len(padded) - N_FFT) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:count]
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    mel = power @ mel_filters().T
    db = 10.0 * np.log10(np.maximum(mel, 1e-10)) - 10.0 * np.log10(max(1e-10, float(mel.max())))
    db = np.maximum(db, db.max() - 80.0)
    return ((db + 40.0) / 40.0).astype(np.float32)


class Dnsmos:
    """The two DNSMOS sessions, built by the project's session factory."""

    def __init__(self, factory: SessionFactory) -> None:
        self.p808, _ = factory.create(resolve_resource(P808_MODEL))
        self.p835, _ = factory.create(resolve_resource(P835_MODEL))

    def score(self, audio: np.ndarray, rate: int) -> dict[str, float]:
        """P.808 and P.835 (sig, bak, ovrl) MOS of one clip."""
        clip = resample(np.asarray(audio, dtype=np.float32).reshape(-1), rate, RATE)
        peak = float(np.max(np.abs(clip))) if clip.size else 0.0
        if peak <= 0.0:
            return {"p808": 1.0, "sig": 1.0, "bak": 1.0, "ovrl": 1.0}  # silence: the lowest score
        clip = clip / peak
        need = int(INPUT_SECONDS * RATE)
        while len(clip) < need:
            clip = np.concatenate([clip, clip])
        windows = int(np.floor(len(clip) / RATE) - INPUT_SECONDS) + 1
        scores: dict[str, list[float]] = {"p808": [], "sig": [], "bak": [], "ovrl": []}
        for i in range(windows):
            seg = clip[i * RATE : i * RATE + need]
            if len(seg) < need:
                continue
            mel = melspec_db(seg[:-HOP])[None]
            scores["p808"].append(float(self.p808.run(None, {self.p808.get_inputs()[0].name: mel})[0].reshape(-1)[0]))
            raw = self.p835.run(None, {self.p835.get_inputs()[0].name: seg[None].astype(np.float32)})[0].reshape(-1)
            for key, value in zip(("sig", "bak", "ovrl"), raw, strict=True):
                scores[key].append(float(np.poly1d(P835_FIT[key])(value)))
        return {key: float(np.mean(values)) for key, values in scores.items()}


def naturalness(clips: Sequence[tuple[np.ndarray, int]], floor: float, factory: SessionFactory) -> dict[str, Any]:
    """A gate figure: the mean P.808 MOS of ``clips`` against ``floor`` (and the P.835 means beside it)."""
    model = Dnsmos(factory)
    per_clip = [model.score(audio, rate) for audio, rate in clips]
    mean = {key: round(float(np.mean([c[key] for c in per_clip])), 3) for key in ("p808", "sig", "bak", "ovrl")}
    return {"metric": METRIC, "value": mean["p808"], "floor": floor, "passed": mean["p808"] >= floor, "clips": len(per_clip),
            "p835": {k: mean[k] for k in ("sig", "bak", "ovrl")}, "model": "DNSMOS (speechmos 0.0.1.1's ONNX models)"}
