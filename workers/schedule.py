"""Earliest deadline first over a loop's units of work, by each job's playback clock: pure decisions, no Redis.

**The playback clock** of a job (``Clock``): its listener starts to play at the job's first chunk and plays in
real time, so ``t`` seconds later it has played ``t`` of the ``delivered_s`` published and holds the rest, its
slack. Its audio runs out at ``started + delivered_s``: that is the deadline of the job's next unit (chosen
``play_margin_ms`` before, as the unit takes time too). Before its first
chunk an interactive job is due ``first_chunk_target_ms`` after its arrival (a later segment of it a little after,
by the audio in front of it). Bulk work (a book's sentences, each a job of its own) is due ``bulk_deadline_s``
after its arrival, or at the job's own deadline when that is sooner: it fills idle time, ages, and cannot starve.

**Where the clock lives**: in the job's status hash, written where chunks are published
(``Publisher.publish_piece``): ``first_chunk`` (wall time of the job's first chunk, which the job's status
timings report too) and ``delivered_s`` (seconds of audio published so far, by every worker that made a segment of
the job). A loop reads the clocks of what it holds and of the stream heads before each choice (one round trip).
Approximation: audio counts when it is published, in whatever order segments are made (a later segment made early
counts early).

**Units** (``Unit``): the acoustic pass of a new batch (a stream head, or entries the loop holds: reclaimed or
retried) and one window step of a batch whose acoustic pass is done. ``choose`` takes the earliest due (a playing
listener about to run dry first), ties in arrival order. Late work is done and counted, never dropped (only a job's own ``deadline`` ends it unserved).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from wire.records import text_of
from wire.settings import SchedulingSettings
from workers.layout import Urgency

T = TypeVar("T")

ACOUSTIC, WINDOW, CARRIED = "acoustic", "window", "carried"


@dataclass(frozen=True)
class Clock:
    """A job's playback clock: ``started`` (wall seconds of its first chunk; None before it) and the seconds of
    audio ``delivered_s`` since."""

    started: float | None = None
    delivered_s: float = 0.0

    @classmethod
    def from_status(cls, first_chunk: object, delivered_s: object) -> Clock:
        """From the status hash's ``first_chunk`` and ``delivered_s`` fields (bytes, str or None)."""
        started = _float(first_chunk)
        return cls(started if started else None, _float(delivered_s) or 0.0)

    def runs_dry(self) -> float | None:
        """When the listener has played everything delivered (None before the first chunk)."""
        return None if self.started is None else self.started + self.delivered_s

    def slack(self, now: float) -> float | None:
        """Seconds of audio the listener still holds (negative: it ran dry that long ago)."""
        dry = self.runs_dry()
        return None if dry is None else dry - now


@dataclass(frozen=True)
class Work:
    """What the scheduler needs of one segment's job."""

    lane: str
    created: float  # wall seconds the job was submitted
    seg: int = 0
    est_s: float = 0.0  # the segment's predicted audio seconds
    deadline: float = 0.0  # the job's own deadline (wall seconds), 0: none


def due(work: Work, clock: Clock, s: SchedulingSettings) -> float:
    """When the next unit of ``work`` should be chosen by (wall seconds): its ``deadline``, for a playing job
    ``play_margin_ms`` sooner (the unit takes time too: it must be done, not started, when the listener runs dry)."""
    d = deadline(work, clock, s)
    return d - s.play_margin_ms / 1000 if work.lane != "bulk" and clock.started is not None else d


def deadline(work: Work, clock: Clock, s: SchedulingSettings) -> float:
    """When the next unit of ``work`` must be published (wall seconds)."""
    if work.lane == "bulk":
        d = work.created + s.bulk_deadline_s
        return min(d, work.deadline) if work.deadline else d
    dry = clock.runs_dry()
    if dry is not None:
        return dry
    # not playing yet: the first chunk is due at the target; a later segment after the audio in front of it
    # (estimated by its own length: segments of a job are of a size)
    return work.created + s.first_chunk_target_ms / 1000 + work.seg * work.est_s


def publish_slack(work: Work, clock_before: Clock, now: float, s: SchedulingSettings) -> float:
    """Slack of a unit published at ``now`` (negative: late), given the job's clock before it was published:
    the job's first chunk against its target (bulk: its deadline), a later one against its listener running dry."""
    return deadline(work, clock_before, s) - now


@dataclass(frozen=True)
class Unit(Generic[T]):
    kind: str  # ACOUSTIC (a stream head), CARRIED (held entries), WINDOW (the next window step of a held batch)
    due: float
    order: tuple[float, int]  # arrival (ms), segment: the tie-break
    ref: T
    playing: bool = False  # a unit of a job whose listener is playing (an interactive job past its first chunk)


def choose(units: Iterable[Unit[T]], now: float) -> Unit[T] | None:
    """Earliest deadline first, except that a playing listener's unit whose time has come (due now: its listener
    runs dry within ``play_margin_ms``) goes first: a caller still waiting for a first chunk hears a longer wait, a
    playing one would hear a gap. A playing job asks for this at most once per window of audio, so callers cannot
    starve. Among equal deadlines the earlier arrival, then a held batch's window before new work (it has paid for
    its acoustic pass)."""
    rank = {WINDOW: 0, CARRIED: 1, ACOUSTIC: 2}
    return min(units, key=lambda u: (not (u.playing and u.due <= now), u.due, u.order, rank.get(u.kind, 3)), default=None)


def at_risk(dues: Sequence[float], now: float, s: SchedulingSettings) -> int:
    """How many of these units are due within ``risk_slack_ms`` (or overdue): their listeners may run dry."""
    return sum(1 for d in dues if d - now < s.risk_slack_ms / 1000)


def window_end_ms(opened_ms: int, window_ms: int, held_dues: Sequence[float]) -> int:
    """When a batch's gathering window closes: ``window_ms`` after it opened, or sooner when a held unit falls due
    (its listener must not run dry while the loop waits for joiners)."""
    end = opened_ms + window_ms
    if held_dues:
        end = min(end, int(min(held_dues) * 1000))
    return end


def urgency_by_slack(lane: str, due_s: float, now: float, s: SchedulingSettings) -> Urgency:
    """BACKGROUND (run at ``queue.bulk_nice``) for bulk work and for a unit whose listener holds more than
    ``risk_slack_ms``; else URGENT."""
    return Urgency.BACKGROUND if lane == "bulk" or due_s - now > s.risk_slack_ms / 1000 else Urgency.URGENT


def _float(v: object) -> float | None:
    if v is None:
        return None
    try:
        return float(text_of(v))
    except (TypeError, ValueError):
        return None
