"""Where full job outputs go: an S3 bucket (AWS, MinIO, moto) or a local folder.

Both backends speak the narrow :class:`Storage` protocol and share one key rule, :func:`safe_key`: a
key is a relative ``/``-separated path that can never leave the backend's prefix.

Errors a caller sees:

- :class:`~pipeline.errors.InputError` ``BAD_KEY``: the key itself is unsafe or malformed.
- :class:`ObjectNotFoundError` (a ``KeyError``), code ``OBJECT_NOT_FOUND``: ``get`` of a missing key.
- :class:`~pipeline.errors.TransientError` (retryable): the endpoint could not be reached, timed out,
  throttled us or answered 5xx; or the local disk is full or failing.
- :class:`StorageError` (not retryable) with codes ``STORAGE_ACCESS_DENIED``,
  ``STORAGE_NO_BUCKET``, ``STORAGE_NO_CREDENTIALS``, ``STORAGE_REJECTED`` (any other 4xx) or
  ``STORAGE_IO_ERROR`` (a local file could not be written for another reason).

Messages are built here from the operation, the bucket, the key and the service's error code; they
never carry the service's own message text, request headers or credentials.

This module imports boto3 but never celery.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import boto3
import botocore.exceptions as bce
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from producer.wire.errors import TransientError
from producer.wire.settings import StorageSettings

log = logging.getLogger(__name__)

# Stable codes owned by this module. Clients match on these strings; never rename one.
BAD_KEY: Final = "BAD_KEY"
OBJECT_NOT_FOUND: Final = "OBJECT_NOT_FOUND"
STORAGE_ERROR: Final = "STORAGE_ERROR"
STORAGE_ACCESS_DENIED: Final = "STORAGE_ACCESS_DENIED"
STORAGE_NO_BUCKET: Final = "STORAGE_NO_BUCKET"
STORAGE_NO_CREDENTIALS: Final = "STORAGE_NO_CREDENTIALS"
STORAGE_REJECTED: Final = "STORAGE_REJECTED"
STORAGE_IO_ERROR: Final = "STORAGE_IO_ERROR"

MAX_KEY_BYTES: Final = 1024
"""S3's limit on a whole object key (prefix included), in UTF-8 bytes."""
MAX_SEGMENT_BYTES: Final = 255
"""Longest single path segment, in UTF-8 bytes: the usual file-name limit of local file systems."""
MAX_PRESIGN_S: Final = 7 * 24 * 3600
"""SigV4 presigned URLs live at most seven days."""

# Used until StorageSettings grows s3_connect_timeout_s / s3_read_timeout_s / s3_max_attempts.
DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
DEFAULT_READ_TIMEOUT_S: Final = 60.0
DEFAULT_MAX_ATTEMPTS: Final = 3

_MIB: Final = 1024 * 1024
_BAD_CATEGORIES: Final = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, lone surrogates, line breaks
_TRANSIENT_S3_CODES: Final = frozenset(
    {
        "InternalError",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
    }
)
_DENIED_S3_CODES: Final = frozenset(
    {"AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}
)
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


def _bad_key(reason: str, shown: object) -> InputError:
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
        raise _bad_key("no key given", "")
    segments = [segment for part in parts for segment in _part_segments(part)]
    key = "/".join(segments)
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise _bad_key(f"longer than {MAX_KEY_BYTES} bytes", key[:40] + "...")
    return key


def _part_segments(part: str) -> list[str]:
    """The checked ``/``-separated segments of one part of a key (see :func:`safe_key`)."""
    if not isinstance(part, str):
        raise _bad_key(f"parts must be strings, not {type(part).__name__}", part)
    if not part:
        raise _bad_key("empty part", part)
    if part.startswith("/"):
        raise _bad_key("absolute paths are not allowed", part)
    if "\\" in part:
        raise _bad_key("backslashes are not allowed", part)
    for ch in part:
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            raise _bad_key(f"control character U+{ord(ch):04X} is not allowed", part)
    segments = part.split("/")
    for segment in segments:
        if not segment:
            raise _bad_key("empty path segment", part)
        if segment in (".", ".."):
            raise _bad_key(f"{segment!r} segments are not allowed", part)
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise _bad_key(f"a segment is longer than {MAX_SEGMENT_BYTES} bytes", part[:40] + "...")
    return segments


def _clean_prefix(prefix: str) -> str:
    """A configured prefix: outer slashes dropped, empty allowed, otherwise as strict as a key."""
    stripped = (prefix or "").strip("/")
    return safe_key(stripped) if stripped else ""


def _join(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key


# -- local folder ----------------------------------------------------------------------------------


class LocalStorage:
    """Objects as files under ``root/prefix``; for one machine, tests and development.

    Writes are atomic: a temporary file in the target folder, fsynced, then ``os.replace``, so a
    reader sees the old object or the whole new one, never a part. Folders are created as needed.
    The content type is not stored (a file has nowhere to keep it).
    """

    def __init__(self, root: str | Path, prefix: str = "") -> None:
        self.prefix = _clean_prefix(prefix)
        self.root = Path(root).expanduser().resolve()
        self.base = self.root / self.prefix if self.prefix else self.root

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r}, prefix={self.prefix!r})"

    def path(self, key: str) -> Path:
        """The file that holds ``key``; raises ``BAD_KEY`` for unsafe keys or symlinks leading out."""
        path = self.base / safe_key(key)
        # safe_key already rules out ``..``; this also catches a symlink inside the tree pointing out.
        if not path.resolve().is_relative_to(self.base.resolve()):
            raise _bad_key("resolves outside the storage folder", key)
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


