"""IO binding for any stage session: inputs from a reused host pool, outputs on the device, copied once.

``pipeline/voices/gpu.py`` holds the pieces (the shape policy, the pinned ``HostBufferPool``, the device
pointer wrapper); this module applies them to a stage whose feeds are already padded numpy arrays, so an
acoustic model or a vocoder of any graph runs the same way on CUDA. The same code runs against the CPU
execution provider (``device="cpu"``), which is how it is tested without a GPU.

Per thread: one ``io_binding`` and one pool (threads sharing a session must not share staging buffers).
The arrays ``run`` returns are views of this thread's pool: the caller copies what it keeps before the
thread's next call (stages cut each item out with a copy anyway).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.voices.gpu import HostBufferPool, ThreadStaging, _DeviceArray


class StageBinding(ThreadStaging):
    def __init__(self, session: Any, *, device: str = "cuda", device_id: int = 0, pinned: bool | None = None) -> None:
        super().__init__(session, device=device, device_id=device_id, pinned=pinned)
        self.outputs = [o.name for o in session.get_outputs()]
        self.shapes_seen: set[tuple[tuple[int, ...], ...]] = set()

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> list[np.ndarray]:
        """The named outputs (default: all) for ``feeds``, as host arrays in this thread's pool."""
        pool = self.pool
        io = self._local.binding
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        with self._lock:
            self.shapes_seen.add(tuple(tuple(a.shape) for a in feeds.values()))
        for name, arr in feeds.items():
            staged = pool.get(f"in:{name}", arr.shape, arr.dtype)
            np.copyto(staged, arr)
            io.bind_input(name, "cpu", 0, staged.dtype, list(staged.shape), staged.ctypes.data)
        wanted = list(outputs) if outputs is not None else self.outputs
        for name in wanted:
            io.bind_output(name, self.device, self.device_id)
        self.session.run_with_iobinding(io)
        return [self._to_host(name, value, pool) for name, value in zip(wanted, io.get_outputs())]

    def _to_host(self, name: str, value: Any, pool: HostBufferPool) -> np.ndarray:
        shape = tuple(int(d) for d in value.shape())
        if self.pinned and value.data_type() == "tensor(float)":  # a pinned pool: torch with CUDA is here
            import torch

            dst = pool.get(f"out:{name}", shape, np.float32)
            src = torch.as_tensor(_DeviceArray(value.data_ptr(), shape), device=f"cuda:{self.device_id}")
            torch.from_numpy(dst).copy_(src)
            return dst
        host = value.numpy()
        dst = pool.get(f"out:{name}", shape, host.dtype)
        np.copyto(dst, host)
        return dst
