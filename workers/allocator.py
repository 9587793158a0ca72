"""The C heap of a worker process: glibc malloc's options, set once when the worker starts, and a periodic
``malloc_trim`` that hands freed memory back to the OS.

Two-stage voices with windowed vocoding run every acoustic pass and vocoder window at a length of its own, so
onnxruntime (its CPU arena off: ``runtime.cpu_mem_arena``) asks the C allocator for buffers of ever new sizes.
glibc keeps what is freed in its heaps and raises its mmap threshold after each large free, so more and more
large tensors come from heaps that are then too fragmented to shrink: RSS creeps up job after job
(docs/BENCHMARKS.md, "Worker RSS flat"). Setting the options here (``mallopt``) rather than as ``MALLOC_*``
environment variables means every worker gets them, however it is started.

Off glibc (musl, macOS) there is no ``mallopt``/``malloc_trim``: ``HeapTuning.of`` returns one that does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline.settings import RuntimeSettings

log = logging.getLogger(__name__)

# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
_NAMES = {M_TRIM_THRESHOLD: "trim_threshold", M_MMAP_THRESHOLD: "mmap_threshold", M_ARENA_MAX: "arena_max"}


def glibc() -> Any:
    """The process's C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


@dataclass
class HeapTuning:
    """What a worker does to its C heap: ``apply`` once at start, ``tick`` from a thread that runs anyway."""

    runtime: RuntimeSettings
    libc: Any = None
    applied: dict[int, int] = field(default_factory=dict)
    trims: int = 0
    last_trim: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, runtime: RuntimeSettings) -> HeapTuning:
        return cls(runtime, glibc())

    def options(self) -> dict[int, int]:
        """The ``mallopt`` parameters the settings ask for (0 in a setting: glibc's own behaviour)."""
        rt, out = self.runtime, {}
        if rt.malloc_arena_max > 0:
            out[M_ARENA_MAX] = rt.malloc_arena_max
        if rt.malloc_mmap_threshold_kb > 0:
            out[M_MMAP_THRESHOLD] = rt.malloc_mmap_threshold_kb * 1024
        if rt.malloc_trim_threshold_kb > 0:
            out[M_TRIM_THRESHOLD] = rt.malloc_trim_threshold_kb * 1024
        return out

    def apply(self) -> dict[int, int]:
        """Set the options (before the voices load and the loops start, so every heap is made under them).
        Returns those glibc accepted."""
        if self.libc is None:
            return {}
        for param, value in self.options().items():
            if self.libc.mallopt(param, value) == 1:
                self.applied[param] = value
            else:
                log.warning("mallopt(%d, %d) refused", param, value)
        return self.applied

    def describe(self) -> dict[str, Any]:
        """For the heartbeat: the options in effect by name, and how many trims ran."""
        return {"glibc": self.libc is not None, "options": {_NAMES[p]: v for p, v in self.applied.items()},
                "trim_every_s": self.runtime.malloc_trim_every_s, "trims": self.trims}

    def tick(self, now: float | None = None) -> bool:
        """``malloc_trim(0)`` when ``runtime.malloc_trim_every_s`` has passed since the last one: free pages inside
        the heaps go back to the OS too, not only the heap's top. Returns whether it trimmed."""
        every = self.runtime.malloc_trim_every_s
        now = time.monotonic() if now is None else now
        if self.libc is None or every <= 0 or now - self.last_trim < every:
            return False
        self.libc.malloc_trim(0)
        self.last_trim = now
        self.trims += 1
        return True
