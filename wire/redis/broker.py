"""``Broker`` on Redis: every step of the farm's wire as one Lua script (``lua``) or one command or pipeline.

``r``: redis-py's blocking ``redis.Redis`` (workers, the sync SDK) or ``redis.asyncio.Redis`` (the asyncio SDK,
which awaits ``send``); the blocking steps need a blocking one. ``RedisBroker.from_settings`` makes the connection,
to one server or a Sentinel group's master (``connect``); everything outside ``wire/`` gets its broker from
``wire.connect``. redis-py's errors leave as the wire's (``errors``). This is the only module family of the farm that
speaks Redis: nothing outside ``wire`` imports ``redis`` (``tests/test_structure.py``).
"""

from __future__ import annotations

import hashlib

import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio

from wire import appends, heartbeats
from wire.admission import Admission
from wire.backlog import admit_args, check_admitted, limits
from wire.broker import Op
from wire.errors import BrokerUnavailable
from wire.keys import GROUP, LANES, Keys
from wire.pieces import ClaimReply, Piece, PieceReply, parts_output, stream_pcm
from wire.queue import Entry
from wire.redis import lua, lua_admission
from wire.redis.lua import (ENSURE_GROUPS, FINALIZE, PUBLISH_PIECES, REQUEUE_DEAD_LETTER,
                               START_SEGMENTS, SUBMIT_BOOK_SEGMENT)
from wire.redis.lua_admission import ADMIT, ADMIT_DUE, APPEND_SEGMENTS, CANCEL, OPEN_JOB
from wire.records import (CANCELLED_INFO, DeadLetter, SegmentJob, final_record, parse_dead_letter, text_of)
from wire.redis.connect import connect, master_address
from wire.redis.consumer import IdleGate, RedisConsumer, ack_args
from wire.redis.errors import raises_wire_errors
from wire.redis.steps import Command, Replicated, Script, Transaction
from wire.snapshot import BucketState, LaneBacklog, QueueSnapshot
from wire.status import JobStatus

if TYPE_CHECKING:
    from wire.records import Submission
    from wire.settings import QueueSettings, RedisSettings


class NotReplicated(BrokerUnavailable):
    """Fewer replicas than ``redis.wait_replicas`` acknowledged a submit in time: a lost connection as far as the
    caller is concerned (the SDK retries the same job, which admission answers as already there)."""


