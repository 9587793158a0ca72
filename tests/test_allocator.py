"""The worker's C heap settings (workers/allocator.py) as glibc sees them: each check runs in a fresh Python
process, so the options never touch the test process's own heap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.settings import RuntimeSettings
from workers.allocator import HeapTuning, glibc

pytestmark = pytest.mark.skipif(glibc() is None, reason="glibc's mallopt/malloc_trim only")

ROOT = Path(__file__).resolve().parent.parent

# How big a mapped block a malloc of 4 MiB makes after one such block was freed: glibc's dynamic threshold rises
# to 4 MiB on that free (the next one comes from a heap, 0 bytes mapped), a fixed threshold does not.
_AFTER_A_FREE = """
import ctypes, sys
from pipeline.settings import RuntimeSettings
from workers.allocator import HeapTuning

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
applied = HeapTuning.of(RuntimeSettings(malloc_mmap_threshold_kb=int(sys.argv[1]))).apply()
size = 4 << 20
libc.free(libc.malloc(size))
before = libc.mallinfo2().hblkhd
block = libc.malloc(size)
print(len(applied), libc.mallinfo2().hblkhd - before)
"""


def _mapped_after_a_free(threshold_kb: int) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _AFTER_A_FREE, str(threshold_kb)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    return int(out[0]), int(out[1])


def test_a_fixed_mmap_threshold_keeps_large_blocks_mapped_after_a_large_free() -> None:
    applied, mapped = _mapped_after_a_free(128)
    assert applied == 1 and mapped >= 4 << 20  # its own mapping: given back to the OS when freed
    applied, mapped = _mapped_after_a_free(0)  # glibc's dynamic threshold: the block comes from a heap
    assert applied == 0 and mapped == 0


def test_options_follow_the_settings_and_zero_leaves_glibc_alone() -> None:
    tuning = HeapTuning(RuntimeSettings(malloc_arena_max=2, malloc_mmap_threshold_kb=256, malloc_trim_threshold_kb=0))
    assert tuning.options() == {-8: 2, -3: 256 * 1024}
    assert HeapTuning(RuntimeSettings(malloc_arena_max=0, malloc_mmap_threshold_kb=0, malloc_trim_threshold_kb=0)).options() == {}


def test_trim_runs_when_its_period_has_passed_and_not_before() -> None:
    tuning = HeapTuning.of(RuntimeSettings(malloc_trim_every_s=10.0))
    start = tuning.last_trim
    assert not tuning.tick(start + 5)
    assert tuning.tick(start + 10) and tuning.trims == 1
    assert not tuning.tick(start + 15)
    assert tuning.tick(start + 21) and tuning.trims == 2
    never = HeapTuning.of(RuntimeSettings(malloc_trim_every_s=0.0))
    assert not never.tick(never.last_trim + 1e6) and never.trims == 0
