"""The rule every storage key follows, for every backend: a relative ``/``-separated path that can never leave
the backend's prefix (``safe_key``), and how a prefix and a key join. ``wire.storage`` (the local folder,
the choice of backend) and ``wire.storage.s3`` both use it, and neither imports the other for it.
"""

from __future__ import annotations

import unicodedata
from typing import Final

from pipeline.errors import InputError
from wire.errors import BAD_KEY

MAX_KEY_BYTES: Final = 1024
"""S3's limit on a whole object key (prefix included), in UTF-8 bytes."""
MAX_SEGMENT_BYTES: Final = 255
"""Longest single path segment, in UTF-8 bytes: the usual file-name limit of local file systems."""
_BAD_CATEGORIES: Final = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, lone surrogates, line breaks


def bad_key(reason: str, shown: object) -> InputError:
    return InputError(f"unsafe storage key {shown!r}: {reason}", code=BAD_KEY)


def safe_key(*parts: str) -> str:
    """Join ``parts`` into one relative key with ``/`` separators, refusing anything that could escape.

    Each part may itself hold ``/``-separated segments. Refused with ``InputError`` code ``BAD_KEY``:
    no parts, a non-string or empty part, an absolute part (leading ``/``), a backslash, ``.`` or
    ``..`` segments, empty segments (``a//b``, a trailing ``/``), control characters (NUL included),
    lone surrogates, Unicode line/paragraph separators, a segment over 255 UTF-8 bytes, or a key over
    1024 bytes. Nothing is silently rewritten, so ``safe_key(safe_key(k)) == safe_key(k)``.
    """
    if not parts:
        raise bad_key("no key given", "")
    segments = [segment for part in parts for segment in _part_segments(part)]
    key = "/".join(segments)
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise bad_key(f"longer than {MAX_KEY_BYTES} bytes", key[:40] + "...")
    return key


def _part_segments(part: str) -> list[str]:
    """The checked ``/``-separated segments of one part of a key (see :func:`safe_key`)."""
    if not isinstance(part, str):
        raise bad_key(f"parts must be strings, not {type(part).__name__}", part)
    if not part:
        raise bad_key("empty part", part)
    if part.startswith("/"):
        raise bad_key("absolute paths are not allowed", part)
    if "\\" in part:
        raise bad_key("backslashes are not allowed", part)
    for ch in part:
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            raise bad_key(f"control character U+{ord(ch):04X} is not allowed", part)
    segments = part.split("/")
    for segment in segments:
        if not segment:
            raise bad_key("empty path segment", part)
        if segment in (".", ".."):
            raise bad_key(f"{segment!r} segments are not allowed", part)
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise bad_key(f"a segment is longer than {MAX_SEGMENT_BYTES} bytes", part[:40] + "...")
    return segments


def clean_prefix(prefix: str) -> str:
    """A configured prefix: outer slashes dropped, empty allowed, otherwise as strict as a key."""
    stripped = (prefix or "").strip("/")
    return safe_key(stripped) if stripped else ""


def join_key(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key
