"""The inference loop a worker process runs, one per thread: take work off the queue, run it through the voice,
publish its audio, ack. It is assembled from four parts, each in its own module:

- ``Claimer`` (``workers/claimer.py``): the stream heads this loop may take, batches claimed inside the batching
  window, what it carries claimed but not yet run, and the housekeeping of held and abandoned entries;
- a ``Scheduler`` (``workers/scheduler.py``, by ``scheduling.mode``): which unit runs next, FIFO by lane or by
  each job's playback deadline;
- ``BatchRunner`` (``workers/runner.py``): one batch through its voice (streamed window by window for a two-stage
  voice), model work for background batches at a lower OS priority;
- ``Outcomes`` (``workers/outcomes.py``): what becomes of each entry: published, failed, retried, dead-lettered,
  acked.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable
from typing import Any

from wire.errors import BrokerError
from wire.keys import LANES
from wire.queue import Entry
from workers.claimer import Claimer
from workers.context import LoopContext
from workers.layout import Urgency
from workers.outcomes import Outcomes
from workers.runner import BatchRunner
from workers.scheduler import scheduler_for

log = logging.getLogger(__name__)


class InferenceLoop:
    """One consuming loop. ``lanes`` limits it to some lanes: a loop reserved for the interactive lane keeps a
    caller's first chunk from waiting behind a long bulk (book) segment; it reads only its lanes' streams (peeking
    the others would return at once while they hold work it may not take, and it would spin instead of block)."""

    def __init__(self, ctx: LoopContext, index: int, *, lanes: tuple[str, ...] | None = None) -> None:
        self.ctx = ctx
        self.index = index
        self.reserved = lanes == ("interactive",)
        self.lane_filter = lanes
        name = f"{ctx.hostname}:{os.getpid()}:{index}:{secrets.token_hex(3)}"
        self.queue = ctx.broker.consumer(name, ctx.broker.keys.queues(ctx.settings.queue.n_buckets, lanes or LANES))
        self.claimer = Claimer(ctx, self.queue, lanes)
        self.outcomes = Outcomes(ctx, self.queue)
        self.runner = BatchRunner(ctx, index, self.outcomes, self.claimer, holding=lambda: bool(self.scheduler.held),
                                  reserved=self.reserved)
        self.scheduler = scheduler_for(ctx, self.claimer, self.runner, self.outcomes)
        self.native_id: int | None = None  # the OS thread id, once running

    def run(self) -> None:
        self.queue.ensure_groups()
        self.native_id = threading.get_native_id()
        backoff = 0.1
        while not self.ctx.stopping.is_set():
            try:
                self.claimer.housekeeping(self.in_flight())
                self.scheduler.step()
                backoff = 0.1
            except BrokerError as exc:
                log.warning("redis error in %s: %s; retrying in %.1f s", self.queue.name, exc, backoff)
                self.ctx.stopping.wait(backoff)
                backoff = min(5.0, backoff * 2)
            except Exception:
                log.exception("unexpected error in %s; entries stay pending and will be retried", self.queue.name)
                self.claimer.forget()
                self.scheduler.let_go()
                self.ctx.stopping.wait(0.5)
        self.scheduler.drain()
        self.runner.close()
        self.claimer.give_back()

    def leave(self) -> None:
        """Once the loop has stopped: its consumer leaves the queue's groups unless something is still pending for it."""
        self.queue.leave()

    # -- what the worker process reads of its loops ---------------------------------------------------------------
    @property
    def running(self) -> Urgency | None:
        """How urgent the batch it runs now is (``workers.layout.Urgency``); None between batches."""
        return self.runner.running

    def in_flight(self) -> list[Entry]:
        """The entries it has claimed and not ended: carried, running, held between windows, or ending on a finisher
        thread (read from other threads: each list is copied whole)."""
        return (self.claimer.claimed + list(self.runner.entries) + [x.entry for b in list(self.scheduler.held) for x in b.live]
                + list(self.outcomes.ending.values()))

    @property
    def holding(self) -> bool:
        """Whether it holds segments between two windows (deadline scheduling)."""
        return bool(self.scheduler.held)

    @property
    def batches(self) -> int:
        return self.runner.batches

    @property
    def segments(self) -> int:
        return self.outcomes.segments

    @property
    def on_batch(self) -> Callable[[dict[str, Any]], None] | None:
        return self.runner.on_batch

    @on_batch.setter
    def on_batch(self, fn: Callable[[dict[str, Any]], None] | None) -> None:
        self.runner.on_batch = fn

    def describe(self) -> dict[str, Any]:
        """For the heartbeat: which lanes it serves, and its OS thread and nice once it runs."""
        nice = None
        if self.native_id is not None:
            try:
                nice = os.getpriority(os.PRIO_PROCESS, self.native_id)
            except OSError:
                pass
        bank = self.ctx.interactive_bank if self.reserved else self.ctx.bank
        return {"consumer": self.queue.name, "lanes": list(self.lane_filter) if self.lane_filter else "all",
                "tid": self.native_id, "nice": nice, "bulk_tid": self.runner.helper_tid,
                "bulk_nice": self.runner.helper_nice, "intra_op_threads": bank.runtime.intra_op_threads}
