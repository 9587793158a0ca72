"""What becomes of the entries a loop claimed: published, failed, retried, dead-lettered, and in every case acked
once their job no longer needs them.

``Outcomes`` is the one place a loop (and a streamed batch, ``workers/streaming.py``) ends an entry's life. Each
verb writes through the publisher and the broker, tells Flower (``events``) and the metrics, and acks. A job that
ended meanwhile (a client's cancel, an earlier failure, its deadline) is ended here too, between its segments or
between two windows of one.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from pipeline.errors import MALFORMED_JOB, InputError
from wire.broker import Consumer
from wire.errors import (DEADLINE_EXCEEDED, SEGMENT_FAILED, TOO_MANY_DELIVERIES, TOO_MANY_FAILURES,
                                  TransientError)
from wire.queue import Entry
from wire.records import CANCELLED_INFO, SegmentJob, dead_letter_fields
from workers import schedule
from workers.context import LoopContext
from workers.publisher import PieceOut, PieceResult, SegmentOutcome
from workers.schedule import Clock, Work

log = logging.getLogger(__name__)

T = TypeVar("T")
TRANSIENT_RETRY_S = 900.0  # a storage or backend outage is waited out this long before giving up


def work_of(job: SegmentJob) -> Work:
    return Work(job.lane, job.created, job.seg, job.est_s, job.deadline)


class Outcomes:
    """The ends of one loop's entries. ``consumer``: the loop's queue consumer (acks go through it); ``name``: the
    consumer's name, which tags each attempt (``<name>/<deliveries>``) and the worker that made a segment."""

    def __init__(self, ctx: LoopContext, consumer: Consumer) -> None:
        self.ctx = ctx
        self.consumer = consumer
        self.name = consumer.name
        self.publisher = ctx.publisher
        self.metrics = ctx.metrics
        self.segments = 0  # segments this loop published
        self._deferred: list[Entry] | None = None  # acks gathered inside ``acks_together``
        self.ending: dict[tuple[str, str], Entry] = {}  # entries whose jobs' ends are running (on a finisher thread)

    def attempt(self, e: Entry) -> str:
        return f"{self.name}/{e.deliveries}"

    def ack(self, entries: Sequence[Entry]) -> None:
        if self._deferred is not None:
            self._deferred.extend(entries)
            return
        self.consumer.ack(entries)

    @contextmanager
    def acks_together(self) -> Iterator[None]:
        """The acks inside go to the queue as one step when the block ends: a window step or a whole batch ends
        several segments at once, each after its job's records are written."""
        if self._deferred is not None:
            yield
            return
        self._deferred = []
        try:
            yield
        finally:
            pending, self._deferred = self._deferred, None
            if pending:
                self.consumer.ack(pending)

    # -- before a batch runs -------------------------------------------------------------------------------------
    def drop_malformed(self, entries: list[Entry]) -> list[Entry]:
        """``entries`` without those that cannot run: unparseable, or delivered too often (dead-lettered)."""
        good = []
        for e in entries:
            if e.job is None:
                self.dead_letter(e, MALFORMED_JOB, str(e.error))
            elif e.deliveries > self.ctx.settings.queue.max_deliveries:
                self.dead_letter(e, TOO_MANY_DELIVERIES, f"delivered {e.deliveries} times without finishing")
            else:
                good.append(e)
        return good

    def live(self, entries: Sequence[Entry]) -> list[Entry]:
        """The entries whose jobs still want them, their jobs marked started (one round trip for all: the states and
        the marks, ``WorkBroker.start_segments``). A cancelled job ends here, between its segments; one whose deadline
        passed ends expired; one that ended otherwise is let go. A job's first start anywhere is told to Flower."""
        jobs = [_job(e) for e in entries]
        now = time.time()
        startable = [not (job.deadline and now > job.deadline) for job in jobs]
        kept = []
        for e, job, ok, (state, first) in zip(entries, jobs, startable,
                                              self.ctx.broker.start_segments([j.job_id for j in jobs], self.name, startable,
                                                                               [x.claimed for x in entries])):
            if self.ended(e, state):
                continue
            if job.closing:  # every segment is done: only the job's end is left (wire.appends)
                self.already_published(e)
                continue
            if not ok:
                if self.publisher.fail(job.job_id, DEADLINE_EXCEEDED, "the job's deadline passed before it ran", state="expired"):
                    self.ctx.events.failed(job.job_id, DEADLINE_EXCEEDED, "deadline passed")
                    self.metrics.error(DEADLINE_EXCEEDED, job_id=job.job_id)
                self.ack([e])
                continue
            if first:
                self.ctx.events.started(job.job_id, voice=job.request_voice, lane=job.lane, total=job.total, text=job.text)
            kept.append(e)
        return kept

    def ended(self, e: Entry, state: str) -> bool:
        """Whether ``e``'s job has ended (by ``state``, as just read): a cancelled one is ended here (its final record
        written once, what it kept while it ran deleted: a piece of an ended job writes nothing), any ended one acked."""
        job = _job(e)
        if state == "cancelled":
            if self.publisher.finish(job.job_id, "cancelled", CANCELLED_INFO, drop_work=True):
                self.revoked(job)
        elif not self.publisher.is_final(state):
            return False
        self.ack([e])
        return True

    # -- a batch that could not run ------------------------------------------------------------------------------
    def fail(self, entries: Sequence[Entry], exc: InputError) -> None:
        """The request itself is wrong (say, a voice this worker lacks): its jobs fail now with its code."""
        for e in entries:
            job = _job(e)
            if self.publisher.fail(job.job_id, exc.code, exc.message):
                self.ctx.events.failed(job.job_id, exc.code, exc.message)
                self.metrics.error(exc.code, job_id=job.job_id, message=exc.message)
        self.ack(entries)

    def retry(self, e: Entry, exc: Exception) -> bool:
        """A segment's attempt failed unexpectedly: counted; dead-lettered at ``max_deliveries`` (False), else
        True after a backoff with jitter (the caller runs it again)."""
        job = _job(e)
        failures = self.ctx.broker.count_failure(job.job_id, job.seg)
        e.deliveries = max(e.deliveries, failures)
        message = f"{type(exc).__name__}: {exc}"
        max_deliveries = self.ctx.settings.queue.max_deliveries
        if failures >= max_deliveries:
            self.dead_letter(e, TOO_MANY_FAILURES, message)
            return False
        self.metrics.error(str(getattr(exc, "code", SEGMENT_FAILED)), stage="attempt", job_id=job.job_id, message=message)
        delay = min(5.0, 0.2 * 2**failures) * random.uniform(0.5, 1.0)
        log.warning("segment %s/%d failed (%d of %d): %s; retrying in %.1f s", job.job_id, job.seg, failures,
                    max_deliveries, message, delay)
        self.ctx.stopping.wait(delay)
        return True

    def dead_letter(self, e: Entry, code: str, message: str) -> None:
        self.ctx.broker.dead_letter(dead_letter_fields(e.stream, e.entry_id, code, message, e.deliveries, e.fields))
        if e.job is not None and self.publisher.fail(e.job.job_id, code, message):
            self.ctx.events.failed(e.job.job_id, code, message)
        self.metrics.error(code, stage="dead_letter", job_id=e.job.job_id if e.job else "", message=message)
        self.ack([e])
        log.warning("dead-lettered %s %s: [%s] %s", e.stream, e.entry_id, code, message)

    # -- audio out -----------------------------------------------------------------------------------------------
    def publish(self, e: Entry, audio: Any, voice_rate: int, batch_id: str, words: list[Any] | None = None) -> None:
        """A segment made whole (a one-graph voice): its chunks, then its end."""
        from pipeline.audio import to_pcm16
        from pipeline.synth import finish_segment

        job = _job(e)
        pcm = to_pcm16(finish_segment(audio, voice_rate, job.sample_rate, job.pause_s))
        outcome = self.publisher.publish_segment(job, pcm, attempt=self.attempt(e), batch_id=batch_id, worker=self.name,
                                                 words=words or [])
        if not outcome.written:  # the job ended while the segment was made (a client's cancel): nothing went out
            self.ended(e, outcome.state)
            return
        self.unit_published(job, "segment", outcome.started, outcome.delivered_before_s)
        self.published(e, outcome, len(pcm) / 2 / job.sample_rate, whole=True)

    def publish_pieces(self, outs: list[PieceOut], batch_id: str) -> list[PieceResult]:
        """A window step's pieces, one per segment, in one round trip (``Publisher.publish_pieces``), made by this
        loop; what each result says is the caller's to end (``ended``, ``published``)."""
        return self.publisher.publish_pieces(outs, batch_id=batch_id, worker=self.name)

    def unit_published(self, job: SegmentJob, unit: str, started: float, delivered_before_s: float) -> None:
        """Slack of a unit of audio just published, from its job's clock as the publisher found it (metrics)."""
        clock = Clock(started or None, delivered_before_s) if delivered_before_s > 0 else Clock()
        sched = self.ctx.settings.scheduling
        self.metrics.published_slack(job.lane, unit, schedule.publish_slack(work_of(job), clock, time.time(), sched))

    def already_published(self, e: Entry) -> None:
        """A redo of a segment an earlier attempt published whole: finish the job if that is what was left."""
        job = _job(e)
        done = self.ctx.broker.segments_done(job.job_id)
        self.published(e, SegmentOutcome(done, job.total, self.publisher.job_state(job.job_id)), None)

    def published(self, e: Entry, outcome: SegmentOutcome, audio_s: float | None, *, whole: bool = False) -> None:
        """After a segment's last chunk (``whole``: it was published in one piece): count it, store and finish
        the job if it was the last, ack."""
        job = _job(e)
        if audio_s is not None:
            self.segments += 1
            self.metrics.segment_published(job, audio_s, first_chunk=whole)
        if 0 < outcome.total <= outcome.done and not self.publisher.is_final(outcome.state):
            whole = job if job.total else dataclasses.replace(job, total=outcome.total)  # an appended job, closed
            output = outcome.output
            self.ending[(e.stream, e.entry_id)] = e
            if not self.ctx.finisher.take(lambda: self._end_guarded(e, whole, output)):
                self._end(e, whole, output)
            return
        self.ack([e])

    def _end(self, e: Entry, job: SegmentJob, output: Any) -> None:
        """A finished job's storage and end (encoding, storage, status, final record, Flower), the ack of the entry
        whose segment finished it in the same step as the end (until then a reclaim of that entry would end the job
        again: an end that fails before it leaves the entry to a reclaim)."""
        try:
            url, cancelled = self.retry_transient(lambda: self.ctx.finisher.store(self.publisher, job, output, [e]),
                                                  f"storing job {job.job_id}")
            if url:
                self.ctx.events.succeeded(job.job_id, url)
            elif cancelled:
                self.revoked(job)
        finally:  # acked, or left to a reclaim (the end failed): no longer held by this process
            self.ending.pop((e.stream, e.entry_id), None)

    def _end_guarded(self, e: Entry, job: SegmentJob, output: Any) -> None:
        """``_end`` on a finisher thread: an error is counted and the entry left to a reclaim, which ends the job again
        (``already_published``)."""
        try:
            self._end(e, job, output)
        except Exception as exc:
            code = str(getattr(exc, "code", SEGMENT_FAILED))
            self.metrics.error(code, stage="finish", job_id=job.job_id, message=f"{type(exc).__name__}: {exc}")
            log.exception("ending job %s failed; its last segment's entry is left for a reclaim", job.job_id)

    def revoked(self, job: SegmentJob) -> None:
        """Tell Flower the job was cancelled (REVOKED); the caller ended it as cancelled, so this runs once."""
        self.ctx.events.revoked(job.job_id, running=self.publisher.has_started(job.job_id), voice=job.request_voice,
                                lane=job.lane, total=job.total, text=job.text)

    def retry_transient(self, fn: Callable[[], T], what: str) -> T:
        """Retry ``fn`` while it fails transiently (storage 5xx or unreachable), with backoff and jitter.
        The loop waits here: the jobs behind it wait too, and nothing is lost or failed for an outage."""
        deadline = time.monotonic() + TRANSIENT_RETRY_S
        delay = 0.5
        while True:
            try:
                return fn()
            except TransientError as exc:
                if self.ctx.stopping.is_set() or time.monotonic() > deadline:
                    raise
                wait = delay * random.uniform(0.5, 1.0)
                log.warning("%s failed transiently (%s); retrying in %.1f s", what, exc, wait)
                self.ctx.stopping.wait(wait)
                delay = min(10.0, delay * 2)


def _job(e: Entry) -> SegmentJob:
    """The job of an entry that parsed (``drop_malformed`` let only those through)."""
    assert e.job is not None
    return e.job
