"""One acoustic call for what several threads ask of a voice at once: a device batcher.

A worker's loops each run their own batches. On a GPU, an acoustic call costs nearly the same for one item as for
eight (it is launch-bound; the GPU check's sweep measures it: docs/GPU.md), so six loops that each send a
small batch spend the device six times on what one call could do. ``Coalescer`` puts the requests that wait while a
call runs into the next call: a thread that finds no call running runs its own request with every waiting request
of the same options (up to the stage's batch cap), then hands the lead to the first request still waiting. So a
request waits for at most the call in flight, and the device sees full batches when loops are many. First chunks
first: a request marked ``urgent`` (it holds what a caller waits for: an interactive job's first segment, or its
first window) is served before the others that wait, and fills a call before them.

Each item gets exactly what it gets alone (the stages' contract), so merging changes no output. A merged call that
fails is run again request by request, so one request's bad item fails only that request. Used where the stages run
on a device and the acoustic stage takes more than one item a call (``TwoStageVoice``: CUDA sessions, or the null
voice's fake device; ``runtime.coalesce_acoustic``) and for its vocoder windows (``runtime.coalesce_vocoder``); on
CPU each loop keeps its own call (and its own core).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")


class _Request(Generic[Item, Out]):
    def __init__(self, items: Sequence[Item], key: Any, seeds: Sequence[int] | None, urgent: bool) -> None:
        self.items = list(items)
        self.key = key
        self.urgent = urgent
        self.seeds = None if seeds is None else list(seeds)
        self.ready = threading.Event()
        self.lead = False  # handed the lead: run the next call
        self.result: list[Out] | None = None
        self.error: BaseException | None = None


class Coalescer(Generic[Item, Out]):
    """``run(items, key, seeds)`` as ``call(items, key, seeds)`` would answer it, sharing calls with other threads'
    requests of an equal ``key`` (the options) and the same use of seeds, at most ``max_rows`` items a call; ``urgent``
    requests before the others."""

    def __init__(self, call: Callable[[Sequence[Item], Any, Sequence[int] | None], list[Out]], max_rows: int) -> None:
        self._call = call
        self.max_rows = max(1, max_rows)
        self._lock = threading.Lock()
        self._waiting: list[_Request[Item, Out]] = []
        self._running = False
        self.calls = 0  # calls made, and requests they served (merged: more requests than calls)
        self.requests = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for a call (not counting those in the call in flight)."""
        with self._lock:
            return len(self._waiting)

    def run(self, items: Sequence[Item], key: Any, seeds: Sequence[int] | None = None, *, urgent: bool = False) -> list[Out]:
        if not items:
            return []
        own: _Request[Item, Out] = _Request(items, key, seeds, urgent)
        with self._lock:
            self._waiting.append(own)
            own.lead = not self._running
            self._running = True
        if not own.lead:
            own.ready.wait()
        if own.lead:  # handed the lead (or took it): run the next call, which holds this request
            self._lead(own)
        if own.error is not None:
            raise own.error
        assert own.result is not None
        return own.result

    def _lead(self, own: _Request[Item, Out]) -> None:
        with self._lock:
            batch, rows = [own], len(own.items)
            for req in sorted(self._waiting, key=lambda r: not r.urgent):  # urgent ones first, each kind in arrival order
                if req is not own and req.key == own.key and (req.seeds is None) == (own.seeds is None) \
                        and rows + len(req.items) <= self.max_rows:
                    batch.append(req)
                    rows += len(req.items)
            self._waiting = [req for req in self._waiting if req not in batch]
        self._serve(batch)
        with self._lock:
            if self._waiting:  # the first urgent request that waited runs the next call, else the first that waited
                nxt = next((req for req in self._waiting if req.urgent), self._waiting[0])
                nxt.lead = True
                nxt.ready.set()
            else:
                self._running = False
        for req in batch:
            if req is not own:
                req.ready.set()

    def _serve(self, batch: list[_Request[Item, Out]]) -> None:
        items = [item for req in batch for item in req.items]
        seeds = None if batch[0].seeds is None else [s for req in batch for s in req.seeds or ()]
        self.calls += 1
        self.requests += len(batch)
        try:
            out = self._call(items, batch[0].key, seeds)
        except BaseException as exc:  # noqa: BLE001 - handed to the requests' threads, which raise it
            if len(batch) == 1:
                batch[0].error = exc
                return
            for req in batch:  # one request's bad item fails only that request
                try:
                    req.result = self._call(req.items, req.key, req.seeds)
                except BaseException as one:  # noqa: BLE001
                    req.error = one
            return
        at = 0
        for req in batch:
            req.result = out[at:at + len(req.items)]
            at += len(req.items)
