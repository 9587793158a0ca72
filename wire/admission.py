"""Just-in-time admission: a listener's job enters the bucket streams a little ahead of its playback, so the
next job's first segment is a stream head at once instead of waiting behind the whole backlog of the jobs before.

At submit (``lua.ADMIT``) an interactive job's first segments covering ``queue.admission_horizon_s`` of predicted
audio go to their bucket streams; the rest wait staged (``Keys.staging``, ``Keys.staged``). Whenever the job's
audio is published, the same atomic step (``admit_next``, inside the publish's script ``lua.PUBLISH_PIECE``) admits its next segments so that
the audio admitted and not yet played stays at the job's horizon (its submit's, kept in its status); the workers' sweep (``lua.ADMIT_DUE``, every
``queue.admission_sweep_ms``) does the same for jobs whose listener played on between publishes. When nothing else
waits in the streams (an idle farm) a job runs further ahead, up to ``queue.admission_idle_ahead`` segments in
flight, so a lone long job still finishes at full speed. Bulk jobs (books) have no listener: they are admitted
whole, and deadline scheduling lets them fill the idle time.

The whole job counts against the lane's backlog limit and in its counters from the start (``ttsfarm status``, the
metrics and autoscaling see a big job's whole size); staged segments are also the length of the lane's staging
stream, which the KEDA scaler reads. A job that ends before its staged segments are admitted (cancel, failure,
deadline) drops them in the script that ends it.

The rules are here as pure functions; the Lua applies the same ones (``tests/test_admission.py`` holds the two
against each other).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wire.records import SegmentJob
from wire.settings import QueueSettings


@dataclass(frozen=True)
class Admission:
    """The workers' side of the admission policy, as the broker's steps take it. (A job's horizon is its submit's:
    ``horizon_s`` in its status record.)"""

    idle_ahead: int = 6

    @classmethod
    def of(cls, q: QueueSettings) -> Admission:
        return cls(q.admission_idle_ahead)


def admitted_at_submit(est_s: Sequence[float], lane: str, horizon_s: float) -> int:
    """How many of a job's first segments (predicted seconds ``est_s``) enter the bucket streams at submit: all of
    a bulk job, or when the horizon is off (0); else the fewest whose audio reaches the horizon, at least one."""
    if lane != "interactive" or horizon_s <= 0:
        return len(est_s)
    total = 0.0
    for i, est in enumerate(est_s):
        total += est
        if total >= horizon_s:
            return i + 1
    return len(est_s)


def may_stage(job: SegmentJob) -> bool:
    """Whether a job can have staged segments at all (else its publishes skip the admission step): an interactive
    job of more than one segment (its first segment always enters at submit)."""
    return job.lane == "interactive" and job.total > 1


def admit_another(*, admitted_s: float, played_s: float, horizon_s: float, queued: int, in_flight: int,
                  idle_ahead: int, ending: bool = False) -> bool:
    """Whether a job's next staged segment is admitted now. ``admitted_s``: its predicted audio admitted so far;
    ``played_s``: how much of it the listener has played (wall time since its first chunk, at most what was
    delivered); ``queued``: segments in the lane's bucket streams not yet acked (every job's); ``in_flight``: the
    job's admitted segments not yet done; ``ending``: a segment of the job ended with this publish (done, its entry
    not yet acked: still in ``queued``)."""
    idle = queued - int(ending) - in_flight <= 0 and in_flight < idle_ahead
    return admitted_s - played_s < horizon_s or idle
