"""A finished job's end, off the inference loops: ``Finisher``.

When a job's last segment is published, what is left is host work that needs no model: assemble its PCM from
the parts, encode it (MP3, Opus, ...), store it (S3 or a folder), write its status and final record, tell
Flower. Inline, a loop did all of it before its next batch, so the next segment (and on a GPU the device) waited
for an encoder and an S3 round trip. The finisher runs these ends on a few threads of the worker process
(``queue.finisher_threads``; 0: inline, as before) while the loops go on.

Nothing is lost by it: the entry of the segment that ended the job is acked only after its job is stored and
finished. A worker that dies with a finish pending leaves that entry unacked; it is reclaimed, and its redo finds
the segment published and finishes the job (``Outcomes.already_published``). A finish that fails is logged and
counted and its entry left unacked for the same reclaim. A worker's warm shutdown waits for the pending ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)


class Finisher:
    """Runs job ends on ``threads`` threads (0: none, each loop runs its own). At most ``2 × threads`` ends are
    pending at a time: a loop that would queue one more runs it itself (storage that slows down slows the loops
    rather than piling finished audio up in memory)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(0, threads)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="ttsfarm-finisher") if self.threads else None
        self._room = threading.BoundedSemaphore(2 * self.threads) if self.threads else None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self.pending = 0  # ends queued or running
        self.done = 0  # ends run here
        self.inline = 0  # ends a loop ran itself (no finisher, or it was full)

    def take(self, end: Callable[[], None]) -> bool:
        """Run ``end`` (a job's storage and end, then its entry's ack) on a finisher thread; False when there is no
        finisher or every place is taken: the caller runs it itself. ``end`` handles its own errors; one that escapes
        is logged."""
        if self._pool is None or self._room is None or not self._room.acquire(blocking=False):
            with self._lock:
                self.inline += 1
            return False
        with self._lock:
            self.pending += 1
        try:
            self._pool.submit(self._run, end)
        except RuntimeError:  # shut down meanwhile: the caller runs it
            self._release()
            return False
        return True

    def _run(self, end: Callable[[], None]) -> None:
        try:
            end()
        except Exception:  # noqa: BLE001 - a finisher thread outlives any one job's end
            log.exception("a job's end failed on the finisher; its segment's entry stays unacked for a reclaim")
        finally:
            with self._lock:
                self.done += 1
            self._release()

    def _release(self) -> None:
        with self._idle:
            self.pending -= 1
            self._idle.notify_all()
        if self._room is not None:
            self._room.release()

    def close(self, timeout: float | None = None) -> bool:
        """Wait for the pending ends (a warm shutdown), at most ``timeout`` seconds; whether none is left."""
        with self._idle:
            self._idle.wait_for(lambda: self.pending == 0, timeout)
            left = self.pending
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        return left == 0

    def describe(self) -> dict[str, int]:
        """For the heartbeat: threads, ends pending, run there, run inline by a loop."""
        return {"threads": self.threads, "pending": self.pending, "done": self.done, "inline": self.inline}
