"""Lossy encoders (MP3, Ogg Opus, AAC) through PyAV, the FFmpeg bindings whose wheels bundle LAME, libopus
and FFmpeg's AAC encoder.

One :class:`AudioEncoder` serves three uses:

- a stored output (``seekable=True``): the whole file is written into memory, so the muxer can go back
  and fill in what it learns at the end (the MP3 Xing/LAME tag with the encoder delay and padding, so
  decoders trim them and the file decodes to exactly its samples, within one frame);
- a stream (``seekable=False``): every :meth:`AudioEncoder.write` returns the bytes made so far, one
  container for the whole response; :meth:`AudioEncoder.close` flushes the encoder and returns the
  end (Ogg's last page carries the end granule, so an Opus stream decodes to exactly its samples; an
  MP3 or ADTS stream cannot say its encoder delay up front and decodes with the codec's priming
  (LAME: 1,105 samples) at the start and padding to a whole frame at the end);
- a book (``container="ipod"`` with chapters): AAC in MP4 with chapter marks and title metadata (M4B).

Opus runs at 8, 12, 16, 24 or 48 kHz; other rates are raised to the next of those (:func:`codec_rate`,
which ``pipeline.audio.output_rate`` applies to every format). Input is mono float32 in [-1, 1] at ``in_rate``; it is resampled with
soxr when the output rate differs.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from pipeline.errors import BAD_OPTION, NOTHING_TO_SPEAK, UNSUPPORTED_FORMAT, InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Codec:
    """How one lossy format is made: FFmpeg muxer and encoder, its bitrate range and default (bit/s)."""

    container: str
    encoder: str
    default_bitrate: int
    min_bitrate: int
    max_bitrate: int
    frame_samples: int  # samples per codec frame at 48 kHz-class rates (MP3 at <= 24 kHz: half)
    rates: tuple[int, ...] = ()  # the only rates the codec runs at; () for any


OPUS_RATES: Final[tuple[int, ...]] = (8000, 12000, 16000, 24000, 48000)
"""The only rates the Opus codec runs at."""

CODECS: Final[dict[str, Codec]] = {
    "mp3": Codec("mp3", "libmp3lame", 64_000, 8_000, 320_000, 1152),
    "ogg": Codec("ogg", "libopus", 32_000, 6_000, 510_000, 960, rates=OPUS_RATES),
    "aac": Codec("adts", "aac", 64_000, 16_000, 320_000, 1024),
}
"""The lossy formats, by the farm's format name (``ogg`` is Ogg Opus)."""

MP3_LSF_MAX_BITRATE: Final = 160_000  # MPEG-2 layer III (rates below 32 kHz) tops out here
OGG_PAGE_US: Final = 100_000  # a streamed Ogg page every 100 ms of audio, not FFmpeg's default second
_TAG_NAMES: Final = {"tracknumber": "track"}  # soundfile's names -> FFmpeg's generic metadata keys
MP3_PRIMING: Final = 576 + 529  # LAME's encoder delay + the decoder's, at the start of an untagged MP3


def codec_rate(fmt: str, rate: int) -> int:
    """The rate ``fmt`` is encoded at when ``rate`` is asked for: ``rate`` itself, except for a codec that runs
    at a few rates only (Opus), where it is the smallest of those at or above ``rate`` (else the highest)."""
    codec = CODECS.get(fmt)
    if codec is None or not codec.rates:
        return rate
    return next((r for r in codec.rates if r >= rate), codec.rates[-1])


def mp3_frame_samples(rate: int) -> int:
    """Samples per MP3 frame: 1152 for MPEG-1 (32 kHz and up), 576 for MPEG-2/2.5."""
    return 1152 if rate >= 32_000 else 576


def check_bitrate(fmt: str, bitrate: Any, rate: int | None = None) -> int | None:
    """``bitrate`` (bit/s) checked for ``fmt``; ``None``/0 is the codec's default. Lossless formats take
    none. Out of range or of a wrong type: ``BAD_OPTION``."""
    if bitrate is None or (isinstance(bitrate, int) and not isinstance(bitrate, bool) and bitrate == 0):
        return None
    if isinstance(bitrate, bool) or not isinstance(bitrate, (int, np.integer)):
        raise InputError(f"bitrate must be an integer number of bits per second, not {type(bitrate).__name__}",
                         code=BAD_OPTION)
    codec = CODECS.get(fmt)
    if codec is None:
        raise InputError(f"bitrate applies to mp3, ogg (opus) and aac, not {fmt!r} (lossless or raw)", code=BAD_OPTION)
    high = codec.max_bitrate
    if fmt == "mp3" and rate is not None and rate < 32_000:
        high = MP3_LSF_MAX_BITRATE
    if not codec.min_bitrate <= int(bitrate) <= high:
        at = f" at {rate} Hz" if rate is not None else ""
        raise InputError(f"bitrate {int(bitrate)} is out of range for {fmt}{at}: {codec.min_bitrate} to {high} bit/s",
                         code=BAD_OPTION)
    return int(bitrate)


