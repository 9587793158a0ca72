"""The queue snapshot: the farm's queues as one consistent read (``Broker.queue_snapshot``).

What `ttsfarm status` draws, what a worker's metrics endpoint exposes as gauges at scrape time (the lag is what
KEDA scales the workers on) and what an autoscaler or a dashboard asks: each lane's backlog counters (kept by
``lua.ADMIT`` and ``lua.ACK``), each bucket stream's length, lag (entries not yet delivered to the
workers' group), pending count (claimed, not acked) and consumers, and the dead-letter stream's length and
newest entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.records import DeadLetter


@dataclass(frozen=True)
class LaneBacklog:
    """A lane's admission counters: segments admitted to the farm (in its bucket streams or staged) and the
    predicted seconds of audio they make; ``staged``: of those, segments of long interactive jobs waiting for their
    turn to enter a bucket stream (``wire.admission``)."""

    segments: float = 0.0
    seconds: float = 0.0
    staged: int = 0


@dataclass(frozen=True)
class BucketState:
    """One bucket stream of a lane, as the workers' consumer group sees it (``grouped``: the group exists; the
    stream and its group are made on the first submit)."""

    lane: str
    bucket: int
    stream: str
    grouped: bool = False
    length: int = 0
    lag: int | None = None  # None: unknown (no group, a Redis before 7, or a trimmed stream)
    pending: int = 0
    consumers: int = 0


@dataclass(frozen=True)
class QueueSnapshot:
    backlog: dict[str, LaneBacklog]  # by lane, in ``keys.LANES`` order
    buckets: tuple[BucketState, ...]  # lane by lane, bucket by bucket
    dead_letter_count: int = 0
    dead_letters: tuple[DeadLetter, ...] = ()  # the newest first, as many as asked for
