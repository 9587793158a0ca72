"""What submitting a job means, apart from any Redis client: validation and the records to write.

``producer.core`` (both SDK faces) calls ``prepare_submission`` for the job's ``Submission``
(``wire.records``) and admits it with the broker's one step (``Broker.admit``: for Redis the Lua script
``lua.ADMIT``, its arguments built by ``wire.backlog``), so the two faces cannot drift apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pipeline.errors import BAD_OPTION, InputError
from producer.checks import (
    bool_arg,
    integer_arg,
    job_id_arg,
    lexicon_arg,
    name_arg,
    number_arg,
    optional_name_arg,
    options_arg,
    text_arg,
)
from wire.keys import JOB_ID, LANES, Keys, bucket_of, new_job_id
from wire.records import CHUNK_MS_RANGE, SegmentJob, Submission
from wire.settings import Settings


REQUEST_KEYS = ("voice", "format", "sample_rate", "lane", "options", "deadline_s", "chunk_ms", "job_id", "bitrate",
                "lexicon", "ssml")


def _rated(opts: Any, rate: float) -> dict[str, float]:
    """The request's options with an SSML ``<prosody rate>`` applied to its speed (BAD_SSML when the
    product leaves the voices' speed range)."""
    from pipeline.errors import BAD_SSML
    from pipeline.voices.base import SPEED_RANGE

    options = opts.to_dict()
    if rate != 1.0:
        speed = options["speed"] * rate
        if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise InputError(f"prosody rate {rate:g} x speed {options['speed']:g} = {speed:g} is outside "
                             f"{SPEED_RANGE[0]:g} to {SPEED_RANGE[1]:g}", code=BAD_SSML)
        options["speed"] = round(speed, 4)
    return options


@dataclass(frozen=True)
class Terms:
    """A request's checked options, apart from its text (``request_terms``)."""

    voice: str  # the catalogue voice asked for (a voice or a blend)
    fmt: str
    lane: str
    options: Any  # pipeline.voices.base.SynthesisOptions
    deadline_s: float | None
    chunk_ms: int
    sample_rate: int
    bitrate: int
    lexicon: dict[str, str] | None
    ssml: bool | None
    job_id: str | None


def check_keys(request: dict[str, Any]) -> None:
    """Every keyword is one ``REQUEST_KEYS`` names (BAD_OPTION)."""
    unknown = sorted(set(request) - set(REQUEST_KEYS))
    if unknown:
        raise InputError(f"unknown request option(s) {', '.join(map(repr, unknown))}; known: {', '.join(REQUEST_KEYS)}",
                         code=BAD_OPTION)


def request_terms(settings: Settings, request: dict[str, Any]) -> Terms:
    """Check every request keyword but the text (see ``prepare_submission``); ``InputError`` on the first bad one."""
    from pipeline.audio import check_format, check_sample_rate
    from pipeline.audio import output_rate as pipeline_output_rate
    from pipeline.encoders import check_bitrate
    from pipeline.voices.bank import output_rate
    from pipeline.voices.base import SynthesisOptions

    check_keys(request)
    voice = optional_name_arg("voice", request.get("voice"))
    fmt = check_format(name_arg("format", request.get("format", "wav")))
    lane = name_arg("lane", request.get("lane", "interactive"))
    if lane not in LANES:
        raise InputError(f"lane must be one of {', '.join(LANES)}", code=BAD_OPTION)
    opts = SynthesisOptions.from_dict(options_arg(request.get("options")))
    deadline_s = number_arg("deadline_s", request.get("deadline_s"), low=0, high=7 * 86400, optional=True, low_open=True)
    chunk_ms = number_arg("chunk_ms", request.get("chunk_ms"), low=CHUNK_MS_RANGE[0], high=CHUNK_MS_RANGE[1],
                          optional=True, integer=True)
    sample_rate = integer_arg("sample_rate", request.get("sample_rate"), optional=True)  # the rates: check_sample_rate
    job_id = request.get("job_id")
    if job_id is not None and not JOB_ID.fullmatch(job_id_arg(job_id)[:100]):
        raise InputError("job_id must be 8 to 64 letters, digits, '_' or '-'", code=BAD_OPTION)
    spec = settings.catalogue.get(voice)
    rate = check_sample_rate(sample_rate) if sample_rate else output_rate(settings.catalogue, spec.name)
    bitrate = check_bitrate(fmt, request.get("bitrate"), pipeline_output_rate(fmt, rate)) or 0
    return Terms(voice=spec.name, fmt=fmt, lane=lane, options=opts, deadline_s=deadline_s, chunk_ms=int(chunk_ms or 0),
                 sample_rate=rate, bitrate=bitrate, lexicon=lexicon_arg(request.get("lexicon")),
                 ssml=bool_arg("ssml", request.get("ssml"), optional=True), job_id=job_id)