class _Sink(io.RawIOBase):
    """A write-only, non-seekable byte sink the muxer streams into; :meth:`take` empties it."""

    def __init__(self) -> None:
        super().__init__()
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: Any) -> int:
        self.buf += data
        return len(data)

    def take(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


@dataclass(frozen=True)
class Chapter:
    """A chapter mark of an M4B: where it starts and ends, in output samples, and its title."""

    start: int
    end: int
    title: str


class AudioEncoder:
    """Float32 mono blocks in, encoded bytes out; see the module docstring for the three uses."""

    def __init__(self, fmt: str, in_rate: int, *, out_rate: int | None = None, bitrate: int | None = None,
                 seekable: bool = False, container: str | None = None, tags: Mapping[str, str] | None = None) -> None:
        import av
        import soxr

        if fmt not in CODECS:
            raise InputError(f"no lossy encoder for {fmt!r}; lossy formats: {', '.join(CODECS)}", code=UNSUPPORTED_FORMAT)
        codec = CODECS[fmt]
        self.fmt, self.in_rate = fmt, int(in_rate)
        self.rate = codec_rate(fmt, int(out_rate or in_rate))
        self.bitrate = check_bitrate(fmt, bitrate, self.rate) or min(codec.default_bitrate, _max_for(fmt, self.rate))
        self.resampler = soxr.ResampleStream(self.in_rate, self.rate, 1, dtype="float32") if self.rate != self.in_rate else None
        self.samples = 0  # input samples written
        self._out = 0  # output samples encoded (the next frame's pts)
        self._sink: io.BytesIO | _Sink = io.BytesIO() if seekable else _Sink()
        options = {"page_duration": str(OGG_PAGE_US)} if codec.container == "ogg" and not seekable else {}
        self._container = av.open(self._sink, "w", format=container or codec.container, options=options)
        self._stream = self._container.add_stream(codec.encoder, rate=self.rate, layout="mono")
        self._stream.bit_rate = self.bitrate
        for key, value in (tags or {}).items():
            if value:
                self._container.metadata[_TAG_NAMES.get(key, key)] = str(value)
        self._closed = False
        log.debug("%s encoder: %d -> %d Hz, %d bit/s, %s", fmt, self.in_rate, self.rate, self.bitrate,
                  "seekable" if seekable else "streamed")

    def set_chapters(self, chapters: Sequence[Chapter]) -> None:
        """Chapter marks (MP4 only); call before :meth:`close`. Starts and ends are output samples."""
        tb = Fraction(1, self.rate)
        self._container.set_chapters([
            {"id": i + 1, "start": c.start, "end": c.end, "time_base": tb, "metadata": {"title": c.title}}
            for i, c in enumerate(chapters)
        ])

    @property
    def out_samples(self) -> int:
        """Output samples handed to the codec so far (chapter marks are placed with this)."""
        return self._out

    def write(self, audio: npt.ArrayLike) -> bytes:
        """Encode a block; returns what the stream has made so far (nothing when ``seekable``)."""
        x = np.ascontiguousarray(np.asarray(audio, dtype=np.float32).reshape(-1))
        self.samples += len(x)
        if self.resampler is not None:
            x = self.resampler.resample_chunk(x)
        self._encode(x)
        return self._take()

    def close(self) -> bytes:
        """Flush the codec, write the trailer; returns the rest of the stream (the whole file when seekable)."""
        if self._closed:
            return b""
        if self.samples == 0:
            raise InputError("there is no audio to encode (0 samples)", code=NOTHING_TO_SPEAK)
        if self.resampler is not None:
            self._encode(self.resampler.resample_chunk(np.zeros(0, np.float32), last=True))
        self._mux(self._stream.encode(None))
        self._container.close()
        self._closed = True
        if isinstance(self._sink, io.BytesIO):
            return self._sink.getvalue()
        return self._sink.take()

    def _encode(self, x: npt.NDArray[np.float32]) -> None:
        import av

        if not len(x):
            return
        frame = av.AudioFrame.from_ndarray(np.clip(x, -1.0, 1.0).reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = self._out
        frame.time_base = Fraction(1, self.rate)
        self._out += len(x)
        self._mux(self._stream.encode(frame))

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self._container.mux(packet)

    def _take(self) -> bytes:
        return self._sink.take() if isinstance(self._sink, _Sink) else b""


def _max_for(fmt: str, rate: int) -> int:
    return MP3_LSF_MAX_BITRATE if fmt == "mp3" and rate < 32_000 else CODECS[fmt].max_bitrate


def encode_lossy(audio: npt.ArrayLike, in_rate: int, fmt: str, *, out_rate: int | None = None,
                 bitrate: int | None = None) -> bytes:
    """A whole stored file of ``audio`` in ``fmt`` (mp3 with its gapless tag, Ogg Opus, AAC in ADTS)."""
    enc = AudioEncoder(fmt, in_rate, out_rate=out_rate, bitrate=bitrate, seekable=True)
    enc.write(audio)
    return enc.close()
