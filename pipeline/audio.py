"""Audio out: sample conversion, resampling and encoding to the farm's output formats.

Voices return float32 arrays in [-1, 1] at their own sample rate. This module turns such an array into
the bytes a client asked for:

========  ==========================================  =====================================
format    what it is                                  content type
========  ==========================================  =====================================
``wav``   RIFF WAVE, PCM 16-bit                       ``audio/wav``
``flac``  FLAC, 16-bit (lossless, so PCM16-exact)     ``audio/flac``
``ogg``   Ogg Opus (lossy)                            ``audio/ogg; codecs=opus``
``mp3``   MPEG-1/2 Layer III (lossy)                  ``audio/mpeg``
``aac``   AAC-LC in ADTS (lossy)                      ``audio/aac``
``pcm``   raw PCM 16-bit little-endian, no header     ``audio/L16;rate=<rate>;channels=<n>``
========  ==========================================  =====================================

Opus only runs at 8, 12, 16, 24 or 48 kHz. An ``ogg`` output asked for at another rate is encoded at
the smallest Opus rate at or above it (22050 -> 24000, 44100 -> 48000, 32000 -> 48000), so no
bandwidth is lost; the decoder reports that rate. See :func:`output_rate`.

The lossy formats (``mp3``, ``ogg``, ``aac``) are made by ``pipeline.encoders`` (PyAV) and take a
``bitrate``; wav and flac by soundfile. Mono audio is a 1-D array; several channels are a 2-D
``(frames, channels)`` array (lossless formats only). No I/O except :func:`write`.
"""

from __future__ import annotations

import io
import logging
import struct
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

from pipeline.encoders import CODECS, codec_rate, encode_lossy
from pipeline.errors import BAD_OPTION, NOTHING_TO_SPEAK, UNSUPPORTED_FORMAT, UNSUPPORTED_SAMPLE_RATE, InputError

log = logging.getLogger(__name__)

FORMATS: Final[tuple[str, ...]] = ("wav", "flac", "ogg", "mp3", "aac", "pcm")
"""The output formats a job may ask for."""

CONTENT_TYPES: Final[dict[str, str]] = {
    "wav": "audio/wav",
    "flac": "audio/flac",
    "ogg": "audio/ogg; codecs=opus",
    "mp3": "audio/mpeg",
    "aac": "audio/aac",
    "pcm": "audio/L16",
}
"""Base content type per format; use :func:`content_type` for ``pcm``, whose type names its rate."""

SAMPLE_RATES: Final[tuple[int, ...]] = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)
"""The output sample rates a job may ask for."""

SUFFIXES: Final[dict[str, str]] = {
    ".wav": "wav",
    ".flac": "flac",
    ".ogg": "ogg",
    ".opus": "ogg",
    ".mp3": "mp3",
    ".aac": "aac",
    ".pcm": "pcm",
    ".raw": "pcm",
}
"""File suffix -> format, for :func:`write`."""

_PCM16_SCALE: Final = 32768.0
_LOSSY: Final = tuple(CODECS)  # made by pipeline.encoders
# (soundfile container format, subtype) per encoded format; pcm is written by to_pcm16 alone.
_SOUNDFILE: Final[dict[str, tuple[str, str]]] = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
}

FloatAudio = npt.NDArray[np.float32]


def check_format(fmt: str) -> str:
    """Return ``fmt`` lower-cased if it is one of :data:`FORMATS`, else raise ``UNSUPPORTED_FORMAT``."""
    name = str(fmt).strip().lower()
    if name not in FORMATS:
        raise InputError(
            f"unsupported audio format {fmt!r}; supported: {', '.join(FORMATS)}",
            code=UNSUPPORTED_FORMAT,
        )
    return name


