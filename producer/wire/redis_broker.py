"""``Broker`` on Redis: every step of the farm's wire as one Lua script (``lua``) or one command or pipeline.

``r``: redis-py's blocking ``redis.Redis`` (workers, the sync SDK) or ``redis.asyncio.Redis`` (the asyncio SDK,
which awaits ``send``); the blocking steps need a blocking one. ``RedisBroker.from_url`` makes the connection:
the SDK, the CLI, the local launcher and the workers build theirs there. This is the only module family of the
farm that speaks Redis: nothing outside ``producer/wire`` imports ``redis`` (``tests/test_structure.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio

from producer.wire import heartbeats
from producer.wire.backlog import admit_args, check_admitted
from producer.wire.broker import Command, Op, Script
from producer.wire.keys import GROUP, LANES, Keys
from producer.wire.lua import (ADMIT, CANCEL, ENSURE_GROUPS, FINALIZE, MARK_STARTED, READ_RESULTS, RELEASE,
                               REQUEUE_DEAD_LETTER)
from producer.wire.records import CANCELLED_INFO, DeadLetter, SegmentJob, final_record, parse_dead_letter
from producer.wire.snapshot import BucketState, LaneBacklog, QueueSnapshot

if TYPE_CHECKING:
    from producer.submit import Submission
    from producer.wire.settings import QueueSettings


class RedisBroker:
    """``Broker`` on Redis. Scripts are registered once per connection and run by their SHA."""

    lost = (redis.ConnectionError, redis.TimeoutError)
    refused = (redis.AuthenticationError, redis.exceptions.AuthorizationError)

    def __init__(self, r: Any, keys: Keys) -> None:
        self.r = r
        self.keys = keys
        self._scripts: dict[str, Any] = {}

    @classmethod
    def from_url(cls, url: str, *, keys: Keys | None = None, asyncio: bool = False, **redis_kwargs: Any) -> RedisBroker:
        """A broker on a new connection to ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``): redis-py's
        blocking client, or its asyncio one with ``asyncio``. ``redis_kwargs`` go to redis-py (timeouts, health
        checks); ``keys``: the farm's names (default prefix ``ttsfarm``). Nothing connects until the first step."""
        client = redis.asyncio.Redis if asyncio else redis.Redis
        return cls(client.from_url(url, **redis_kwargs), keys if keys is not None else Keys())

    def send(self, step: Command | Script) -> Any:
        if isinstance(step, Script):
            script = self._scripts.get(step.source)
            if script is None:
                script = self._scripts[step.source] = self.r.register_script(step.source)
            return script(keys=list(step.keys), args=list(step.args))
        return getattr(self.r, step.name)(*step.args, **step.kwargs)

    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        yield Script(ENSURE_GROUPS, streams, [GROUP])

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        script_keys, argv = admit_args(sub, self.keys, queue)
        check_admitted((yield Script(ADMIT, script_keys, argv)), sub, queue)

    def cancel(self, job_id: str) -> Op[int]:
        return int((yield Script(CANCEL, [self.keys.status(job_id)], [time.time()])))

    def job_status(self, job_id: str) -> Op[Mapping[Any, Any]]:
        return (yield Command("hgetall", (self.keys.status(job_id),)))  # type: ignore[no-any-return]

    def read_results(self, job_id: str, args: Sequence[Any]) -> Op[Any]:
        return (yield Script(READ_RESULTS, [self.keys.results(job_id)], list(args)))

    def await_results(self, job_id: str, after_id: Any, block_ms: int) -> Op[bool]:
        woke = yield Command("xread", ({self.keys.results(job_id): after_id},), {"count": 1, "block": block_ms})
        return bool(woke)

    def release(self, lane: str, segments: int, seconds: float) -> None:
        self.send(Script(RELEASE, [self.keys.backlog(lane)], [int(segments), round(seconds, 3)]))

    def mark_started(self, job_id: str, worker: str) -> bool:
        return bool(self.send(Script(MARK_STARTED, [self.keys.status(job_id)], [time.time(), worker])))

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 **status: Any) -> int:
        argv: list[Any] = [state, final_record(state, final_info), final_record("cancelled", CANCELLED_INFO), maxlen, ttl_s]
        for k, v in status.items():
            argv += [k, v]
        return int(self.send(Script(FINALIZE, [self.keys.status(job_id), self.keys.results(job_id)], argv)))

    # -- results ------------------------------------------------------------------------------------------

    # -- admin --------------------------------------------------------------------------------------------
    def queue_snapshot(self, n_buckets: int, *, dead_letters: int = 0) -> QueueSnapshot:
        keys = self.keys
        streams = [(lane, b, keys.queue(lane, b)) for lane in LANES for b in range(n_buckets)]
        pipe = self.r.pipeline(transaction=True)  # MULTI: every figure from the same moment
        for lane in LANES:
            pipe.hgetall(keys.backlog(lane))
        for _, _, stream in streams:
            pipe.xlen(stream)
            pipe.xinfo_groups(stream)  # an error reply while the stream does not exist: read as no group
        pipe.xlen(keys.dead_letters())
        if dead_letters > 0:
            pipe.xrevrange(keys.dead_letters(), count=dead_letters)
        replies = iter(pipe.execute(raise_on_error=False))
        backlog = {lane: _backlog(next(replies)) for lane in LANES}
        buckets = tuple(_bucket(lane, b, stream, next(replies), next(replies)) for lane, b, stream in streams)
        count = next(replies)
        tail = next(replies) if dead_letters > 0 else []
        return QueueSnapshot(backlog=backlog, buckets=buckets, dead_letter_count=_int(count),
                             dead_letters=() if isinstance(tail, Exception) else tuple(parse_dead_letter(*e) for e in tail))

    def dead_letters(self, count: int) -> list[DeadLetter]:
        return [parse_dead_letter(i, f) for i, f in self.r.xrevrange(self.keys.dead_letters(), count=count)]

    def dead_letter(self, entry_id: str) -> DeadLetter | None:
        found = self.r.xrange(self.keys.dead_letters(), min=entry_id, max=entry_id)
        return parse_dead_letter(*found[0]) if found else None

    def requeue_dead_letter(self, entry_id: str) -> str:
        dl = self.dead_letter(entry_id)
        if dl is None:
            raise KeyError(entry_id)
        job = SegmentJob.from_fields(dl.fields)  # MALFORMED_JOB for an entry that never parsed: it stays
        argv: list[Any] = [dl.id]
        for k, v in job.to_fields().items():
            argv += [k, v]
        script_keys = [self.keys.dead_letters(), self.keys.status(job.job_id), self.keys.results(job.job_id), dl.stream]
        new_id = self.send(Script(REQUEUE_DEAD_LETTER, script_keys, argv))
        if new_id is None:  # requeued or purged since it was read
            raise KeyError(entry_id)
        return new_id.decode() if isinstance(new_id, bytes) else str(new_id)

    def purge_dead_letters(self) -> int:
        pipe = self.r.pipeline(transaction=True)
        pipe.xlen(self.keys.dead_letters())
        pipe.delete(self.keys.dead_letters())
        return int(pipe.execute()[0])

    def write_heartbeat(self, hostname: str, pid: int, info: Mapping[str, Any]) -> None:
        self.r.hset(self.keys.workers(), *heartbeats.encode(hostname, pid, info))

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        return heartbeats.decode((yield Command("hgetall", (self.keys.workers(),))))

    def reachable(self) -> bool:
        try:
            return bool(self.r.ping())
        except (redis.RedisError, OSError):
            return False


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _int(reply: Any) -> int:
    return 0 if isinstance(reply, Exception) else int(reply or 0)


def _backlog(reply: Any) -> LaneBacklog:
    raw = {} if isinstance(reply, Exception) else {_s(k): _s(v) for k, v in reply.items()}
    return LaneBacklog(segments=float(raw.get("n") or 0), seconds=float(raw.get("s") or 0))


def _bucket(lane: str, bucket: int, stream: str, length: Any, groups: Any) -> BucketState:
    """A bucket stream from its XLEN and XINFO GROUPS replies (the workers' group's line of the latter)."""
    group = None if isinstance(groups, Exception) else next((g for g in groups if _s(g.get("name")) == GROUP), None)
    if group is None:
        return BucketState(lane, bucket, stream, length=_int(length))
    lag = group.get("lag")
    return BucketState(lane, bucket, stream, grouped=True, length=_int(length), lag=None if lag is None else int(lag),
                       pending=int(group.get("pending") or 0), consumers=int(group.get("consumers") or 0))
