"""A worker process's farm side: it loads the voices (one ``VoiceBank``, one model session per voice, plus
the reserved loops' own when they have one), starts the inference loops (``workers.loop``) and writes a
heartbeat (``WorkBroker.write_heartbeat``). ``inference_threads`` loops share the bank, each with its own consumer
name. The process's connection to the store is its broker's (``wire.connect``: one per shard with ``redis.shards``),
shared by the loops.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any

from pipeline.errors import TTSFarmError
from pipeline.voices.bank import VoiceBank
from pipeline.voices.device_use import DEVICE_USE
from wire.connect import connect
from wire.errors import BrokerError
from wire.keys import Keys
from wire.settings import Settings
from workers.allocator import HeapTrim, limit_arenas
from workers.batcher import first_segments_any_length
from workers.events import JobEvents
from workers.finisher import Finisher
from workers.layout import Urgency, resolve_loops
from workers.context import Chores, LoopContext, LoopHooks
from workers.loop import InferenceLoop
from workers.metrics import WorkerMetrics
from workers.publisher import Publisher

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
FINISH_WAIT_S = 30.0  # a warm shutdown waits this long for the finisher's pending job ends
IDLE_SWEEP_S = 1.0  # the admission sweep's interval while no job has staged segments


class FarmWorker:
    """Owns the threads of one worker process. ``start`` returns at once; voices load in the background."""

    def __init__(
        self,
        settings: Settings,
        *,
        hostname: str,
        events: JobEvents | None = None,
        bank: VoiceBank | None = None,
        storage: Any = None,
        connection: Any = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        settings = resolve_loops(settings)
        self.settings = settings
        self.hostname = hostname
        self.keys = Keys(settings.redis.key_prefix)
        self.broker = connect(settings.redis, connection=connection, health_check_interval=30)
        self.bank = bank or VoiceBank(settings.catalogue, settings.runtime)
        q, rt = settings.queue, settings.runtime
        if bank is None and q.interactive_loops > 0 and q.interactive_loop_threads != rt.intra_op_threads:
            own = dataclasses.replace(rt, intra_op_threads=q.interactive_loop_threads)
            self.interactive_bank = VoiceBank(settings.catalogue, own)  # the reserved loops' sessions
        else:
            self.interactive_bank = self.bank
        if storage is None:
            from wire.storage import storage_from_settings

            storage = storage_from_settings(settings.storage)
        self.publisher = Publisher.of(settings, self.broker, storage)
        self.admission = self.publisher.admission
        self.events = events or JobEvents(None, hostname, enabled=False)
        self.heap = HeapTrim.of(settings.runtime.malloc_trim_every_s)
        self.arenas_limited = limit_arenas(settings.runtime.malloc_arena_max, self.heap.libc)  # before the loops start
        self.hooks = LoopHooks()  # empty: only tests add to it (workers.step.farm_created, tests/fault_worker.py)
        self.metrics = metrics or WorkerMetrics(enabled=False)
        self.last_beat = 0.0
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.state = "loading"
        self.voices_failed: dict[str, TTSFarmError] = {}
        self.error: TTSFarmError | None = None
        self._threads: list[threading.Thread] = []
        self.loops: list[InferenceLoop] = []
        self._on_cuda: bool | None = None
        self.chores = Chores()
        self.finisher = Finisher(settings.queue.finisher_threads, settings.queue.finisher_processes, settings)

    @property
    def on_cuda(self) -> bool:
        """Whether the sessions really run on CUDA (known once the voices are loaded)."""
        if self._on_cuda is None:
            self._on_cuda = any("CUDA" in p for info in self.bank.factory.sessions() for p in info.providers[:1])
        return self._on_cuda

    @property
    def device_max_batch(self) -> int:
        """The batch cap of the device the sessions really run on."""
        return self.settings.queue.max_batch_cuda if self.on_cuda else self.settings.queue.max_batch_cpu

    def first_segments_any_length(self) -> bool:
        """Whether callers' first segments claimed together share a batch whatever their lengths
        (``queue.first_segments_join``; auto: on CUDA)."""
        return first_segments_any_length(self.settings.queue.first_segments_join, self.on_cuda)

    def reserved_loop_free(self) -> bool:
        """Whether a loop reserved for the interactive lane is running, not inside a batch and holds no segment
        between its windows (deadline scheduling)."""
        return any(loop.reserved and loop.native_id is not None and loop.running is None and not loop.holding
                   for loop in self.loops)

    def shared_loop_serving_interactive(self) -> bool:
        """Whether a loop that is not reserved is inside an urgent batch (a caller's first segment)."""
        return any(not loop.reserved and loop.running is Urgency.URGENT for loop in self.loops)

    def device_busy(self) -> bool:
        """Whether a stage call of this process is on the device now (``pipeline.voices.device_use``): while one is,
        a loop gathering a batch may wait for joiners; once none is, it dispatches."""
        return DEVICE_USE.busy()

    def context(self) -> LoopContext:
        """What the loops use of this process (built when they start: ``events`` may be replaced before)."""
        return LoopContext(settings=self.settings, hostname=self.hostname, broker=self.broker, bank=self.bank,
                           interactive_bank=self.interactive_bank, publisher=self.publisher, events=self.events,
                           metrics=self.metrics, stopping=self.stopping, hooks=self.hooks,
                           device_max_batch=lambda: self.device_max_batch, reserved_loop_free=self.reserved_loop_free,
                           shared_loop_serving_interactive=self.shared_loop_serving_interactive, chores=self.chores,
                           finisher=self.finisher, device_busy=self.device_busy,
                           first_segments_any_length=self.first_segments_any_length, in_flight=self.in_flight)

    def in_flight(self) -> frozenset[tuple[str, str]]:
        """(stream, entry id) of every entry its loops have claimed and not ended: no loop reclaims them."""
        return frozenset((e.stream, e.entry_id) for loop in self.loops for e in loop.in_flight())

    def banks(self) -> list[VoiceBank]:
        """The voice banks of this process: the loops' one, and the reserved loops' own if they have one."""
        return [self.bank] if self.interactive_bank is self.bank else [self.bank, self.interactive_bank]

    def start(self) -> None:
        self.stopping.clear()
        self.metrics.serve(self)
        t = threading.Thread(target=self._run, name="ttsfarm-main", daemon=True)
        t.start()
        self._threads = [t]

    def _run(self) -> None:
        # A voice that fails to load leaves the others serving: its jobs fail with VOICE_UNAVAILABLE (the load error
        # in the message) and the heartbeat lists it. Only a worker none of whose voices load takes no work.
        try:
            for bank in self.banks():
                self.voices_failed.update(bank.load_all(tolerant=True))
            if self.voices_failed and not self.bank.loaded():
                first = next(iter(self.voices_failed.values()))
                raise first
        except TTSFarmError as exc:
            self.state, self.error = "failed", exc
            log.error("voices failed to load, taking no work: %s", exc)
            self._heartbeat_until_stopped()
            return
        for name, exc in self.voices_failed.items():
            self.metrics.error(exc.code, stage="load", message=f"voice {name}: {exc.message}")
        self.state = "serving"
        self.ready.set()
        self.metrics.voices_loaded(self.bank)
        q = self.settings.queue
        reserved = max(0, q.interactive_loops)
        n = max(1, q.inference_threads, reserved + 1)  # at least one loop serves every lane
        ctx = self.context()
        self.loops = [InferenceLoop(ctx, i, lanes=("interactive",) if i < reserved else None) for i in range(n)]
        log.info("%d inference loops (%d reserved for the interactive lane); intra-op threads %d, reserved loops %d", n,
                 reserved, self.bank.runtime.intra_op_threads, self.interactive_bank.runtime.intra_op_threads)
        for loop in self.loops:
            loop.on_batch = self.metrics.batch
        threads = [threading.Thread(target=loop.run, name=f"ttsfarm-loop-{i}", daemon=True) for i, loop in enumerate(self.loops)]
        threads.append(threading.Thread(target=self._admit_until_stopped, name="ttsfarm-admission", daemon=True))
        for t in threads:
            t.start()
        self._threads += threads
        self._heartbeat_until_stopped()
        for t in threads:
            t.join()
        if not self.finisher.close(timeout=FINISH_WAIT_S):
            log.warning("stopping with %d finished jobs not yet stored: their last segments are reclaimed and end them",
                        self.finisher.pending)
        for loop in self.loops:
            loop.leave()

    def _admit_until_stopped(self) -> None:
        """Admit staged segments that fell due between publishes (``wire.admission``), every
        ``queue.admission_sweep_ms``, or every ``IDLE_SWEEP_S`` while no job has staged segments (a job's own
        publishes admit its next segments too); one script call a sweep."""
        interval = wait = self.settings.queue.admission_sweep_ms / 1000
        while not self.stopping.wait(wait):
            try:
                wait = max(interval, IDLE_SWEEP_S) if self.broker.admit_due(self.admission) < 0 else interval
            except BrokerError as exc:
                log.warning("admission sweep failed: %s", exc)
                wait = interval

    def _heartbeat_until_stopped(self) -> None:
        while not self.stopping.is_set():
            self.heartbeat()
            self.heap.tick()
            self.stopping.wait(HEARTBEAT_S)
        self.heartbeat(state="stopped")

    def heartbeat(self, state: str | None = None) -> None:
        info = {"state": state or self.state, "ts": time.time(), "pid": os.getpid(),
                "voices": sorted(self.bank.loaded()), "error": str(self.error) if self.error else "",
                "voices_failed": {name: f"{exc.code}: {exc.message}" for name, exc in self.voices_failed.items()},
                "batches": sum(loop.batches for loop in self.loops), "segments": sum(loop.segments for loop in self.loops)}
        self.last_beat = time.time()
        if state is None:
            self.metrics.serve(self)  # in multiprocess mode: take the endpoint over if its holder exited
        info.update(self.metrics.heartbeat_fields(sum(loop.segments for loop in self.loops)) or {})
        info["voice_info"] = self.bank.describe()
        info["loops"] = [loop.describe() for loop in self.loops]
        info["redis_master"], info["redis_failovers"] = self.broker.master(), self.broker.master_changes
        info["heap"] = self.heap.describe() | {"arena_max": self.settings.runtime.malloc_arena_max if self.arenas_limited else 0}
        info["finisher"] = self.finisher.describe()
        try:
            self.broker.write_heartbeat(self.hostname, os.getpid(), info)
        except BrokerError as exc:
            log.warning("heartbeat failed: %s", exc)

    def stop(self, timeout: float = 60.0) -> None:
        """Finish the batches in flight, ack them, then return (SIGTERM's warm shutdown)."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.events.close()
        self.metrics.close()