@raises_wire_errors
class RedisBroker:
    """``Broker`` on Redis. Scripts are registered once per connection and run by their SHA. ``replicas``: a
    submit's admission waits until that many replicas hold it (``redis.wait_replicas``), at most ``wait_ms``."""

    def __init__(self, r: Any, keys: Keys, *, replicas: int = 0, wait_ms: int = 500) -> None:
        self.r = r
        self.keys = keys
        self.replicas = replicas
        self.wait_ms = wait_ms
        self._scripts: dict[str, Any] = {}
        self._master = ""  # the Sentinel group's master this broker last connected to, and how often it changed
        self._changes = 0
        self._gates: dict[frozenset[str], IdleGate] = {}  # per set of queue streams, its consumers' idle wait
        self._gates_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: RedisSettings, *, asyncio: bool = False, connection: Any = None,
                      **redis_kwargs: Any) -> RedisBroker:
        """A broker on the Redis the settings name (``url``: ``redis://``, ``rediss://`` for TLS, ``unix://``, or a
        Sentinel group's ``sentinel://`` addresses with ``master_name`` and ``sentinel_password``), with their key
        prefix, socket timeout and replica wait: redis-py's blocking client, or its asyncio one with ``asyncio``.
        ``connection``: a redis-py client to use instead of a new one; ``redis_kwargs`` go to redis-py and win over
        the settings' options. Nothing connects until the first step."""
        if connection is None:
            options = {"socket_timeout": settings.socket_timeout_s, **redis_kwargs}
            connection = connect(settings.url, master_name=settings.master_name,
                                 sentinel_password=settings.sentinel_password, asyncio=asyncio, **options)
        return cls(connection, Keys(settings.key_prefix), replicas=settings.wait_replicas,
                   wait_ms=settings.wait_timeout_ms)

    def close(self) -> Any:
        """Close the connection (an awaitable on an asyncio one)."""
        return self.r.aclose() if isinstance(self.r, redis.asyncio.Redis) else self.r.close()

    def send(self, step: Command | Script | Replicated | Transaction) -> Any:
        if isinstance(step, Script):
            return self._script(step.source)(keys=list(step.keys), args=list(step.args))
        if isinstance(step, Replicated):
            return self._replicated(step)
        if isinstance(step, Transaction):
            pipe = self.r.pipeline(transaction=True)
            for c in step.commands:
                getattr(pipe, c.name)(*c.args, **c.kwargs)
            return pipe.execute()  # awaitable on an asyncio connection
        return getattr(self.r, step.name)(*step.args, **step.kwargs)

    def _replicated(self, step: Replicated) -> Any:
        """The script (by its SHA: no SCRIPT EXISTS first) and WAIT pipelined on one connection: ``[script reply,
        replicas that hold it]``. A master that lacks the script (a new one after a failover) gets it loaded and the
        pair is sent again: the farm's scripts are safe to repeat."""
        script = self._script(step.script.source)  # a registered script knows its SHA without asking Redis
        keys, args = list(step.script.keys), list(step.script.args)

        def pipeline() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.wait(step.replicas, step.timeout_ms)
            return pipe

        if not isinstance(self.r, redis.asyncio.Redis):
            replies = pipeline().execute(raise_on_error=False)
            if isinstance(replies[0], redis.exceptions.NoScriptError):
                self.r.script_load(step.script.source)
                replies = pipeline().execute(raise_on_error=False)
            return _raised(replies)

        async def run() -> Any:
            replies = await pipeline().execute(raise_on_error=False)
            if isinstance(replies[0], redis.exceptions.NoScriptError):
                await self.r.script_load(step.script.source)
                replies = await pipeline().execute(raise_on_error=False)
            return _raised(replies)

        return run()

    def master(self) -> str:
        """``host:port`` of the Sentinel group's master this broker last connected to ('' for a plain server); each
        change seen counts in ``master_changes`` (a failover this process followed). No IO."""
        now = master_address(self.r)
        if now and now != self._master:
            self._changes += int(bool(self._master))
            self._master = now
        return self._master

    @property
    def master_changes(self) -> int:
        return self._changes

    def _script(self, source: str) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.r.register_script(source)
        return script

    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        yield Script(ENSURE_GROUPS, streams, [GROUP])

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        script_keys, argv = admit_args(sub, self.keys, queue)
        reply, held_by = yield from self._written(Script(ADMIT, script_keys, argv))
        check_admitted(reply, sub, queue)
        self._check_replicated(held_by, f"job {sub.job_id}")

    def _written(self, script: Script) -> Op[tuple[Any, int]]:
        """A producing script's reply and how many replicas hold what it wrote: with ``replicas``, WAIT pipelined
        behind it (``Replicated``); without, the script alone (and ``replicas`` as the count, which passes)."""
        if not self.replicas:
            return (yield script), self.replicas
        reply, held_by = yield Replicated(script, self.replicas, self.wait_ms)
        return reply, int(held_by)

    def _check_replicated(self, held_by: int, what: str) -> None:
        if held_by < self.replicas:
            raise NotReplicated(f"{what}: {held_by} of {self.replicas} replica(s) acknowledged it within "
                                f"{self.wait_ms} ms (redis.wait_replicas)")

    def cancel(self, job_id: str) -> Op[int]:
        return int((yield Script(CANCEL, [self.keys.status(job_id)], [time.time(), self.keys.prefix, job_id]))[0])

    def open_job(self, job_id: str, status: Mapping[str, Any], queue: QueueSettings) -> Op[None]:
        script_keys, argv = appends.open_args(job_id, dict(status), self.keys, queue)
        reply, held_by = yield from self._written(Script(OPEN_JOB, script_keys, argv))
        appends.check_opened(reply, job_id)
        self._check_replicated(held_by, f"job {job_id}")

    def append(self, job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first_seg: int, *,
               close: bool, last: tuple[SegmentJob, str] | None, queue: QueueSettings) -> Op[None]:
        script_keys, argv = appends.append_args(job_id, segments, streams, first_seg, close=close, last=last,
                                               keys=self.keys, q=queue)
        reply, held_by = yield from self._written(Script(APPEND_SEGMENTS, script_keys, argv))
        appends.check_appended(reply, job_id, appends.lane_of(segments, last), queue)
        self._check_replicated(held_by, f"job {job_id}'s segments from {first_seg}")

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        return JobStatus.from_fields(job_id, (yield Command("hgetall", (self.keys.status(job_id),))))

    def read_results(self, job_id: str, after_id: Any, count: int, block_ms: int) -> Op[list[tuple[Any, Any]]]:
        """One XREAD: the entries after ``after_id``, waiting up to ``block_ms`` for the first (0: no wait). A plain
        command, no script: the entries carry audio, which a script would hash whole (~5 us per KB read)."""
        reply = yield Command("xread", ({self.keys.results(job_id): after_id},),
                              {"count": count, **({"block": block_ms} if block_ms > 0 else {})})
        return list(reply[0][1]) if reply else []

    # -- consuming ------------------------------------------------------------------------------------------
    def consumer(self, name: str, streams: Sequence[str]) -> RedisConsumer:
        with self._gates_lock:  # the process's consumers of the same streams wait for new entries together
            gate = self._gates.setdefault(frozenset(streams), IdleGate())
        return RedisConsumer(self.r, self, name, streams, gate)

    # -- results --------------------------------------------------------------------------------------------
    def job_states(self, job_ids: Sequence[str]) -> list[str]:
        if not job_ids:
            return []
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(self.keys.status(job_id), "state")
        return [text_of(state) if state else "" for state in pipe.execute()]

    def start_segments(self, job_ids: Sequence[str], worker: str, startable: Sequence[bool],
                       claimed: Sequence[float]) -> list[tuple[str, bool]]:
        if not job_ids:
            return []
        reply = self.send(Script(START_SEGMENTS, [self.keys.status(j) for j in job_ids],
                                 [time.time(), worker, *[x for ok, at in zip(startable, claimed) for x in (int(ok), at)]]))
        return [(text_of(reply[i]), bool(int(reply[i + 1]))) for i in range(0, len(reply), 2)]

    def playback_clocks(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        pipe = self.r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self.keys.status(job_id), "first_chunk", "delivered_s")
        return {job_id: (reply[0], reply[1]) for job_id, reply in zip(ids, pipe.execute())}

    def publish_pieces(self, pieces: Sequence[Piece], *, maxlen: int, ttl_s: int) -> list[PieceReply]:
        todo = [p for p in pieces if p.chunks or p.end is not None]
        keys: list[str] = []
        argv: list[Any] = [maxlen, ttl_s, time.time()]
        k = self.keys
        for p in todo:
            keys += [k.status(p.job_id), k.results(p.job_id), k.parts(p.job_id), k.frames(p.job_id)]
            claim = p.claim
            # the PCM and frames as views: sent as they are, not copied into the packed command (redis_connect.WholePacker)
            argv += [p.seg, p.piece, p.seconds, len(p.chunks), f"{claim.attempt}|{claim.replay}" if claim else "",
                     memoryview(claim.frames) if claim and claim.frames else ""]
            for fields in p.chunks:
                argv += [2 * len(fields), *[x for k, v in fields.items() for x in (k, memoryview(v) if k == "pcm" else v)]]
            argv += ([1, p.end.words_json, p.end.batch_id, p.end.worker, p.total, int(p.end.frames)] if p.end is not None else
                     [0, "", "", "", 0, 0])
            argv += [k.prefix, p.job_id, p.admission.idle_ahead if p.admission is not None else "", int(p.copy)]
        replies = iter(self.send(Script(PUBLISH_PIECES, keys, argv)) if todo else [])
        out = []
        for p in pieces:
            if not p.chunks and p.end is None:
                out.append(PieceReply())
                continue
            first, delivered, done, state, total, ended, written, *held = next(replies)
            state = text_of(state) if state else ""
            if int(written) != 1:
                claim = _held_claim(*held) if int(written) == 2 else None
                out.append(PieceReply(state=state, written=False, claim=claim))
                continue
            clock = (float(first or 0.0), float(delivered or 0.0)) if p.chunks else (0.0, 0.0)
            # a job of this one piece: its output is what was sent; a longer one's parts the finisher reads (job_output)
            output = _sent_output(p) if int(ended) == 2 else None
            out.append(PieceReply(*clock, state=state) if p.end is None else
                       PieceReply(*clock, done=int(done), state=state, total=int(total or 0), output=output,
                                  counted=int(ended) != 3))
        return out

    def admit_due(self, admission: Admission, limit: int = 64) -> int:
        return int(self.send(Script(ADMIT_DUE, [], [self.keys.prefix, time.time(), admission.idle_ahead, limit])))

    def segments_done(self, job_id: str) -> int:
        return int(self.r.hget(self.keys.status(job_id), "done") or 0)

    def count_failure(self, job_id: str, seg: int) -> int:
        return int(self.r.hincrby(self.keys.status(job_id), f"failures:{seg}", 1))

    def dead_letter(self, record: Mapping[str, Any]) -> None:
        self.r.xadd(self.keys.dead_letters(), dict(record), maxlen=100_000, approximate=True)

    def job_output(self, job_id: str) -> tuple[dict[int, bytes], dict[int, Any]]:
        by_seg, words = parts_output(self.r.hgetall(self.keys.parts(job_id)))
        if set(words) - set(by_seg):  # a job of one segment keeps its PCM in its results stream only
            by_seg = {**stream_pcm(f for _, f in self.r.xrange(self.keys.results(job_id))), **by_seg}
        return by_seg, words

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 drop_work: bool = False, ack: Sequence[Entry] = (), **status: Any) -> int:
        k = self.keys
        argv: list[Any] = [state, final_record(state, final_info), final_record("cancelled", CANCELLED_INFO), maxlen, ttl_s,
                           k.prefix, job_id, time.time(), len(ack), GROUP, *ack_args(k, ack)]
        for name, v in status.items():
            argv += [name, v]
        work = [k.parts(job_id), k.frames(job_id)] if drop_work else []
        return int(self.send(Script(FINALIZE, [k.status(job_id), k.results(job_id), *[e.stream for e in ack], *work], argv)))

    # -- admin --------------------------------------------------------------------------------------------

    # books
    def cancel_jobs(self, job_ids: Sequence[str]) -> list[int]:
        if not job_ids:
            return []
        return [int(x) for x in self.send(Script(CANCEL, [self.keys.status(j) for j in job_ids],
                                                 [time.time(), self.keys.prefix, *job_ids]))]

    def admit_book_segments(self, subs: Sequence[Submission], queue: QueueSettings, *, force: bool) -> list[str]:
        script, pipe = self._script(SUBMIT_BOOK_SEGMENT), self.r.pipeline(transaction=False)
        for sub in subs:
            (job,), (stream,) = sub.segments, sub.streams  # one segment each
            k, fields, (max_n, max_s) = self.keys, job.to_fields(), limits(queue, job.lane)
            script(keys=[k.status(sub.job_id), k.results(sub.job_id), k.parts(sub.job_id), stream, k.backlog(job.lane)],
                   args=[int(force), queue.job_ttl_s, fields["v"], fields["job"], max_n, max_s, job.est_s,
                         *[x for kv in sub.status.items() for x in kv]], client=pipe)
        if not subs:
            return []
        if self.replicas:
            pipe.wait(self.replicas, self.wait_ms)
        replies = pipe.execute()
        if self.replicas:
            self._check_replicated(int(replies.pop()), f"{len(subs)} book segment(s)")
        return [text_of(reply) for reply in replies]

    def job_fields(self, job_ids: Sequence[str], fields: Sequence[str]) -> list[list[str | None]]:
        pipe = self.r.pipeline(transaction=False)
        for j in job_ids:
            pipe.hmget(self.keys.status(j), *fields)
        return [[None if v is None else text_of(v) for v in row] for row in pipe.execute()] if job_ids else []

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
        return text_of(self.r.get(run_key) or b"")

    def reply_to_book(self, reply_key: str, reply: str, ttl_s: int) -> None:
        self.r.pipeline(transaction=False).rpush(reply_key, reply).expire(reply_key, ttl_s).execute()

    def book_replies(self, reply_keys: Sequence[str]) -> list[str | None]:
        pipe = self.r.pipeline(transaction=False)
        for key in reply_keys:
            pipe.lpop(key)
        return [None if v is None else text_of(v) for v in pipe.execute()] if reply_keys else []

    def queue_snapshot(self, n_buckets: int, *, dead_letters: int = 0) -> QueueSnapshot:
        keys = self.keys
        streams = [(lane, b, keys.queue(lane, b)) for lane in LANES for b in range(n_buckets)]
        pipe = self.r.pipeline(transaction=True)  # MULTI: every figure from the same moment
        for lane in LANES:
            pipe.hgetall(keys.backlog(lane))
            pipe.xlen(keys.staging(lane))
        for _, _, stream in streams:
            pipe.xlen(stream)
            pipe.xinfo_groups(stream)  # an error reply while the stream does not exist: read as no group
        pipe.xlen(keys.dead_letters())
        if dead_letters > 0:
            pipe.xrevrange(keys.dead_letters(), count=dead_letters)
        replies = iter(pipe.execute(raise_on_error=False))
        backlog = {lane: _backlog(next(replies), next(replies)) for lane in LANES}
        buckets = tuple(_bucket(lane, b, stream, next(replies), next(replies)) for lane, b, stream in streams)
        count = next(replies)
        tail = next(replies) if dead_letters > 0 else []
        return QueueSnapshot(backlog=backlog, buckets=buckets, dead_letter_count=_int(count),
                             dead_letters=() if isinstance(tail, Exception) else tuple(parse_dead_letter(*e) for e in tail))

    def dead_letters(self, count: int) -> list[DeadLetter]:
        return [parse_dead_letter(i, f) for i, f in self.r.xrevrange(self.keys.dead_letters(), count=count)]

    def find_dead_letter(self, entry_id: str) -> DeadLetter | None:
        found = self.r.xrange(self.keys.dead_letters(), min=entry_id, max=entry_id)
        return parse_dead_letter(*found[0]) if found else None

    def requeue_dead_letter(self, entry_id: str) -> str:
        dl = self.find_dead_letter(entry_id)
        if dl is None:
            raise KeyError(entry_id)
        job = SegmentJob.from_fields(dl.fields)  # MALFORMED_JOB for an entry that never parsed: it stays
        argv: list[Any] = [dl.id]
        for k, v in job.to_fields().items():
            argv += [k, v]
        script_keys = [self.keys.dead_letters(), self.keys.status(job.job_id), self.keys.results(job.job_id), dl.stream,
                       self.keys.backlog(job.lane)]
        new_id = self.send(Script(REQUEUE_DEAD_LETTER, script_keys, argv))
        if new_id is None:  # requeued or purged since it was read
            raise KeyError(entry_id)
        return text_of(new_id)

    def purge_dead_letters(self) -> int:
        pipe = self.r.pipeline(transaction=True)
        pipe.xlen(self.keys.dead_letters())
        pipe.delete(self.keys.dead_letters())
        return int(pipe.execute()[0])

    def write_heartbeat(self, hostname: str, pid: int, info: Mapping[str, Any]) -> None:
        self.r.hset(self.keys.workers(), *heartbeats.encode(hostname, pid, info))

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        return heartbeats.decode((yield Command("hgetall", (self.keys.workers(),))))

    def topology(self) -> dict[str, Any]:
        pool = self.r.connection_pool
        out: dict[str, Any] = {}
        group = getattr(pool, "sentinel_manager", None)
        if group is not None:  # a Sentinel group: ask its Sentinels, then the master they name
            out.update(group=pool.service_name, guards=len(group.sentinels), guards_up=0)
            for sentinel in group.sentinels:
                try:
                    out["guards_up"] += int(bool(sentinel.ping()))
                except (redis.RedisError, OSError):
                    pass
        try:
            info = self.r.info("replication")
        except (redis.RedisError, OSError) as exc:
            return {**out, "master": self.master() or "?", "error": str(exc)}
        kw = pool.connection_kwargs
        out["master"] = self.master() or (f"{kw['host']}:{kw['port']}" if "host" in kw else str(kw.get("path", "")))
        out["replicas"] = int(info.get("connected_slaves") or 0)
        return out

    def reachable(self) -> bool:
        try:
            return bool(self.r.ping())
        except (redis.RedisError, OSError):
            return False


