"""Decoding what the farm encodes, with FFmpeg (PyAV) rather than the farm's own code: MP3, Ogg Opus, AAC."""

from __future__ import annotations

import io

import numpy as np


def decode_av(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float32 samples and the rate of an encoded file, as FFmpeg's decoders give them.

    Opus is decoded at 48 kHz by FFmpeg whatever rate it was made at; the Ogg end granule and pre-skip
    are applied, so the length is exact. An MP3 with a LAME tag is trimmed of its delay and padding.
    """
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(stream)]
        rate = stream.rate
    samples = np.concatenate(frames).astype(np.float32) if frames else np.zeros(0, np.float32)
    return samples, int(rate)
