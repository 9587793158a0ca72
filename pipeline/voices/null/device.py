"""A device made of sleeps, calibrated from measured stage times, so a CPU host can stand in for a GPU worker.

One lock per stage, held for the call's time: a stage's calls run one at a time (as one session's kernels queue
on one stream), while an acoustic call and a vocoder call may overlap. Each process has its own device unless the
voice names a ``device_lock`` folder: then a stage's calls also take a file lock there (``flock``), so the worker
processes of a host share one device, a stage's calls one at a time across them (a GPU time-sliced between
processes). Without it, several processes each with their own device stand for CUDA MPS with launch-bound stages:
their calls overlap in full (joe's acoustic call is launch-bound). The two bracket
what several worker processes on one GPU get (docs/SCALING.md). The time of a call is the profile's for
its padded batch: rows rounded up to the next of the CUDA batch sizes and widths to their multiple, as the
CUDA stages pad (``pipeline.voices.gpu.ShapePolicy``).

``h200`` is calibrated from the GPU check's sweep on an H200 (docs/GPU.md; the run's figures are in docs/lab/gpu-h200.md): the precisions served on CUDA, FP32 acoustic and FP16 vocoder, on items of the bench's English workload (the
reference item, ``Profile.ref_*``):

* acoustic: launch-bound, flat in the batch (batch 16 scaled from batch 8 by what the sweep's first run measured
  between them). Eight items take no longer than one, so neither does one item eight times longer: the time grows
  only past 16 reference items' worth of ids (rows x width > 16 x ``acoustic_ref_ids``).
* vocoder: taken as linear in the padded frames (``vocoder_base_ms`` plus ``vocoder_ms_per_frame`` per frame; the
  sweep's FP32 rows at every batch fit such a line within 10 %).

``h200_chained`` is ``h200`` scaled by ``CHAINED`` so that a batch of 8 reference items through both stages takes
what the raw batched ceiling measured for joe (stages chained in-process, host glue included) instead of the sweep's
two stage calls: the real calls' own host work (input staging, output copies, the acoustic graph's nodes that run
on the CPU) counted as device time.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.voices.device_use import DEVICE_USE
from pipeline.voices.gpu import ShapePolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Profile:
    """Milliseconds per stage call as a function of the padded batch."""

    acoustic_ms: tuple[tuple[int, float], ...] = ()  # (rows, ms) measured at the reference width, interpolated
    acoustic_ref_ids: int = 76
    vocoder_base_ms: float = 0.0
    vocoder_ms_per_frame: float = 0.0
    ref_frames: int = 161  # the sweep's reference item: ~76 ids, ~161 frames, ~1.87 s of speech
    ref_speech_s: float = 1.873

    def acoustic(self, rows: int, width: int) -> float:
        if not self.acoustic_ms:
            return 0.0
        points = self.acoustic_ms
        sizes = [b for b, _ in points]
        i = bisect_left(sizes, rows)
        if i == 0:
            ms = points[0][1]
        elif i >= len(points):
            ms = points[-1][1]
        else:
            (b0, m0), (b1, m1) = points[i - 1], points[i]
            ms = m0 + (m1 - m0) * (rows - b0) / (b1 - b0)
        return ms * max(1.0, rows * width / (sizes[-1] * self.acoustic_ref_ids))

    def vocoder(self, rows: int, width: int) -> float:
        if not self.vocoder_base_ms and not self.vocoder_ms_per_frame:
            return 0.0
        return self.vocoder_base_ms + self.vocoder_ms_per_frame * rows * width

    def ceiling(self, batch: int) -> float | None:
        """The raw batched ceiling in speech seconds per second: ``batch`` reference items through both stages,
        one call after the other (as the GPU check's ``ceiling`` section measures a real device; ``h200_chained`` is
        scaled to joe's). None for a device without time."""
        ms = self.acoustic(batch, self.acoustic_ref_ids) + self.vocoder(batch, self.ref_frames)
        return batch * self.ref_speech_s / (ms / 1000) if ms > 0 else None


CHAINED = 24.25 / (11.95 + 3.15)  # the ceiling's ms for 8 reference items over the sweep's two stage calls at batch 8
PROFILES: dict[str, Profile] = {
    "h200": Profile(acoustic_ms=((1, 11.70), (8, 11.95), (16, 12.43)), acoustic_ref_ids=76,
                    vocoder_base_ms=0.887, vocoder_ms_per_frame=0.001757),
    "h200_chained": Profile(acoustic_ms=((1, 11.70 * CHAINED), (8, 11.95 * CHAINED), (16, 12.43 * CHAINED)),
                            acoustic_ref_ids=76, vocoder_base_ms=0.887 * CHAINED, vocoder_ms_per_frame=0.001757 * CHAINED),
    "none": Profile(),
}


class FakeDevice:
    """The process's fake device of one profile (``device(name)``): stage locks, and busy time counted."""

    def __init__(self, profile: Profile, shapes: ShapePolicy | None = None, lock_dir: Path | None = None) -> None:
        self.profile = profile
        self.shapes = shapes or ShapePolicy()
        self._locks = {"acoustic": threading.Lock(), "vocoder": threading.Lock()}
        self._files: dict[str, int] = {}  # shared with other processes: a file lock per stage in ``lock_dir``
        if lock_dir is not None:
            lock_dir.mkdir(parents=True, exist_ok=True)
            self._files = {stage: os.open(lock_dir / f"{stage}.lock", os.O_RDWR | os.O_CREAT, 0o644) for stage in self._locks}
        self._count = threading.Lock()
        self._active = 0
        self._since = 0.0
        self.busy_s = 0.0  # time at least one stage was busy
        self.stage_s = {"acoustic": 0.0, "vocoder": 0.0}
        self.calls = {"acoustic": 0, "vocoder": 0}
        self._writer: threading.Thread | None = None

    def run(self, stage: str, rows: int, width: int) -> None:
        """One call of ``stage`` on ``rows`` items padded to ``width`` (ids or frames)."""
        rows, width = self.shapes.batch(rows), self.shapes.width(width)
        seconds = getattr(self.profile, stage)(rows, width) / 1000
        with DEVICE_USE.running(), self._locks[stage], self._across(stage):  # waiting for the lock counts: the device has work
            self._enter()
            start = time.perf_counter()
            if seconds > 0:
                time.sleep(seconds)
            took = time.perf_counter() - start
            self._leave(stage, took)

    @contextmanager
    def _across(self, stage: str) -> Iterator[None]:
        """The stage's file lock, where the device is shared with other processes (taken under the thread lock: a
        file lock is the process's, not a thread's)."""
        fd = self._files.get(stage)
        if fd is None:
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _enter(self) -> None:
        with self._count:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1

    def _leave(self, stage: str, took: float) -> None:
        with self._count:
            self._active -= 1
            if self._active == 0:
                self.busy_s += time.perf_counter() - self._since
            self.stage_s[stage] += took
            self.calls[stage] += 1

    def snapshot(self) -> dict[str, object]:
        with self._count:
            busy = self.busy_s + (time.perf_counter() - self._since if self._active else 0.0)
            return {"busy_s": busy, "stage_s": dict(self.stage_s), "calls": dict(self.calls), "clock": time.perf_counter(),
                    "wall": time.time()}

    def report_to(self, path: Path, every_s: float = 0.1) -> None:
        """Write ``snapshot()`` as JSON to ``path`` every ``every_s`` (for a bench outside this process)."""
        if self._writer is not None:
            return

        def write() -> None:
            while True:
                tmp = path.with_suffix(".tmp")
                try:
                    tmp.write_text(json.dumps(self.snapshot()))
                    tmp.replace(path)
                except OSError:  # its folder is gone (the bench's run ended): nobody reads it any more
                    log.info("fake device stats: %s cannot be written; stopped", path)
                    return
                time.sleep(every_s)

        self._writer = threading.Thread(target=write, name="null-device-stats", daemon=True)
        self._writer.start()


_DEVICES: dict[tuple[str, Path | None], FakeDevice] = {}
_DEVICES_LOCK = threading.Lock()


def device(name: str, shapes: ShapePolicy | None = None, lock_dir: Path | None = None) -> FakeDevice:
    """The process's one fake device of profile ``name`` and ``lock_dir`` (every voice and bank of the process naming
    them shares it), shared with other processes through ``lock_dir`` where given."""
    if name not in PROFILES:
        raise KeyError(name)
    with _DEVICES_LOCK:
        if (name, lock_dir) not in _DEVICES:
            _DEVICES[(name, lock_dir)] = FakeDevice(PROFILES[name], shapes, lock_dir)
        return _DEVICES[(name, lock_dir)]
