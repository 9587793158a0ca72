"""Whole-text synthesis, in-process: what `ttsfarm say` runs, and the per-segment steps the farm shares.

The farm's workers and this module cut text the same way (``plan``) and finish each segment the same
way (``finish_segment``), so a streamed job and an offline `say` of the same text give the same audio.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.errors import TEXT_TOO_LONG, InputError
from pipeline.settings import PipelineSettings
from pipeline.text.segment import Segment, Segmenter
from pipeline.voices.bank import VoiceBank, output_rate, route
from pipeline.voices.base import Phonemized, SynthesisOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedSegment:
    segment: Segment
    voice: str  # the concrete voice that speaks this segment's language
    rate: float = 1.0  # SSML <prosody rate>: a factor on the request's speed
    source: str = ""  # the text ``segment.words`` index into: the caller's text, or an SSML span's after the lexicon


def plan(text: bytes | str, voice: str | None, settings: PipelineSettings, *, lexicon: Mapping[str, str] | None = None,
         ssml: bool | None = None) -> list[PlannedSegment]:
    """Segments of ``text`` and the concrete voice of each; every input error is raised here.

    ``lexicon`` ({word: pinyin or phonemes}, ``pipeline.text.lexicon``) chooses how words are read;
    ``ssml`` reads ``text`` as SSML (``pipeline.text.ssml``); ``None`` does so when it starts with ``<speak``."""
    from pipeline.text.clean import decode
    from pipeline.text.lexicon import apply_lexicon, check_lexicon
    from pipeline.text.ssml import Span, looks_like_ssml, parse_ssml

    words = check_lexicon(lexicon)
    raw = decode(text)
    if ssml is None:
        ssml = looks_like_ssml(raw)
    if ssml and len(raw) > settings.frontend.max_text_chars:
        raise InputError(f"text has {len(raw)} characters; the limit is {settings.frontend.max_text_chars}",
                         code=TEXT_TOO_LONG)
    spans = parse_ssml(raw if looks_like_ssml(raw) else f"<speak>{raw}</speak>") if ssml else [Span(raw)]
    segmenter = Segmenter(settings.frontend)
    out: list[PlannedSegment] = []
    for n, span in enumerate(spans):
        source = apply_lexicon(span.text, words)  # what the segments' word spans index (the caller's text when plain)
        segments = segmenter.split(source)
        if span.pause_s is not None or n < len(spans) - 1:
            last = segments[-1]
            pause = span.pause_s if span.pause_s is not None else 0.0
            segments[-1] = dataclasses.replace(last, pause_after_s=pause, est_seconds=round(
                last.est_seconds - last.pause_after_s + pause, 3))
        for seg in segments:
            seg = dataclasses.replace(seg, index=len(out))
            out.append(PlannedSegment(seg, route(settings.catalogue, voice, seg.lang, settings.runtime.cache_dir).name,
                                      span.rate, source=source))
    return out


def finish_segment(audio: np.ndarray, voice_rate: int, out_rate: int, pause_s: float) -> np.ndarray:
    """A segment's model audio at the output rate, followed by its pause."""
    from pipeline.audio import resample

    out = resample(audio, voice_rate, out_rate) if voice_rate != out_rate else audio
    pause = np.zeros(int(round(pause_s * out_rate)), dtype=np.float32)
    return np.concatenate([out.astype(np.float32, copy=False), pause])


@dataclass
class Rendered:
    audio: np.ndarray
    sample_rate: int
    segments: list[tuple[PlannedSegment, Phonemized]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate


class Synthesizer:
    """Text in, audio out, in this process. Segments of one voice run in batches of its max size."""

    def __init__(self, settings: PipelineSettings, bank: VoiceBank | None = None) -> None:
        self.settings = settings
        self.bank = bank or VoiceBank(settings.catalogue, settings.runtime)

    def phonemize(self, text: bytes | str, voice: str | None = None, *, lexicon: Mapping[str, str] | None = None,
                  ssml: bool | None = None) -> list[tuple[PlannedSegment, Phonemized]]:
        planned = plan(text, voice, self.settings, lexicon=lexicon, ssml=ssml)
        return [(p, self.bank.get(p.voice, load=False).phonemize(p.segment.text, p.segment.lang)) for p in planned]

    def synthesize(self, text: bytes | str, voice: str | None = None, opts: SynthesisOptions | None = None, *,
                   lexicon: Mapping[str, str] | None = None, ssml: bool | None = None) -> Rendered:
        opts = opts or SynthesisOptions()
        start = time.perf_counter()
        rate = output_rate(self.settings.catalogue, voice)
        items = self.phonemize(text, voice, lexicon=lexicon, ssml=ssml)
        t_front = time.perf_counter()
        pieces: list[np.ndarray] = [np.zeros(0, np.float32)] * len(items)
        by_voice: dict[tuple[str, float], list[int]] = {}  # one batch per voice and SSML rate
        for i, (p, _) in enumerate(items):
            by_voice.setdefault((p.voice, p.rate), []).append(i)
        for (name, speed_factor), indexes in by_voice.items():
            v = self.bank.get(name)
            rated = dataclasses.replace(opts, speed=opts.speed * speed_factor) if speed_factor != 1.0 else opts
            for batch in _chunks(indexes, v.max_batch):
                outs = v.synthesize_batch([items[i][1].ids for i in batch], rated)
                for i, audio in zip(batch, outs):
                    pieces[i] = finish_segment(audio, v.sample_rate, rate, items[i][0].segment.pause_after_s)
        end = time.perf_counter()
        audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        return Rendered(audio, rate, items, {"frontend_s": t_front - start, "inference_s": end - t_front, "total_s": end - start})


def _chunks(seq: Sequence[int], size: int) -> list[list[int]]:
    return [list(seq[i : i + size]) for i in range(0, len(seq), max(1, size))]
