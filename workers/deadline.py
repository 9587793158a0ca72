"""Deadline scheduling in the inference loop (``scheduling.mode = "deadline"``, ``workers/schedule.py``): each step
runs one unit, whichever is due first by its job's playback clock: the acoustic pass of a new batch (a stream head,
claimed now by the batching rules, or what the loop carries) or one window step of a batch the loop holds.

``DeadlineSteps`` is the part of ``InferenceLoop`` (``workers/loop.py``) that does this; the loop supplies the
members declared below.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from producer.wire.errors import TransientError
from producer.wire.records import SegmentJob
from producer.wire.settings import SchedulingSettings
from workers import schedule
from workers.batcher import Head
from workers.context import LoopContext
from workers.queue import Entry
from workers.schedule import ACOUSTIC, CARRIED, WINDOW, Clock, Unit, Work
from workers.streaming import StreamingBatch

log = logging.getLogger(__name__)


class DeadlineSteps:
    """One deadline-scheduled step of a loop, and the batches it holds between their windows (``open``)."""

    ctx: LoopContext
    sched: SchedulingSettings
    index: int
    open: list[StreamingBatch]
    carry: list[Entry]
    running: str | None
    on_batch: Callable[[dict[str, Any]], None] | None

    if TYPE_CHECKING:  # the loop's own steps (workers/loop.py)
        def _drop_malformed(self, entries: list[Entry]) -> list[Entry]: ...
        def _heads(self, block_ms: int, *, interactive_only: bool = False, handover_wait: bool = True) -> list[Head]: ...
        def _claim(self, head: Head, held_dues: list[float] | None = None) -> list[Entry]: ...
        def _run_carried(self, running: str | None = None) -> None: ...
        def compute(self, fn: Callable[[], Any]) -> Any: ...
        def _count_failure(self, e: Entry, exc: Exception) -> None: ...

    def _step_deadline(self) -> None:
        """Run one unit, the one due first: a window step of a held batch, or the acoustic pass of a new batch
        (from what this loop holds, or a stream head, claimed now by the batching rules)."""
        self.carry = self._drop_malformed(self.carry)
        s = self.sched
        heads: list[Head] = []
        if len(self.open) < s.max_open:  # what a loop claims it must be able to serve in time
            busy = bool(self.open or self.carry)
            heads = self._heads(0 if busy else 250, handover_wait=not busy)
        live = [x.entry for b in self.open for x in b.live]
        clocks = self._clocks([e.job.job_id for e in (*live, *self.carry) if e.job and e.job.lane == "interactive"]
                              + [h.job_id for h in heads if h.lane == "interactive"])

        def playing(job_id: str) -> bool:
            return clocks.get(job_id, Clock()).started is not None

        units: list[Unit[Any]] = []
        for b in self.open:
            entries = [x.entry for x in b.live]
            units.append(Unit(WINDOW, min(self._due(e, clocks) for e in entries),
                              min((e.arrived_ms, e.job.seg) for e in entries if e.job), b,
                              any(playing(e.job.job_id) for e in entries if e.job)))
        for e in self.carry:
            assert e.job is not None
            units.append(Unit(CARRIED, self._due(e, clocks), (e.arrived_ms, e.job.seg), e, playing(e.job.job_id)))
        for h in heads:
            work = Work(h.lane, h.created, h.seg, h.est_s, h.deadline)
            units.append(Unit(ACOUSTIC, schedule.due(work, clocks.get(h.job_id, Clock()), s), h.order, h, playing(h.job_id)))
        now = time.time()
        self.ctx.metrics.underrun_risk(self.index, schedule.at_risk([u.due for u in units], now, s))
        unit = schedule.choose(units, now)
        if unit is None:
            return
        running = schedule.urgency(_lane_of(unit), unit.due, now, s)
        if unit.kind == WINDOW:
            self._run_window(unit.ref, running)
        elif unit.kind == CARRIED:
            self._run_carried(running)
        else:
            claimed = self._claim(unit.ref, [u.due for u in units if u.kind == WINDOW])
            held, self.carry = self.carry, claimed
            try:
                while self.carry and not self.ctx.stopping.is_set():
                    self._run_carried(running)
            finally:
                self.carry = held + self.carry

    def _due(self, e: Entry, clocks: dict[str, Clock]) -> float:
        assert e.job is not None
        return schedule.due(work_of(e.job), clocks.get(e.job.job_id, Clock()), self.sched)

    def _clocks(self, job_ids: list[str]) -> dict[str, Clock]:
        """The playback clocks of these jobs, from their status hashes (one round trip)."""
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        pipe = self.ctx.r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self.ctx.keys.status(job_id), "first_chunk", "delivered_s")
        return {job_id: Clock.from_status(*reply) for job_id, reply in zip(ids, pipe.execute())}

    def _run_window(self, batch: StreamingBatch, running: str) -> None:
        """One window step of a held batch; the batch is let go (and reported) after its last window. If the step
        fails the batch is let go too: on a backend error its entries stay pending (reclaimed and continued from
        their claimed frames, as in FIFO mode); on another error each segment is retried (``_count_failure``)."""
        outer, self.running = self.running, running
        try:
            more = self.compute(batch.step)
            self.ctx.hooks.window(batch.live)
        except (redis.RedisError, TransientError):
            self.open.remove(batch)
            raise
        except Exception as exc:
            self.open.remove(batch)
            log.warning("window step of batch %s failed (%s); retrying its segments", batch.batch_id, exc)
            for x in batch.live:
                self._count_failure(x.entry, exc)
            return
        finally:
            self.running = outer
        if not more:
            self.open.remove(batch)
            if self.on_batch and batch.base_stats:
                self.on_batch({**batch.base_stats, **batch.stats()})

    def _drain_open(self) -> None:
        """On shutdown, the held batches are finished (warm shutdown: what was started ends and is acked)."""
        while self.open:
            try:
                self._run_window(self.open[0], "urgent")
            except (redis.RedisError, TransientError) as exc:
                log.warning("could not finish held segments (they will be reclaimed): %s", exc)
                self.open = []


def work_of(job: SegmentJob) -> Work:
    return Work(job.lane, job.created, job.seg, job.est_s, job.deadline)


def _lane_of(unit: Unit[Any]) -> str:
    """The most urgent lane of a unit: interactive if any of its segments is."""
    if unit.kind == ACOUSTIC:
        return str(unit.ref.lane)
    entries = [x.entry for x in unit.ref.live] if unit.kind == WINDOW else [unit.ref]
    return "interactive" if any(e.job is not None and e.job.lane == "interactive" for e in entries) else "bulk"
