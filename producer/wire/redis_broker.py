"""``Broker`` on Redis: every step of the farm's wire as one Lua script (``lua``) or one command or pipeline.

``r``: redis-py's blocking ``redis.Redis`` (workers, the sync SDK) or ``redis.asyncio.Redis`` (the asyncio SDK,
which awaits ``send``); the blocking steps need a blocking one. This is the only module family of the farm that
speaks Redis: nothing outside ``producer/wire`` imports ``redis`` (``tests/test_structure.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis

from producer.wire.backlog import admit_args, check_admitted
from producer.wire.broker import Command, Op, PieceReply, Script, SegmentEnd
from producer.wire.keys import GROUP, Keys
from producer.wire.admission import Admission
from producer.wire.lua import (ADMIT, ADMIT_DUE, ADMIT_NEXT, CANCEL, CLAIM_FRAMES, ENSURE_GROUPS, FINALIZE, MARK_STARTED,
                               READ_RESULTS)
from producer.wire.records import CANCELLED_INFO, final_record, text_of
from producer.wire.redis_consumer import RedisConsumer
from producer.wire.status import JobStatus

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
        self._shas: dict[str, str] = {}

    def send(self, step: Command | Script) -> Any:
        if isinstance(step, Script):
            return self._script(step.source)(keys=list(step.keys), args=list(step.args))
        return getattr(self.r, step.name)(*step.args, **step.kwargs)

    def _script(self, source: str) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.r.register_script(source)
        return script

    def _sha(self, source: str) -> str:
        """The SHA of ``source``, loaded once, for an EVALSHA inside a transaction (a registered script would ask
        SCRIPT EXISTS on every execute)."""
        sha = self._shas.get(source)
        if sha is None:
            sha = self._shas[source] = str(self.r.script_load(source))
        return sha

    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        yield Script(ENSURE_GROUPS, streams, [GROUP])

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        script_keys, argv = admit_args(sub, self.keys, queue)
        check_admitted((yield Script(ADMIT, script_keys, argv)), sub, queue)

    def cancel(self, job_id: str) -> Op[int]:
        return int((yield Script(CANCEL, [self.keys.status(job_id)], [time.time(), self.keys.prefix, job_id])))

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        return JobStatus.from_fields(job_id, (yield Command("hgetall", (self.keys.status(job_id),))))

    def read_results(self, job_id: str, args: Sequence[Any]) -> Op[Any]:
        return (yield Script(READ_RESULTS, [self.keys.results(job_id)], list(args)))

    def await_results(self, job_id: str, after_id: Any, block_ms: int) -> Op[bool]:
        woke = yield Command("xread", ({self.keys.results(job_id): after_id},), {"count": 1, "block": block_ms})
        return bool(woke)

    # -- consuming ------------------------------------------------------------------------------------------
    def consumer(self, name: str, streams: Sequence[str]) -> RedisConsumer:
        return RedisConsumer(self.r, self, name, streams)

    # -- results --------------------------------------------------------------------------------------------
    def mark_started(self, job_id: str, worker: str) -> bool:
        return bool(self.send(Script(MARK_STARTED, [self.keys.status(job_id)], [time.time(), worker])))

    def job_states(self, job_ids: Sequence[str]) -> list[str]:
        if not job_ids:
            return []
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(self.keys.status(job_id), "state")
        return [text_of(state) if state else "" for state in pipe.execute()]

    def playback_clocks(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        pipe = self.r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self.keys.status(job_id), "first_chunk", "delivered_s")
        return {job_id: (reply[0], reply[1]) for job_id, reply in zip(ids, pipe.execute())}

    def claim_frames(self, job_id: str, seg: int, attempt: str, frames: bytes, ttl_s: int) -> tuple[bool, str, bytes, int]:
        won, tag, stored, windows = self.send(Script(CLAIM_FRAMES, [self.keys.frames(job_id), self.keys.status(job_id)],
                                                     [str(seg), attempt, frames, ttl_s]))
        return bool(int(won)), text_of(tag), frames if int(won) else bytes(stored or b""), int(windows or 0)

    def publish_piece(self, job_id: str, seg: int, chunks: Sequence[Mapping[str, Any]], *, piece: int, seconds: float,
                      end: SegmentEnd | None, maxlen: int, ttl_s: int, admission: Admission) -> PieceReply:
        k_status, k_res = self.keys.status(job_id), self.keys.results(job_id)
        pipe = self.r.pipeline(transaction=True)
        admit_at = -1
        clock_at = -1
        if chunks:
            for fields in chunks:
                pipe.xadd(k_res, dict(fields), maxlen=maxlen, approximate=True)
            pipe.expire(k_res, ttl_s)
            pipe.hset(k_status, f"windows:{seg}", piece + 1)
            # the job's playback clock: audio delivered by every worker, and when its first chunk went out
            clock_at = len(pipe)
            pipe.hincrbyfloat(k_status, "delivered_s", seconds)
            pipe.hsetnx(k_status, "first_chunk", time.time())
            pipe.hget(k_status, "first_chunk")
        if end is not None:
            k_parts, k_words, k_done = self.keys.parts(job_id), self.keys.words(job_id), self.keys.done(job_id)
            pipe.hdel(self.keys.frames(job_id), f"{seg}:frames")  # a book keeps only its segments in flight
            pipe.hset(k_parts, str(seg), end.pcm)
            pipe.expire(k_parts, ttl_s)
            pipe.hset(k_words, str(seg), end.words_json)
            pipe.expire(k_words, ttl_s)
            pipe.sadd(k_done, seg)
            pipe.expire(k_done, ttl_s)
            pipe.hsetnx(k_status, "first_chunk", time.time())
            pipe.hset(k_status, mapping={f"batch:{seg}": end.batch_id, f"worker:{seg}": end.worker})
            pipe.scard(k_done)
            pipe.hget(k_status, "state")
        if not len(pipe):
            return PieceReply()
        # the job's next segments, admitted in the same transaction as the audio that makes them due
        admit = [self.keys.prefix, job_id, time.time(), admission.horizon_s, admission.idle_ahead]
        pipe.evalsha(self._sha(ADMIT_NEXT), 0, *admit)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies[:-1]:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(replies[-1], redis.exceptions.NoScriptError):  # Redis restarted and lost its scripts
            self._shas.clear()
            self.send(Script(ADMIT_NEXT, [], admit))
        elif isinstance(replies[-1], Exception):
            raise replies[-1]
        replies = replies[:-1]
        clock = PieceReply() if clock_at < 0 else PieceReply(float(replies[clock_at + 2] or 0.0), float(replies[clock_at]))
        if end is None:
            return clock
        done, state = int(replies[-2]), replies[-1]
        self.r.hset(k_status, "done", done)
        return PieceReply(clock.first_chunk, clock.delivered_s, done, text_of(state) if state else "")

    def admit_due(self, admission: Admission, limit: int = 64) -> int:
        return int(self.send(Script(ADMIT_DUE, [], [self.keys.prefix, time.time(), admission.horizon_s,
                                                     admission.idle_ahead, limit])))

    def segments_done(self, job_id: str) -> int:
        return int(self.r.scard(self.keys.done(job_id)))

    def count_failure(self, job_id: str, seg: int) -> int:
        return int(self.r.hincrby(self.keys.status(job_id), f"failures:{seg}", 1))

    def dead_letter(self, record: Mapping[str, Any]) -> None:
        self.r.xadd(self.keys.dead_letters(), dict(record), maxlen=100_000, approximate=True)

    def job_parts(self, job_id: str) -> dict[int, bytes]:
        return {int(k): v for k, v in self.r.hgetall(self.keys.parts(job_id)).items()}

    def job_words(self, job_id: str, total: int) -> tuple[dict[int, Any], list[int]]:
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(self.keys.words(job_id))
        for seg in range(total):
            pipe.hstrlen(self.keys.parts(job_id), str(seg))
        replies = pipe.execute()
        return {int(k): json.loads(v) for k, v in replies[0].items()}, [int(n) for n in replies[1:]]

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 **status: Any) -> int:
        argv: list[Any] = [state, final_record(state, final_info), final_record("cancelled", CANCELLED_INFO), maxlen, ttl_s,
                           self.keys.prefix, job_id]
        for k, v in status.items():
            argv += [k, v]
        return int(self.send(Script(FINALIZE, [self.keys.status(job_id), self.keys.results(job_id)], argv)))

    def drop_job_work(self, job_id: str) -> None:
        k = self.keys
        self.r.delete(k.parts(job_id), k.done(job_id), k.words(job_id), k.frames(job_id))

    # -- admin --------------------------------------------------------------------------------------------
