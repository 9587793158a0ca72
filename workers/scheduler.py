"""How a loop chooses its next unit of work (``scheduling.mode``): a strategy with one ``step``.

``FifoScheduler`` (``fifo``): a batch by lane in arrival order (``workers/batcher.py``), run to its last window;
between two windows of a background batch, interactive work waiting now runs first.

``DeadlineScheduler`` (``deadline``, the default): each step runs one unit, whichever is due first by its job's
playback clock (``workers/schedule.py``): the acoustic pass of a new batch (a stream head, claimed now by the
batching rules, or what the loop carries) or one window step of a batch it holds between windows (``held``).

Both take their work from the loop's ``Claimer``, run it with its ``BatchRunner`` and end it through its
``Outcomes``; adding a strategy means one class with ``held``, ``step``, ``drain`` and ``let_go`` and a name in
``scheduler_for``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from wire.errors import BrokerError, TransientError
from wire.queue import Entry, Head
from workers import schedule
from workers.claimer import IDLE_BLOCK_MS, Claimer
from workers.context import LoopContext
from workers.layout import Urgency
from workers.outcomes import Outcomes, work_of
from workers.runner import BatchRunner
from workers.schedule import ACOUSTIC, CARRIED, WINDOW, Clock, Unit, Work
from workers.streaming import StreamingBatch

log = logging.getLogger(__name__)


class Scheduler(Protocol):
    held: list[StreamingBatch]  # batches between two windows (only a deadline scheduler holds any)

    def step(self) -> None:
        """Choose and run one unit of work (waits a little for work when there is none)."""
        ...

    def drain(self) -> None:
        """On shutdown: finish what is held (warm shutdown: what was started ends and is acked)."""
        ...

    def let_go(self) -> None:
        """Hold nothing (after an unexpected error: the held segments' entries stay pending and are reclaimed)."""
        ...


class FifoScheduler:
    def __init__(self, ctx: LoopContext, claimer: Claimer, runner: BatchRunner, outcomes: Outcomes) -> None:
        self.ctx, self.claimer, self.runner, self.outcomes = ctx, claimer, runner, outcomes
        self.held: list[StreamingBatch] = []

    def step(self) -> None:
        self.claimer.refill()
        self.run_carried()

    def run_carried(self) -> None:
        self.claimer.keep_runnable(self.outcomes.drop_malformed)
        batch = self.claimer.next_batch()
        if batch:
            self.runner.run(batch, between_windows=self.serve_waiting_interactive)

    def serve_waiting_interactive(self) -> None:
        """Between two windows of a background batch: run the interactive work waiting now (a caller's segment
        does not wait for a book's segment to end), unless a free reserved loop is taking it."""
        if self.runner.running is not Urgency.BACKGROUND or self.claimer.lane_filter is not None:
            return
        claimed = self.claimer.gather(interactive_only=True)
        if not claimed:
            return
        with self.claimer.set_aside_for(claimed):
            while self.claimer.carry and not self.ctx.stopping.is_set():
                self.run_carried()

    def drain(self) -> None:
        pass

    def let_go(self) -> None:
        self.held = []


class DeadlineScheduler:
    def __init__(self, ctx: LoopContext, claimer: Claimer, runner: BatchRunner, outcomes: Outcomes) -> None:
        self.ctx, self.claimer, self.runner, self.outcomes = ctx, claimer, runner, outcomes
        self.sched = ctx.settings.scheduling
        self.held: list[StreamingBatch] = []

    def step(self) -> None:
        """Run one unit, the one due first: a window step of a held batch, or the acoustic pass of a new batch
        (from what this loop carries, or a stream head, claimed now by the batching rules)."""
        c = self.claimer
        c.keep_runnable(self.outcomes.drop_malformed)
        carried = c.carry
        s = self.sched
        heads: list[Head] = []
        if len(self.held) < s.max_open:  # what a loop claims it must be able to serve in time
            busy = bool(self.held or carried)
            heads = c.heads(0 if busy else IDLE_BLOCK_MS, handover_wait=not busy)
        # the clocks of interactive jobs (bulk ones are due by their arrival): a held segment's job by what its last
        # publish found (its job's state too: a window of a job that ended meanwhile writes nothing and ends it there),
        # the others read; not a head's whose job's first segment it is (never delivered: no audio of it is out)
        own = _own_clocks(self.held)
        live = [x.entry for b in self.held for x in b.live]
        clocks = {**self._clocks([e.job.job_id for e in (*live, *carried) if e.job and e.job.lane == "interactive"]
                                 + [h.job_id for h in heads if h.lane == "interactive" and h.seg > 0], known=own), **own}

        def playing(job_id: str) -> bool:
            return clocks.get(job_id, Clock()).started is not None

        units: list[Unit[Any]] = []
        for b in self.held:
            entries = [x.entry for x in b.live]
            units.append(Unit(WINDOW, min(self._due(e, clocks) for e in entries),
                              min((e.arrived_ms, e.job.seg) for e in entries if e.job), b,
                              any(playing(e.job.job_id) for e in entries if e.job)))
        for e in carried:
            assert e.job is not None
            units.append(Unit(CARRIED, self._due(e, clocks), (e.arrived_ms, e.job.seg), e, playing(e.job.job_id)))
        for h in heads:
            work = Work(h.lane, h.created, h.seg, h.est_s, h.deadline)
            units.append(Unit(ACOUSTIC, schedule.due(work, clocks.get(h.job_id, Clock()), s), h.order, h, playing(h.job_id)))
        now = time.time()
        self.ctx.metrics.underrun_risk(self.runner.index, schedule.at_risk([u.due for u in units], now, s))
        unit = schedule.choose(units, now)
        if unit is None:
            return
        running = schedule.urgency_by_slack(_lane_of(unit), unit.due, now, s)
        if unit.kind == WINDOW:
            self._window(unit.ref, running)
        elif unit.kind == CARRIED:
            self._run_carried(running)
        else:
            claimed = c.claim(unit.ref, [u.due for u in units if u.kind == WINDOW])
            with c.set_aside_for(claimed):
                while c.carry and not self.ctx.stopping.is_set():
                    self._run_carried(running)

    def _run_carried(self, running: Urgency) -> None:
        self.claimer.keep_runnable(self.outcomes.drop_malformed)
        batch = self.claimer.next_batch()
        if batch:
            self.runner.run(batch, running, hold=self.held.append)

    def _window(self, batch: StreamingBatch, running: Urgency) -> None:
        """One window step of a held batch; the batch is let go after its last window, or when the step fails."""
        try:
            more = self.runner.window(batch, running)
        except (BrokerError, TransientError):
            self.held.remove(batch)
            raise
        if not more:
            self.held.remove(batch)

    def _due(self, e: Entry, clocks: dict[str, Clock]) -> float:
        assert e.job is not None
        return schedule.due(work_of(e.job), clocks.get(e.job.job_id, Clock()), self.sched)

    def _clocks(self, job_ids: list[str], *, known: dict[str, Clock]) -> dict[str, Clock]:
        """The playback clocks of ``job_ids`` not ``known`` (one round trip, none if all are)."""
        raw = self.ctx.broker.playback_clocks([j for j in job_ids if j not in known])
        return {job_id: Clock.from_status(first, delivered) for job_id, (first, delivered) in raw.items()}

    def drain(self) -> None:
        while self.held:
            try:
                self._window(self.held[0], Urgency.URGENT)
            except (BrokerError, TransientError) as exc:
                log.warning("could not finish held segments (they will be reclaimed): %s", exc)
                self.let_go()

    def let_go(self) -> None:
        self.held = []


def scheduler_for(ctx: LoopContext, claimer: Claimer, runner: BatchRunner, outcomes: Outcomes) -> Scheduler:
    """The strategy ``scheduling.mode`` names."""
    strategies = {"fifo": FifoScheduler, "deadline": DeadlineScheduler}
    return strategies[ctx.settings.scheduling.mode](ctx, claimer, runner, outcomes)


def _own_clocks(held: list[StreamingBatch]) -> dict[str, Clock]:
    """The playback clocks of held interactive segments' jobs as their last published windows found them (the
    furthest, where a job has several); another worker's audio for the job since then is not in them: its segment
    looks a little more urgent than it is, never less."""
    own: dict[str, Clock] = {}
    for b in held:
        for x in b.live:
            clock = x.progress.clock()
            job_id = x.progress.job.job_id
            if x.progress.job.lane != "interactive" or clock is None:
                continue
            if job_id not in own or clock[1] > own[job_id].delivered_s:
                own[job_id] = Clock(clock[0], clock[1])
    return own


def _lane_of(unit: Unit[Any]) -> str:
    """The most urgent lane of a unit: interactive if any of its segments is."""
    if unit.kind == ACOUSTIC:
        return str(unit.ref.lane)
    entries = [x.entry for x in unit.ref.live] if unit.kind == WINDOW else [unit.ref]
    return "interactive" if any(e.job is not None and e.job.lane == "interactive" for e in entries) else "bulk"
