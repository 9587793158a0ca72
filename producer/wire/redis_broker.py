"""``Broker`` on Redis: every step of the farm's wire as one Lua script (``lua``) or one command or pipeline.

``r``: redis-py's blocking ``redis.Redis`` (workers, the sync SDK) or ``redis.asyncio.Redis`` (the asyncio SDK,
which awaits ``send``); the blocking steps need a blocking one. This is the only module family of the farm that
speaks Redis: nothing outside ``producer/wire`` imports ``redis`` (``tests/test_structure.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis

from producer.wire.backlog import admit_args, check_admitted, limits
from producer.wire.broker import Command, Op, Script
from producer.wire.keys import GROUP, Keys
from producer.wire.lua import ADMIT, CANCEL, ENSURE_GROUPS, FINALIZE, MARK_STARTED, READ_RESULTS, RELEASE
from producer.wire.lua import SUBMIT_BOOK_SEGMENT
from producer.wire.records import CANCELLED_INFO, final_record

if TYPE_CHECKING:
    from producer.wire.records import Submission
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
    def from_url(cls, url: str, *, keys: Keys, socket_timeout: float | None = None) -> RedisBroker:
        """A broker on a blocking connection of its own (a worker's task that is handed no connection)."""
        return cls(redis.Redis.from_url(url, socket_timeout=socket_timeout), keys)

    def _script(self, source: str) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.r.register_script(source)
        return script

    def send(self, step: Command | Script) -> Any:
        if isinstance(step, Script):
            return self._script(step.source)(keys=list(step.keys), args=list(step.args))
        return getattr(self.r, step.name)(*step.args, **step.kwargs)

    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        yield Script(ENSURE_GROUPS, streams, [GROUP])

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        script_keys, argv = admit_args(sub, self.keys, queue)
        check_admitted((yield Script(ADMIT, script_keys, argv)), sub, queue)

    def cancel(self, job_id: str) -> Op[int]:
        return int((yield Script(CANCEL, [self.keys.status(job_id)], [time.time()]))[0])

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

    # books
    def cancel_jobs(self, job_ids: Sequence[str]) -> list[int]:
        if not job_ids:
            return []
        return [int(x) for x in self.send(Script(CANCEL, [self.keys.status(j) for j in job_ids], [time.time()]))]

    def admit_book_segments(self, subs: Sequence[Submission], queue: QueueSettings, *, force: bool) -> list[str]:
        script, pipe = self._script(SUBMIT_BOOK_SEGMENT), self.r.pipeline(transaction=False)
        for sub in subs:
            (job,), (stream,) = sub.segments, sub.streams  # one segment each
            k, fields, (max_n, max_s) = self.keys, job.to_fields(), limits(queue, job.lane)
            script(keys=[k.status(sub.job_id), k.results(sub.job_id), k.parts(sub.job_id), k.done(sub.job_id), stream,
                         k.backlog(job.lane)],
                   args=[int(force), queue.job_ttl_s, fields["v"], fields["job"], max_n, max_s, job.est_s,
                         *[x for kv in sub.status.items() for x in kv]], client=pipe)
        return [_str(reply) for reply in pipe.execute()] if subs else []

    def job_fields(self, job_ids: Sequence[str], fields: Sequence[str]) -> list[list[str | None]]:
        pipe = self.r.pipeline(transaction=False)
        for j in job_ids:
            pipe.hmget(self.keys.status(j), *fields)
        return [[None if v is None else _str(v) for v in row] for row in pipe.execute()] if job_ids else []

    def keep_jobs(self, job_ids: Sequence[str], ttl_s: int) -> None:
        pipe = self.r.pipeline(transaction=False)
        for j in job_ids:
            pipe.expire(self.keys.status(j), ttl_s)
        pipe.execute()

    def drop_results(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.r.unlink(*[self.keys.results(j) for j in job_ids])

    def start_book_run(self, book_id: str, run_id: str, ttl_s: int) -> str:
        run_key = self.keys.book_run(book_id)
        self.r.set(run_key, run_id, ex=ttl_s)
        return run_key

    def book_run(self, run_key: str) -> str:
        return _str(self.r.get(run_key) or b"")

    def reply_to_book(self, reply_key: str, reply: str, ttl_s: int) -> None:
        self.r.pipeline(transaction=False).rpush(reply_key, reply).expire(reply_key, ttl_s).execute()

    def book_replies(self, reply_keys: Sequence[str]) -> list[str | None]:
        pipe = self.r.pipeline(transaction=False)
        for key in reply_keys:
            pipe.lpop(key)
        return [None if v is None else _str(v) for v in pipe.execute()] if reply_keys else []


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
