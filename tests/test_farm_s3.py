"""Full outputs go to S3: moto's standalone server, a real worker process, real voices.

The worker is started with ``TTSFARM_STORAGE_S3_*`` settings and dummy AWS credentials, and a small
multipart threshold, so a long job is uploaded in parts and a short one in one PUT.
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Callable

import boto3
import numpy as np
import pytest
import soundfile as sf

from pipeline.audio import from_pcm16
from tests.conftest import Farm, FarmSpec

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
THRESHOLD_MB = 1
LONG = (
    "The farm keeps its full outputs in a bucket, one folder for each job. "
    "A long job like this one makes a file larger than the multipart threshold. "
    "So the worker sends it in parts, and the stored object says so in its entity tag. "
    "A short job goes up in a single request instead, with a plain tag."
)


@pytest.fixture
def s3_farm(make_farm: Callable[..., Farm], s3_endpoint: str) -> tuple[Farm, object]:
    farm = make_farm(FarmSpec(s3_outputs=True, env={
        "TTSFARM_STORAGE_PREFIX": f"e2e-{uuid.uuid4().hex[:6]}/out",
        "TTSFARM_STORAGE_MULTIPART_THRESHOLD_MB": str(THRESHOLD_MB),
        "TTSFARM_STORAGE_MULTIPART_CHUNK_MB": str(THRESHOLD_MB),
    }))
    return farm, boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


def test_outputs_land_in_the_bucket_under_the_prefix(s3_farm: tuple[Farm, object]) -> None:
    farm, s3 = s3_farm
    st = farm.settings.storage
    bucket, prefix = st.s3_bucket, st.prefix
    client = farm.client()
    long_job = client.submit(LONG, voice="joe", sample_rate=48000)
    short_job = client.submit("Hello there.", voice="joe")

    for job, multipart in ((long_job, True), (short_job, False)):
        pcm, rate = job.audio(timeout=120)
        result = job.wait(timeout=60)
        key = f"{prefix}/{job.id}/audio.wav"
        assert result.url == f"s3://{bucket}/{key}"
        head = s3.head_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
        assert head["ContentType"] == "audio/wav"
        data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
        assert head["ContentLength"] == len(data)
        stored, stored_rate = sf.read(io.BytesIO(data), dtype="float32")
        assert stored_rate == rate == (48000 if multipart else 22050)
        np.testing.assert_array_equal(stored, from_pcm16(pcm))
        assert abs(result.duration_s - len(stored) / rate) < 1e-3
        # boto3's transfer manager: multipart above the threshold, whose ETag ends in "-<parts>"
        assert (len(data) > THRESHOLD_MB * MIB) is multipart, len(data)
        etag = head["ETag"]
        assert re.fullmatch(r'"[0-9a-f]{32}-\d+"' if multipart else r'"[0-9a-f]{32}"', etag), etag

    listing = s3.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
    keys = sorted(o["Key"] for o in listing.get("Contents", []))
    assert keys == sorted(f"{prefix}/{j.id}/{name}" for j in (long_job, short_job) for name in ("audio.wav", "words.json"))
    assert not list(farm.root.glob("storage/**/*"))  # nothing went to the local folder
