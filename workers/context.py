"""What an inference loop uses of its worker process, and nothing more: ``LoopContext``, built by
``FarmWorker.context()`` and handed to each ``InferenceLoop`` (``workers/loop.py``). The loop never sees the
worker object, so ``workers.loop`` and ``workers.farm`` do not import each other.

``LoopHooks`` are the points where a test may step into the loop's path: the tests' own Celery app module
(``tests/fault_worker.py``) adds its fault injection to them when ``workers.step`` says the farm is built
(``farm_created``). Production connects nothing there, so each call is a no-op.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.voices.bank import VoiceBank
from wire.broker import WorkBroker
from wire.records import SegmentJob
from wire.settings import Settings
from workers.events import JobEvents
from workers.finisher import Finisher
from workers.metrics import WorkerMetrics
from workers.publisher import Publisher


@dataclass
class LoopHooks:
    """Callbacks the loop calls: ``before_segment(job)`` before a segment is phonemized, ``after_window(live)``
    after a window step of a streamed batch (``live``: its segments still running, ``workers.streaming.Streamed``)."""

    before_segment: list[Callable[[SegmentJob], None]] = field(default_factory=list)
    after_window: list[Callable[[list[Any]], None]] = field(default_factory=list)

    def segment(self, job: SegmentJob) -> None:
        for fn in self.before_segment:
            fn(job)

    def window(self, live: list[Any]) -> None:
        for fn in self.after_window:
            fn(live)


class Chores:
    """Chores of the process that any of its loops may do, each at most once per period for the whole process (the
    loops share the queue streams: one reclaim every few seconds serves them all)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def due(self, chore: str, every_s: float) -> bool:
        """True for the one caller that should do ``chore`` now (none did it in the last ``every_s``)."""
        with self._lock:
            now = time.monotonic()
            if chore in self._last and now - self._last[chore] < every_s:
                return False
            self._last[chore] = now
            return True


class Gathering:
    """The queue streams a loop of the process is gathering a batch on now: the others leave those heads to it, so a
    stream's arrivals fill one batch instead of several that each wait out the window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: set[str] = set()

    def enter(self, stream: str) -> bool:
        """Take ``stream`` for a gathering; False if another loop holds it."""
        with self._lock:
            if stream in self._streams:
                return False
            self._streams.add(stream)
            return True

    def leave(self, stream: str) -> None:
        with self._lock:
            self._streams.discard(stream)

    def taken(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._streams)


@dataclass(frozen=True)
class LoopContext:
    """The members of a worker process its loops share. The three callables ask the process about its other
    loops (``FarmWorker``): the device's batch cap, and whether a reserved loop is free or a shared loop is
    running a caller's first segment. ``chores``: what the process's loops do once for all of them; ``finisher``: where
    they hand finished jobs' storage and ends (workers/finisher.py; by default none: a loop ends its jobs itself);
    ``device_busy``: whether a stage call of the process is on the device now (by default always: a window is waited out);
    ``first_segments_any_length``: whether callers' first segments claimed together share a batch whatever their lengths
    (``queue.first_segments_join``; by default not: by length like the rest); ``in_flight``: the (stream, entry id) of
    every entry a loop of the process has claimed and not ended (by default none: a loop knows only its own)."""

    settings: Settings
    hostname: str
    broker: WorkBroker
    bank: VoiceBank
    interactive_bank: VoiceBank
    publisher: Publisher
    events: JobEvents
    metrics: WorkerMetrics
    stopping: threading.Event
    hooks: LoopHooks
    device_max_batch: Callable[[], int]
    reserved_loop_free: Callable[[], bool]
    shared_loop_serving_interactive: Callable[[], bool]
    chores: Chores = field(default_factory=Chores)
    finisher: Finisher = field(default_factory=lambda: Finisher(0))
    device_busy: Callable[[], bool] = field(default=lambda: True)
    first_segments_any_length: Callable[[], bool] = field(default=lambda: False)
    gathering: Gathering = field(default_factory=Gathering)
    in_flight: Callable[[], frozenset[tuple[str, str]]] = field(default=lambda: frozenset())
