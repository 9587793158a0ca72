"""Where full job outputs go: an S3 bucket (AWS, MinIO, moto) or a local folder.

Both backends speak the narrow :class:`Storage` protocol and share one key rule, :func:`safe_key`: a
key is a relative ``/``-separated path that can never leave the backend's prefix.

Errors a caller sees:

- :class:`~pipeline.errors.InputError` ``BAD_KEY``: the key itself is unsafe or malformed.
- :class:`ObjectNotFoundError` (a ``KeyError``), code ``OBJECT_NOT_FOUND``: ``get`` of a missing key.
- :class:`~producer.wire.errors.TransientError` (retryable): the endpoint could not be reached, timed out,
  throttled us or answered 5xx; or the local disk is full or failing.
- :class:`StorageError` (not retryable) with codes ``STORAGE_ACCESS_DENIED``,
  ``STORAGE_NO_BUCKET``, ``STORAGE_NO_CREDENTIALS``, ``STORAGE_REJECTED`` (any other 4xx) or
  ``STORAGE_IO_ERROR`` (a local file could not be written for another reason).

Messages are built from the operation, the bucket, the key and the service's error code; they
never carry the service's own message text, request headers or credentials.

This is the wire's storage layout: workers write a job's outputs through it, front ends and the SDK read
them back through it (``storage_from_settings``), so neither side needs the other. It imports neither
celery nor boto3; the S3 backend (``producer.wire.storage_s3``) loads boto3 when it is chosen.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import unicodedata
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from producer.wire.errors import (
    BAD_KEY,
    OBJECT_NOT_FOUND,
    STORAGE_ERROR,
    STORAGE_IO_ERROR,
    TransientError,
)
from producer.wire.settings import StorageSettings

log = logging.getLogger(__name__)

MAX_KEY_BYTES: Final = 1024
"""S3's limit on a whole object key (prefix included), in UTF-8 bytes."""
MAX_SEGMENT_BYTES: Final = 255
"""Longest single path segment, in UTF-8 bytes: the usual file-name limit of local file systems."""
_BAD_CATEGORIES: Final = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, lone surrogates, line breaks
_TRANSIENT_ERRNOS: Final = frozenset(
    {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EIO, errno.EAGAIN, errno.EBUSY}
)


class StorageError(TTSFarmError, RuntimeError):
    """Object storage refused an operation in a way retrying will not fix (see the module's codes)."""

    code = STORAGE_ERROR


class ObjectNotFoundError(TTSFarmError, KeyError):
    """``get`` of a key that holds no object. A ``KeyError``, so ``except KeyError`` works too."""

    code = OBJECT_NOT_FOUND


@runtime_checkable
class Storage(Protocol):
    """What the workers need from a place to keep full outputs."""

    def put(self, key: str, data: bytes, content_type: str) -> str:
        """Store ``data`` under ``key`` (replacing any object there) and return its :meth:`url`."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes under ``key``; :class:`ObjectNotFoundError` when there are none."""
        ...

    def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""
        ...

    def url(self, key: str) -> str:
        """A stable address for ``key``: ``s3://bucket/prefix/key`` or a ``file://`` URL."""
        ...

    def presigned_url(self, key: str, expires_s: int = 3600) -> str | None:
        """A time-limited plain-HTTP GET URL for ``key``, or ``None`` where the backend has none."""
        ...


# -- keys ------------------------------------------------------------------------------------------


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


# -- local folder ----------------------------------------------------------------------------------


class LocalStorage:
    """Objects as files under ``root/prefix``; for one machine, tests and development.

    Writes are atomic: a temporary file in the target folder, fsynced, then ``os.replace``, so a
    reader sees the old object or the whole new one, never a part. Folders are created as needed.
    The content type is not stored (a file has nowhere to keep it).
    """

    def __init__(self, root: str | Path, prefix: str = "") -> None:
        self.prefix = clean_prefix(prefix)
        self.root = Path(root).expanduser().resolve()
        self.base = self.root / self.prefix if self.prefix else self.root

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r}, prefix={self.prefix!r})"

    def path(self, key: str) -> Path:
        """The file that holds ``key``; raises ``BAD_KEY`` for unsafe keys or symlinks leading out."""
        path = self.base / safe_key(key)
        # safe_key already rules out ``..``; this also catches a symlink inside the tree pointing out.
        if not path.resolve().is_relative_to(self.base.resolve()):
            raise bad_key("resolves outside the storage folder", key)
        return path

    def put(self, key: str, data: bytes, content_type: str) -> str:
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:80]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise _local_error("write", key, exc) from exc
        log.debug("stored %d bytes at %s", len(data), path)
        return self.url(key)

    def get(self, key: str) -> bytes:
        path = self.path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f"no stored object {key!r}", key=key) from None
        except OSError as exc:
            raise _local_error("read", key, exc) from exc

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def url(self, key: str) -> str:
        return self.path(key).as_uri()

    def presigned_url(self, key: str, expires_s: int = 3600) -> str | None:
        """Always ``None``: a local folder has no HTTP endpoint to sign for."""
        self.path(key)
        return None


def _local_error(op: str, key: str, exc: OSError) -> TTSFarmError:
    reason = exc.strerror or type(exc).__name__
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientError(f"local storage could not {op} {key!r}: {reason}", key=key)
    return StorageError(f"local storage could not {op} {key!r}: {reason}", code=STORAGE_IO_ERROR, key=key)


# -- choice ----------------------------------------------------------------------------------------


def storage_from_settings(settings: StorageSettings) -> Storage:
    """The backend ``settings.backend`` names: ``s3``, ``local``, or ``auto`` (S3 when a bucket is set)."""
    backend = (settings.backend or "auto").lower()
    if backend not in ("auto", "s3", "local"):
        raise InputError(f"storage.backend must be auto, s3 or local, not {settings.backend!r}", code=BAD_OPTION)
    if backend == "s3" or (backend == "auto" and settings.s3_bucket):
        from producer.wire.storage_s3 import S3Storage  # boto3 loads only where S3 is used

        return S3Storage(settings)
    return LocalStorage(Path(settings.local_dir), settings.prefix)
