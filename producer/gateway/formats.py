"""Audio format names a request may use, mapped onto the farm's formats (``pipeline.audio.FORMATS``)."""

from __future__ import annotations

from pipeline.audio import FORMATS, check_format
from pipeline.errors import UNSUPPORTED_FORMAT, InputError

ALIASES = {"opus": "ogg", "ogg_opus": "ogg", "wave": "wav", "l16": "pcm", "raw": "pcm"}
NOT_SUPPORTED = ("mp3", "aac")  # OpenAI formats the farm has no encoder for (patent-free stack only)


def request_format(name: str | None, default: str = "wav") -> str:
    """``opus`` -> ``ogg`` (Ogg Opus), ``wave`` -> ``wav``; mp3/aac and anything else unknown -> 400."""
    raw = (name or default).strip().lower()
    if raw in NOT_SUPPORTED:
        raise InputError(
            f"response_format {raw!r} is not supported by this farm; use one of {', '.join(FORMATS)} "
            "(or 'opus', which is sent as Ogg Opus)",
            code=UNSUPPORTED_FORMAT,
        )
    return check_format(ALIASES.get(raw, raw)) if raw else check_format(default)

