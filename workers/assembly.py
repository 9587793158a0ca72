"""Audiobook chapters: a book's stored segment audio joined into one file per chapter, as Celery tasks.

``books`` sends three tasks (Flower shows them by these names):

- ``ttsfarm.measure_chapter``: are all of a chapter's segments stored? Its loudness histogram and peak.
- ``ttsfarm.assemble_chapter``: the segments in order, each faded in and out over a few milliseconds
  (no click at any join), the pauses between them from the book's plan (the jobs were made with
  ``pause_s=0``, so no pause is doubled), the book's one gain, silence before and after; encoded
  as FLAC, Ogg Opus or WAV while it is built and stored under the book's output.
- ``ttsfarm.write_book_files``: the manifest (JSON) and playlist (M3U).

There is no result backend: each task pushes one JSON reply onto the reply list named in its spec, which
the sender owns and reads (the broker's ``reply_to_book``). Tasks that write files first check that their run
of the book is still the current one (``book_run``), so a late task of an abandoned run cannot overwrite a
newer chapter file.
Register the tasks by importing this module (``workers.app`` does).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from celery import shared_task

from pipeline.errors import BAD_OPTION, INTERNAL_ERROR, UNSUPPORTED_FORMAT, InputError, TTSFarmError
from wire.errors import BOOK_OUTPUT_REFUSED, BOOK_SUPERSEDED, SEGMENT_MISSING
from wire.broker import BookBroker
from wire.connect import connect
from wire.settings import Settings, StorageSettings
from wire.storage import LocalStorage, ObjectNotFoundError, Storage, safe_key, storage_from_settings
from wire.storage.s3 import S3Storage
from wire.tasks import (
    ASSEMBLE_CHAPTER,
    CHAPTER_FORMATS,
    LOUDNESS_FLOOR_DB,
    LOUDNESS_STEP_DB,
    MEASURE_CHAPTER,
    OUTPUT_MARKER,
    REPLY_TTL_S,
    WRITE_BOOK_FILES,
)

log = logging.getLogger(__name__)

BOOK_FILES = {"manifest.json": "application/json", "playlist.m3u8": "audio/x-mpegurl; charset=utf-8"}
BLOCK_S, HOP_S = 0.4, 0.1  # loudness blocks, as in BS.1770
_SOUNDFILE = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16")}
CONTENT_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "ogg": "audio/ogg; codecs=opus", "mp3": "audio/mpeg",
            "m4b": "audio/mp4"}

Audio = npt.NDArray[np.float32]


# -- pure signal work ------------------------------------------------------------------------------


def fade_edges(x: Audio, rate: int, fade_ms: float) -> Audio:
    """Raised-cosine fade in and out (in place): both ends of the segment land on exactly zero."""
    n = min(int(rate * fade_ms / 1000), len(x) // 2)
    if n > 0:
        ramp = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, dtype=np.float64))).astype(np.float32)
        x[:n] *= ramp
        x[-n:] *= ramp[::-1]
    return x


def limit_peaks(x: Audio, rate: int, ceiling: float, reach_ms: float = 10.0) -> Audio:
    """Smooth gain dips so that no sample exceeds ``ceiling`` (in place); audio under it is untouched.

    Per 1 ms frame the gain the frame's peak needs, then the minimum over +-``reach_ms`` frames, then a
    moving average one frame narrower: every frame's gain stays at or below what it needs (each average
    only takes minima whose window holds that frame), and the gain moves over ~2 x ``reach_ms``.
    """
    if not len(x) or float(np.max(np.abs(x))) <= ceiling:
        return x
    from numpy.lib.stride_tricks import sliding_window_view

    f = max(1, rate // 1000)
    nf = -(-len(x) // f)
    frames = np.zeros(nf * f, np.float32)
    frames[: len(x)] = np.abs(x)
    # float64 throughout: a float32 running sum over minutes of frames drifts by ~1e-4, enough to let
    # the averaged gain rise over what a frame needs (a sample 2 LSB over the ceiling was seen).
    need = np.minimum(1.0, ceiling / np.maximum(frames.reshape(nf, f).max(axis=1).astype(np.float64), 1e-9))
    k = max(2, int(reach_ms))
    m = k - 1
    g = sliding_window_view(np.pad(need, k, constant_values=1.0), 2 * k + 1).min(axis=1)
    c = np.concatenate([[0.0], np.cumsum(np.pad(g, m, mode="edge"))])
    avg = (c[2 * m + 1 :] - c[: -(2 * m + 1)]) / (2 * m + 1)
    centres = np.arange(nf) * f + (f - 1) / 2
    x *= np.interp(np.arange(len(x)), centres, avg).astype(np.float32)
    return x


def join_chapter(pieces: Iterable[tuple[Audio, float]], rate: int, *, gain: float = 1.0, fade_ms: float = 5.0,
                 head_s: float = 0.0, tail_s: float = 0.0, ceiling: float = 1.0) -> Iterator[Audio]:
    """The chapter as consecutive blocks: head silence, then each segment (faded, scaled, peaks held
    under ``ceiling``) followed by its pause, then tail silence.
    Length: head + sum(segments) + sum(round(pause * rate)) + tail."""
    yield np.zeros(round(head_s * rate), np.float32)
    for audio, pause_s in pieces:
        x = fade_edges(np.array(audio, dtype=np.float32, copy=True), rate, fade_ms)
        if gain != 1.0:
            x *= np.float32(gain)
        limit_peaks(x, rate, ceiling)
        np.clip(x, -1.0, 1.0, out=x)
        yield x
        if pause_s > 0:
            yield np.zeros(round(pause_s * rate), np.float32)
    yield np.zeros(round(tail_s * rate), np.float32)


class LoudnessMeter:
    """Mean-square energy of 400 ms blocks (100 ms hop) within each segment, binned by level."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.bins: dict[int, list[float]] = {}
        self.peak = 0.0

    def add(self, x: Audio) -> None:
        if not len(x):
            return
        self.peak = max(self.peak, float(np.max(np.abs(x))))
        block, hop = int(BLOCK_S * self.rate), int(HOP_S * self.rate)
        sq = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
        if len(x) <= block:
            energies = np.array([sq[-1] / len(x)])
        else:
            starts = np.arange(0, len(x) - block + 1, hop)
            energies = (sq[starts + block] - sq[starts]) / block
        with np.errstate(divide="ignore"):
            db = 10 * np.log10(energies)
        keep = db > LOUDNESS_FLOOR_DB
        idx = np.floor((db[keep] - LOUDNESS_FLOOR_DB) / LOUDNESS_STEP_DB).astype(int)
        for i, e in zip(idx.tolist(), energies[keep].tolist()):
            b = self.bins.setdefault(i, [0.0, 0.0])
            b[0] += 1
            b[1] += e