# -- S3 --------------------------------------------------------------------------------------------


def _redact(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages and logs."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class S3Storage:
    """Objects in one S3 bucket under ``settings.prefix``.

    ``settings.s3_endpoint_url`` points at MinIO, moto or another S3-compatible service (path-style
    addressing is then used); without it boto3 talks to AWS in ``settings.s3_region``. Credentials
    come from boto3's usual chain (environment, shared files, instance role). Uploads go through
    boto3's transfer manager, which switches to multipart above ``multipart_threshold_mb`` with parts
    of ``multipart_chunk_mb`` (S3 raises parts below 5 MiB to 5 MiB).

    The timeouts and attempt count come from the keyword arguments, else from the settings fields
    ``s3_connect_timeout_s``, ``s3_read_timeout_s`` and ``s3_max_attempts`` when they exist, else
    from this module's defaults. Pass ``client`` to use a ready boto3 S3 client instead.
    """

    def __init__(
        self,
        settings: StorageSettings,
        *,
        client: Any = None,
        connect_timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        max_attempts: int | None = None,
    ) -> None:
        if not settings.s3_bucket:
            raise InputError("S3 storage needs storage.s3_bucket to be set", code=BAD_OPTION)
        self.bucket = settings.s3_bucket
        self.prefix = _clean_prefix(settings.prefix)
        self.endpoint = _redact(settings.s3_endpoint_url)
        self.transfer_config = TransferConfig(
            multipart_threshold=max(0, settings.multipart_threshold_mb) * _MIB,
            multipart_chunksize=max(1, settings.multipart_chunk_mb) * _MIB,
        )
        if client is None:
            config = Config(
                region_name=settings.s3_region or None,
                signature_version="s3v4",
                connect_timeout=_pick(connect_timeout_s, settings, "s3_connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S),
                read_timeout=_pick(read_timeout_s, settings, "s3_read_timeout_s", DEFAULT_READ_TIMEOUT_S),
                retries={
                    "total_max_attempts": int(_pick(max_attempts, settings, "s3_max_attempts", DEFAULT_MAX_ATTEMPTS)),
                    "mode": "standard",
                },
                s3={"addressing_style": "path"} if settings.s3_endpoint_url else None,
            )
            session = boto3.session.Session()
            client = session.client("s3", endpoint_url=settings.s3_endpoint_url or None, config=config)
        self.client = client

    def __repr__(self) -> str:
        where = f", endpoint={self.endpoint!r}" if self.endpoint else ""
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}{where})"

    def object_key(self, key: str) -> str:
        """The full S3 key for ``key``: the prefix, then the checked key."""
        full = _join(self.prefix, safe_key(key))
        if len(full.encode("utf-8")) > MAX_KEY_BYTES:
            raise _bad_key(f"longer than {MAX_KEY_BYTES} bytes with its prefix", key[:40] + "...")
        return full

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist yet (for tests and first deployments)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except bce.ClientError as exc:
            if _status(exc) != 404:
                raise self._translate(exc, "check", None) from exc
        except Exception as exc:
            raise self._translate(exc, "check", None) from exc
        region = self.client.meta.region_name
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if region and region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self.client.create_bucket(**kwargs)
            log.info("created bucket %s", self.bucket)
        except bce.ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._translate(exc, "create", None) from exc
        except Exception as exc:
            raise self._translate(exc, "create", None) from exc

    def put(self, key: str, data: bytes, content_type: str) -> str:
        full = self.object_key(key)
        try:
            self.client.upload_fileobj(
                io.BytesIO(data),
                self.bucket,
                full,
                ExtraArgs={"ContentType": content_type},
                Config=self.transfer_config,
            )
        except Exception as exc:
            raise self._translate(exc, "upload", key) from exc
        log.debug("stored %d bytes at s3://%s/%s", len(data), self.bucket, full)
        return self.url(key)

    def get(self, key: str) -> bytes:
        full = self.object_key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full)
            body: bytes = response["Body"].read()
        except bce.ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                raise ObjectNotFoundError(f"no stored object {key!r}", key=key) from None
            raise self._translate(exc, "download", key) from exc
        except Exception as exc:
            raise self._translate(exc, "download", key) from exc
        return body

    def exists(self, key: str) -> bool:
        full = self.object_key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=full)
        except bce.ClientError as exc:
            if _status(exc) == 404:
                return False
            raise self._translate(exc, "check", key) from exc
        except Exception as exc:
            raise self._translate(exc, "check", key) from exc
        return True

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.object_key(key)}"

    def presigned_url(self, key: str, expires_s: int = 3600) -> str | None:
        """A SigV4 GET URL valid for ``expires_s`` seconds (1 to 7 days' worth). Makes no request."""
        if not 1 <= int(expires_s) <= MAX_PRESIGN_S:
            raise InputError(f"expires_s must be between 1 and {MAX_PRESIGN_S}, got {expires_s}", code=BAD_OPTION)
        full = self.object_key(key)
        try:
            url: str = self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": full}, ExpiresIn=int(expires_s)
            )
        except Exception as exc:
            raise self._translate(exc, "sign", key) from exc
        return url

    def _translate(self, exc: BaseException, op: str, key: str | None) -> TTSFarmError:
        """Turn a boto3/botocore failure into the farm's errors, with a message free of secrets."""
        where = f"s3://{self.bucket}/{self.object_key(key)}" if key is not None else f"bucket s3://{self.bucket}"
        via = f" via {self.endpoint}" if self.endpoint else ""
        detail: dict[str, Any] = {"bucket": self.bucket}
        if key is not None:
            detail["key"] = key
        # boto3 wraps some transfer failures (S3UploadFailedError); look at what it wraps.
        inner = exc
        for _ in range(5):
            wrapped = inner.__cause__ or inner.__context__
            if isinstance(inner, (bce.ClientError, bce.BotoCoreError)) or wrapped is None:
                break
            inner = wrapped
        if isinstance(inner, bce.ClientError):
            code, status = _code(inner), _status(inner)
            text = f"object storage refused to {op} {where}{via}: {code} (HTTP {status})"
            if status >= 500 or code in _TRANSIENT_S3_CODES:
                return TransientError(text, status=status, **detail)
            if status == 403 or code in _DENIED_S3_CODES:
                return StorageError(text, code=STORAGE_ACCESS_DENIED, status=status, **detail)
            if code == "NoSuchBucket":
                return StorageError(text, code=STORAGE_NO_BUCKET, status=status, **detail)
            return StorageError(text, code=STORAGE_REJECTED, status=status, **detail)
        name = type(inner).__name__
        if isinstance(inner, (bce.ConnectionError, bce.HTTPClientError, bce.IncompleteReadError)):
            return TransientError(f"object storage unreachable during {op} of {where}{via}: {name}", **detail)
        if isinstance(inner, (bce.NoCredentialsError, bce.PartialCredentialsError)):
            return StorageError(
                f"no usable S3 credentials to {op} {where}: {name}", code=STORAGE_NO_CREDENTIALS, **detail
            )
        if isinstance(inner, (ConnectionError, TimeoutError)):  # a socket error that escaped botocore
            return TransientError(f"object storage unreachable during {op} of {where}{via}: {name}", **detail)
        return StorageError(f"object storage failed to {op} {where}{via}: {name}", **detail)


def _pick(given: float | None, settings: StorageSettings, field: str, default: float) -> float:
    if given is not None:
        return given
    return float(getattr(settings, field, default))


def _code(exc: bce.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "") or "")


def _status(exc: bce.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


# -- choice ----------------------------------------------------------------------------------------


def storage_from_settings(settings: StorageSettings) -> Storage:
    """The backend ``settings.backend`` names: ``s3``, ``local``, or ``auto`` (S3 when a bucket is set)."""
    backend = (settings.backend or "auto").lower()
    if backend not in ("auto", "s3", "local"):
        raise InputError(f"storage.backend must be auto, s3 or local, not {settings.backend!r}", code=BAD_OPTION)
    if backend == "s3" or (backend == "auto" and settings.s3_bucket):
        return S3Storage(settings)
    return LocalStorage(Path(settings.local_dir), settings.prefix)
