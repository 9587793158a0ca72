"""A finished job's end, off the inference loops: ``Finisher``.

When a job's last segment is published, what is left is host work that needs no model: assemble its PCM from
the parts, encode it (MP3, Opus, ...), store it (S3 or a folder), write its status and final record, tell
Flower. Inline, a loop did all of it before its next batch, so the next segment (and on a GPU the device) waited
for an encoder and an S3 round trip. The finisher runs these ends on a few threads of the worker process
(``queue.finisher_threads``; 0: inline, on the loop that published the last segment) while the loops go on.

Nothing is lost by it: the entry of the segment that ended the job is acked only once its job is stored, in the same
step as the job's end (``WorkBroker.finalize``'s ``ack``). A worker that dies with a finish pending leaves that entry
unacked; it is reclaimed, and its redo finds the segment published and finishes the job
(``Outcomes.already_published``). A finish that fails is logged and
counted and its entry left unacked for the same reclaim. A worker's warm shutdown waits for the pending ends.

With ``queue.finisher_processes``, the heavy part of an end (assembly, encoding, storage, status and final record:
``Publisher.store_and_finish``) runs in that many processes of its own (``StoreProcesses``), each with its own Redis
connection and storage client, so it takes none of the loops' interpreter (their GIL): the end acks the entry there,
and the finisher thread waits for it, then tells Flower itself. A finisher process that dies fails no job: the pool
is started again and the end runs on the thread this time.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from wire.queue import Entry
from wire.records import SegmentJob
from wire.settings import Settings
from wire.connect import connect
from wire.storage import storage_from_settings
from workers.publisher import Publisher

log = logging.getLogger(__name__)


class Finisher:
    """Runs job ends on ``threads`` threads (0: none, each loop runs its own). At most ``2 × threads`` ends are
    pending at a time: a loop that would queue one more runs it itself (storage that slows down slows the loops
    rather than piling finished audio up in memory)."""

    def __init__(self, threads: int, processes: int = 0, settings: Settings | None = None) -> None:
        self.threads = max(0, threads)
        self.processes = StoreProcesses(processes, settings) if processes > 0 and settings is not None else None
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="ttsfarm-finisher") if self.threads else None
        self._room = threading.BoundedSemaphore(2 * self.threads) if self.threads else None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self.pending = 0  # ends queued or running
        self.done = 0  # ends run here
        self.inline = 0  # ends a loop ran itself (no finisher, or it was full)

    def store(self, publisher: Publisher, job: SegmentJob, output: Any,
              ack: Sequence[Entry] = ()) -> tuple[str | None, bool]:
        """``publisher.store_and_finish(job, output, ack)``: in a finisher process when there are any, else here."""
        if self.processes is not None:
            done = self.processes.store(job, output, ack)
            if done is not None:
                return done
        return publisher.store_and_finish(job, output, ack)

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
        if self.processes is not None:
            self.processes.close()
        return left == 0

    def describe(self) -> dict[str, int]:
        """For the heartbeat: threads, ends pending, run there, run inline by a loop; with finisher processes, how
        many and the ends they stored."""
        info = {"threads": self.threads, "pending": self.pending, "done": self.done, "inline": self.inline}
        if self.processes is not None:
            info |= {"processes": self.processes.size, "stored_in_processes": self.processes.stored,
                     "process_restarts": self.processes.restarts}
        return info


class StoreProcesses:
    """``size`` processes that run ``Publisher.store_and_finish`` (started at once, by ``spawn``: the worker has
    threads and model sessions a fork would copy half-made). Each builds its publisher from ``settings`` (not loaded
    again: the worker's own), ignores Ctrl-C (a warm shutdown waits for their pending ends) and exits when the worker
    is gone."""

    def __init__(self, size: int, settings: Settings) -> None:
        self.size, self.settings = size, settings
        self.stored = 0  # ends stored in a process
        self.restarts = 0  # pools started again after one of their processes died
        self.pids: set[int] = set()  # the processes, once started
        self._lock = threading.Lock()
        self._pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(self.size, mp_context=multiprocessing.get_context("spawn"), initializer=_start_process,
                                   initargs=(self.settings, os.getpid()))
        self.pids = set()
        for _ in range(self.size):  # start them now, not under the first finished jobs
            pool.submit(os.getpid).add_done_callback(self._started)
        return pool

    def _started(self, pid: Any) -> None:
        if not pid.cancelled() and pid.exception() is None:
            self.pids.add(pid.result())

    def store(self, job: SegmentJob, output: Any, ack: Sequence[Entry] = ()) -> tuple[str | None, bool] | None:
        """The job stored and ended in a finisher process, as ``store_and_finish`` returns it; None when the pool
        broke (a process died: it is started again, and the caller stores the job itself)."""
        pool = self._pool
        try:
            done: tuple[str | None, bool] = pool.submit(_store, job, output, list(ack)).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    log.warning("a finisher process died; starting the finisher processes again")
                    self.restarts += 1
                    self._pool = self._start()
            return None
        with self._lock:
            self.stored += 1
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


_publisher: Publisher | None = None  # in a finisher process: its own


def _start_process(settings: Settings, parent: int) -> None:
    """A finisher process's start: its publisher, and a watch on the worker that started it. Its logging is
    Python's default (warnings and errors to stderr, which it shares with the worker): the worker's own is Celery's."""
    global _publisher
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _publisher = Publisher.of(settings, connect(settings.redis), storage_from_settings(settings.storage))
    threading.Thread(target=_exit_with, args=(parent,), name="ttsfarm-parent-watch", daemon=True).start()


def _exit_with(parent: int) -> None:
    """Exit once the worker that started this process is gone (killed: no shutdown told the pool)."""
    while os.getppid() == parent:
        threading.Event().wait(1.0)
    os._exit(0)


def _store(job: SegmentJob, output: Any, ack: Sequence[Entry]) -> tuple[str | None, bool]:
    assert _publisher is not None, "a finisher process without its publisher"
    return _publisher.store_and_finish(job, output, ack)
