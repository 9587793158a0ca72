"""Backpressure: a backlog limit per lane, in queued segments and in predicted audio seconds.

A submission is admitted and written by one Lua script, so two producers cannot both slip past the
limit: it checks the lane's counters, then writes the status record, every segment's stream entry and
the new counts at once. A job id admits one request: the status keeps the request's fingerprint, so the same
request again (a retry after a lost reply) is the job that exists, and another one under the id is refused
(JOB_ID_CONFLICT) with nothing written. Workers take a segment off the counters when their XACK of it succeeds
(an XACK counts once, so a redelivered entry cannot be subtracted twice). A lane that is empty admits any
job, so a job larger than the limit can still run when nothing else waits. The scripts are ``lua.ADMIT`` and
``lua.ACK``; this module builds their arguments and reads their answers.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError
from wire.admission import admitted_at_submit
from wire.errors import JOB_ID_CONFLICT, OverloadedError
from wire.keys import Keys
from wire.settings import QueueSettings
from wire.status import JobStatus

if TYPE_CHECKING:
    from wire.records import Submission


def limits(q: QueueSettings, lane: str) -> tuple[int, float]:
    if lane == "bulk":
        return q.max_backlog_bulk_segments, q.max_backlog_bulk_seconds
    return q.max_backlog_interactive_segments, q.max_backlog_interactive_seconds


def admitted_status(sub: Submission, q: QueueSettings) -> dict[str, str]:
    """The status fields a job's admission writes: its request's, its fingerprint and its admission horizon."""
    return JobStatus.admitted(**{**sub.status, "fingerprint": sub.fingerprint, "horizon_s": q.admission_horizon_s})


def admit_args(sub: Submission, keys: Keys, q: QueueSettings) -> tuple[list[str], list[Any]]:
    lane = sub.segments[0].lane
    max_n, max_s = limits(q, lane)
    add_s = round(sum(s.est_s for s in sub.segments), 3)
    now_n = admitted_at_submit([s.est_s for s in sub.segments], lane, q.admission_horizon_s)
    script_keys = [keys.status(sub.job_id), keys.backlog(lane), keys.staging(lane), keys.staged(sub.job_id),
                   keys.admission_due(), *sub.streams]
    fingerprint = sub.fingerprint
    argv: list[Any] = [max_n, max_s, add_s, q.job_ttl_s, json.dumps(admitted_status(sub, q)), now_n, sub.job_id,
                       time.time(), fingerprint]
    argv += [json.dumps({**seg.to_fields(), "est": round(seg.est_s, 3)}, ensure_ascii=False) for seg in sub.segments]
    return script_keys, argv


def check_admitted(reply: list[Any], sub: Submission, q: QueueSettings) -> None:
    if int(reply[0]) in (1, 2):  # 2: the same request admitted already (an earlier try whose reply was lost)
        return
    if int(reply[0]) == 3:
        raise InputError(f"job id {sub.job_id!r} is taken by another request (other text or options); submit "
                         "under a new id, or resend the same request to get its job", code=JOB_ID_CONFLICT,
                         job_id=sub.job_id)
    lane = sub.segments[0].lane
    max_n, max_s = limits(q, lane)
    raise OverloadedError(
        f"the {lane} lane is full ({int(reply[1])} segments, {float(reply[2]):.0f} s of audio queued; "
        f"limits {max_n} segments, {max_s:.0f} s): retry later",
        lane=lane, queued_segments=int(reply[1]), queued_seconds=float(reply[2]),
    )