def plan_segments(settings: Settings, terms: Terms, text: str, job_id: str, created: float, deadline: float, *,
                  first_seg: int = 0, first_char: int = 0, total: int | None = None) -> list[SegmentJob]:
    """``text`` as the job's segment records. A piece of a job whose text is appended (``producer.appending``) starts at
    segment ``first_seg`` and character ``first_char`` of the job's text, and has ``total`` 0 (open)."""
    from pipeline.synth import plan
    from pipeline.text.sources import words_after

    planned = plan(text, terms.voice, settings, lexicon=terms.lexicon, ssml=terms.ssml)
    after = words_after([(p.segment.words, p.source) for p in planned])
    return [
        SegmentJob(
            job_id=job_id,
            seg=first_seg + n,
            total=len(planned) if total is None else total,
            text=p.segment.text,
            lang=p.segment.lang,
            voice=p.voice,
            request_voice=terms.voice,
            format=terms.fmt,
            sample_rate=terms.sample_rate,
            lane=terms.lane,
            deadline=deadline,
            pause_s=p.segment.pause_after_s,
            est_s=p.segment.est_seconds,
            options=_rated(terms.options, p.rate),
            created=created,
            chunk_ms=terms.chunk_ms,
            words=[[a, b, c + first_char, d + first_char, p.source[c:d], tail]
                   for (a, b, c, d), tail in zip(p.segment.words, after[n])],
            bitrate=terms.bitrate,
        )
        for n, p in enumerate(planned)
    ]


def job_status(terms: Terms, created: float, deadline: float, segments: list[SegmentJob]) -> dict[str, Any]:
    """The status record a new job starts with (``JobStatus.admitted`` adds the admission's fields)."""
    return {
        "state": "queued",
        "total": len(segments),
        "done": 0,
        "voice": terms.voice,
        "format": terms.fmt,
        "sample_rate": terms.sample_rate,
        "bitrate": terms.bitrate,
        "lane": terms.lane,
        "created": created,
        "deadline": deadline,
        "est_seconds": round(sum(s.est_s for s in segments), 3),
    }


def prepare_submission(settings: Settings, text: Any, **request: Any) -> Submission:
    """Validate a request and build its records. Every input error is raised here, before any write.

    Keywords (all optional): ``voice``, ``format`` ("wav"; also "mp3", "ogg" (Opus), "aac", "flac", "pcm"),
    ``sample_rate``, ``bitrate`` (bit/s, lossy formats), ``lane`` ("interactive"), ``options`` ({"speed",
    "noise_scale", "noise_w"}), ``deadline_s``, ``chunk_ms``, ``job_id``, ``lexicon`` ({word: pinyin or
    phonemes}), ``ssml`` (read ``text`` as SSML; text starting with ``<speak`` is SSML anyway). A wrong
    type or value of any of them, or an unknown keyword, is an ``InputError`` (``producer.checks``)."""
    check_keys(request)
    text = text_arg(text)
    terms = request_terms(settings, request)
    job_id = terms.job_id or new_job_id()
    now = time.time()
    deadline = now + terms.deadline_s if terms.deadline_s else 0.0
    segments = plan_segments(settings, terms, text, job_id, now, deadline)
    keys = Keys(settings.redis.key_prefix)
    streams = [keys.queue(terms.lane, bucket_of(s.est_s, settings.queue.bucket_edges_s)) for s in segments]
    return Submission(job_id=job_id, segments=segments, status=job_status(terms, now, deadline, segments), streams=streams)
