"""One file a listener can carry: the whole book as an M4B (AAC in MP4, chapter marks, title metadata).

``ttsfarm.assemble_book_file`` joins every chapter exactly as ``ttsfarm.assemble_chapter`` does (the same
segments, pauses, fades, gain, limiter, head and tail silence) into one AAC encoder (``pipeline.encoders``,
FFmpeg's AAC encoder through PyAV), and marks where each chapter starts with its title. The source is the
stored segment PCM, not the chapter files, so a lossy chapter format is never encoded twice.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from wire.errors import SEGMENT_MISSING
from wire.settings import Settings
from wire.storage import Storage, safe_key
from wire.tasks import ASSEMBLE_BOOK_FILE
from workers.assembly import CONTENT_TYPES, join_chapter, output_storage, run_task, stored_pieces

log = logging.getLogger(__name__)


def _book_file(settings: Settings, storage: Storage, spec: dict[str, Any]) -> dict[str, Any]:
    from pipeline.encoders import AudioEncoder, Chapter

    rate = int(spec["rate"])
    out = output_storage(settings.storage, str(spec["out"]))
    key = safe_key(str(spec["file"]))
    if "/" in key or not key.endswith(".m4b"):
        raise InputError(f"the book file is a plain .m4b name, not {key!r}", code=BAD_OPTION)
    encoder = AudioEncoder("aac", rate, bitrate=spec.get("bitrate"), seekable=True, container="ipod",
                           tags=dict(spec.get("tags") or {}))
    marks: list[Chapter] = []
    missing: list[str] = []
    for ch in spec["chapters"]:
        start = encoder.out_samples
        for block in join_chapter(stored_pieces(storage, ch["segments"], missing), rate, gain=float(spec["gain"]),
                                  fade_ms=float(spec["fade_ms"]), head_s=float(spec["head_s"]),
                                  tail_s=float(spec["tail_s"]), ceiling=float(spec.get("ceiling", 1.0))):
            encoder.write(block)
        marks.append(Chapter(start, encoder.out_samples, str(ch["title"])))
    if missing:
        raise TTSFarmError(f"{len(missing)} segment(s) are not stored", code=SEGMENT_MISSING, missing=missing)
    encoder.set_chapters(marks)
    data = encoder.close()
    url = out.put(key, data, CONTENT_TYPES["m4b"])
    out_rate = encoder.rate
    log.info("book file %s: %d chapters, %.1f s, %d bytes -> %s", key, len(marks), encoder.out_samples / out_rate,
             len(data), url)
    return {"key": key, "url": url, "format": "m4b", "bytes": len(data),
            "duration_s": round(encoder.out_samples / out_rate, 4),
            "chapters": [{"title": m.title, "start_s": round(m.start / out_rate, 4), "end_s": round(m.end / out_rate, 4)}
                         for m in marks]}


@shared_task(name=ASSEMBLE_BOOK_FILE, bind=True, acks_late=True, ignore_result=True)
def assemble_book_file(self: Any, spec: dict[str, Any]) -> dict[str, Any]:
    return run_task(self, spec, _book_file, writes=True)
