"""The broker seam: the farm's atomic wire steps, as one small interface, and its Redis implementation.

Everything the farm keeps in its message store goes through names (``keys``), records (``records``) and a
handful of steps that must each happen at once (two producers must not both slip past a backlog limit; a
client's cancel must not be undone by a worker's finish). ``Broker`` names those steps; ``RedisBroker`` runs
each as one Lua script (``lua``). The SDK and front ends use the producing steps, workers the consuming ones.

Adding another broker (NATS JetStream, SQS + DynamoDB, an in-memory stub for tests):

1. Write a class with the methods of ``Broker`` below (``isinstance(x, Broker)`` checks it at run time),
   keeping each step atomic the way its docstring says; map ``Keys``' names onto your store's objects.
2. Store and return the records of ``producer.wire.records`` unchanged (``SegmentJob.to_fields``,
   ``chunk_fields``, ``final_fields``, ``dead_letter_fields``): readers parse them with the same functions.
3. Hand it to what builds the farm's connections (``Publisher``, ``StreamQueue``, the SDK client) in place
   of ``RedisBroker``; the queue reading itself (consumer groups, claiming, reclaiming) is Redis Streams'
   today and lives in ``workers.queue``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from producer.wire.backlog import admit_args, check_admitted
from producer.wire.keys import GROUP, Keys
from producer.wire.lua import ADMIT, CANCEL, ENSURE_GROUPS, FINALIZE, MARK_STARTED, READ_RESULTS, RELEASE
from producer.wire.records import CANCELLED_INFO, final_record

if TYPE_CHECKING:
    import redis

    from producer.submit import Submission
    from producer.wire.settings import QueueSettings


@runtime_checkable
class Broker(Protocol):
    """The farm's atomic wire steps. ``keys`` names every object of the farm in the store."""

    keys: Keys

    # -- producing side: the SDK, front ends ---------------------------------------------------------------
    def ensure_groups(self, streams: Sequence[str]) -> None:
        """Create the workers' consumer group on each queue stream unless it is there."""
        ...

    def admit(self, sub: Submission, queue: QueueSettings) -> None:
        """Check the lane's backlog limit and write the job's status and every segment at once, or raise
        ``OverloadedError`` and write nothing."""
        ...

    def cancel(self, job_id: str) -> int:
        """Mark a job cancelled unless it has ended: -1 no such job, 0 it had ended, 1 cancelled."""
        ...

    def read_results(self, job_id: str, args: Sequence[Any]) -> Any:
        """A job's results records after a reader's position (``JobReader.read_args``), with how many the
        stream has lost at its head (``JobReader.take`` reads the reply); None when there is no stream."""
        ...

    # -- consuming side: workers ------------------------------------------------------------------------------
    def release(self, lane: str, segments: int, seconds: float) -> None:
        """Take acked segments off a lane's backlog counters (never below zero)."""
        ...

    def mark_started(self, job_id: str, worker: str) -> bool:
        """Mark a job started by ``worker``; True for its first start, never over a state written meanwhile."""
        ...

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 **status: Any) -> int:
        """Write a job's end state and its one final record: 1 as asked, 2 if a client's cancel won the race
        (the job ends cancelled), 0 if it had ended already. ``status``: fields for the job's status record
        (any names: ``info`` too)."""
        ...


class RedisBroker:
    """``Broker`` on Redis: each step one Lua script, registered once per connection."""

    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r = r
        self.keys = keys
        self._admit = r.register_script(ADMIT)
        self._read_results = r.register_script(READ_RESULTS)
        self._release = r.register_script(RELEASE)
        self._mark_started = r.register_script(MARK_STARTED)
        self._finalize = r.register_script(FINALIZE)

    def ensure_groups(self, streams: Sequence[str]) -> None:
        self.r.eval(ENSURE_GROUPS, len(streams), *streams, GROUP)

    def admit(self, sub: Submission, queue: QueueSettings) -> None:
        script_keys, argv = admit_args(sub, self.keys, queue)
        check_admitted(self._admit(keys=script_keys, args=argv), sub, queue)

    def cancel(self, job_id: str) -> int:
        return int(self.r.eval(CANCEL, 1, self.keys.status(job_id), time.time()))

    def read_results(self, job_id: str, args: Sequence[Any]) -> Any:
        return self._read_results(keys=[self.keys.results(job_id)], args=list(args))

    def release(self, lane: str, segments: int, seconds: float) -> None:
        self._release(keys=[self.keys.backlog(lane)], args=[int(segments), round(seconds, 3)])

    def mark_started(self, job_id: str, worker: str) -> bool:
        return bool(self._mark_started(keys=[self.keys.status(job_id)], args=[time.time(), worker]))

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 **status: Any) -> int:
        argv: list[Any] = [state, final_record(state, final_info), final_record("cancelled", CANCELLED_INFO), maxlen, ttl_s]
        for k, v in status.items():
            argv += [k, v]
        return int(self._finalize(keys=[self.keys.status(job_id), self.keys.results(job_id)], args=argv))
