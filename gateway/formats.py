"""Audio format names a request may use, mapped onto the farm's formats (``pipeline.audio.FORMATS``)."""

from __future__ import annotations

from pipeline.audio import FORMATS, check_format

ALIASES = {"opus": "ogg", "ogg_opus": "ogg", "wave": "wav", "l16": "pcm", "raw": "pcm"}
STREAMED = ("pcm", "wav", "mp3", "ogg", "aac")  # sent as they are made; flac once stored


def request_format(name: str | None, default: str = "wav") -> str:
    """``opus`` -> ``ogg`` (Ogg Opus), ``wave`` -> ``wav``; anything not in ``FORMATS`` -> UNSUPPORTED_FORMAT."""
    raw = (name or default).strip().lower()
    return check_format(ALIASES.get(raw, raw)) if raw else check_format(default)


__all__ = ["ALIASES", "FORMATS", "STREAMED", "request_format"]
