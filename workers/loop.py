"""The inference loop a worker process runs: peek, pick a queue, gather a batch inside the window,
run it through the voice, publish each item, ack.

A two-stage voice's batch is streamed (``streaming.windowed``; ``workers/streaming.py``): its acoustic pass,
then one vocoder window of every job per step, each window published at once; a background batch lets
waiting interactive work run between two steps, and a cancelled job stops at the next step. Other voices
(Kokoro: one graph) run the batch whole and publish each segment when it is done.

How the next unit is chosen (``scheduling.mode``): ``deadline`` (default) runs one unit per step — the acoustic pass
of a new batch, claimed by the batching rules below, or one window step of a segment the loop holds — whichever is
due first by its job's playback clock (``workers/deadline.py``, ``workers/schedule.py``); ``fifo`` picks a batch by lane in arrival order
(``workers/batcher.py``) and runs it to its last window.

Errors are caught per batch: a bad entry fails its job with a code, an unexpected error leaves the
entries pending so they are reclaimed and retried, and a poison entry goes to the dead-letter stream
after ``max_deliveries``. The model work of background batches (bulk, callers' later segments) runs on a
helper thread at a lower OS priority (``workers.layout``).
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from pipeline.errors import MALFORMED_JOB, InputError
from pipeline.timing import synthesize_timed
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import Phonemized, SynthesisOptions
from pipeline.voices.twostage import TwoStageVoice
from pipeline.voices.windows import WindowPlan
from producer.wire.errors import (DEADLINE_EXCEEDED, JOB_CANCELLED, SEGMENT_FAILED, TOO_MANY_DELIVERIES, TOO_MANY_FAILURES,
                                  TransientError)
from producer.wire.keys import LANES
from producer.wire.records import SegmentJob, dead_letter_fields
from workers import schedule
from workers.batcher import Candidate, Head, LaneState, choose_head, padding_waste, select_batch
from workers.context import LoopContext
from workers.deadline import DeadlineSteps, work_of
from workers.layout import lower_thread_priority, urgency
from workers.publisher import SegmentOutcome
from workers.queue import Entry, StreamQueue
from workers.schedule import Clock
from workers.streaming import StreamingBatch
from workers.timings import segment_words

log = logging.getLogger(__name__)

RECLAIM_EVERY_S = 2.0
TRANSIENT_RETRY_S = 900.0  # a storage or backend outage is waited out this long before giving up
WINDOW_POLL_MS = 10
RESERVED_HANDOVER_S = 0.005  # a shared loop that leaves an interactive head to a free reserved loop waits this


def now_ms() -> int:
    return int(time.time() * 1000)


class InferenceLoop(DeadlineSteps):
    """One consuming loop. ``lanes`` limits it to some lanes: a loop reserved for the interactive lane
    keeps a caller's first chunk from waiting behind a long bulk (book) segment."""

    def __init__(self, ctx: LoopContext, index: int, *, lanes: tuple[str, ...] | None = None) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.q = ctx.settings.queue
        self.consumer = f"{ctx.hostname}:{os.getpid()}:{index}:{secrets.token_hex(3)}"
        # a reserved loop reads only its lanes' streams: peeking the others would return at once while they
        # hold work it may not take, and the loop would spin instead of blocking
        self.queue = StreamQueue(ctx.r, ctx.keys, self.q.n_buckets, self.consumer, lanes or LANES)
        self.lane_filter = lanes
        self.reserved = lanes == ("interactive",)
        self.lanes = LaneState()
        self.carry: list[Entry] = []
        self.batch_ids = itertools.count()
        self.batches = 0
        self.segments = 0
        self._last_reclaim = 0.0
        self._last_touch = 0.0
        self.on_batch: Callable[[dict[str, Any]], None] | None = None
        self.native_id: int | None = None  # the OS thread id, once running
        self.running: str | None = None  # "urgent" or "background" while a batch runs (see urgency), else None
        self.index = index
        self._bulk_runner: ThreadPoolExecutor | None = None  # runs bulk batches at a lower OS priority
        self._bulk_tid: int | None = None
        self._bulk_nice: int | None = None
        self.waiting = 0  # entries of its lanes still waiting when it took its last batch
        self.sched = ctx.settings.scheduling
        self.open: list[StreamingBatch] = []  # deadline mode: batches past their acoustic pass, windows still to make

    def voice_bank(self) -> VoiceBank:
        """Where this batch's voice comes from. A reserved loop uses its own session (a thread per core)
        when its job is the only interactive work about: a caller's first chunk then uses the idle cores
        and those the background work yields. When more interactive jobs wait, one thread per job does
        more work per core, and while a shared loop runs another caller's first segment the extra threads
        would take its core: then it runs on the shared single-threaded session too."""
        if self.reserved and not self.waiting and not self.ctx.shared_loop_serving_interactive():
            return self.ctx.interactive_bank
        return self.ctx.bank

    def describe(self) -> dict[str, Any]:
        """For the heartbeat: which lanes it serves, and its OS thread and nice once it runs."""
        nice = None
        if self.native_id is not None:
            try:
                nice = os.getpriority(os.PRIO_PROCESS, self.native_id)
            except OSError:
                pass
        return {"consumer": self.consumer, "lanes": list(self.lane_filter) if self.lane_filter else "all",
                "tid": self.native_id, "nice": nice, "bulk_tid": self._bulk_tid, "bulk_nice": self._bulk_nice,
                "intra_op_threads": (self.ctx.interactive_bank if self.reserved else self.ctx.bank).runtime.intra_op_threads}

    def run(self) -> None:
        self.queue.ensure_groups()
        self.native_id = threading.get_native_id()
        backoff = 0.1
        while not self.ctx.stopping.is_set():
            try:
                self.step()
                backoff = 0.1
            except redis.RedisError as exc:
                log.warning("redis error in %s: %s; retrying in %.1f s", self.consumer, exc, backoff)
                self.ctx.stopping.wait(backoff)
                backoff = min(5.0, backoff * 2)
            except Exception:
                log.exception("unexpected error in %s; entries stay pending and will be retried", self.consumer)
                self.carry, self.open = [], []
                self.ctx.stopping.wait(0.5)
        self._drain_open()
        if self._bulk_runner is not None:
            self._bulk_runner.shutdown(wait=True)
        self._release_carry()

    def _release_carry(self) -> None:
        """On shutdown, entries claimed but not started go back on their queues at once (no idle wait)."""
        if self.carry:
            try:
                self.queue.requeue(self.carry)
                log.info("%s: %d claimed entries returned to their queues", self.consumer, len(self.carry))
            except redis.RedisError as exc:
                log.warning("could not return claimed entries (they will be reclaimed): %s", exc)
            self.carry = []

    # -- forming a batch -------------------------------------------------------------------------
    def step(self) -> None:
        held = [x.entry for b in self.open for x in b.live]
        # held segments wait for their deadlines: keep them ours, well inside the idle time after which any
        # loop (this one included) would reclaim them as a dead worker's, and before reclaiming
        if held and time.monotonic() - self._last_touch > min(RECLAIM_EVERY_S, self.q.claim_idle_ms / 4000):
            self._last_touch = time.monotonic()
            self.queue.touch(held)
        if self.lane_filter is None and time.monotonic() - self._last_reclaim > RECLAIM_EVERY_S:
            self._last_reclaim = time.monotonic()
            mine = {(e.stream, e.entry_id) for e in held}
            self.carry += [e for e in self.queue.reclaim(self.q.claim_idle_ms) if (e.stream, e.entry_id) not in mine]
            self.queue.prune_consumers(min_idle_ms=10 * self.q.claim_idle_ms)
        if self.sched.mode == "deadline":
            self._step_deadline()
            return
        if not self.carry:
            self.carry = self._gather()
        self._run_carried()

    def _run_carried(self, running: str | None = None) -> None:
        """Run one batch of what this loop holds (the rest stays carried); ``running``: its urgency if not the
        lane rule's (``workers.layout.urgency``)."""
        self.carry = self._drop_malformed(self.carry)
        if not self.carry:
            return
        limit = self._limit(self.carry[0])
        cands = [Candidate(e, e.arrived_ms, e.job.est_s, _batch_key(e)) for e in self.carry if e.job]
        batch, rest = select_batch(cands, now_ms(), limit, self.q)
        self.carry = [c.item for c in rest]
        outer = self.running
        self.running = running or urgency([c.item for c in batch])
        try:
            self.run_isolated([c.item for c in batch])
        finally:
            self.running = outer

    def compute(self, fn: Callable[[], Any]) -> Any:
        """Run one unit of model work (a whole batch, an acoustic pass, a vocoder window step). For a background
        batch it runs on this loop's helper thread at OS nice ``queue.bulk_nice`` (the loops reserved for the
        interactive lane never use one): the inference of a single-threaded session runs on the calling
        thread, so a book's segments yield the cores at once to a caller's first segment (another loop's),
        while they take all the idle time. This thread waits for it; its own Redis work stays at nice 0."""
        if self.running != "background" or self.q.bulk_nice <= 0 or self.reserved:
            return fn()
        if self._bulk_runner is None:
            def start() -> None:
                self._bulk_tid = threading.get_native_id()
                self._bulk_nice = lower_thread_priority(self.q.bulk_nice)

            self._bulk_runner = ThreadPoolExecutor(1, thread_name_prefix=f"ttsfarm-bulk-{self.index}", initializer=start)
        return self._bulk_runner.submit(fn).result()

    def serve_waiting_interactive(self) -> None:
        """Between two windows of a background batch: run the interactive work waiting now (a caller's segment
        does not wait for a book's segment to end), unless a free reserved loop is taking it."""
        if self.running != "background" or self.lane_filter is not None:
            return
        claimed = self._gather(interactive_only=True)
        if not claimed:
            return
        held, self.carry = self.carry, claimed
        try:
            while self.carry and not self.ctx.stopping.is_set():
                self._run_carried()
        finally:
            self.carry = held + self.carry

    def run_isolated(self, entries: list[Entry]) -> None:
        """Run a batch; if it fails, run its items one by one so a poison item cannot sink the others."""
        try:
            self.run_batch(entries)
        except (redis.RedisError, TransientError):
            raise  # the backend is down: the entries stay pending and are retried when it is back
        except InputError as exc:  # the request itself is wrong (say, a voice this worker lacks): fail it now
            for e in entries:
                assert e.job is not None
                if self.ctx.publisher.fail(e.job.job_id, exc.code, exc.message):
                    self.ctx.events.failed(e.job.job_id, exc.code, exc.message)
                    self.ctx.metrics.error(exc.code, job_id=e.job.job_id, message=exc.message)
            self.queue.ack(entries)
        except Exception as exc:
            if len(entries) > 1:
                log.warning("batch of %d failed (%s); retrying its items one by one", len(entries), exc)
                for e in entries:
                    self.run_isolated([e])
            else:
                self._count_failure(entries[0], exc)

    def _count_failure(self, e: Entry, exc: Exception) -> None:
        job = e.job
        assert job is not None
        failures = int(self.ctx.r.hincrby(self.ctx.keys.status(job.job_id), f"failures:{job.seg}", 1))
        e.deliveries = max(e.deliveries, failures)
        message = f"{type(exc).__name__}: {exc}"
        if failures >= self.q.max_deliveries:
            self.dead_letter(e, TOO_MANY_FAILURES, message)
            return
        self.ctx.metrics.error(str(getattr(exc, "code", SEGMENT_FAILED)), stage="attempt", job_id=job.job_id, message=message)
        delay = min(5.0, 0.2 * 2**failures) * random.uniform(0.5, 1.0)
        log.warning("segment %s/%d failed (%d of %d): %s; retrying in %.1f s", job.job_id, job.seg, failures,
                    self.q.max_deliveries, message, delay)
        self.ctx.stopping.wait(delay)
        self.carry.insert(0, e)

    def _limit(self, entry: Entry) -> int:
        voice = entry.job.voice if entry.job else ""
        spec = self.ctx.bank.catalogue.voices.get(voice)  # the bank's: a hot reload may change max_batch
        return max(1, min(spec.max_batch if spec else 1, self.ctx.device_max_batch()))

    def _gather(self, interactive_only: bool = False) -> list[Entry]:
        heads = self._heads(0 if interactive_only else 250, interactive_only=interactive_only, handover_wait=not interactive_only)
        head = choose_head(heads, now_ms(), self.lanes, self.q)
        if head is None:
            return []
        return self._claim(head)

    def _heads(self, block_ms: int, *, interactive_only: bool = False, handover_wait: bool = True) -> list[Head]:
        """The stream heads this loop may take now."""
        heads = self.queue.peek(block_ms=block_ms)
        if interactive_only:
            heads = [h for h in heads if h.lane == "interactive"]
            if not heads:
                return []
        if self.lane_filter is None and self.ctx.reserved_loop_free():
            # a reserved loop of this process is free: it takes the callers' first segments, on its own
            # session with a thread per core, while this loop keeps to the rest
            others = [h for h in heads if not (h.lane == "interactive" and h.seg == 0)]
            if heads and not others:
                if handover_wait:
                    self.ctx.stopping.wait(RESERVED_HANDOVER_S)  # the reserved loop is claiming it: do not spin
                return []
            heads = others
        return heads

    def _claim(self, head: Head, held_dues: list[float] | None = None) -> list[Entry]:
        """Claim a batch from ``head``'s stream: up to the voice's batch cap, joiners gathered until the window
        closes (sooner when a unit this loop holds falls due: ``schedule.window_end_ms``)."""
        spec = self.ctx.bank.catalogue.voices.get(head.voice)
        limit = max(1, min(spec.max_batch if spec else 1, self.ctx.device_max_batch()))
        window_end = schedule.window_end_ms(min(head.arrived_ms, now_ms()), self.q.window_ms, held_dues or [])
        undelivered = self.queue.undelivered
        claimed = self.queue.claim(head.stream, limit)
        if not claimed:
            return []
        self.lanes.record(head.lane)
        key = _batch_key(claimed[0]) if claimed[0].job else None
        while limit > 1 and not self.ctx.stopping.is_set():
            same = sum(1 for e in claimed if e.job and _batch_key(e) == key)
            left = window_end - now_ms()
            if same >= limit or left <= 0:
                break
            # Not a blocking read: Redis times a BLOCK out only on its cron tick (every 1/hz s, 100 ms by
            # default), which would stretch the window by up to that. Poll, and keep the time here.
            more = self.queue.claim(head.stream, limit - same)
            if not more:
                self.ctx.stopping.wait(min(left, WINDOW_POLL_MS) / 1000)
            claimed += more
        self.waiting = max(0, undelivered - len(claimed))  # (approximate: others claim meanwhile)
        return claimed

    def _drop_malformed(self, entries: list[Entry]) -> list[Entry]:
        good = []
        for e in entries:
            if e.job is None:
                self.dead_letter(e, MALFORMED_JOB, str(e.error))
            elif e.deliveries > self.q.max_deliveries:
                self.dead_letter(e, TOO_MANY_DELIVERIES, f"delivered {e.deliveries} times without finishing")
            else:
                good.append(e)
        return good

    def dead_letter(self, e: Entry, code: str, message: str) -> None:
        record = dead_letter_fields(e.stream, e.entry_id, code, message, e.deliveries, e.fields)
        self.ctx.r.xadd(self.ctx.keys.dead_letters(), record, maxlen=100_000, approximate=True)
        if e.job is not None and self.ctx.publisher.fail(e.job.job_id, code, message):
            self.ctx.events.failed(e.job.job_id, code, message)
        self.ctx.metrics.error(code, stage="dead_letter", job_id=e.job.job_id if e.job else "", message=message)
        self.queue.ack([e])
        log.warning("dead-lettered %s %s: [%s] %s", e.stream, e.entry_id, code, message)

    # -- running a batch -------------------------------------------------------------------------
    def run_batch(self, entries: list[Entry]) -> None:
        pub, events = self.ctx.publisher, self.ctx.events
        live: list[Entry] = []
        for e in entries:
            job = e.job
            assert job is not None
            state = pub.job_state(job.job_id)
            if state == "cancelled":  # skipped: a cancelled job stops here, between its segments
                if pub.finish(job.job_id, "cancelled", {"code": JOB_CANCELLED, "message": "cancelled by the client"}):
                    self._revoked(job)
                self.queue.ack([e])
            elif pub.is_final(state):
                self.queue.ack([e])
            elif job.deadline and time.time() > job.deadline:
                if pub.fail(job.job_id, DEADLINE_EXCEEDED, "the job's deadline passed before it ran", state="expired"):
                    events.failed(job.job_id, DEADLINE_EXCEEDED, "deadline passed")
                    self.ctx.metrics.error(DEADLINE_EXCEEDED, job_id=job.job_id)
                self.queue.ack([e])
            else:
                live.append(e)
        if not live:
            return
        voice = self.voice_bank().get(live[0].job.voice)  # type: ignore[union-attr]
        ready: list[tuple[Entry, Phonemized]] = []
        for e in live:
            job = e.job
            assert job is not None
            if pub.mark_started(job, self.consumer):
                events.started(job.job_id, voice=job.request_voice, lane=job.lane, total=job.total, text=job.text)
            self.ctx.hooks.segment(job)
            try:
                ready.append((e, voice.phonemize(job.text, job.lang)))
            except InputError as exc:
                if pub.fail(job.job_id, exc.code, exc.message):
                    events.failed(job.job_id, exc.code, exc.message)
                    self.ctx.metrics.error(exc.code, job_id=job.job_id, message=exc.message)
                self.queue.ack([e])
        if not ready:
            return
        opts = SynthesisOptions.from_dict(dict(ready[0][0].job.options))  # type: ignore[union-attr]
        batch_id = f"{self.consumer}#{next(self.batch_ids)}"
        started = time.time()
        self.batches += 1
        streaming = None
        if isinstance(voice, TwoStageVoice) and self.settings.streaming.windowed:
            streaming = StreamingBatch(self, voice, ready, opts, batch_id, self._plan(voice), small_first=self._small_first())
            done = self.run_streaming(streaming)
        else:
            start = time.perf_counter()
            audios, durations, hop = self.compute(lambda: synthesize_timed(voice, [ph.ids for _, ph in ready], opts))
            done = {"infer_s": time.perf_counter() - start, "audio_s": sum(len(a) for a in audios) / voice.sample_rate}
            for (e, ph), audio, dur in zip(ready, audios, durations):
                words = segment_words(e.job, ph, dur, hop=hop, voice_rate=voice.sample_rate, model_samples=len(audio))  # type: ignore[arg-type]
                self._publish(e, audio, voice.sample_rate, batch_id, words)
        stats = {"batch_id": batch_id, "size": len(ready), "voice": voice.name,
                 "padding_waste": padding_waste([len(ph.ids) for _, ph in ready]),
                 "queue_wait_s": [(started * 1000 - e.arrived_ms) / 1000 for e, _ in ready],
                 "lanes": [e.job.lane for e, _ in ready],  # type: ignore[union-attr]
                 "buckets": [e.stream.rsplit(":", 1)[-1] for e, _ in ready], "started": started}
        if done is None:  # held for its windows (deadline scheduling): reported when its last window is out
            assert streaming is not None
            streaming.base_stats = stats
        elif self.on_batch:
            self.on_batch({**stats, **done})

    def _plan(self, voice: TwoStageVoice) -> WindowPlan:
        s = self.settings.streaming
        return WindowPlan.from_ms(s.first_window_ms, s.window_ms, sample_rate=voice.sample_rate, hop=voice.hop)

    def _small_first(self) -> bool:
        """Whether a job's first segment gets the small first window now: when nothing else waits for this loop
        and it holds no other segment between windows (or the setting says always). Under a backlog its extra model
        time would delay the jobs queued behind; a loop holding segments (deadline scheduling) is busy the same way."""
        return self.settings.streaming.first_window_when_queued or not (self.waiting or self.carry or self.open)

    def run_streaming(self, batch: StreamingBatch) -> dict[str, Any] | None:
        """The acoustic pass of the batch, then its window steps; a background batch lets waiting interactive
        work run between two steps. Deadline scheduling: the acoustic pass only; the batch is held (None) and
        each window step is a unit of its own (``_step_deadline``)."""
        self.compute(batch.acoustic)
        if self.sched.mode == "deadline" and batch.live:
            self.open.append(batch)
            return None
        while self.compute(batch.step):
            self.ctx.hooks.window(batch.live)
            self.serve_waiting_interactive()
        self.ctx.hooks.window(batch.live)
        return batch.stats()

    def drop_ended(self, entries: list[Entry], items: list[Any]) -> list[Any]:
        """Between windows: ``items[i]`` (of ``entries[i]``) kept while its job runs; a cancelled job is ended
        here (it stops at this window), one that ended otherwise is let go; their entries are acked."""
        if not entries:
            return []
        pub = self.ctx.publisher
        pipe = self.ctx.r.pipeline(transaction=False)
        for e in entries:
            pipe.hget(self.ctx.keys.status(e.job.job_id), "state")  # type: ignore[union-attr]
        kept = []
        for e, item, raw in zip(entries, items, pipe.execute()):
            state = raw.decode() if raw else ""
            job = e.job
            assert job is not None
            if state == "cancelled":
                if pub.finish(job.job_id, "cancelled", {"code": JOB_CANCELLED, "message": "cancelled by the client"}):
                    self._revoked(job)
                self.queue.ack([e])
            elif pub.is_final(state):
                self.queue.ack([e])
            else:
                kept.append(item)
        return kept

    def _revoked(self, job: SegmentJob) -> None:
        """Tell Flower the job was cancelled (REVOKED); the caller ended it as cancelled, so this runs once."""
        self.ctx.events.revoked(job.job_id, running=self.ctx.publisher.has_started(job.job_id), voice=job.request_voice,
                                 lane=job.lane, total=job.total, text=job.text)

    def _retry_transient(self, fn: Callable[[], Any], what: str) -> Any:
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

    def _publish(self, e: Entry, audio: Any, voice_rate: int, batch_id: str, words: list[Any] | None = None) -> None:
        from pipeline.audio import to_pcm16
        from pipeline.synth import finish_segment

        job = e.job
        assert job is not None
        pcm = to_pcm16(finish_segment(audio, voice_rate, job.sample_rate, job.pause_s))
        outcome = self.ctx.publisher.publish_segment(job, pcm, attempt=f"{self.consumer}/{e.deliveries}",
                                                      batch_id=batch_id, worker=self.consumer, words=words or [])
        self.unit_published(job, "segment", outcome.started, outcome.delivered_before_s)
        self.segment_published(e, outcome, len(pcm) / 2 / job.sample_rate, whole=True)

    def unit_published(self, job: SegmentJob, unit: str, started: float, delivered_before_s: float) -> None:
        """Slack of a unit of audio just published, from its job's clock as the publisher found it (metrics)."""
        clock = Clock(started or None, delivered_before_s) if delivered_before_s > 0 else Clock()
        self.ctx.metrics.published_slack(job.lane, unit, schedule.publish_slack(work_of(job), clock, time.time(), self.sched))

    def segment_already_published(self, e: Entry) -> None:
        """A redo of a segment an earlier attempt published whole: finish the job if that is what was left."""
        job = e.job
        assert job is not None
        done = int(self.ctx.r.scard(self.ctx.keys.done(job.job_id)))
        self.segment_published(e, SegmentOutcome(done, job.total, self.ctx.publisher.job_state(job.job_id)), None)

    def segment_published(self, e: Entry, outcome: SegmentOutcome, audio_s: float | None, *, whole: bool = False) -> None:
        """After a segment's last chunk (``whole``: it was published in one piece): count it, store and finish
        the job if it was the last, ack."""
        job = e.job
        assert job is not None
        if audio_s is not None:
            self.segments += 1
            self.ctx.metrics.segment_published(job, audio_s, first_chunk=whole)
        if outcome.done >= job.total and not self.ctx.publisher.is_final(outcome.state):
            url, cancelled = self._retry_transient(lambda: self.ctx.publisher.store_and_finish(job), f"storing job {job.job_id}")
            if url:
                self.ctx.events.succeeded(job.job_id, url)
            elif cancelled:
                self._revoked(job)
        self.queue.ack([e])


def _batch_key(e: Entry) -> tuple[object, ...]:
    job = e.job
    assert job is not None
    return (job.voice, tuple(sorted(job.options.items())))

