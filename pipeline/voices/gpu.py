"""The pieces every IO-binding path on a CUDA device is built from: reused host staging buffers, rounded shapes.

A session whose first provider is CUDA (``wants_io_binding``) runs through IO binding: a stage session through
``pipeline.voices.binding.StageBinding``, the whole Piper graph through ``pipeline.voices.piper.iobinding``.
On CPU they keep their plain ``session.run``. Three things keep the device steady under a stream of batches of
every shape:

* Inputs are written into host staging buffers (``HostBufferPool``; pinned with ``torch.empty(...,
  pin_memory=True)`` when torch with CUDA is present, plain numpy otherwise) that are kept per thread
  (``ThreadStaging``) and reused from batch to batch; a buffer grows only when a batch does not fit, never
  shrinks, and is never allocated per batch. onnxruntime copies them to the device from there.
* Outputs are bound to the device and copied into a reused host buffer (pinned when it can be), torch reading
  the device pointer in place (``_DeviceArray``).
* Padded shapes are rounded up (``ShapePolicy``): the phoneme width to a multiple of ``cuda_width_multiple``
  and the batch to the next of ``cuda_batch_sizes`` (extra rows repeat the first item and are dropped), so the
  device arena (capped by ``cuda_mem_limit_mb``, grown by ``cuda_arena_extend_strategy``; both in
  ``SessionFactory``) sees a few sizes again and again instead of a new one per batch.

The same code runs against the CPU execution provider (``device="cpu"``): that is how it is tested on
a machine without a GPU; ``pinned=True`` there takes the pinned pool's torch copy too (the tests drive it with a
stand-in for torch on host memory, tests/device_standin.py).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.settings import RuntimeSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShapePolicy:
    """How far a padded batch is rounded up."""

    width_multiple: int = 32
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)

    @classmethod
    def from_settings(cls, runtime: RuntimeSettings) -> ShapePolicy:
        sizes = tuple(sorted({max(1, int(b)) for b in runtime.cuda_batch_sizes})) or (1,)
        return cls(width_multiple=max(1, runtime.cuda_width_multiple), batch_sizes=sizes)

    def width(self, n: int) -> int:
        m = max(1, self.width_multiple)
        return max(m, -(-n // m) * m)

    def batch(self, n: int) -> int:
        for size in self.batch_sizes:
            if size >= n:
                return size
        top = self.batch_sizes[-1]
        return -(-n // top) * top


def cuda_pinning_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class HostBufferPool:
    """Named flat host buffers, reused across batches; ``get`` returns a view of the shape asked for.

    A buffer is replaced by a larger one only when a request does not fit (growing by at least half,
    so a slowly rising width does not reallocate every time). ``allocations`` counts those events."""

    def __init__(self, *, pinned: bool = False) -> None:
        self.pinned = pinned
        self.allocations = 0
        self._buffers: dict[str, tuple[np.ndarray, Any]] = {}  # name -> (uint8 view, owner keeping it alive)

    def capacity(self, name: str) -> int:
        buf = self._buffers.get(name)
        return 0 if buf is None else int(buf[0].nbytes)

    def get(self, name: str, shape: Sequence[int], dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = math.prod(shape)
        need = max(1, count * dtype.itemsize)
        have = self.capacity(name)
        if have < need:
            self._buffers[name] = self._allocate(max(need, have + have // 2))
            self.allocations += 1
        raw = self._buffers[name][0]
        return np.frombuffer(raw.data, dtype=dtype, count=count).reshape(tuple(shape))

    def _allocate(self, nbytes: int) -> tuple[np.ndarray, Any]:
        nbytes = -(-nbytes // 4096) * 4096
        if self.pinned:
            import torch

            owner = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            return owner.numpy(), owner
        raw = np.empty(nbytes, dtype=np.uint8)
        return raw, raw


class _DeviceArray:
    """A device pointer presented through ``__cuda_array_interface__``, so torch can read it in place."""

    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (ptr, False), "version": 3, "strides": None}


class ThreadStaging:
    """Per thread that runs a session: one ``io_binding`` and one host pool (threads sharing a session must not
    share staging buffers). Base of ``pipeline.voices.binding.StageBinding`` and of the whole Piper graph's
    ``pipeline.voices.piper.iobinding.IoBindingRunner``."""

    def __init__(self, session: Any, *, device: str, device_id: int, pinned: bool | None) -> None:
        self.session = session
        self.device = device
        self.device_id = device_id
        self.pinned = (device == "cuda" and cuda_pinning_available()) if pinned is None else pinned
        self._local = threading.local()
        self._lock = threading.Lock()
        self.pools: list[HostBufferPool] = []  # one per thread that ran a batch

    @property
    def allocations(self) -> int:
        return sum(p.allocations for p in self.pools)

    @property
    def pool(self) -> HostBufferPool:
        """This thread's staging buffers; its binding is ``self._local.binding``."""
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = HostBufferPool(pinned=self.pinned)
            self._local.binding = self.session.io_binding()
            with self._lock:
                self.pools.append(pool)
        return pool


def wants_io_binding(providers: Sequence[str], runtime: RuntimeSettings) -> bool:
    """The IO-binding path is for sessions whose first provider is CUDA (and when it is not turned off)."""
    return bool(providers) and providers[0] == "CUDAExecutionProvider" and runtime.cuda_io_binding

