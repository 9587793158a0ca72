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
* One attempt per segment: a segment's first window published carries its attempt's claim, the attempt tag and
  replay record (its window plan and frame count), written in the same step as the window (``PieceOut.claim``). A
  redo (the worker died mid-segment, its entry was reclaimed) finds the first attempt's claim there instead: its window
  is not written, and it gets that tag and plan back, has the same frames, vocodes them again from the start, skips the
  windows already published, and publishes the rest under the same tag: a reader sees one attempt's chunks, seamless.
  The same frames: a replayable voice (``StreamingVoice.replayable``: joe prepared with seeded noise, baker, the null
  voice) makes them again from the segment's seed (``noise_seed``), so they never pass through Redis; any other voice
  (a two-stage graph that draws its own noise, e.g. a Piper voice prepared before seeded noise) stores them with its
  claim (1.5 x the audio's PCM16 for a Piper voice), and a redo reads them back.
* A cancelled job stops at the next window: each publish reads its job's state and writes nothing once it has ended
  (that window is made, not sent; nothing reads the held jobs' states between windows).
"""

from __future__ import annotations

import io
import logging
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.voices.base import Phonemized, SynthesisOptions
from pipeline.voices.stages import AcousticOutput
from pipeline.voices.windows import StreamingVoice, WindowedItem, WindowPlan
from wire.pieces import ClaimReply, FrameClaim
from wire.queue import Entry
from wire.records import SegmentJob
from workers.layout import awaited
from workers.metrics import WorkerMetrics
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


def noise_seed(job_id: str, seg: int) -> int:
    """The seed of a segment's acoustic noise: the same for every attempt at it, another for every other segment."""
    return zlib.crc32(f"{job_id}:{seg}".encode())


def replay_record(out: AcousticOutput, plan: WindowPlan) -> str:
    """What a redo of a replayable voice needs besides its own frames: the window plan, and the frame count to check
    that it made the same frames."""
    return f"{plan.first},{plan.size},{int(out.frames.shape[0])}"


def read_replay(record: str) -> tuple[WindowPlan, int] | None:
    try:
        first, size, frames = (int(v) for v in record.split(","))
    except ValueError:
        return None
    return WindowPlan(first=first, size=size), frames


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
    ph: Phonemized
    out: AcousticOutput  # this attempt's frames (a redo that finds another attempt's claim cuts them by its plan)
    plan: WindowPlan
    item: WindowedItem
    progress: SegmentProgress
    finish: PcmFinisher
    claim: FrameClaim | None = None  # sent with the segment's first window published, then None
    skip: int = 0  # windows an earlier attempt published already
    samples: int = 0


class StreamingBatch:
    """``outcomes``: the loop's, where each window goes out and each segment ends; ``metrics``: where the windows
    made and the redos that made other frames are counted."""

    def __init__(self, outcomes: Outcomes, metrics: WorkerMetrics, voice: StreamingVoice,
                 ready: Sequence[tuple[Entry, Phonemized]], opts: SynthesisOptions, batch_id: str, plan: WindowPlan, *,
                 small_first: bool = True) -> None:
        self.outcomes = outcomes
        self.metrics = metrics
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
        jobs = [e.job for e, _ in self.ready]
        assert all(job is not None for job in jobs)
        start = time.perf_counter()
        outs = self.voice.acoustic_outputs([ph.ids for _, ph in self.ready], self.opts, [noise_seed(job.job_id, job.seg) for job in jobs],  # type: ignore[arg-type]
                                           urgent=any(awaited(job) for job in jobs))  # type: ignore[arg-type]
        self.infer_s += time.perf_counter() - start
        # a job's later segments are not awaited (earlier audio is playing): no small first window for them
        plans = [self.plan if job.seg == 0 and self.small_first else self.plan.without_small_first() for job in jobs]  # type: ignore[union-attr]
        replayable = self.voice.replayable
        for (e, ph), job, out, plan in zip(self.ready, jobs, outs, plans):
            assert job is not None
            claim = FrameClaim(self.outcomes.attempt(e), replay_record(out, plan), b"" if replayable else pack_frames(out, plan))
            self.live.append(self._streamed(e, ph, out, plan, claim.attempt, claim=claim, frames_stored=bool(claim.frames)))

    def _streamed(self, e: Entry, ph: Phonemized, out: AcousticOutput, plan: WindowPlan, tag: str, *,
                  claim: FrameClaim | None = None, frames_stored: bool = False, skip: int = 0) -> Streamed:
        job = e.job
        assert job is not None
        words = segment_words(job, ph, out.durations, hop=self.voice.hop, voice_rate=self.voice.sample_rate,
                              model_samples=int(out.frames.shape[0]) * self.voice.hop)
        item = self.voice.windowed(e, out.frames, plan)
        return Streamed(e, ph, out, plan, item,
                        SegmentProgress(job, tag, words=words, frames_stored=frames_stored, planned=len(item.windows)),
                        PcmFinisher(self.voice.sample_rate, job.sample_rate, job.pause_s), claim=claim, skip=skip)

    def _follow(self, s: Streamed, held: ClaimReply) -> Streamed | None:
        """A segment whose first window found another attempt's claim: nothing of this attempt went out. It continues
        that attempt from the windows it published (its frames and plan, vocoded again from the start), or, once that
        attempt published it whole, only the bookkeeping is left (None)."""
        job = s.entry.job
        assert job is not None
        if held.ended:
            self.outcomes.already_published(s.entry)
            return None
        out, plan = self._continued(job, s.out, s.plan, held)
        log.info("segment %s/%d: continuing attempt %s from window %d", job.job_id, job.seg, held.attempt, held.windows)
        return self._streamed(s.entry, s.ph, out, plan, held.attempt, frames_stored=bool(held.frames), skip=held.windows)

    def _continued(self, job: SegmentJob, out: AcousticOutput, plan: WindowPlan, claim: ClaimReply) -> tuple[AcousticOutput, WindowPlan]:
        """A redo's frames and plan: the first attempt's frames where it stored them, else this pass's (made from the
        same seed), cut by the first attempt's plan."""
        if claim.frames:
            return unpack_frames(claim.frames)
        replay = read_replay(claim.replay)
        if replay is None:
            log.warning("segment %s/%d: attempt %s left no frames and no plan; its windows are cut anew", job.job_id, job.seg,
                        claim.attempt)
            return out, plan
        plan, frames = replay
        if frames != int(out.frames.shape[0]):  # another precision or provider rounded a duration the other way
            log.warning("segment %s/%d: made %d frames again where attempt %s had %d; its later windows may not join "
                        "seamlessly", job.job_id, job.seg, int(out.frames.shape[0]), claim.attempt, frames)
            self.metrics.replay_mismatch(self.voice.name)
        return out, plan

    # -- unit 2: the next window of every live job --------------------------------------------------
    def step(self) -> bool:
        """Vocode and publish the next window of each live job (the windows in one round trip); False once none is
        left. A job that ended meanwhile (a client's cancel) is told by its window's publish, which writes nothing: it
        ends there. The segments it ends are acked together."""
        with self.outcomes.acks_together():
            return self._step()

    def _step(self) -> bool:
        if not self.live:
            return False
        start = time.perf_counter()
        urgent = any(s.item.next == 0 and awaited(s.entry.job) for s in self.live)  # a caller waits for its first window
        made = self.voice.vocode_windows([s.item for s in self.live], urgent=urgent)
        self.infer_s += time.perf_counter() - start
        self.windows += len(made)
        self.metrics.windows(self.voice.name, len(made))
        by_item = {id(s.item): s for s in self.live}
        outs = []
        for item, window, audio in made:
            s = by_item[id(item)]
            pcm = s.finish(audio, window.last)
            s.samples += len(pcm) // 2
            publish = window.index >= s.skip
            outs.append(PieceOut(s.progress, pcm, window.last, publish=publish, claim=s.claim if publish else None))
        results = self.outcomes.publish_pieces(outs, self.batch_id)
        followed: dict[int, Streamed | None] = {}
        for (item, window, _), res in zip(made, results):  # every window of the step is out: now what follows
            s = by_item[id(item)]
            job = s.entry.job
            assert job is not None
            if res.held is not None:  # another attempt holds the segment: follow it
                followed[id(s)] = self._follow(s, res.held)
                continue
            if not res.written:  # the job ended (a client's cancel) before this window went out
                self.outcomes.ended(s.entry, res.state)
                followed[id(s)] = None
                continue
            s.claim = None
            if window.index >= s.skip:
                self.outcomes.unit_published(job, "window", s.progress.started, s.progress.delivered_before_s)
            if window.index == 0 and window.index >= s.skip:
                self.metrics.first_chunk(job)
            if res.outcome is not None:
                audio_s = s.samples / job.sample_rate
                self.audio_s += len(item.whole()) / self.voice.sample_rate
                self.outcomes.published(s.entry, res.outcome, audio_s)
        kept = []
        for s in self.live:
            nxt = followed[id(s)] if id(s) in followed else (None if s.item.done else s)
            if nxt is not None:
                kept.append(nxt)
        self.live = kept
        return bool(self.live)

    def stats(self) -> dict[str, Any]:
        return {"infer_s": self.infer_s, "windows": self.windows, "audio_s": self.audio_s}
