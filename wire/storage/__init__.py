"""Where full job outputs go: an S3 bucket (AWS, MinIO, moto) or a local folder.

Both backends speak the narrow :class:`Storage` protocol and share one key rule, :func:`safe_key`
(``wire.storage.keys``): a key is a relative ``/``-separated path that can never leave the backend's
prefix.

Errors a caller sees (the classes are ``wire.errors``'s, named here too):

- :class:`~pipeline.errors.InputError` ``BAD_KEY``: the key itself is unsafe or malformed.
- :class:`ObjectNotFoundError` (a ``KeyError``), code ``OBJECT_NOT_FOUND``: ``get`` of a missing key.
- :class:`~wire.errors.TransientError` (retryable): the endpoint could not be reached, timed out,
  throttled us or answered 5xx; or the local disk is full or failing.
- :class:`StorageError` (not retryable) with codes ``STORAGE_ACCESS_DENIED``,
  ``STORAGE_NO_BUCKET``, ``STORAGE_NO_CREDENTIALS``, ``STORAGE_REJECTED`` (any other 4xx) or
  ``STORAGE_IO_ERROR`` (a local file could not be written for another reason).

Messages are built from the operation, the bucket, the key and the service's error code; they
never carry the service's own message text, request headers or credentials.

This is the wire's storage layout: workers write a job's outputs through it, front ends and the SDK read
them back through it (``storage_from_settings``), so neither side needs the other. It imports neither
celery nor boto3; the S3 backend (``wire.storage.s3``) loads boto3 when it is chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from pipeline.errors import BAD_OPTION, InputError
from wire.errors import ObjectNotFoundError, StorageError
from wire.settings import StorageSettings
from wire.storage.keys import safe_key
from wire.storage.local import LocalStorage

__all__ = ["LocalStorage", "ObjectNotFoundError", "Storage", "StorageError", "safe_key", "storage_from_settings"]


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


# -- choice ----------------------------------------------------------------------------------------


def storage_from_settings(settings: StorageSettings) -> Storage:
    """The backend ``settings.backend`` names: ``s3``, ``local``, or ``auto`` (S3 when a bucket is set)."""
    backend = (settings.backend or "auto").lower()
    if backend not in ("auto", "s3", "local"):
        raise InputError(f"storage.backend must be auto, s3 or local, not {settings.backend!r}", code=BAD_OPTION)
    if backend == "s3" or (backend == "auto" and settings.s3_bucket):
        from wire.storage.s3 import S3Storage  # boto3 loads only where S3 is used

        return S3Storage(settings)
    return LocalStorage(Path(settings.local_dir), settings.prefix)
