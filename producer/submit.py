"""What submitting a job means, apart from any Redis client: validation and the records to write.

The sync and asyncio clients both call ``prepare_submission`` and then write its records in one
transaction, so they cannot drift apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import Settings
from producer.contract import CHUNK_MS_RANGE, LANES, Keys, SegmentJob, bucket_of, new_job_id


@dataclass(frozen=True)
class Submission:
    job_id: str
    segments: list[SegmentJob]
    status: dict[str, Any]
    streams: list[str]  # the bucket stream of each segment

    @property
    def total(self) -> int:
        return len(self.segments)


def prepare_submission(
    settings: Settings,
    text: bytes | str,
    *,
    voice: str | None = None,
    format: str = "wav",
    sample_rate: int | None = None,
    lane: str = "interactive",
    options: dict[str, float] | None = None,
    deadline_s: float | None = None,
    chunk_ms: int | None = None,
    job_id: str | None = None,
) -> Submission:
    """Validate a request and build its records. Every input error is raised here, before any write."""
    from pipeline.audio import check_format, check_sample_rate
    from pipeline.synth import plan
    from pipeline.voices.base import SynthesisOptions
    from pipeline.voices.bank import output_rate

    fmt = check_format(format)
    if lane not in LANES:
        raise InputError(f"lane must be one of {', '.join(LANES)}", code=BAD_OPTION)
    opts = SynthesisOptions.from_dict(dict(options or {}))
    if deadline_s is not None and not (0 < deadline_s <= 7 * 86400):
        raise InputError("deadline_s must be between 0 and 7 days", code=BAD_OPTION)
    if chunk_ms is not None and not (isinstance(chunk_ms, int) and CHUNK_MS_RANGE[0] <= chunk_ms <= CHUNK_MS_RANGE[1]):
        raise InputError(f"chunk_ms must be an integer in [{CHUNK_MS_RANGE[0]}, {CHUNK_MS_RANGE[1]}]", code=BAD_OPTION)
    spec = settings.catalogue.get(voice)
    rate = check_sample_rate(sample_rate) if sample_rate else output_rate(settings.catalogue, spec.name)
    planned = plan(text, spec.name, settings)
    job_id = job_id or new_job_id()
    now = time.time()
    deadline = now + deadline_s if deadline_s else 0.0
    keys = Keys(settings.redis.key_prefix)
    segments = [
        SegmentJob(
            job_id=job_id,
            seg=p.segment.index,
            total=len(planned),
            text=p.segment.text,
            lang=p.segment.lang,
            voice=p.voice,
            request_voice=spec.name,
            format=fmt,
            sample_rate=rate,
            lane=lane,
            deadline=deadline,
            pause_s=p.segment.pause_after_s,
            est_s=p.segment.est_seconds,
            options=opts.to_dict(),
            created=now,
            chunk_ms=chunk_ms or 0,
        )
        for p in planned
    ]
    streams = [keys.queue(lane, bucket_of(s.est_s, settings.queue.bucket_edges_s)) for s in segments]
    status = {
        "state": "queued",
        "total": len(segments),
        "done": 0,
        "voice": spec.name,
        "format": fmt,
        "sample_rate": rate,
        "lane": lane,
        "created": now,
        "deadline": deadline,
        "est_seconds": round(sum(s.est_s for s in segments), 3),
    }
    return Submission(job_id=job_id, segments=segments, status=status, streams=streams)
