"""The narrow protocol the worker and the batcher use to drive any voice."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.errors import BAD_OPTION, InputError

PhonemeIds = Sequence[int]

SPEED_RANGE = (0.25, 4.0)
NOISE_RANGE = (0.0, 2.0)


@dataclass(frozen=True)
class SynthesisOptions:
    """Per-request options. ``None`` means the voice's own default from the catalogue."""

    speed: float = 1.0
    noise_scale: float | None = None
    noise_w: float | None = None

    def __post_init__(self) -> None:
        _check_range("speed", self.speed, SPEED_RANGE)
        for name in ("noise_scale", "noise_w"):
            value = getattr(self, name)
            if value is not None:
                _check_range(name, value, NOISE_RANGE)

    @classmethod
    def noiseless(cls, speed: float = 1.0) -> SynthesisOptions:
        """Deterministic output: the stochastic parts of the model switched off."""
        return cls(speed=speed, noise_scale=0.0, noise_w=0.0)

    def to_dict(self) -> dict[str, float]:
        out = {"speed": self.speed}
        if self.noise_scale is not None:
            out["noise_scale"] = self.noise_scale
        if self.noise_w is not None:
            out["noise_w"] = self.noise_w
        return out

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> SynthesisOptions:
        unknown = set(data) - {"speed", "noise_scale", "noise_w"}
        if unknown:
            raise InputError(f"unknown synthesis option(s): {', '.join(sorted(unknown))}", code=BAD_OPTION)
        try:
            values = {k: None if v is None else float(v) for k, v in data.items()}  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InputError("synthesis options must be numbers", code=BAD_OPTION) from None
        return cls(**values)  # type: ignore[arg-type]


def _check_range(name: str, value: float, bounds: tuple[float, float]) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not bounds[0] <= value <= bounds[1]:
        raise InputError(f"{name} must be a number in [{bounds[0]}, {bounds[1]}], got {value!r}", code=BAD_OPTION)


@dataclass(frozen=True)
class Phonemized:
    """One segment as a voice reads it: model ids plus what a person can check."""

    ids: tuple[int, ...]
    phonemes: str
    pinyin: tuple[str, ...] = field(default=())
    # Word timings (``pipeline/timing.py``): for each id, the index in ``phonemes`` of the phoneme it carries
    # (-1: a frame marker such as BOS/EOS); for each character of ``phonemes``, the syllable of ``pinyin`` it
    # belongs to (-1: none; Chinese voices). Empty when the voice cannot say.
    id_units: tuple[int, ...] = field(default=())
    unit_syllables: tuple[int, ...] = field(default=())


@runtime_checkable
class Voice(Protocol):
    name: str
    sample_rate: int
    languages: tuple[str, ...]
    max_batch: int
    precision: str

    def phonemize(self, text: str, lang: str) -> Phonemized:
        """Normalized text of one language run -> model ids. Raises InputError for text it cannot read."""

    def synthesize_batch(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]:
        """One float32 waveform per item, each exactly the length the item gets when run alone."""
