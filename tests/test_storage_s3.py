"""The S3 backend (wire/storage/s3.py) against a real S3 endpoint: puts, gets, multipart above the threshold only,
presigned URLs, refused keys, and errors that are clear, classified and free of secrets. The other backend is
tests/test_storage_local.py; what every backend shares (the key check, the choice of backend) is
tests/test_storage_common.py.

The S3 endpoint is the session's (tests/conftest.py ``s3_endpoint``): a ``moto_server`` process on a free port, or
the one named by ``TTSFARM_TEST_S3_ENDPOINT`` (e.g. a MinIO), with the credentials in the environment.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from bench.processes import free_port
from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from wire import errors as codes
from wire import storage as st
from wire.errors import BAD_KEY, TransientError
from wire.settings import StorageSettings
from wire.storage import ObjectNotFoundError, StorageError
from wire.storage.s3 import S3Storage
from tests.bad_keys import BAD_KEYS

SECRET = "s3cr3t-" + uuid.uuid4().hex  # never allowed in an error message
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials; no profile files, no instance metadata, nothing from the real machine."""
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", os.environ.get("TTSFARM_TEST_S3_KEY", "testing"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", os.environ.get("TTSFARM_TEST_S3_SECRET", SECRET))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def settings(s3_endpoint: str) -> StorageSettings:
    """Settings for a fresh bucket (created) with small multipart sizes; one prefix per test."""
    s = StorageSettings(
        backend="s3",
        prefix=f"t-{uuid.uuid4().hex[:8]}/out",
        s3_bucket=f"ttsfarm-test-{uuid.uuid4().hex[:12]}",
        s3_endpoint_url=s3_endpoint,
        multipart_threshold_mb=5,
        multipart_chunk_mb=5,
    )
    S3Storage(s).ensure_bucket()
    return s


@pytest.fixture
def s3(settings: StorageSettings) -> S3Storage:
    return S3Storage(settings, connect_timeout_s=2, read_timeout_s=30, max_attempts=2)


def all_keys(s3: S3Storage) -> list[str]:
    listing = s3.client.list_objects_v2(Bucket=s3.bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def no_secrets(err: BaseException) -> None:
    text = f"{err} {err!r} {getattr(err, 'detail', '')}"
    assert SECRET not in text
    assert "testing" not in text.replace("ttsfarm-test", "")


# -- S3 --------------------------------------------------------------------------------------------


def test_s3_put_get_exists_url(s3: S3Storage) -> None:
    assert isinstance(s3, st.Storage)
    key = "jobs/42/audio.flac"
    assert not s3.exists(key)
    url = s3.put(key, b"fLaC-bytes", "audio/flac")
    assert url == f"s3://{s3.bucket}/{s3.prefix}/{key}" == s3.url(key)
    assert s3.exists(key)
    assert s3.get(key) == b"fLaC-bytes"
    assert all_keys(s3) == [f"{s3.prefix}/{key}"]


def test_s3_overwrite_replaces(s3: S3Storage) -> None:
    s3.put("a.wav", b"one", "audio/wav")
    s3.put("a.wav", b"two", "audio/wav")
    assert s3.get("a.wav") == b"two"


def test_s3_content_type_is_stored(s3: S3Storage) -> None:
    s3.put("x.pcm", b"\x00\x01" * 10, "audio/L16;rate=24000;channels=1")
    head = s3.client.head_object(Bucket=s3.bucket, Key=s3.object_key("x.pcm"))
    assert head["ContentType"] == "audio/L16;rate=24000;channels=1"
    assert head["ContentLength"] == 20


def test_s3_multipart_above_threshold_only(s3: S3Storage) -> None:
    small = os.urandom(1 * MIB)
    big = os.urandom(11 * MIB)  # threshold and parts are 5 MiB: three parts
    s3.put("small.wav", small, "audio/wav")
    s3.put("big.wav", big, "audio/wav")
    head_small = s3.client.head_object(Bucket=s3.bucket, Key=s3.object_key("small.wav"))
    head_big = s3.client.head_object(Bucket=s3.bucket, Key=s3.object_key("big.wav"))
    assert "-" not in head_small["ETag"].strip('"')
    assert head_big["ETag"].strip('"').endswith("-3")
    assert head_big["ContentType"] == "audio/wav"
    assert s3.get("big.wav") == big


def test_s3_one_request_per_object_below_the_threshold(s3: S3Storage) -> None:
    """A job's output and words go up in one PutObject each, sent from the calling thread (not through boto3's
    transfer manager, whose threads cost more CPU than the request: python -m bench.lab storage); at the threshold and
    above, in parts."""
    calls: list[tuple[str, int]] = []
    s3.client.meta.events.register("before-call.s3", lambda model, **_: calls.append((model.name, threading.get_ident())))
    s3.put("a/audio.wav", os.urandom(5 * MIB - 1), "audio/wav")
    s3.put("a/words.json", b"[]", "application/json")
    assert calls == [("PutObject", threading.get_ident())] * 2
    calls.clear()
    s3.put("b/audio.wav", os.urandom(5 * MIB), "audio/wav")
    assert calls[0][0] == "CreateMultipartUpload" and calls[-1][0] == "CompleteMultipartUpload", calls
    assert s3.get("a/words.json") == b"[]"


def test_s3_presigned_get_with_plain_http(s3: S3Storage) -> None:
    s3.put("jobs/p/audio.ogg", b"OggS-bytes", "audio/ogg")
    url = s3.presigned_url("jobs/p/audio.ogg", expires_s=120)
    assert url is not None and url.startswith(s3.client.meta.endpoint_url)
    with urllib.request.urlopen(url, timeout=10) as response:  # no credentials, no boto3
        assert response.read() == b"OggS-bytes"
        assert response.headers["Content-Type"] == "audio/ogg"
    # moto serves presigned URLs without checking signature or expiry, so check the URL's own terms.
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=120" in url
    assert SECRET not in url
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url.replace("audio.ogg", "other.ogg"), timeout=10)
    assert err.value.code in (403, 404)


