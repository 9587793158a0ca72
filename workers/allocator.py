"""A worker's C heap handed back to the OS: ``malloc_trim(0)`` every ``runtime.malloc_trim_every_s``.

Two-stage voices with windowed vocoding run every acoustic pass and vocoder window at a length of its own, so a
worker keeps asking the C allocator for buffers of new sizes: numpy's audio and frames always, onnxruntime's
tensors too when its CPU arena is off (``runtime.cpu_mem_arena``). glibc keeps what is freed inside its heaps (it
gives back only a heap's top, and the worker's threads each grow heaps of their own), so RSS creeps up although
the memory is free. ``malloc_trim(0)`` returns the free pages inside every heap too (docs/lab/memory.md, "What did
not flatten it"). It is called from the heartbeat thread, which runs anyway, and needs nothing from how the worker was
started (no ``LD_PRELOAD``, no ``MALLOC_*`` variables).

``runtime.malloc_arena_max`` caps glibc's arenas at the worker's start (``limit_arenas``): every thread that
allocates while another holds an arena's lock may otherwise get an arena of its own.

Off glibc (musl, macOS) there is no ``malloc_trim``: ``HeapTrim.of`` returns one that does nothing.
"""

from __future__ import annotations

import ctypes
import sys
import time
from dataclasses import dataclass, field
from typing import Any


def glibc() -> Any:
    """The process's C library when it is glibc (it has ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def limit_arenas(arenas: int, libc: Any = None) -> bool:
    """``mallopt(M_ARENA_MAX, arenas)``: threads that allocate share at most this many glibc arenas (each keeps its
    own 64 MB heaps and what was freed in them). Call it before the threads start; 0 leaves glibc's default. Whether
    glibc took it (False off glibc)."""
    libc = libc if libc is not None else glibc()
    if arenas <= 0 or libc is None:
        return False
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


@dataclass
class HeapTrim:
    """``tick`` from a thread that runs anyway; it trims when ``every_s`` has passed since the last trim."""

    every_s: float
    libc: Any = None
    trims: int = 0
    last: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, every_s: float) -> HeapTrim:
        return cls(every_s, glibc())

    def tick(self, now: float | None = None) -> bool:
        """``malloc_trim(0)`` when it is due; returns whether it trimmed."""
        now = time.monotonic() if now is None else now
        if self.libc is None or self.every_s <= 0 or now - self.last < self.every_s:
            return False
        self.libc.malloc_trim(0)
        self.last = now
        self.trims += 1
        return True

    def describe(self) -> dict[str, Any]:
        """For the heartbeat: whether it can trim here, how often, and how many times it has."""
        return {"glibc": self.libc is not None, "every_s": self.every_s, "trims": self.trims}
