"""The two stages of a two-stage voice: an acoustic model (ids -> frames, durations) and a vocoder
(frames -> audio).

Frames are always handed over as float32 arrays shaped ``(n_frames, channels)`` per item, whatever layout
the graph uses inside (Piper's decoder takes ``[B, 192, T]``, MB-MelGAN ``[B, T, 80]``): each stage class
converts at its own edge, so nothing outside ``pipeline/voices/`` knows a graph's tensor names or layout.

A vocoder turns ``n`` frames into exactly ``n * hop`` samples. ``context`` is how many frames on each
side a window needs so that vocoding the window alone reproduces the same samples as vocoding the whole
item (measured per vocoder; see the class that implements it), and ``min_frames`` the shortest input the
graph accepts. These two are what windowed vocoding (streaming from inside a sentence) is built on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.voices.base import PhonemeIds, SynthesisOptions


@dataclass(frozen=True)
class AcousticOutput:
    """One item of an acoustic pass."""

    frames: np.ndarray  # float32 (n_frames, channels)
    durations: np.ndarray  # int64 (n_ids,): frames given to each input id; sums to n_frames


@runtime_checkable
class AcousticStage(Protocol):
    channels: int
    max_batch: int

    replayable: bool  # the same item, options and seed give the same frames (a redo can make them again)

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions, seeds: Sequence[int] | None = None) -> list[AcousticOutput]:
        """One output per item, each exactly what the item gets when run alone. ``seeds``: one non-negative integer
        per item that fixes its noise (a replayable stage gives the same frames for the same seed); ``None``: noise
        drawn anew."""


@runtime_checkable
class VocoderStage(Protocol):
    hop: int  # samples per frame
    context: int  # frames of context each side that make a window's samples equal whole-item vocoding
    min_frames: int  # shortest frame count the graph accepts (shorter inputs are padded by the caller)
    max_batch: int

    def run(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``frames[i]`` (n_i, channels) -> float32 audio of exactly ``n_i * hop`` samples."""
