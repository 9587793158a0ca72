"""A stand-in for the few torch calls the CUDA copy-back makes, so that copy runs on a machine without a GPU.

On CUDA, an IO-bound output lies in device memory: ``torch.as_tensor`` wraps its pointer (``_DeviceArray``'s
``__cuda_array_interface__``) and ``copy_`` brings it into a pinned host buffer from ``torch.empty(...,
pin_memory=True)``. Here onnxruntime's CPU provider binds outputs to host memory, so this stand-in reads the
pointer from the interface as host memory, exactly where and as the interface says (shape, float32, contiguous),
and copies only when ``copy_`` is called. Its "pinned" buffers start filled with a loud pattern, so an output that
was never copied in cannot pass for one that was. The real torch with a real device is what scripts/gpu_check.sh
runs (docs/GPU.md).
"""

from __future__ import annotations

import ctypes
import math
import types
from typing import Any

import numpy as np

UNWRITTEN = 0x7F  # a "pinned" buffer's bytes before anything is copied in: float32 3.4e38


class Tensor:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def copy_(self, src: Tensor) -> Tensor:
        np.copyto(self.array, src.array)
        return self

    def numpy(self) -> np.ndarray:
        return self.array


def _as_tensor(obj: Any, device: str) -> Tensor:
    iface = obj.__cuda_array_interface__
    assert device.startswith("cuda:"), device
    assert iface["typestr"] == "<f4" and iface["strides"] is None and iface["version"] == 3, iface
    shape = tuple(iface["shape"])
    count = math.prod(shape)
    if count == 0:
        return Tensor(np.zeros(shape, np.float32))
    view = np.ctypeslib.as_array((ctypes.c_float * count).from_address(iface["data"][0]))
    return Tensor(view.reshape(shape))


def _empty(nbytes: int, *, dtype: Any, pin_memory: bool) -> Tensor:
    assert pin_memory and dtype == "uint8"
    return Tensor(np.full(nbytes, UNWRITTEN, dtype=np.uint8))


def standin_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.uint8 = "uint8"  # type: ignore[attr-defined]
    torch.as_tensor = _as_tensor  # type: ignore[attr-defined]
    torch.from_numpy = Tensor  # type: ignore[attr-defined]
    torch.empty = _empty  # type: ignore[attr-defined]
    return torch