@pytest.mark.parametrize("expires", [0, -5, 8 * 24 * 3600])
def test_s3_presigned_expiry_bounds(s3: S3Storage, expires: int) -> None:
    with pytest.raises(InputError) as err:
        s3.presigned_url("a.wav", expires_s=expires)
    assert err.value.code == BAD_OPTION


def test_s3_get_missing_is_a_key_error(s3: S3Storage) -> None:
    with pytest.raises(KeyError):
        s3.get("missing.wav")
    with pytest.raises(ObjectNotFoundError) as err:
        s3.get("missing.wav")
    assert err.value.code == codes.OBJECT_NOT_FOUND


@pytest.mark.parametrize("key", BAD_KEYS)
def test_s3_refuses_traversal_and_writes_nothing(s3: S3Storage, key: str) -> None:
    for op in (
        lambda: s3.put(key, b"evil", "audio/wav"),
        lambda: s3.get(key),
        lambda: s3.exists(key),
        lambda: s3.url(key),
        lambda: s3.presigned_url(key),
    ):
        with pytest.raises(InputError) as err:
            op()
        assert err.value.code == BAD_KEY
    assert all_keys(s3) == []


def test_s3_empty_prefix_and_slashes_trimmed(settings: StorageSettings) -> None:
    bare = S3Storage(StorageSettings(**{**settings.__dict__, "prefix": ""}))
    assert bare.put("k.wav", b"k", "audio/wav") == f"s3://{settings.s3_bucket}/k.wav"
    slashed = S3Storage(StorageSettings(**{**settings.__dict__, "prefix": "/a/b/"}))
    assert slashed.url("k.wav") == f"s3://{settings.s3_bucket}/a/b/k.wav"
    with pytest.raises(InputError):
        S3Storage(StorageSettings(**{**settings.__dict__, "prefix": "a/../.."}))


def test_s3_missing_bucket_is_a_clear_non_retryable_error(settings: StorageSettings) -> None:
    store = S3Storage(StorageSettings(**{**settings.__dict__, "s3_bucket": "no-such-bucket-" + uuid.uuid4().hex[:8]}))
    with pytest.raises(StorageError) as err:
        store.put("a.wav", b"a", "audio/wav")
    assert err.value.code == codes.STORAGE_NO_BUCKET
    assert not err.value.retryable
    no_secrets(err.value)


