"""Running one claimed batch through its voice: phonemize, the model, and the audio out through ``Outcomes``.

A two-stage voice's batch is streamed (``workers/streaming.py``): its acoustic pass, then one vocoder window of
every job per step, each window published at once. Other voices (Kokoro: one graph) run the batch whole and
publish each segment when it is done. The model work of background batches (bulk, callers' later segments) runs
on a helper thread at a lower OS priority (``workers.layout``), so a caller's first segment on another loop gets
the cores at once.

Errors are caught per batch: a bad request fails its jobs with a code; a backend outage leaves the entries
pending (reclaimed and retried when it is back); any other error reruns the batch's items one by one, so a
poison item cannot sink the others, and is counted against that item (``Outcomes.retry``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline.errors import InputError
from pipeline.timing import synthesize_timed
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import Phonemized, SynthesisOptions
from pipeline.voices.windows import StreamingVoice, WindowPlan
from wire.errors import BrokerError, TransientError
from wire.queue import Entry
from workers.batcher import padding_waste
from workers.claimer import Claimer
from workers.context import LoopContext
from workers.layout import Urgency, awaited, lower_thread_priority, urgency_by_lane
from workers.outcomes import Outcomes
from workers.streaming import StreamingBatch
from workers.timings import segment_words

log = logging.getLogger(__name__)

Hold = Callable[[StreamingBatch], None]  # takes a streamed batch after its acoustic pass, to run its windows later


class BatchRunner:
    """Runs one loop's batches. ``claimer``: the loop's, for what else waits (the session and first window chosen
    depend on it) and where an item goes to be run again after a failed attempt; ``holding``: whether the loop holds
    segments between windows; ``reserved``: the loop is reserved for the interactive lane (it never uses a helper
    thread, and it has a session of its own)."""

    def __init__(self, ctx: LoopContext, index: int, outcomes: Outcomes, claimer: Claimer, *,
                 holding: Callable[[], bool], reserved: bool) -> None:
        self.ctx = ctx
        self.index = index
        self.outcomes = outcomes
        self.claimer = claimer
        self.holding = holding
        self.reserved = reserved
        self.running: Urgency | None = None  # how urgent the batch it runs now is; None between batches
        self.entries: list[Entry] = []  # the entries of the batch it runs now (and of one it runs inside, if any)
        self.batches = 0
        self.batch_ids = itertools.count()
        self.on_batch: Callable[[dict[str, Any]], None] | None = None
        self._helper: ThreadPoolExecutor | None = None  # runs background work at a lower OS priority
        self.helper_tid: int | None = None
        self.helper_nice: int | None = None

    def voice_bank(self) -> VoiceBank:
        """Where this batch's voice comes from. A reserved loop uses its own session (a thread per core)
        when its job is the only interactive work about: a caller's first chunk then uses the idle cores
        and those the background work yields. When more interactive jobs wait, one thread per job does
        more work per core, and while a shared loop runs another caller's first segment the extra threads
        would take its core: then it runs on the shared single-threaded session too."""
        if self.reserved and not self.claimer.waiting and not self.ctx.shared_loop_serving_interactive():
            return self.ctx.interactive_bank
        return self.ctx.bank

    def compute(self, fn: Callable[[], Any]) -> Any:
        """Run one unit of model work (a whole batch, an acoustic pass, a vocoder window step). For a background
        batch it runs on this loop's helper thread at OS nice ``queue.bulk_nice`` (the loops reserved for the
        interactive lane never use one): the inference of a single-threaded session runs on the calling
        thread, so a book's segments yield the cores at once to a caller's first segment (another loop's),
        while they take all the idle time. This thread waits for it; its own Redis work stays at nice 0."""
        nice = self.ctx.settings.queue.bulk_nice
        if self.running is not Urgency.BACKGROUND or nice <= 0 or self.reserved:
            return fn()
        if self._helper is None:
            def start() -> None:
                self.helper_tid = threading.get_native_id()
                self.helper_nice = lower_thread_priority(nice)

            self._helper = ThreadPoolExecutor(1, thread_name_prefix=f"ttsfarm-bulk-{self.index}", initializer=start)
        return self._helper.submit(fn).result()

    def run(self, entries: list[Entry], running: Urgency | None = None, *, hold: Hold | None = None,
            between_windows: Callable[[], None] | None = None) -> None:
        """Run a batch at ``running`` urgency (``urgency_by_lane`` if None). With ``hold``, a streamed batch stops after
        its acoustic pass and is handed to it, each window step left to the caller (``window``); else it runs to its
        last window, ``between_windows`` called between two."""
        outer, outer_entries = self.running, self.entries
        self.running = running or urgency_by_lane(entries)
        self.entries = outer_entries + entries
        try:
            self._isolated(entries, hold, between_windows)
        finally:
            self.running, self.entries = outer, outer_entries

    def _isolated(self, entries: list[Entry], hold: Hold | None, between_windows: Callable[[], None] | None) -> None:
        try:
            self._batch(entries, hold, between_windows)
        except (BrokerError, TransientError):
            raise  # the backend is down: the entries stay pending and are retried when it is back
        except InputError as exc:  # the request itself is wrong (say, a voice this worker lacks): fail it now
            self.outcomes.fail(entries, exc)
        except Exception as exc:
            if len(entries) == 1:
                self.retry(entries[0], exc)
                return
            log.warning("batch of %d failed (%s); retrying its items one by one", len(entries), exc)
            for e in entries:
                self._isolated([e], hold, between_windows)

    def retry(self, e: Entry, exc: Exception) -> None:
        if self.outcomes.retry(e, exc):
            self.claimer.take_back([e])

    def _batch(self, entries: list[Entry], hold: Hold | None, between_windows: Callable[[], None] | None) -> None:
        live = self.outcomes.live(entries)
        if not live:
            return
        voice = self.voice_bank().get(live[0].job.voice)  # type: ignore[union-attr]
        ready: list[tuple[Entry, Phonemized]] = []
        for e in live:
            job = e.job
            assert job is not None
            self.ctx.hooks.segment(job)
            try:
                ready.append((e, voice.phonemize(job.text, job.lang)))
            except InputError as exc:
                self.outcomes.fail([e], exc)
        if not ready:
            return
        opts = SynthesisOptions.from_dict(dict(ready[0][0].job.options))  # type: ignore[union-attr]
        batch_id = f"{self.outcomes.name}#{next(self.batch_ids)}"
        started = time.time()
        self.batches += 1
        stats = {"batch_id": batch_id, "size": len(ready), "voice": voice.name,
                 "padding_waste": padding_waste([len(ph.ids) for _, ph in ready]),
                 "queue_wait_s": [(started * 1000 - e.arrived_ms) / 1000 for e, _ in ready],
                 "lanes": [e.job.lane for e, _ in ready],  # type: ignore[union-attr]
                 "buckets": [e.stream.rsplit(":", 1)[-1] for e, _ in ready], "started": started}
        if isinstance(voice, StreamingVoice) and self.ctx.settings.streaming.windowed:
            s = self.ctx.settings.streaming
            plan = WindowPlan.from_ms(s.first_window_ms, s.window_ms, sample_rate=voice.sample_rate, hop=voice.hop)
            # A job's first segment gets the small first window only when nothing else waits for this loop and it
            # holds no other segment between windows (or the setting says always): under a backlog its extra model
            # time would delay the jobs queued behind.
            small_first = s.first_window_when_queued or not (self.claimer.waiting or self.claimer.carry or self.holding())
            batch = StreamingBatch(self.outcomes, self.ctx.metrics, voice, ready, opts, batch_id, plan, small_first=small_first)
            batch.base_stats = stats
            self.compute(batch.acoustic)
            if hold is not None and batch.live:
                # A caller waiting for a first chunk gets it now: the acoustic pass is paid for and the first window
                # is small, so no other unit runs between them (measured: other jobs' due windows between the two
                # doubled deadline scheduling's claim-to-first-chunk against FIFO's; docs/lab/scheduling-and-first-audio.md)
                if any(awaited(x.entry.job) for x in batch.live) and not self.window(batch, self.running or Urgency.URGENT):
                    return
                hold(batch)  # reported when its last window is out (``window``)
                return
            while self.compute(batch.step):
                self.ctx.hooks.window(batch.live)
                if between_windows is not None:
                    between_windows()
            self.ctx.hooks.window(batch.live)
            self._report(batch)
            return
        start = time.perf_counter()
        audios, durations, hop = self.compute(lambda: synthesize_timed(voice, [ph.ids for _, ph in ready], opts))
        done = {"infer_s": time.perf_counter() - start, "audio_s": sum(len(a) for a in audios) / voice.sample_rate}
        with self.outcomes.acks_together():
            for (e, ph), audio, dur in zip(ready, audios, durations):
                words = segment_words(e.job, ph, dur, hop=hop, voice_rate=voice.sample_rate, model_samples=len(audio))  # type: ignore[arg-type]
                self.outcomes.publish(e, audio, voice.sample_rate, batch_id, words)
        if self.on_batch:
            self.on_batch({**stats, **done})

    def window(self, batch: StreamingBatch, running: Urgency) -> bool:
        """One window step of a held batch at ``running`` urgency; False
        once its last window is out (then it is reported). If the step fails: on a backend error its entries stay
        pending (reclaimed and continued from their claimed frames) and the error is raised; on another error each
        segment is retried and False returned."""
        outer, self.running = self.running, running
        try:
            more = self.compute(batch.step)
            self.ctx.hooks.window(batch.live)
        except (BrokerError, TransientError):
            raise
        except Exception as exc:
            log.warning("window step of batch %s failed (%s); retrying its segments", batch.batch_id, exc)
            for x in batch.live:
                self.retry(x.entry, exc)
            return False
        finally:
            self.running = outer
        if not more:
            self._report(batch)
        return bool(more)

    def _report(self, batch: StreamingBatch) -> None:
        if self.on_batch and batch.base_stats:
            self.on_batch({**batch.base_stats, **batch.stats()})

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=True)
