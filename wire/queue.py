"""The records of the consuming side: what a worker reads off the bucket streams.

``Head`` is a queue's oldest undelivered entry, seen without claiming it (the batching and scheduling rules choose
among heads); ``Entry`` is an entry a consumer claimed, its job parsed (or the error that stopped the parse: a
malformed entry becomes a record to dead-letter, never a crash). A broker returns these from its consumer's steps
(``broker.Consumer``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from wire.records import SegmentJob, text_of


@dataclass(frozen=True)
class Head:
    """The oldest undelivered entry of one queue stream."""

    stream: str
    lane: str
    arrived_ms: int
    est_s: float
    voice: str
    seg: int = 0  # segments of one job arrive in the same millisecond: the earlier segment goes first
    job_id: str = ""  # for its playback clock (workers/schedule.py)
    created: float = 0.0
    deadline: float = 0.0
    first_behind: bool = False  # the next entry of its stream is a job's first segment too

    @property
    def order(self) -> tuple[int, int]:
        return (self.arrived_ms, self.seg)


@dataclass
class Entry:
    """A claimed stream entry; ``job`` is None when the entry could not be parsed (``error`` says why)."""

    stream: str
    entry_id: str
    fields: dict[Any, Any]  # as stored: a dead letter keeps them, a requeue writes them back
    job: SegmentJob | None
    error: Exception | None = None
    deliveries: int = 1
    claimed: float = field(default_factory=time.time)  # when this consumer claimed it (the job's ``claimed``)

    @property
    def arrived_ms(self) -> int:
        return int(self.entry_id.split("-")[0])


def parse_entry(stream: str, entry_id: Any, fields: dict[Any, Any]) -> Entry:
    try:
        return Entry(stream, text_of(entry_id), fields, SegmentJob.from_fields(fields))
    except Exception as exc:  # a malformed entry becomes an error record, never a crash
        return Entry(stream, text_of(entry_id), fields, None, exc)


def head_of(stream: str, entry_id: Any, fields: dict[Any, Any], *, first_behind: bool = False) -> Head:
    """The head a peek saw: the stream's lane (``Keys.queue``: ``...:q:<lane>:<bucket>``), its job's timing, and
    whether another job's first segment waits behind it."""
    e = parse_entry(stream, entry_id, fields)
    job = e.job
    return Head(stream=stream, lane=stream.split(":")[-2], arrived_ms=e.arrived_ms, est_s=job.est_s if job else 0.0,
                voice=job.voice if job else "", seg=job.seg if job else 0, job_id=job.job_id if job else "",
                created=job.created if job else 0.0, deadline=job.deadline if job else 0.0, first_behind=first_behind)