def test_ensure_bucket_creates_once_and_is_idempotent(settings: StorageSettings) -> None:
    name = "ttsfarm-new-" + uuid.uuid4().hex[:8]
    store = S3Storage(StorageSettings(**{**settings.__dict__, "s3_bucket": name}))
    store.ensure_bucket()
    store.ensure_bucket()
    assert name in [b["Name"] for b in store.client.list_buckets()["Buckets"]]
    store.put("a.wav", b"a", "audio/wav")
    assert store.get("a.wav") == b"a"


def test_unreachable_endpoint_is_transient_and_quick() -> None:
    port = free_port()  # nothing listens there once the probe socket is closed
    store = S3Storage(
        StorageSettings(s3_bucket="b", s3_endpoint_url=f"http://127.0.0.1:{port}"),
        connect_timeout_s=1,
        read_timeout_s=1,
        max_attempts=1,
    )
    for op in (
        lambda: store.put("a.wav", b"a", "audio/wav"),
        lambda: store.get("a.wav"),
        lambda: store.exists("a.wav"),
    ):
        start = time.monotonic()
        with pytest.raises(TransientError) as err:
            op()
        assert time.monotonic() - start < 5
        assert err.value.retryable
        assert err.value.code == "BACKEND_UNAVAILABLE"
        no_secrets(err.value)


def test_endpoint_that_never_answers_times_out_as_transient() -> None:
    with socket.socket() as server:  # accepts connections (kernel backlog) but never replies
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        store = S3Storage(
            StorageSettings(s3_bucket="b", s3_endpoint_url=f"http://127.0.0.1:{port}"),
            connect_timeout_s=1,
            read_timeout_s=0.5,
            max_attempts=1,
        )
        start = time.monotonic()
        with pytest.raises(TransientError) as err:
            store.get("a.wav")
        assert time.monotonic() - start < 5
        no_secrets(err.value)


def test_credentials_in_endpoint_url_are_not_shown() -> None:
    port = free_port()
    store = S3Storage(
        StorageSettings(s3_bucket="b", s3_endpoint_url=f"http://user:{SECRET}@127.0.0.1:{port}"),
        connect_timeout_s=1,
        max_attempts=1,
    )
    assert SECRET not in repr(store)
    with pytest.raises(TTSFarmError) as err:
        store.get("a.wav")
    no_secrets(err.value)


@pytest.mark.parametrize(
    ("op", "code", "status", "expect_cls", "expect_code"),
    [
        ("get_object", "SlowDown", 503, TransientError, "BACKEND_UNAVAILABLE"),
        ("get_object", "InternalError", 500, TransientError, "BACKEND_UNAVAILABLE"),
        ("get_object", "RequestTimeout", 400, TransientError, "BACKEND_UNAVAILABLE"),
        ("get_object", "AccessDenied", 403, StorageError, codes.STORAGE_ACCESS_DENIED),
        ("get_object", "InvalidAccessKeyId", 403, StorageError, codes.STORAGE_ACCESS_DENIED),
        ("get_object", "InvalidArgument", 400, StorageError, codes.STORAGE_REJECTED),
        ("put_object", "AccessDenied", 403, StorageError, codes.STORAGE_ACCESS_DENIED),
        ("put_object", "ServiceUnavailable", 503, TransientError, "BACKEND_UNAVAILABLE"),
        ("head_object", "403", 403, StorageError, codes.STORAGE_ACCESS_DENIED),
    ],
)
def test_service_errors_are_classified(
    op: str, code: str, status: int, expect_cls: type[TTSFarmError], expect_code: str
) -> None:
    client = boto3.session.Session().client("s3", region_name="us-east-1")
    store = S3Storage(StorageSettings(s3_bucket="b", prefix="p"), client=client)
    with Stubber(client) as stub:
        stub.add_client_error(op, service_error_code=code, service_message=f"secret {SECRET}", http_status_code=status)
        with pytest.raises(expect_cls) as err:
            if op == "get_object":
                store.get("a.wav")
            elif op == "put_object":
                store.put("a.wav", b"a", "audio/wav")
            else:
                store.exists("a.wav")
    assert err.value.code == expect_code
    assert err.value.retryable == (expect_cls is TransientError)
    assert "s3://b/p/a.wav" in err.value.message
    no_secrets(err.value)
