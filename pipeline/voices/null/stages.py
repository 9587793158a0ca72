"""The null voice's stages: Piper's English frontend and Piper's stage shapes, with silence for output and a fake
device (``device.py``) for model time.

``NullAcoustic`` gives each id 2 frames, and every ninth id one more (joe's 2.11 frames per id on the bench's English
texts, noise on), scaled by ``1 / speed``; its frames are zeros shaped ``(n_frames, 192)`` as joe's decoder input.
``NullVocoder`` gives ``n_frames * 256`` samples of silence per item, with joe's decoder context. Both are called by
``TwoStageVoice`` exactly as joe's ONNX stages are (batches cut at ``max_batch``, windows by ``vocode_next``), so the
worker's path around them is the real one: phonemizing, windows, chunks, claims, publishing, assembly.

Catalogue keys (``[voices.NAME]``): ``engine = "twostage"``, ``source = "null"``, ``config`` (a Piper voice's
``.onnx.json``: the phonemizer and its id map), ``device`` (a profile of ``device.PROFILES``; ``none`` by default),
``device_stats`` (optional: a file the device's busy time is written to ten times a second; ``{pid}`` in it is the
process's id), ``device_lock`` (optional: a folder whose file locks make the worker processes of a host share one
fake device, ``device.py``), and the usual
``languages``, ``sample_rate`` (the Piper voice's), ``max_batch``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import VoiceSpec
from pipeline.voices.base import PhonemeIds, SynthesisOptions
from pipeline.voices.gpu import ShapePolicy
from pipeline.voices.null.device import PROFILES, FakeDevice, device
from pipeline.voices.piper.split import DECODER_CONTEXT
from pipeline.voices.piper.voice import PiperConfig
from pipeline.voices.runtime import SessionFactory
from pipeline.voices.stages import AcousticOutput
from pipeline.voices.twostage import TwoStageVoice, coalescing

log = logging.getLogger(__name__)

CHANNELS = 192  # Piper's latent (the decoder's input)
HOP = 256


def null_durations(n_ids: int, speed: float) -> np.ndarray:
    base = 2.0 + (np.arange(n_ids) % 9 == 0)
    return np.maximum(1, np.rint(base / speed)).astype(np.int64)


class NullAcoustic:
    replayable = True  # its frames depend on the ids and the speed only

    def __init__(self, fake: FakeDevice, max_batch: int) -> None:
        self.device = fake
        self.channels = CHANNELS
        self.max_batch = max(1, max_batch)

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions, seeds: Sequence[int] | None = None) -> list[AcousticOutput]:
        if not batch:
            return []
        self.device.run("acoustic", len(batch), max(len(ids) for ids in batch))
        out = []
        for ids in batch:
            durations = null_durations(len(ids), opts.speed)
            out.append(AcousticOutput(frames=np.zeros((int(durations.sum()), CHANNELS), dtype=np.float32), durations=durations))
        return out


class NullVocoder:
    def __init__(self, fake: FakeDevice, max_batch: int) -> None:
        self.device = fake
        self.hop = HOP
        self.context = DECODER_CONTEXT
        self.min_frames = 1
        self.max_batch = max(1, max_batch)

    def run(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not frames:
            return []
        counts = [int(f.shape[0]) for f in frames]
        self.device.run("vocoder", len(frames), max(counts))
        return [np.zeros(n * self.hop, dtype=np.float32) for n in counts]


def build_null_two_stage(spec: VoiceSpec, factory: SessionFactory) -> TwoStageVoice:
    """``STAGE_BUILDERS["null"]``: the null voice of a catalogue entry that names it."""
    profile = str(spec.options.get("device", "none"))
    if profile not in PROFILES:
        raise InputError(f"voice {spec.name}: unknown fake device {profile!r} (known: {', '.join(sorted(PROFILES))})",
                         code=BAD_OPTION)
    lock_dir = spec.options.get("device_lock")
    fake = device(profile, ShapePolicy.from_settings(factory.settings), Path(str(lock_dir)) if lock_dir else None)
    stats = spec.options.get("device_stats")
    if stats:  # "{pid}" in the name: a file per process (several workers on one host)
        fake.report_to(Path(str(stats).replace("{pid}", str(os.getpid()))))
    config = PiperConfig(spec)
    max_batch = max(1, spec.max_batch)
    log.warning("voice %s is the null voice (silence, fake device %s): for benchmarks only", spec.name, profile)
    return TwoStageVoice(name=spec.name, languages=spec.languages, sample_rate=config.sample_rate, phonemizer=config,
                         acoustic=NullAcoustic(fake, max_batch), vocoder=NullVocoder(fake, max_batch), max_batch=max_batch,
                         coalesce=lambda stage: coalescing(factory.settings, stage))  # its stages are on a (fake) device
