"""Whether this process's compute device is running a stage call now: what a loop gathering a batch asks.

Continuous batching (``queue.continuous_batching``, workers/claimer.py) gathers joiners only while the device is
busy and dispatches as soon as it frees. Every stage call of the process marks the device in use for its time
(``runtime.StageSession.run``, on CUDA and on CPU alike; the null voice's fake device too), so "busy" means a
stage is on the device, not that some loop is somewhere inside a batch (phonemizing, publishing, storing).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DeviceUse:
    """A count of the stage calls running now, across the process's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1

    def busy(self) -> bool:
        return self._running > 0


DEVICE_USE = DeviceUse()  # the process's one device (a worker serves one device: ``runtime.cuda_device_id``)
