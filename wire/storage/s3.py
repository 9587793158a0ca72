"""The S3 backend of ``wire.storage``: AWS, MinIO or moto, through boto3 (imported here only).

``wire.storage`` imports this module when S3 is chosen; this one takes the key rule from
``wire.storage.keys`` and its errors from ``wire.errors``, never from ``wire.storage``.
"""

from __future__ import annotations

import io
import logging
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import boto3
import botocore.exceptions as bce
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from wire.errors import (
    STORAGE_ACCESS_DENIED,
    STORAGE_NO_BUCKET,
    STORAGE_NO_CREDENTIALS,
    STORAGE_REJECTED,
    ObjectNotFoundError,
    StorageError,
    TransientError,
)
from wire.settings import StorageSettings
from wire.storage.keys import MAX_KEY_BYTES, bad_key, clean_prefix, join_key, safe_key

log = logging.getLogger(__name__)

MAX_PRESIGN_S: Final = 7 * 24 * 3600
"""SigV4 presigned URLs live at most seven days."""

_MIB: Final = 1024 * 1024
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

    The timeouts and attempt count come from the keyword arguments, else from the settings
    ``s3_connect_timeout_s``, ``s3_read_timeout_s`` and ``s3_max_attempts``. Pass ``client`` to use a
    ready boto3 S3 client instead.
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
        self.prefix = clean_prefix(settings.prefix)
        self.endpoint = _redact(settings.s3_endpoint_url)
        self.transfer_config = TransferConfig(
            multipart_threshold=max(0, settings.multipart_threshold_mb) * _MIB,
            multipart_chunksize=max(1, settings.multipart_chunk_mb) * _MIB,
        )
        if client is None:
            config = Config(
                region_name=settings.s3_region or None,
                signature_version="s3v4",
                connect_timeout=settings.s3_connect_timeout_s if connect_timeout_s is None else connect_timeout_s,
                read_timeout=settings.s3_read_timeout_s if read_timeout_s is None else read_timeout_s,
                retries={
                    "total_max_attempts": settings.s3_max_attempts if max_attempts is None else max_attempts,
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
        full = join_key(self.prefix, safe_key(key))
        if len(full.encode("utf-8")) > MAX_KEY_BYTES:
            raise bad_key(f"longer than {MAX_KEY_BYTES} bytes with its prefix", key[:40] + "...")
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
        """One PUT below the multipart threshold (a job's output, its words: the transfer manager's threads and
        futures cost 1.2 ms of CPU more per object, ``python -m bench.lab storage``), the transfer manager above it."""
        full = self.object_key(key)
        try:
            if len(data) < self.transfer_config.multipart_threshold:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=data, ContentType=content_type)
            else:
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
        # What reaches here from the calls above is botocore's own error: put_object raises it, upload_fileobj
        # re-raises its transfer's error as it was (only boto3's file-name upload_file wraps one, in
        # S3UploadFailedError), and botocore wraps every failure of sending a request or reading a body, socket
        # errors included, in its errors.
        if isinstance(exc, bce.ClientError):
            code, status = _code(exc), _status(exc)
            text = f"object storage refused to {op} {where}{via}: {code} (HTTP {status})"
            if status >= 500 or code in _TRANSIENT_S3_CODES:
                return TransientError(text, status=status, **detail)
            if status == 403 or code in _DENIED_S3_CODES:
                return StorageError(text, code=STORAGE_ACCESS_DENIED, status=status, **detail)
            if code == "NoSuchBucket":
                return StorageError(text, code=STORAGE_NO_BUCKET, status=status, **detail)
            return StorageError(text, code=STORAGE_REJECTED, status=status, **detail)
        name = type(exc).__name__
        if isinstance(exc, (bce.ConnectionError, bce.HTTPClientError, bce.IncompleteReadError)):
            return TransientError(f"object storage unreachable during {op} of {where}{via}: {name}", **detail)
        if isinstance(exc, (bce.NoCredentialsError, bce.PartialCredentialsError)):
            return StorageError(
                f"no usable S3 credentials to {op} {where}: {name}", code=STORAGE_NO_CREDENTIALS, **detail
            )
        return StorageError(f"object storage failed to {op} {where}{via}: {name}", **detail)


def _code(exc: bce.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "") or "")


def _status(exc: bce.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