def _raised(replies: list[Any]) -> list[Any]:
    """A pipeline's replies, or the first error among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _int(reply: Any) -> int:
    return 0 if isinstance(reply, Exception) else int(reply or 0)


def _backlog(reply: Any, staged: Any) -> LaneBacklog:
    raw = {} if isinstance(reply, Exception) else {text_of(k): text_of(v) for k, v in reply.items()}
    return LaneBacklog(segments=float(raw.get("n") or 0), seconds=float(raw.get("s") or 0), staged=_int(staged))


def _bucket(lane: str, bucket: int, stream: str, length: Any, groups: Any) -> BucketState:
    """A bucket stream from its XLEN and XINFO GROUPS replies (the workers' group's line of the latter)."""
    group = None if isinstance(groups, Exception) else next((g for g in groups if text_of(g.get("name")) == GROUP), None)
    if group is None:
        return BucketState(lane, bucket, stream, length=_int(length))
    lag = group.get("lag")
    return BucketState(lane, bucket, stream, grouped=True, length=_int(length), lag=None if lag is None else int(lag),
                       pending=int(group.get("pending") or 0), consumers=int(group.get("consumers") or 0))


def _held_claim(tag: Any, replay: Any, frames: Any, windows: Any, ended: Any) -> ClaimReply:
    """The claim another attempt holds on a segment, as ``PUBLISH_PIECES`` returns it."""
    return ClaimReply(text_of(tag), text_of(replay), bytes(frames or b""), int(windows or 0), bool(int(ended)))


def _sent_output(p: Piece) -> tuple[dict[int, bytes], dict[int, Any]]:
    """The output of a job that is one piece (``PUBLISH_PIECES`` answers 2): that piece's PCM and words, as sent."""
    assert p.end is not None
    return {p.seg: p.pcm}, {p.seg: json.loads(p.end.words_json)}


def script_names() -> dict[str, str]:
    """The wire's Lua scripts by SHA1 (what ``EVALSHA`` names, in ``SLOWLOG`` or ``MONITOR``), to their names."""
    return {hashlib.sha1(source.encode()).hexdigest(): name for module in (lua, lua_admission)
            for name, source in vars(module).items() if name.isupper() and isinstance(source, str) and "redis." in source}