class StreamEncoder:
    """Encodes blocks as they come: the chapter is never held whole as float samples. FLAC and WAV go
    through soundfile; the lossy formats (Ogg Opus, MP3) through ``pipeline.encoders`` (PyAV)."""

    def __init__(self, fmt: str, rate: int, tags: dict[str, str] | None = None, bitrate: int | None = None) -> None:
        import soundfile as sf

        from pipeline.encoders import CODECS, AudioEncoder

        if fmt not in CHAPTER_FORMATS:
            raise InputError(f"a chapter file is {', '.join(CHAPTER_FORMATS)}, not {fmt!r}", code=UNSUPPORTED_FORMAT)
        self.fmt, self.rate = fmt, rate
        self.lossy = AudioEncoder(fmt, rate, bitrate=bitrate, seekable=True, tags=tags) if fmt in CODECS else None
        self.samples = 0
        if self.lossy is not None:
            return
        self.buf = io.BytesIO()
        container, subtype = _SOUNDFILE[fmt]
        self.file = sf.SoundFile(self.buf, "w", samplerate=rate, channels=1, format=container, subtype=subtype)
        for name, value in (tags or {}).items():
            if value and fmt != "wav":
                try:
                    setattr(self.file, name, value)
                except (RuntimeError, AttributeError):
                    log.debug("cannot tag %s with %s", fmt, name)

    def write(self, x: Audio) -> None:
        self.samples += len(x)
        if self.lossy is not None:
            self.lossy.write(x)
        elif len(x):
            self.file.write(np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16))

    def close(self) -> bytes:
        if self.lossy is not None:
            return self.lossy.close()
        self.file.close()
        return self.buf.getvalue()


# -- storage and replies ---------------------------------------------------------------------------

_local = threading.local()
_outputs: dict[str, Storage] = {}


