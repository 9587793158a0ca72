"""What a loop takes off the queue: the stream heads it may take, batches claimed inside the batching window,
and what it holds claimed but has not run yet (``carry``); and the housekeeping that keeps what it holds its own
and takes over what a dead worker left.

The batching rules themselves are pure (``workers/batcher.py``); this is where they meet the queue (the wire's
``Consumer``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from wire.broker import Consumer
from wire.errors import BrokerError
from wire.queue import Entry, Head
from workers import schedule
from workers.batcher import Candidate, LaneState, choose_head, select_batch
from workers.context import LoopContext
from workers.layout import awaited

log = logging.getLogger(__name__)

RECLAIM_FRACTION = 0.25  # what dead workers left is looked for once per this much of claim_idle_ms (once per process)
PRUNE_EVERY_S = 60.0  # dead consumers are forgotten after 10 x claim_idle_ms idle: no hurry
IDLE_BLOCK_MS = 1000  # an idle loop waits this long on the streams (any new entry wakes it at once)
WINDOW_POLL_MS = 10
RESERVED_HANDOVER_S = 0.005  # a shared loop that leaves an interactive head to a free reserved loop waits this


def now_ms() -> int:
    return int(time.time() * 1000)


def batch_key(e: Entry) -> tuple[object, ...]:
    """Entries with equal keys may share a model call: same voice, same options."""
    assert e.job is not None
    return (e.job.voice, tuple(sorted(e.job.options.items())))


class Claimer:
    """One loop's claims. ``lanes``: the lanes it may take (None: all); a loop reserved for the interactive lane
    leaves reclaiming to the shared loops."""

    def __init__(self, ctx: LoopContext, consumer: Consumer, lanes: tuple[str, ...] | None) -> None:
        self.ctx = ctx
        self.consumer = consumer
        self.queue_settings = ctx.settings.queue
        self.lane_filter = lanes
        self.lanes = LaneState()
        self._carry: list[Entry] = []
        self._aside: list[Entry] = []  # what it carried before ``set_aside_for``, while that runs
        self._gathering: list[Entry] = []  # what it claimed of a batch whose window is still open
        self.waiting = 0  # entries of its lanes still waiting when it took its last batch
        self._last_touch = 0.0

    def housekeeping(self, own: list[Entry]) -> None:
        """Entries this loop holds (carried while others run first, or between windows waiting for their deadlines):
        keep them ours, well inside the idle time after which another worker would reclaim them as a dead worker's.
        One shared loop of the process at a time takes over what dead workers left (never what a loop of this
        process holds: ``LoopContext.in_flight``) and forgets dead consumers."""
        idle_ms = self.queue_settings.claim_idle_ms
        every_s = RECLAIM_FRACTION * idle_ms / 1000  # an entry idle that long is taken at most this late
        if own and time.monotonic() - self._last_touch > every_s:
            self._last_touch = time.monotonic()
            self.consumer.touch(own)
        if self.lane_filter is None and self.ctx.chores.due("reclaim", every_s):
            # what a loop of this process is running, holds or carries is not a dead worker's, however long a stage call
            # has kept it idle: taking it over would run it twice and count a delivery that never failed
            self._carry += self.consumer.reclaim(idle_ms, keep=self.ctx.in_flight() | {(e.stream, e.entry_id) for e in own})
        if self.lane_filter is None and self.ctx.chores.due("prune", PRUNE_EVERY_S):
            self.consumer.prune(min_idle_ms=10 * idle_ms)

    def heads(self, block_ms: int, *, interactive_only: bool = False, handover_wait: bool = True) -> list[Head]:
        """The stream heads this loop may take now (none of a stream another loop of the process gathers on)."""
        heads = self.consumer.heads(block_ms)
        taken = self.ctx.gathering.taken()
        if taken:  # another loop is gathering a batch there: its arrivals join that batch
            heads = [h for h in heads if h.stream not in taken]
        if interactive_only:
            heads = [h for h in heads if h.lane == "interactive"]
            if not heads:
                return []
        if self.lane_filter is None and self.ctx.reserved_loop_free():
            # a reserved loop of this process is free: it takes a caller's first segment, on its own session with
            # a thread per core, while this loop keeps to the rest; when another caller's first segment waits behind
            # it (several listeners starting at once), this loop takes one too
            others = [h for h in heads if not (h.lane == "interactive" and h.seg == 0 and not h.first_behind)]
            if heads and not others:
                if handover_wait:
                    self.ctx.stopping.wait(RESERVED_HANDOVER_S)  # the reserved loop is claiming it: do not spin
                return []
            heads = others
        return heads

    def gather(self, interactive_only: bool = False) -> list[Entry]:
        """A batch by the lane rules (``batcher.choose_head``): waits up to ``IDLE_BLOCK_MS`` for work unless
        ``interactive_only``."""
        heads = self.heads(0 if interactive_only else IDLE_BLOCK_MS, interactive_only=interactive_only, handover_wait=not interactive_only)
        head = choose_head(heads, now_ms(), self.lanes, self.queue_settings)
        return self.claim(head) if head is not None else []

    def limit(self, voice: str) -> int:
        """The batch cap for ``voice``: its catalogue entry's (a hot reload may change it) and the device's."""
        spec = self.ctx.bank.catalogue.voices.get(voice)
        return max(1, min(spec.max_batch if spec else 1, self.ctx.device_max_batch()))

    def claim(self, head: Head, held_dues: list[float] | None = None) -> list[Entry]:
        """Claim a batch from ``head``'s stream: up to the voice's batch cap, joiners gathered until the window
        closes (sooner when a unit this loop holds falls due: ``schedule.window_end_ms``), with continuous batching
        only while a stage call of the process is on the device (``queue.continuous_batching``). One loop of the
        process gathers on a stream at a time (``LoopContext.gathering``): the others leave its heads to it."""
        limit = self.limit(head.voice)
        window_end = schedule.window_end_ms(min(head.arrived_ms, now_ms()), self.queue_settings.window_ms, held_dues or [])
        undelivered = self.consumer.undelivered
        claimed = self.consumer.claim(head.stream, limit)
        if not claimed:
            return []
        self.lanes.record(head.lane)
        key = batch_key(claimed[0]) if claimed[0].job else None
        continuous = self.queue_settings.continuous_batching
        gathering = limit > 1 and self.ctx.gathering.enter(head.stream)
        self._gathering = claimed
        try:
            while gathering and not self.ctx.stopping.is_set():
                same = sum(1 for e in claimed if e.job and batch_key(e) == key)
                left = window_end - now_ms()
                if same >= limit or left <= 0 or (continuous and not self.ctx.device_busy()):
                    break  # full, the window closed, or (continuous batching) the device is free for it now
                # Not a blocking read: Redis times a BLOCK out only on its cron tick (every 1/hz s, 100 ms by
                # default), which would stretch the window by up to that. Poll, and keep the time here.
                more = self.consumer.claim(head.stream, limit - same)
                if not more:
                    self.ctx.stopping.wait(min(left, WINDOW_POLL_MS) / 1000)
                claimed += more  # (in place: ``_gathering`` sees them)
        finally:
            self._gathering = []
            if gathering:
                self.ctx.gathering.leave(head.stream)
        self.waiting = max(0, undelivered - len(claimed))  # (approximate: others claim meanwhile)
        return claimed

    # -- what it carries: claimed, not yet run ----------------------------------------------------------------------
    @property
    def carry(self) -> list[Entry]:
        """What this loop holds claimed but has not run yet, in the order it runs them (a copy: it changes only
        through the methods below)."""
        return list(self._carry)

    @property
    def claimed(self) -> list[Entry]:
        """Everything it holds claimed and has not run: the carry, what it set aside for work that goes first, and a batch
        it is gathering."""
        return self._carry + self._aside + self._gathering

    def refill(self) -> None:
        """Once it carries nothing, carry a new batch claimed by the lane rules (``gather``)."""
        if not self._carry:
            self._carry = self.gather()

    def keep_runnable(self, runnable: Callable[[list[Entry]], list[Entry]]) -> None:
        """Carry on only what ``runnable`` keeps of the carry (``Outcomes.drop_malformed`` ends the rest)."""
        self._carry = runnable(self._carry)

    def take_back(self, entries: list[Entry]) -> None:
        """``entries`` run next, before the rest it carries (an item to run again after a failed attempt)."""
        self._carry[:0] = entries

    @contextmanager
    def set_aside_for(self, claimed: list[Entry]) -> Iterator[None]:
        """Inside, it carries only ``claimed`` (work that goes before what it carried: a stream head claimed now, a
        caller's segment between two windows of a book's); after, what is left of them follows what it carried."""
        carried, self._carry = self._carry, list(claimed)
        self._aside = carried + self._aside
        try:
            yield
        finally:
            self._aside = self._aside[len(carried):]
            self._carry = carried + self._carry

    def forget(self) -> None:
        """Carry nothing (after an unexpected error: the entries stay pending on their queues and are reclaimed)."""
        self._carry = []

    def next_batch(self) -> list[Entry]:
        """One batch of what this loop carries, by the batching rules (callers' first segments first, whatever their
        lengths, where ``queue.first_segments_join`` says so); the rest stays carried."""
        if not self._carry:
            return []
        lead = self.ctx.first_segments_any_length()
        cands = [Candidate(e, e.arrived_ms, e.job.est_s, batch_key(e), lead and awaited(e.job)) for e in self._carry if e.job]
        first = self._carry[0].job
        batch, rest = select_batch(cands, now_ms(), self.limit(first.voice if first else ""), self.queue_settings)
        self._carry = [c.item for c in rest]
        return [c.item for c in batch]

    def give_back(self) -> None:
        """On shutdown, entries claimed but not started go back on their queues at once (no idle wait)."""
        if not self._carry:
            return
        try:
            self.consumer.requeue(self._carry)
            log.info("%s: %d claimed entries returned to their queues", self.consumer.name, len(self._carry))
        except BrokerError as exc:
            log.warning("could not return claimed entries (they will be reclaimed): %s", exc)
        self._carry = []