def check_sample_rate(rate: int) -> int:
    """Return ``rate`` as an int if it is one of :data:`SAMPLE_RATES`, else raise ``UNSUPPORTED_SAMPLE_RATE``."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or int(rate) not in SAMPLE_RATES:
        raise InputError(
            f"unsupported sample rate {rate!r}; supported: {', '.join(map(str, SAMPLE_RATES))}",
            code=UNSUPPORTED_SAMPLE_RATE,
        )
    return int(rate)


def output_rate(fmt: str, rate: int) -> int:
    """The rate ``fmt`` is actually encoded at when ``rate`` is asked for.

    The same rate for every format but ``ogg``, where it is the smallest Opus rate at or above
    ``rate`` (48000 for anything above 48 kHz).
    """
    return codec_rate(check_format(fmt), rate)


def content_type(fmt: str, sample_rate: int, channels: int = 1) -> str:
    """The content type of ``fmt`` output; ``pcm`` carries its rate and channel count (RFC 2586 style).

    Note that the ``pcm`` bytes are little-endian, as most TTS APIs send them, although RFC 2586's
    ``audio/L16`` is strictly big-endian; clients must not rely on the type alone for byte order.
    """
    name = check_format(fmt)
    if name == "pcm":
        return f"{CONTENT_TYPES['pcm']};rate={int(sample_rate)};channels={int(channels)}"
    return CONTENT_TYPES[name]


def _as_float(audio: npt.ArrayLike) -> FloatAudio:
    arr = np.asarray(audio)
    if arr.ndim not in (1, 2):
        raise InputError(f"audio must be 1-D (mono) or 2-D (frames, channels), got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _pcm16_samples(audio: npt.ArrayLike) -> npt.NDArray[np.int16]:
    """float [-1, 1] -> int16 with rounding and clipping; NaN becomes 0, +-inf full scale (the clip takes them there;
    one pass finds NaN, where ``np.nan_to_num`` makes four)."""
    scaled = _as_float(audio) * np.float32(_PCM16_SCALE)
    np.rint(scaled, out=scaled)
    np.clip(scaled, -32768.0, 32767.0, out=scaled)
    np.copyto(scaled, np.float32(0.0), where=np.isnan(scaled))
    return scaled.astype(np.int16)


def to_pcm16(audio: npt.ArrayLike) -> bytes:
    """Float samples in [-1, 1] -> PCM16 little-endian bytes (interleaved when 2-D).

    Samples are scaled by 32768, rounded and clipped to [-32768, 32767], so
    ``to_pcm16(from_pcm16(b)) == b`` for any PCM16 ``b``.
    """
    return _pcm16_samples(audio).astype("<i2", copy=False).tobytes()


def from_pcm16(data: bytes) -> FloatAudio:
    """PCM16 little-endian bytes -> float32 samples in [-1, 1) (flat; reshape for several channels)."""
    if len(data) % 2:
        raise InputError(f"PCM16 data must have an even number of bytes, got {len(data)}")
    return (np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(_PCM16_SCALE)).astype(np.float32)


def resample(audio: npt.ArrayLike, from_rate: int, to_rate: int) -> FloatAudio:
    """Resample with soxr at high quality; when the rates are equal the audio comes back unchanged (as float32).

    The result has ``round(len(audio) * to_rate / from_rate)`` frames.
    """
    arr = _as_float(audio)
    if from_rate <= 0 or to_rate <= 0:
        raise InputError(f"sample rates must be positive, got {from_rate} -> {to_rate}", code=UNSUPPORTED_SAMPLE_RATE)
    if from_rate == to_rate:
        return arr
    if arr.shape[0] == 0:
        return np.zeros((0, *arr.shape[1:]), dtype=np.float32)
    out = soxr.resample(arr, from_rate, to_rate, quality="HQ")
    return np.asarray(out, dtype=np.float32)


def encode(audio: npt.ArrayLike, sample_rate: int, fmt: str, *, out_rate: int | None = None,
           bitrate: int | None = None) -> bytes:
    """Encode float audio at ``sample_rate`` to ``fmt`` bytes.

    ``out_rate`` (one of :data:`SAMPLE_RATES`) resamples first; by default the audio keeps its own
    rate. For ``ogg`` the rate is then raised to the next Opus rate (see :func:`output_rate`).
    ``bitrate`` (bit/s) is for the lossy formats (``pipeline.encoders.check_bitrate``).

    Empty audio is refused with ``NOTHING_TO_SPEAK`` for every format: libsndfile writes no bytes
    at all for an empty FLAC and an Ogg Opus file without audio pages that it cannot read back.
    """
    name = check_format(fmt)
    if np.shape(audio)[:1] == (0,):
        raise InputError("there is no audio to encode (0 samples)", code=NOTHING_TO_SPEAK)
    if isinstance(sample_rate, bool) or int(sample_rate) <= 0:
        raise InputError(f"sample rate must be a positive integer, got {sample_rate!r}", code=UNSUPPORTED_SAMPLE_RATE)
    sample_rate = int(sample_rate)
    target = check_sample_rate(out_rate) if out_rate is not None else sample_rate
    target = output_rate(name, target)
    if name in _LOSSY:
        arr = _as_float(audio)
        if arr.ndim == 2 and arr.shape[1] != 1:
            raise InputError(f"{name} output is mono; got {arr.shape[1]} channels", code=UNSUPPORTED_FORMAT)
        return encode_lossy(arr.reshape(-1), sample_rate, name, out_rate=target, bitrate=bitrate)
    if bitrate:
        raise InputError(f"bitrate applies to the lossy formats ({', '.join(_LOSSY)}), not {name}", code=BAD_OPTION)
    arr = resample(audio, sample_rate, target)
    if target != sample_rate:
        log.debug("resampled %d frames from %d Hz to %d Hz for %s", arr.shape[0], sample_rate, target, name)
    if name == "pcm":
        return to_pcm16(arr)
    container, subtype = _SOUNDFILE[name]
    # The lossless formats get the exact int16 samples to_pcm16 would produce, so wav and flac decode
    # to the same PCM16 as the pcm format.
    buf = io.BytesIO()
    sf.write(buf, _pcm16_samples(arr), target, format=container, subtype=subtype)
    return buf.getvalue()


_WAV_MAX_DATA: Final = 2**32 - 64  # a RIFF size is 32 bits: past it, libsndfile writes what it writes


def wav_header(data_bytes: int, sample_rate: int) -> bytes:
    """The 44-byte header of a mono PCM16 WAV file holding ``data_bytes`` of samples: the bytes libsndfile writes for
    ``sf.write(..., format="WAV", subtype="PCM_16")`` (tests/test_audio.py compares them), made here without its
    per-write callbacks into Python, which a finished job's end paid on the worker's interpreter."""
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + data_bytes, b"WAVE", b"fmt ", 16, 1, 1, sample_rate,
                       2 * sample_rate, 2, 16, b"data", data_bytes)


def encode_pcm16(pcm: bytes, sample_rate: int, fmt: str, *, bitrate: int | None = None) -> bytes:
    """Mono PCM16 bytes at ``sample_rate`` -> ``fmt`` bytes: what ``encode(from_pcm16(pcm), sample_rate, fmt,
    bitrate=bitrate)`` makes, without the trip through float where the format takes the samples as they are (pcm, and
    wav and flac at their own rate): a finished job's output is PCM16 already."""
    name = check_format(fmt)
    rate_ok = not isinstance(sample_rate, bool) and isinstance(sample_rate, (int, np.integer)) and int(sample_rate) > 0
    if (name == "pcm" or name in _SOUNDFILE) and rate_ok and not bitrate and len(pcm) >= 2 and len(pcm) % 2 == 0:
        if name == "pcm":
            return bytes(pcm)
        if output_rate(name, int(sample_rate)) == int(sample_rate):
            if name == "wav" and len(pcm) < _WAV_MAX_DATA:
                return wav_header(len(pcm), int(sample_rate)) + bytes(pcm)
            container, subtype = _SOUNDFILE[name]
            buf = io.BytesIO()
            sf.write(buf, np.frombuffer(pcm, dtype="<i2"), int(sample_rate), format=container, subtype=subtype)
            return buf.getvalue()
    return encode(from_pcm16(pcm), sample_rate, fmt, bitrate=bitrate)


def format_for_path(path: str | Path) -> str:
    """The format a file suffix names (``.opus`` is Ogg Opus, ``.raw`` is pcm)."""
    suffix = Path(path).suffix.lower()
    try:
        return SUFFIXES[suffix]
    except KeyError:
        raise InputError(
            f"cannot tell the audio format from {str(path)!r}; use one of {', '.join(SUFFIXES)}",
            code=UNSUPPORTED_FORMAT,
        ) from None


def write(
    path: str | Path,
    audio: npt.ArrayLike,
    sample_rate: int,
    fmt: str | None = None,
    *,
    out_rate: int | None = None,
    bitrate: int | None = None,
) -> Path:
    """Encode ``audio`` and write it to ``path``; the format comes from the suffix unless ``fmt`` is given."""
    target = Path(path)
    name = check_format(fmt) if fmt is not None else format_for_path(target)
    target.write_bytes(encode(audio, sample_rate, name, out_rate=out_rate, bitrate=bitrate))
    return target
