"""A worker's heap trim (workers/allocator.py) as glibc sees it: each check runs in a fresh Python process, so
the test process's own heap is left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workers.allocator import HeapTrim, glibc

ROOT = Path(__file__).resolve().parent.parent

# 256 MiB in 16 KiB blocks (below glibc's mmap threshold: they come from a heap), all freed but the last, which
# keeps the heap's top in use: glibc keeps the freed memory resident until something trims inside the heap.
_FREED_INSIDE_A_HEAP = """
import ctypes, sys
from workers.allocator import HeapTrim

libc = ctypes.CDLL(None)
libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

size, count = 16 << 10, 16 << 10
blocks = [libc.malloc(size) for _ in range(count)]
for block in blocks:
    ctypes.memset(block, 1, size)
for block in blocks[:-1]:
    libc.free(block)
before = rss_mb()
trim = HeapTrim.of(float(sys.argv[1]))
trimmed = trim.tick(trim.last + 60)
print(int(trimmed), round(before - rss_mb()))
"""


def _given_back_mb(every_s: float) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _FREED_INSIDE_A_HEAP, str(every_s)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.skipif(glibc() is None, reason="glibc's malloc_trim only")
def test_a_due_trim_gives_memory_freed_inside_a_heap_back_to_the_os() -> None:
    trimmed, given_back = _given_back_mb(10.0)
    assert trimmed == 1 and given_back >= 200  # of the 256 MiB freed
    trimmed, given_back = _given_back_mb(0.0)  # trimming off: the freed memory stays resident
    assert trimmed == 0 and given_back < 50


def test_trim_runs_when_its_period_has_passed_and_not_before() -> None:
    trim = HeapTrim(10.0, libc=glibc())
    start = trim.last
    assert not trim.tick(start + 5)
    assert trim.tick(start + 10) is (trim.libc is not None)
    assert not trim.tick(start + 15)
    never = HeapTrim(0.0, libc=glibc())
    assert not never.tick(never.last + 1e6) and never.trims == 0
    assert HeapTrim(10.0, libc=None).tick(1e9) is False  # off glibc: nothing to call


# Eight threads allocate at once; glibc's malloc_stats() prints one "Arena N:" block per arena it made.
_THREADS_ALLOCATE = """
import sys, threading
from workers.allocator import glibc, limit_arenas

print(limit_arenas(int(sys.argv[1])))
start = threading.Barrier(8)

def work():
    start.wait()
    for _ in range(2000):
        blocks = [bytearray(1000) for _ in range(50)]
        del blocks

threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
glibc().malloc_stats()
"""


@pytest.mark.skipif(glibc() is None, reason="glibc only")
def test_the_arena_cap_holds_threads_to_that_many_arenas() -> None:
    """``runtime.malloc_arena_max``: without it eight threads allocating at once get arenas of their own; with a cap
    of 2 they share two."""
    arenas = {}
    for cap in (0, 2):
        done = subprocess.run([sys.executable, "-c", _THREADS_ALLOCATE, str(cap)], capture_output=True, text=True,
                              timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(cap > 0)  # glibc took the cap (0: left at its default)
        arenas[cap] = sum(1 for line in done.stderr.splitlines() if line.startswith("Arena "))
    assert arenas[2] <= 2 < arenas[0], arenas
