"""Batch forming, as pure decisions over what the streams hold: no Redis here.

* Which queue next: the interactive lane first; bulk gets a batch when the interactive lane is idle,
  after ``interactive_streak`` interactive batches in a row, or when its head has waited
  ``bulk_aging_ms``; never two bulk batches in a row while interactive work waits. So a bulk backlog
  delays an interactive job by at most one batch, and bulk never starves.
* Which entries join the head: same voice and options (they share one model call), and a predicted
  length within a tolerance of the head's that widens from ``tolerance`` to ``tolerance_max`` as the
  head waits out the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from wire.queue import Head
from wire.settings import QueueSettings

T = TypeVar("T")


@dataclass(frozen=True)
class Candidate(Generic[T]):
    item: T
    arrived_ms: int
    est_s: float
    key: tuple[object, ...]  # entries with equal keys may share a model call
    awaited: bool = False  # a caller waits for its first audio (``workers.layout.awaited``)


@dataclass
class LaneState:
    interactive_streak: int = 0
    last_lane: str = ""

    def record(self, lane: str) -> None:
        self.interactive_streak = self.interactive_streak + 1 if lane == "interactive" else 0
        self.last_lane = lane


def choose_head(heads: Sequence[Head], now_ms: int, state: LaneState, q: QueueSettings) -> Head | None:
    interactive = [h for h in heads if h.lane == "interactive"]
    bulk = [h for h in heads if h.lane == "bulk"]
    oldest_i = min(interactive, key=lambda h: h.order, default=None)
    oldest_b = min(bulk, key=lambda h: h.order, default=None)
    if oldest_i is None or oldest_b is None:
        return oldest_i or oldest_b
    if state.last_lane == "bulk":
        return oldest_i
    if state.interactive_streak >= q.interactive_streak or now_ms - oldest_b.arrived_ms >= q.bulk_aging_ms:
        return oldest_b
    return oldest_i


def tolerance(waited_ms: float, q: QueueSettings) -> float:
    """Relative length tolerance: ``tolerance`` at arrival, ``tolerance_max`` once the window has passed."""
    frac = min(1.0, max(0.0, waited_ms / max(1, q.window_ms)))
    return q.tolerance + (q.tolerance_max - q.tolerance) * frac


def fits(head: Candidate[T], other: Candidate[T], tol: float) -> bool:
    if other.key != head.key:
        return False
    scale = max(head.est_s, other.est_s, 0.5)
    return abs(other.est_s - head.est_s) <= tol * scale


def first_segments_any_length(join: str, on_cuda: bool) -> bool:
    """Whether callers' first segments claimed together share a batch whatever their lengths: ``queue.first_segments_join``
    any, or auto on CUDA (padded rows cost little there); fit, or auto elsewhere, batches them by length."""
    return join == "any" or (join == "auto" and on_cuda)


def select_batch(candidates: Sequence[Candidate[T]], now_ms: int, limit: int, q: QueueSettings) -> tuple[list[Candidate[T]], list[Candidate[T]]]:
    """Split ``candidates`` into (this batch, the rest): the oldest is the head, the rest join by fit. What a caller
    waits for goes first: the oldest awaited candidate is the head if there is one, and the other awaited ones join it
    whatever their length (a caller's first segment does not wait out a batch of others' it was claimed with)."""
    if not candidates:
        return [], []
    ordered = sorted(candidates, key=lambda c: (not c.awaited, c.arrived_ms))
    head = ordered[0]
    tol = tolerance(now_ms - head.arrived_ms, q)
    joiners = sorted((c for c in ordered[1:] if fits(head, c, tol) or (head.awaited and c.awaited and c.key == head.key)),
                     key=lambda c: (not c.awaited, abs(c.est_s - head.est_s), c.arrived_ms))
    batch = [head, *joiners[: max(0, limit - 1)]]
    chosen = {id(c) for c in batch}
    return batch, [c for c in ordered if id(c) not in chosen]


def padding_waste(lengths: Sequence[int]) -> float:
    """Fraction of a padded batch that is padding."""
    if not lengths:
        return 0.0
    width = max(lengths)
    return 1.0 - sum(lengths) / (width * len(lengths))
