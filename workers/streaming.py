"""A batch of segments of a two-stage voice, streamed a vocoder window at a time.

Two units of work, run one after the other (``workers.runner.BatchRunner``), so a scheduler can choose between
them: ``acoustic()`` is the acoustic pass of the whole batch (batched as the voice batches);
``step()`` vocodes the next window of every job still live in the batch (one batched vocoder call), and
publishes each window to its job's results stream at once. Every job thus gets its first window before any
job gets its second, and a job's first chunk is out after the acoustic pass and one small window.

Guarantees kept from whole-segment publishing:

* Chunks of a segment are numbered on across its windows (``Publisher.publish_piece``); the last chunk of
  the last window is the segment's ``last``; the segment's whole PCM becomes its part for assembly then, and
  the entry is acked only then.
* One attempt per segment: before its first window is published, a segment's frames and attempt tag are
  claimed (``Publisher.claim_frames``, the batch's segments in one step). A redo (the worker died mid-segment, its entry was reclaimed) gets
  those frames and tag back, vocodes the same frames, skips the windows already published, and publishes
  the rest under the same tag: a reader sees one attempt's chunks, seamless.
* A cancelled job stops at the next window: its state is read before each window step.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.voices.base import Phonemized, SynthesisOptions
from pipeline.voices.stages import AcousticOutput
from pipeline.voices.twostage import TwoStageVoice
from pipeline.voices.windows import WindowedItem, WindowPlan, vocode_next
from producer.wire.queue import Entry
from workers.outcomes import Outcomes
from workers.publisher import PieceOut, SegmentProgress
from workers.timings import segment_words

log = logging.getLogger(__name__)


def pack_frames(out: AcousticOutput, plan: WindowPlan) -> bytes:
    """A segment's acoustic output and window plan, as claimed: a redo cuts the same windows from the same frames
    (and times its words from the same durations)."""
    buf = io.BytesIO()
    np.savez(buf, frames=np.ascontiguousarray(out.frames, dtype=np.float32), durations=np.asarray(out.durations, dtype=np.int64),
             plan=np.array([plan.first, plan.size], dtype=np.int64))
    return buf.getvalue()


def unpack_frames(data: bytes) -> tuple[AcousticOutput, WindowPlan]:
    with np.load(io.BytesIO(data), allow_pickle=False) as stored:
        first, size = (int(v) for v in stored["plan"])
        return AcousticOutput(frames=stored["frames"], durations=stored["durations"]), WindowPlan(first=first, size=size)


class PcmFinisher:
    """A segment's audio, window by window, as PCM16 at the job's rate with its pause after the last window.
    A rate change runs through one soxr stream per segment, so window seams are not resampling seams."""

    def __init__(self, voice_rate: int, out_rate: int, pause_s: float) -> None:
        self.out_rate = out_rate
        self.pause = int(round(pause_s * out_rate))
        self.stream = None
        if voice_rate != out_rate:
            import soxr

            self.stream = soxr.ResampleStream(voice_rate, out_rate, 1, dtype="float32", quality="HQ")

    def __call__(self, audio: np.ndarray, last: bool) -> bytes:
        from pipeline.audio import to_pcm16

        out = self.stream.resample_chunk(audio, last=last) if self.stream is not None else audio
        if last and self.pause:
            out = np.concatenate([out, np.zeros(self.pause, dtype=np.float32)])
        return to_pcm16(out)


@dataclass
class Streamed:
    """One job's segment in the batch."""

    entry: Entry
    item: WindowedItem
    progress: SegmentProgress
    finish: PcmFinisher
    skip: int = 0  # windows an earlier attempt published already
    samples: int = 0


