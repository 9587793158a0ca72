"""Windowed vocoding: a segment's frames vocoded a window at a time, so its audio can stream from inside it.

The unit of work is **one vocoder window**: a span ``[start, end)`` of an item's frames, vocoded with up to
``context`` frames of the item on each side (``VocoderStage.context``: the receptive field, measured per
vocoder) and at least ``min_frames`` in all, of which only the window's own ``(end - start) * hop`` samples
are kept. Vocoding every window of a plan and joining the kept samples reproduces vocoding the whole item:
exactly for the tiny test voice, about 1e-6 for Piper's decoder (context 10) and within 1e-3 for MB-MelGAN
(context 18); the first window sees the item's real start, the last its real end (then the padding after it,
as whole vocoding in a batch does).

``plan_windows`` cuts ``n`` frames into a small first window (audio starts early) and larger ones after
(each boundary costs ``2 * context`` frames of extra vocoding; a remainder too short to pay for that joins
the window before it). ``WindowedItem`` is one item's frames, plan and progress; ``vocode_next`` vocodes
the next window of several items in batched vocoder calls. Who goes next is the caller's choice (the worker
gives every job of a batch its first window before any gets its second; a deadline scheduler may choose
otherwise), which is why the window, not the segment, is the step here.

``StreamingVoice`` is what a voice offers a caller that streams it this way (``TwoStageVoice`` has it; a one-graph
voice does not): the acoustic pass of a batch, its frames cut into windows, and the next window of several items.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.voices.base import PhonemeIds, SynthesisOptions, Voice
from pipeline.voices.stages import AcousticOutput, VocoderStage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowPlan:
    """Window sizes in frames: the first, and every later one."""

    first: int
    size: int

    @classmethod
    def from_ms(cls, first_ms: int, size_ms: int, *, sample_rate: int, hop: int) -> WindowPlan:
        """Sizes given in milliseconds of audio, for a vocoder of ``hop`` samples per frame."""
        per_ms = sample_rate / hop / 1000
        return cls(first=max(1, round(first_ms * per_ms)), size=max(1, round(size_ms * per_ms)))

    def without_small_first(self) -> WindowPlan:
        """Every window large: for a segment whose listener still has earlier audio to play (not a job's first)."""
        return WindowPlan(first=self.size, size=self.size)


@dataclass(frozen=True)
class Window:
    """Frames ``[start, end)`` are this window's own; ``[lo, hi)`` go to the vocoder (own + context)."""

    index: int
    start: int
    end: int
    lo: int
    hi: int
    last: bool


def plan_windows(n: int, plan: WindowPlan, *, context: int, min_frames: int = 1) -> list[Window]:
    """The windows of an item of ``n`` frames. A remainder shorter than ``2 * context`` (what splitting it
    off would cost) or than half a later window joins the window before it, but a small first window stays
    small: an item no longer than it plus ``2 * context`` is one window."""
    if n <= 0:
        return [Window(0, 0, 0, 0, 0, True)]
    bounds = [0]
    end = min(n, max(1, plan.first))
    merge_after = max(2 * context, plan.size // 2)  # a remainder shorter than this joins the window before it
    if n - end < (2 * context if plan.first < plan.size else merge_after):  # a small first window stays small
        end = n
    bounds.append(end)
    while end < n:
        nxt = min(n, end + max(1, plan.size))
        if n - nxt < merge_after:
            nxt = n
        bounds.append(nxt)
        end = nxt
    windows = []
    for i, (start, stop) in enumerate(zip(bounds, bounds[1:])):
        lo, hi = max(0, start - context), min(n, stop + context)
        if hi - lo < min_frames:  # the graph refuses short inputs: widen inside the item (more context is harmless)
            hi = min(n, lo + min_frames)
            lo = max(0, hi - min_frames)
        windows.append(Window(i, start, stop, lo, hi, stop == n))
    return windows


@dataclass
class WindowedItem:
    """One item's frames being vocoded window by window; ``key`` is the caller's (a job, an index)."""

    key: object
    frames: np.ndarray  # float32 (n_frames, channels)
    windows: list[Window]
    hop: int
    next: int = 0
    audio: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(cls, key: object, frames: np.ndarray, vocoder: VocoderStage, plan: WindowPlan) -> WindowedItem:
        windows = plan_windows(int(frames.shape[0]), plan, context=vocoder.context, min_frames=vocoder.min_frames)
        return cls(key, frames, windows, vocoder.hop)

    @property
    def done(self) -> bool:
        return self.next >= len(self.windows)

    def pending(self) -> Window:
        return self.windows[self.next]

    def whole(self) -> np.ndarray:
        """The item's audio so far, joined (all of it once ``done``)."""
        return np.concatenate(self.audio) if self.audio else np.zeros(0, dtype=np.float32)


def vocode_next(vocoder: VocoderStage, items: Sequence[WindowedItem],
                run: Callable[[Sequence[np.ndarray]], list[np.ndarray]] | None = None) -> list[tuple[WindowedItem, Window, np.ndarray]]:
    """Vocode the pending window of each item (batched up to the vocoder's ``max_batch``), keep each window's
    own samples, advance the items. Returns (item, window, samples) in the order given. ``run`` makes the vocoder's
    calls (``vocoder.run`` unless given: a device batcher's, which shares them with other threads')."""
    todo = [item for item in items if not item.done]
    out: list[tuple[WindowedItem, Window, np.ndarray]] = []
    step = max(1, vocoder.max_batch)
    call = run or vocoder.run
    for part_start in range(0, len(todo), step):
        part = todo[part_start : part_start + step]
        windows = [item.pending() for item in part]
        audio = call([item.frames[w.lo : w.hi] for item, w in zip(part, windows)])
        for item, w, wave in zip(part, windows, audio):
            own = wave[(w.start - w.lo) * item.hop : (w.end - w.lo) * item.hop]
            item.audio.append(own)
            item.next += 1
            out.append((item, w, own))
    return out


def vocode_windowed(vocoder: VocoderStage, frames: Sequence[np.ndarray], plan: WindowPlan) -> list[np.ndarray]:
    """Every item vocoded window by window and stitched (what a stream of the windows adds up to)."""
    items = [WindowedItem.of(i, f, vocoder, plan) for i, f in enumerate(frames)]
    while not all(item.done for item in items):
        vocode_next(vocoder, items)
    return [item.whole() for item in items]


@runtime_checkable
class StreamingVoice(Voice, Protocol):
    """A voice whose batches stream from inside a sentence: an acoustic pass of the whole batch, then its vocoder a
    window at a time. A caller asks ``isinstance(voice, StreamingVoice)``; a voice without it is run whole
    (``synthesize_batch``)."""

    hop: int  # samples per frame

    @property
    def replayable(self) -> bool:
        """Whether ``acoustic_outputs`` with the same seeds gives the same frames again (a redo can make them
        instead of reading them back)."""

    def acoustic_outputs(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions,
                         seeds: Sequence[int] | None = None, *, urgent: bool = False) -> list[AcousticOutput]:
        """Frames and per-id durations of each item, as it gets them alone; ``seeds`` (one per item) fix the noise of
        a replayable voice; ``urgent``: a caller waits for one of the items."""

    def windowed(self, key: object, frames: np.ndarray, plan: WindowPlan) -> WindowedItem:
        """``frames`` cut into ``plan``'s windows for this voice's vocoder, to be vocoded by ``vocode_windows``."""

    def vocode_windows(self, items: Sequence[WindowedItem], *, urgent: bool = False) -> list[tuple[WindowedItem, Window, np.ndarray]]:
        """The next window of each item, as ``vocode_next`` returns them (``urgent``: a caller waits for one)."""
