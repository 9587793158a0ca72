"""Where full job outputs go: an S3 bucket (AWS, MinIO, moto) or a local folder.

Both backends speak the narrow :class:`Storage` protocol and share one key rule, :func:`safe_key`
(``producer.wire.storage_keys``): a key is a relative ``/``-separated path that can never leave the backend's
prefix.

Errors a caller sees (the classes are ``producer.wire.errors``'s, named here too):

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
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from producer.wire.errors import STORAGE_IO_ERROR, ObjectNotFoundError, StorageError, TransientError
from producer.wire.settings import StorageSettings
from producer.wire.storage_keys import bad_key, clean_prefix, safe_key

__all__ = ["LocalStorage", "ObjectNotFoundError", "Storage", "StorageError", "safe_key", "storage_from_settings"]

log = logging.getLogger(__name__)

_TRANSIENT_ERRNOS: Final = frozenset(
    {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EIO, errno.EAGAIN, errno.EBUSY}
)


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
        self._real_base = self.base.resolve()  # a key's file must resolve inside it (a later symlink there fails safe)

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r}, prefix={self.prefix!r})"

    def path(self, key: str) -> Path:
        """The file that holds ``key``; raises ``BAD_KEY`` for unsafe keys or symlinks leading out."""
        path = self.base / safe_key(key)
        # safe_key already rules out ``..``; this also catches a symlink inside the tree pointing out.
        if not path.resolve().is_relative_to(self._real_base):
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
        return path.as_uri()

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