def output_storage(settings: StorageSettings, out: str) -> Storage:
    """``s3://bucket/prefix`` (endpoint, region and credentials from the farm's settings) or an absolute folder."""
    if out not in _outputs:
        if out.startswith("s3://"):
            bucket, _, prefix = out[5:].partition("/")
            _outputs[out] = S3Storage(dataclasses.replace(settings, backend="s3", s3_bucket=bucket, prefix=prefix))
        elif not Path(out).is_absolute():
            raise InputError(f"book output {out!r} must be s3://bucket/prefix or an absolute folder", code=BAD_OPTION)
        elif not (Path(out) / OUTPUT_MARKER).is_file():
            raise InputError(f"{out!r} is not a book output folder here (no {OUTPUT_MARKER}; is it on a file system "
                             "this worker shares?)", code=BOOK_OUTPUT_REFUSED)
        else:
            _outputs[out] = LocalStorage(Path(out), "")
    return _outputs[out]


def _farm(task: Any) -> tuple[Settings, BookBroker, Storage]:
    settings: Settings = task.app.conf.ttsfarm_settings
    if getattr(_local, "broker", None) is None:
        _local.broker = connect(settings.redis)
        _local.storage = storage_from_settings(settings.storage)
    return settings, _local.broker, _local.storage


def _fetch(storage: Storage, keys: list[str], window: int = 8) -> Iterator[tuple[str, bytes | None]]:
    """Segment bytes in order, ``window`` reads ahead (S3 latency overlaps); None for a missing object."""

    def get(key: str) -> bytes | None:
        try:
            return storage.get(safe_key(key))
        except ObjectNotFoundError:
            return None

    with ThreadPoolExecutor(max_workers=min(window, 8)) as pool:
        ahead: deque[tuple[str, Future[bytes | None]]] = deque()
        it = iter(keys)
        for key in it:
            ahead.append((key, pool.submit(get, key)))
            if len(ahead) >= window:
                break
        while ahead:
            key, fut = ahead.popleft()
            nxt = next(it, None)
            if nxt is not None:
                ahead.append((nxt, pool.submit(get, nxt)))
            yield key, fut.result()


def _pcm(data: bytes) -> Audio:
    return (np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768.0)).astype(np.float32)


def run_task(task: Any, spec: dict[str, Any], work: Any, writes: bool) -> dict[str, Any]:
    settings, broker, storage = _farm(task)
    reply = str(spec.get("reply", ""))
    if not broker.keys.is_book_reply(reply):
        raise InputError(f"reply key {reply!r} is not a book's reply list of this farm", code=BAD_OPTION)
    try:
        if writes and broker.book_run(str(spec.get("run_key", ""))) != spec.get("run_id"):
            raise TTSFarmError("a newer run of this book has started", code=BOOK_SUPERSEDED)
        result = {"ok": True, **work(settings, storage, spec)}
    except TTSFarmError as exc:
        result = {"ok": False, **exc.to_dict(), **exc.detail}
    except Exception as exc:  # reported to the sender, which raises it; never a silent task failure
        log.exception("%s failed", task.name)
        result = {"ok": False, "code": INTERNAL_ERROR, "message": f"{task.name}: {type(exc).__name__}: {exc}"}
    broker.reply_to_book(reply, json.dumps(result, ensure_ascii=False), REPLY_TTL_S)
    return {k: v for k, v in result.items() if k != "hist"}


def stored_pieces(storage: Storage, segments: list[list[Any]], missing: list[str],
                  seen: list[tuple[str, int, float]] | None = None) -> Iterator[tuple[Audio, float]]:
    for (key, data), (_, pause) in zip(_fetch(storage, [str(k) for k, _ in segments]), segments):
        if data is None:
            missing.append(key)
            continue
        audio = _pcm(data)
        if seen is not None:
            seen.append((key, len(audio), float(pause)))
        yield audio, float(pause)


