"""A job's live chunks as an encoded stream (MP3, Ogg Opus, AAC), for the SDK and the gateway alike.

Chunks are PCM16 as the workers make them; these generators pass them through one streaming encoder
(``pipeline.encoders.AudioEncoder``) and yield its bytes as they come, then the encoder's flush: one
whole container, playable from its first bytes::

    with open("out.mp3", "wb") as f:
        for data in encode_chunks(job.stream(), "mp3"):
            f.write(data)

The async face runs the encoder on a worker thread, so an event loop (the gateway's) is never blocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

from pipeline.audio import check_format, from_pcm16
from pipeline.encoders import CODECS, AudioEncoder, check_bitrate
from pipeline.errors import UNSUPPORTED_FORMAT, InputError
from wire.records import Chunk


def _checked(fmt: str, bitrate: int | None) -> str:
    """Format and bitrate checked before the first chunk, so a bad request fails before anything is read."""
    name = check_format(fmt)
    if name not in CODECS:
        raise InputError(f"chunks are encoded to {', '.join(CODECS)}; {name} is not an encoded stream (chunks are "
                         "PCM16 already)", code=UNSUPPORTED_FORMAT)
    check_bitrate(name, bitrate)
    return name


def encode_chunks(chunks: Iterable[Chunk], fmt: str, *, bitrate: int | None = None,
                  out_rate: int | None = None) -> Iterator[bytes]:
    """``fmt`` bytes (mp3, ogg, aac) of the chunks, as they are encoded; the rate is the chunks' own unless
    ``out_rate``. Yields nothing for no chunks."""
    name = _checked(fmt, bitrate)
    encoder: AudioEncoder | None = None
    for chunk in chunks:
        if encoder is None:
            encoder = AudioEncoder(name, chunk.sample_rate, out_rate=out_rate, bitrate=bitrate)
        if data := encoder.write(from_pcm16(chunk.pcm)):
            yield data
    if encoder is not None:
        yield encoder.close()


async def aencode_chunks(chunks: AsyncIterable[Chunk], fmt: str, *, bitrate: int | None = None,
                         out_rate: int | None = None) -> AsyncIterator[bytes]:
    """:func:`encode_chunks` for an async chunk stream (``AsyncJob.stream``)."""
    name = _checked(fmt, bitrate)
    encoder: AudioEncoder | None = None
    async for chunk in chunks:
        if encoder is None:
            encoder = AudioEncoder(name, chunk.sample_rate, out_rate=out_rate, bitrate=bitrate)
        if data := await asyncio.to_thread(encoder.write, from_pcm16(chunk.pcm)):
            yield data
    if encoder is not None:
        yield await asyncio.to_thread(encoder.close)
