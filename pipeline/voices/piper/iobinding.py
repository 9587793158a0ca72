"""The whole Piper graph on a CUDA device: ``PiperVoice``'s IO-binding path (the pieces: ``pipeline/voices/gpu.py``).

``input``, ``input_lengths`` and ``scales`` are staged in this thread's reused host pool, the audio ``output``
is bound to the device and copied once into a reused (pinned when it can be) host buffer, and
``frame_lengths`` comes back to the host directly, so each item is cut at its own frame count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.settings import RuntimeSettings
from pipeline.voices.base import PhonemeIds
from pipeline.voices.gpu import HostBufferPool, ShapePolicy, ThreadStaging, _DeviceArray
from pipeline.voices.piper.graph import AUDIO, FRAME_LENGTHS, PIPER_INPUTS


class IoBindingRunner(ThreadStaging):
    """Runs the prepared whole Piper graph (``frame_lengths`` exposed) through IO binding."""

    def __init__(self, session: Any, *, device: str = "cuda", device_id: int = 0, policy: ShapePolicy | None = None,
                 pinned: bool | None = None) -> None:
        super().__init__(session, device=device, device_id=device_id, pinned=pinned)
        self.policy = policy or ShapePolicy()
        self.shapes_seen: set[tuple[int, int]] = set()

    @classmethod
    def for_settings(cls, session: Any, runtime: RuntimeSettings) -> IoBindingRunner:
        return cls(session, device="cuda", device_id=runtime.cuda_device_id, policy=ShapePolicy.from_settings(runtime))

    def run(self, batch: Sequence[PhonemeIds], scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(audio of shape (n, samples) in this thread's host buffer, frames per item) for the n items.

        The audio view is overwritten by this thread's next batch: copy what you keep."""
        n = len(batch)
        rows, width = self.policy.batch(n), self.policy.width(max(len(ids) for ids in batch))
        pool = self.pool
        ids = pool.get(PIPER_INPUTS[0], (rows, width), np.int64)
        lengths = pool.get(PIPER_INPUTS[1], (rows,), np.int64)
        scale = pool.get(PIPER_INPUTS[2], (3,), np.float32)
        ids.fill(0)
        for row in range(rows):
            item = batch[row] if row < n else batch[0]  # padding rows repeat the first item
            ids[row, : len(item)] = item
            lengths[row] = len(item)
        scale[:] = scales
        with self._lock:
            self.shapes_seen.add((rows, width))
        io = self._local.binding
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        for name, arr in zip(PIPER_INPUTS, (ids, lengths, scale), strict=True):
            io.bind_input(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        io.bind_output(AUDIO, self.device, self.device_id)
        io.bind_output(FRAME_LENGTHS, "cpu")
        self.session.run_with_iobinding(io)
        audio_value, frames_value = io.get_outputs()
        audio = self._to_host(audio_value, pool)
        frames = np.asarray(frames_value.numpy()).reshape(-1)
        return audio.reshape(rows, -1)[:n], frames[:n]

    def _to_host(self, value: Any, pool: HostBufferPool) -> np.ndarray:
        shape = tuple(int(d) for d in value.shape())
        dst = pool.get(AUDIO, shape, np.float32)
        if self.pinned:  # a pinned pool: torch with CUDA is here
            import torch

            src = torch.as_tensor(_DeviceArray(value.data_ptr(), shape), device=f"cuda:{self.device_id}")
            torch.from_numpy(dst).copy_(src)
        else:
            np.copyto(dst, value.numpy())
        return dst

    def synthesize(self, batch: Sequence[PhonemeIds], scales: np.ndarray, hop: int) -> list[np.ndarray]:
        """One waveform per item, cut at its own frame count and copied out of the staging buffer."""
        if not batch:
            return []
        audio, frames = self.run(batch, scales)
        return [audio[row, : int(f) * hop].astype(np.float32, copy=True) for row, f in enumerate(frames)]