def chapter_captions(storage: Storage, seen: list[tuple[str, int, float]], rate: int, head_s: float) -> str:
    """WebVTT of a chapter: each stored job's words (``records.words_key``) moved to where ``join_chapter``
    put its audio (head silence, then each segment and its pause). A job stored without words adds none."""
    from pipeline.captions import to_vtt
    from wire.records import Word, words_key

    words: list[Word] = []
    offset = round(head_s * rate)
    for (key, n, pause), (_, data) in zip(seen, _fetch(storage, [words_key(k.split("/", 1)[0]) for k, _, _ in seen])):
        shift = offset / rate
        for w in json.loads(data) if data else []:
            words.append(dataclasses.replace(Word(**w), start_s=round(w["start_s"] + shift, 4), end_s=round(w["end_s"] + shift, 4)))
        offset += n + (round(pause * rate) if pause > 0 else 0)
    return to_vtt(words)


# -- the tasks -------------------------------------------------------------------------------------


def _measure(settings: Settings, storage: Storage, spec: dict[str, Any]) -> dict[str, Any]:
    meter, samples = LoudnessMeter(int(spec["rate"])), 0
    missing: list[str] = []
    for audio, _ in stored_pieces(storage, spec["segments"], missing):
        meter.add(audio)
        samples += len(audio)
    if missing:
        raise TTSFarmError(f"{len(missing)} segment(s) are not stored", code=SEGMENT_MISSING, missing=missing)
    return {"hist": meter.bins, "peak": meter.peak, "samples": samples}


def _assemble(settings: Settings, storage: Storage, spec: dict[str, Any]) -> dict[str, Any]:
    rate, fmt = int(spec["rate"]), str(spec["format"])
    if not math.isfinite(float(spec["gain"])) or not 0 < float(spec["gain"]) < 100:
        raise InputError(f"gain {spec['gain']!r} is out of range", code=BAD_OPTION)
    out = output_storage(settings.storage, str(spec["out"]))
    key = safe_key(str(spec["file"]))
    if "/" in key or not key.endswith(f".{fmt}"):
        raise InputError(f"a chapter file is a plain .{fmt} name, not {key!r}", code=BAD_OPTION)
    encoder = StreamEncoder(fmt, rate, dict(spec.get("tags") or {}), spec.get("bitrate"))
    missing: list[str] = []
    seen: list[tuple[str, int, float]] = []
    pieces = stored_pieces(storage, spec["segments"], missing, seen)
    for block in join_chapter(pieces, rate, gain=float(spec["gain"]), fade_ms=float(spec["fade_ms"]),
                              head_s=float(spec["head_s"]), tail_s=float(spec["tail_s"]),
                              ceiling=float(spec.get("ceiling", 1.0))):
        encoder.write(block)
    data = encoder.close()
    if missing:
        raise TTSFarmError(f"{len(missing)} segment(s) are not stored", code=SEGMENT_MISSING, missing=missing)
    url = out.put(key, data, CONTENT_TYPES[fmt])
    captions = key.rsplit(".", 1)[0] + ".vtt"
    out.put(captions, chapter_captions(storage, seen, rate, float(spec["head_s"])).encode("utf-8"), "text/vtt; charset=utf-8")
    log.info("chapter %s: %.1f s, %d bytes -> %s", key, encoder.samples / rate, len(data), url)
    return {"key": key, "url": url, "duration_s": round(encoder.samples / rate, 4), "samples": encoder.samples,
            "bytes": len(data), "captions": captions}


def _write_files(settings: Settings, storage: Storage, spec: dict[str, Any]) -> dict[str, Any]:
    out = output_storage(settings.storage, str(spec["out"]))
    files = dict(spec["files"])
    if set(files) - set(BOOK_FILES):
        raise InputError(f"a book's own files are {', '.join(BOOK_FILES)}", code=BAD_OPTION)
    return {"urls": {name: out.put(name, str(text).encode("utf-8"), BOOK_FILES[name]) for name, text in files.items()}}


@shared_task(name=MEASURE_CHAPTER, bind=True, acks_late=True, ignore_result=True)
def measure_chapter(self: Any, spec: dict[str, Any]) -> dict[str, Any]:
    return run_task(self, spec, _measure, writes=False)


@shared_task(name=ASSEMBLE_CHAPTER, bind=True, acks_late=True, ignore_result=True)
def assemble_chapter(self: Any, spec: dict[str, Any]) -> dict[str, Any]:
    return run_task(self, spec, _assemble, writes=True)


@shared_task(name=WRITE_BOOK_FILES, bind=True, acks_late=True, ignore_result=True)
def write_book_files(self: Any, spec: dict[str, Any]) -> dict[str, Any]:
    return run_task(self, spec, _write_files, writes=True)
