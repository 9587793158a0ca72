"""The wire's names: every Redis key of the farm, the consumer group, the lanes, the job states and the job id
rule. A broker other than Redis maps these names onto its own objects."""

from __future__ import annotations

import bisect
import re
import secrets
from dataclasses import dataclass

JOB_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")  # also a storage key part: no dots, no slashes
LANES = ("interactive", "bulk")
GROUP = "workers"  # the consumer group every worker reads the queues in
STATES_FINAL = ("done", "failed", "cancelled", "expired")


@dataclass(frozen=True)
class Keys:
    """Every Redis key of the farm, under one prefix."""

    prefix: str = "ttsfarm"

    def queue(self, lane: str, bucket: int) -> str:
        return f"{self.prefix}:q:{lane}:{bucket}"

    def queues(self, n_buckets: int, lanes: tuple[str, ...] = LANES) -> list[str]:
        return [self.queue(lane, b) for lane in lanes for b in range(n_buckets)]

    def status(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def results(self, job_id: str) -> str:
        return f"{self.prefix}:res:{job_id}"

    def parts(self, job_id: str) -> str:
        """Hash, until the job is assembled: each published piece's PCM16 (``<seg>:<piece>``) and each done segment's
        words with their times (``words:<seg>``, JSON). A segment counts done in the status (``done``, ``batch:<seg>``)."""
        return f"{self.prefix}:pcm:{job_id}"

    def frames(self, job_id: str) -> str:
        """Hash: a streamed segment's acoustic frames (field ``<seg>``), from a voice that cannot make them again, while
        the segment runs (its claim is in the status: ``claim:<seg>``)."""
        return f"{self.prefix}:job:{job_id}:frames"

    def dead_letters(self) -> str:
        return f"{self.prefix}:dlq"

    def workers(self) -> str:
        return f"{self.prefix}:workers"

    def backlog(self, lane: str) -> str:
        return f"{self.prefix}:backlog:{lane}"

    def staging(self, lane: str) -> str:
        """Stream: a lane's staged segments (admitted to the farm, not yet to a bucket stream), every job's."""
        return f"{self.prefix}:staging:{lane}"

    def staged(self, job_id: str) -> str:
        """List: a job's staged segments, in order, as ids of ``staging`` entries."""
        return f"{self.prefix}:staged:{job_id}"

    def admission_due(self) -> str:
        """Sorted set: jobs with staged segments, scored by when their next segment is due to be admitted."""
        return f"{self.prefix}:admission_due"

    def book_run(self, book_id: str) -> str:
        """String: the id of the book's current run (assembly tasks of another run refuse to write)."""
        return f"{self.prefix}:book:{book_id}:run"

    def book_reply(self, book_id: str, token: str) -> str:
        """List: an assembly task's JSON reply, read by the book's runner."""
        return f"{self.prefix}:book:{book_id}:reply:{token}"

    def is_book_reply(self, key: str) -> bool:
        """Whether ``key`` (named by a task) is a reply list of this farm's books: a task may push to no other key."""
        return key.startswith(f"{self.prefix}:book:") and ":reply:" in key


def new_job_id() -> str:
    """128 random bits, URL-safe: unguessable, so a job id is also the right to read its results."""
    return secrets.token_urlsafe(16)


def bucket_of(est_seconds: float, edges: tuple[float, ...]) -> int:
    return bisect.bisect_right(list(edges), est_seconds)
