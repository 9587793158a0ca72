"""The wire's side of a job whose text is appended while it plays (``producer.appending`` is the SDK's): what
opening, appending and closing write, as the arguments of ``lua.OPEN_JOB`` and ``lua.APPEND_SEGMENTS``, and what
their answers mean.

An open job's status has ``open`` 1, ``total`` 0 and ``appended`` (its segments so far); its segment records carry
total 0. Appended segments go to their bucket streams at once, against the lane's backlog limit. The close sets the
total; the worker that publishes the end of a segment of an open job reads the total in the same transaction
(``Broker.publish_piece``), so the last segment to end after the close finishes the job, and a close that comes when
every segment is done queues a closer (``SegmentJob.closing``) that a worker finishes the job with. A reader takes an
open job's total as unknown until its final record.

Round trips: one to open, one per append (however many segments it carries), one to close (none when the close
rides on the last append). Each segment of an open job costs its worker one more command (an HGET) inside the
publish that ends it; other jobs' segments cost nothing more.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pipeline.errors import EMPTY_TEXT, InputError
from wire.backlog import limits
from wire.errors import APPEND_OUT_OF_ORDER, JOB_CLOSED, JOB_ID_CONFLICT, JobError, JobNotFoundError, OverloadedError
from wire.keys import Keys
from wire.records import SegmentJob
from wire.settings import QueueSettings
from wire.status import JobStatus

APPENDED, RETRIED, FULL, MISSING, ENDED, CLOSED, OUT_OF_ORDER, EMPTY = 1, 2, 0, -1, -2, -3, -4, -5


def opened_status(status: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """An open job's request fingerprint and the status fields its opening writes, from the fields ``status``
    (``submit.job_status``)."""
    asked = {k: v for k, v in status.items() if k not in ("created", "deadline")}
    fingerprint = hashlib.sha256(json.dumps({"open": asked}, sort_keys=True).encode()).hexdigest()
    return fingerprint, JobStatus.admitted(**{**status, "total": 0, "open": 1, "appended": 0,
                                              "fingerprint": fingerprint, "horizon_s": 0})


def open_args(job_id: str, status: dict[str, Any], keys: Keys, q: QueueSettings) -> tuple[list[str], list[Any]]:
    """``lua.OPEN_JOB``'s keys and arguments for a job with the status fields ``status`` (``submit.job_status``)."""
    fingerprint, fields = opened_status(status)
    return [keys.status(job_id)], [q.job_ttl_s, fingerprint, *[x for kv in fields.items() for x in kv]]


def check_opened(reply: Any, job_id: str) -> None:
    if int(reply) == 3:
        raise InputError(f"job id {job_id!r} is taken by another request; open under a new id", code=JOB_ID_CONFLICT,
                         job_id=job_id)


def lane_of(segments: Sequence[SegmentJob], last: tuple[SegmentJob, str] | None) -> str:
    """The lane an append counts against: its segments' (a close that appends none: the job's last segment's)."""
    return segments[0].lane if segments else last[0].lane if last else "interactive"


def append_args(job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first_seg: int, *,
                close: bool, last: tuple[SegmentJob, str] | None, keys: Keys,
                q: QueueSettings) -> tuple[list[str], list[Any]]:
    """``lua.APPEND_SEGMENTS``'s keys and arguments: ``segments`` (numbered from ``first_seg``) on ``streams``; with
    ``close``, the job's total set; ``last``: the job's last segment appended before and its stream (the closer's
    model), for a close that appends nothing."""
    lane = lane_of(segments, last)
    max_n, max_s = limits(q, lane)
    add_s = round(sum(s.est_s for s in segments), 3)
    closer = ""
    script_keys = [keys.status(job_id), keys.backlog(lane), *streams]
    if close and not segments and last is not None:
        job, stream = last
        closer = json.dumps(dataclasses.replace(job, total=first_seg, closing=True, est_s=0.0).to_fields(),
                            ensure_ascii=False)
        script_keys.append(stream)
    argv: list[Any] = [max_n, max_s, add_s, q.job_ttl_s, first_seg, int(close), closer]
    argv += [json.dumps(seg.to_fields(), ensure_ascii=False) for seg in segments]
    return script_keys, argv


def check_appended(reply: Sequence[Any], job_id: str, lane: str, q: QueueSettings) -> None:
    """Raise what an ``APPEND_SEGMENTS`` answer says went wrong."""
    status = int(reply[0])
    if status in (APPENDED, RETRIED):
        return
    if status == FULL:
        max_n, max_s = limits(q, lane)
        raise OverloadedError(f"the {lane} lane is full ({int(reply[1])} segments, {float(reply[2]):.0f} s of audio "
                              f"queued; limits {max_n} segments, {max_s:.0f} s): append again later", lane=lane,
                              queued_segments=int(reply[1]), queued_seconds=float(reply[2]))
    if status == MISSING:
        raise JobNotFoundError(f"no job {job_id!r} (unknown or expired)")
    if status == ENDED:
        state = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
        raise JobError(f"job {job_id} was {state}: no more text can be appended", code=f"JOB_{state.upper()}")
    if status == EMPTY:
        raise InputError("the job was closed with no text to speak", code=EMPTY_TEXT)
    raise JobError(f"job {job_id}: append refused ({'closed already' if status == CLOSED else 'out of order'})",
                   code=JOB_CLOSED if status == CLOSED else APPEND_OUT_OF_ORDER)