class StreamingBatch:
    def __init__(self, outcomes: Outcomes, voice: TwoStageVoice, ready: Sequence[tuple[Entry, Phonemized]],
                 opts: SynthesisOptions, batch_id: str, plan: WindowPlan, *, small_first: bool = True) -> None:
        self.outcomes = outcomes
        self.voice = voice
        self.ready = list(ready)
        self.opts = opts
        self.batch_id = batch_id
        self.plan = plan
        self.small_first = small_first  # a job's first segment starts with the plan's small window
        self.live: list[Streamed] = []
        self.infer_s = 0.0
        self.windows = 0
        self.audio_s = 0.0
        self.base_stats: dict[str, Any] = {}  # held by a deadline-scheduled loop: its batch stats, reported when done

    # -- unit 1: the acoustic pass ----------------------------------------------------------------
    def acoustic(self) -> None:
        start = time.perf_counter()
        outs = self.voice.acoustic_outputs([ph.ids for _, ph in self.ready], self.opts)
        self.infer_s += time.perf_counter() - start
        plans = []
        for e, _ in self.ready:
            assert e.job is not None
            # a job's later segments are not awaited (earlier audio is playing): no small first window for them
            plans.append(self.plan if e.job.seg == 0 and self.small_first else self.plan.without_small_first())
        claims = self.outcomes.publisher.claim_frames([(e.job, self.outcomes.attempt(e), pack_frames(out, plan))  # type: ignore[misc]
                                                       for (e, _), out, plan in zip(self.ready, outs, plans)])
        for (e, ph), out, plan, (won, tag, stored, published) in zip(self.ready, outs, plans, claims):
            job = e.job
            assert job is not None
            if not stored:  # an earlier attempt published the whole segment: only its bookkeeping may be left
                self.outcomes.already_published(e)
                continue
            if not won:
                out, plan = unpack_frames(stored)
                log.info("segment %s/%d: continuing attempt %s from window %d", job.job_id, job.seg, tag, published)
            words = segment_words(job, ph, out.durations, hop=self.voice.hop, voice_rate=self.voice.sample_rate,
                                  model_samples=int(out.frames.shape[0]) * self.voice.hop)
            item = WindowedItem.of(e, out.frames, self.voice.vocoder, plan)
            self.live.append(Streamed(e, item, SegmentProgress(job, tag, words=words),
                                      PcmFinisher(self.voice.sample_rate, job.sample_rate, job.pause_s), skip=published))

    # -- unit 2: the next window of every live job --------------------------------------------------
    def step(self, states: dict[str, str] | None = None) -> bool:
        """Vocode and publish the next window of each live job (the windows in one round trip); False once none is
        left. ``states``: the jobs' states if the caller just read them (else they are read here). The segments it
        ends are acked together."""
        with self.outcomes.acks_together():
            return self._step(states)

    def _step(self, states: dict[str, str] | None) -> bool:
        self.live = self.outcomes.still_running([s.entry for s in self.live], self.live, states)
        if not self.live:
            return False
        start = time.perf_counter()
        made = vocode_next(self.voice.vocoder, [s.item for s in self.live])
        self.infer_s += time.perf_counter() - start
        self.windows += len(made)
        self.outcomes.metrics.windows(self.voice.name, len(made))
        by_item = {id(s.item): s for s in self.live}
        outs = []
        for item, window, audio in made:
            s = by_item[id(item)]
            pcm = s.finish(audio, window.last)
            s.samples += len(pcm) // 2
            outs.append(PieceOut(s.progress, pcm, window.last, publish=window.index >= s.skip))
        outcomes = self.outcomes.publisher.publish_pieces(outs, batch_id=self.batch_id, worker=self.outcomes.name)
        for (item, window, _), outcome in zip(made, outcomes):  # every window of the step is out: now what follows
            s = by_item[id(item)]
            job = s.entry.job
            assert job is not None
            if window.index >= s.skip:
                self.outcomes.unit_published(job, "window", s.progress.started, s.progress.delivered_before_s)
            if window.index == 0 and window.index >= s.skip:
                self.outcomes.metrics.first_chunk(job)
            if outcome is not None:
                audio_s = s.samples / job.sample_rate
                self.audio_s += len(item.whole()) / self.voice.sample_rate
                self.outcomes.published(s.entry, outcome, audio_s)
        self.live = [s for s in self.live if not s.item.done]
        return bool(self.live)

    def stats(self) -> dict[str, Any]:
        return {"infer_s": self.infer_s, "windows": self.windows, "audio_s": self.audio_s}
