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

from producer.wire.backlog import admit_args, check_admitted
from producer.wire.broker import Command, Op, Script
from producer.wire.keys import GROUP, Keys
from producer.wire.lua import ADMIT, CANCEL, ENSURE_GROUPS, FINALIZE, MARK_STARTED, READ_RESULTS, RELEASE
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
