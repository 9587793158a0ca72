"""Security: Redis AUTH and TLS, secrets kept out of logs, limits enforced before heavy work."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis

from pipeline.errors import TEXT_TOO_LONG, InputError, TTSFarmError
from pipeline.synth import plan
from producer.client import Client
from bench.processes import RedisServer, free_port
from wire.settings import Settings
from tests.conftest import Farm

pytestmark = pytest.mark.slow


def test_redis_auth_url_works_end_to_end_and_a_wrong_password_is_refused(tmp_path: Path, base_settings: Settings) -> None:
    server = RedisServer(password="s3cret-pass").start()
    try:
        farm = Farm(server.url, tmp_path)
        farm.start_worker()
        try:
            assert farm.client().submit("Authenticated.", voice="joe").wait(timeout=60).state == "done"
            bad = base_settings.replace(redis={"url": f"redis://:wrong@127.0.0.1:{server.port}/0"})
            with pytest.raises(TTSFarmError) as exc:
                Client.from_url(settings=bad).submit("Refused.", voice="joe")
            assert exc.value.code == "BACKEND_AUTH_FAILED"
            assert "s3cret-pass" not in farm.logs()
        finally:
            farm.stop()
    finally:
        server.stop()


def _tls_files(d: Path) -> tuple[Path, Path, Path]:
    ca_key, ca, key, csr, crt = (d / n for n in ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt"))
    run = lambda *a: subprocess.run(["openssl", *map(str, a)], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=ttsfarm-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", crt, "-days", "1", "-extfile", ext)
    return ca, crt, key


def test_rediss_url_with_a_verified_certificate(tmp_path: Path, base_settings: Settings) -> None:
    ca, crt, key = _tls_files(tmp_path)
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(crt),
                             "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no",
                             "--save", "", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca}"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        client = Client.from_url(settings=base_settings.replace(redis={"url": url}))
        job = client.submit("Over TLS.", voice="joe")
        assert job.status()["state"] == "queued"
        # without the CA the certificate is not trusted: the connection is refused, not silently insecure
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=required").ping()
    finally:
        proc.terminate()
        proc.wait(10)


def test_s3_credentials_never_reach_the_logs(redis_url: str, tmp_path: Path) -> None:
    secret_id, secret_key = "AKIATTSFARMLEAKCHECK", "do-not-log-this-secret-key-123"
    farm = Farm(redis_url, tmp_path, TTSFARM_STORAGE_S3_BUCKET="farm",
                TTSFARM_STORAGE_S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",  # nothing listens: every put fails
                TTSFARM_STORAGE_S3_CONNECT_TIMEOUT_S="0.5", TTSFARM_STORAGE_S3_MAX_ATTEMPTS="1",
                AWS_ACCESS_KEY_ID=secret_id, AWS_SECRET_ACCESS_KEY=secret_key, AWS_DEFAULT_REGION="us-east-1")
    farm.start_worker()
    try:
        job = farm.client().submit("Storage is unreachable.", voice="joe")
        deadline = time.monotonic() + 30
        while "failed transiently" not in farm.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        logs = farm.logs()
        assert "failed transiently" in logs  # the outage is logged...
        assert secret_id not in logs and secret_key not in logs  # ...without the credentials
        job.cancel()
    finally:
        farm.stop()


def test_size_limit_is_checked_before_any_work(base_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.text.segment as segment

    def no_work(*_: object) -> str:
        raise AssertionError("normalization ran on an oversized text")

    monkeypatch.setattr(segment, "_normalize", no_work)
    monkeypatch.setattr(segment, "_stretches", no_work)
    huge = "a" * (base_settings.frontend.max_text_chars * 50)
    with pytest.raises(InputError) as exc:
        plan(huge, None, base_settings)
    assert exc.value.code == TEXT_TOO_LONG
