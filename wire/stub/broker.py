"""``StubBroker``: every step of the farm's wire in plain Python over an in-memory store, with the semantics of the
Redis broker's scripts (``wire.redis.lua``, ``wire.redis.lua_admission``), step by step: admission against the
lanes' backlog limits with just-in-time staging, idempotent per request; cancels that win over a worker's finish; a
streamed segment's claim; repeated pieces that keep the first copy; a segment's end counted once; a job's one final
record; dead letters; books. ``tests/test_broker_contract.py`` holds the two brokers to the same assertions.

For unit tests (dramatiq's ``StubBroker`` is the model) and for trying the farm in one process: ``memory://NAME`` as
``redis.url`` (``wire.connect``) gives every broker of that name in the process one store, so a client and a worker
built from the same settings meet. It keeps no data across processes and has no replicas.

A client's steps are ``Op``s like the Redis broker's: each yields one IO step (the step's work, done under the store's
lock), so the SDK drives it unchanged; on an asyncio stub ``send`` answers an awaitable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from wire import appends, heartbeats
from wire.admission import Admission, admitted_at_submit
from wire.backlog import admitted_status, check_admitted, limits
from wire.broker import Op
from wire.keys import LANES, STATES_FINAL, Keys
from wire.pieces import ClaimReply, Piece, PieceReply, parts_output, stream_pcm
from wire.queue import Entry
from wire.records import (CANCELLED_INFO, ENTRY, FINAL, RESULTS_SLACK_S, DeadLetter, SegmentJob, final_fields,
                          parse_dead_letter, text_of)
from wire.snapshot import BucketState, LaneBacklog, QueueSnapshot
from wire.status import JobStatus
from wire.stub.consumer import StubConsumer, ack_entries
from wire.stub.store import Store, Stream, b, id_of, num

if TYPE_CHECKING:
    from wire.records import Submission
    from wire.settings import QueueSettings, RedisSettings

T = TypeVar("T")
_STORES: dict[str, Store] = {}  # memory://NAME: one store per name in this process


@dataclass(frozen=True)
class Call:
    """The stub's IO step: a step's work, run under the store's lock."""

    fn: Callable[[], Any]


class StubBroker:
    """``Broker`` in memory. ``store``: whose objects it reads and writes (a new one unless given)."""

    def __init__(self, store: Store | None = None, keys: Keys | None = None, *, asynchronous: bool = False) -> None:
        self.store = store if store is not None else Store()
        self.keys = keys if keys is not None else Keys()
        self.asynchronous = asynchronous

    @classmethod
    def from_settings(cls, settings: RedisSettings, *, asyncio: bool = False, connection: Any = None,
                      **options: Any) -> StubBroker:
        """The stub of ``memory://NAME``: its store is every such broker's in this process (``connection``: a
        ``Store`` to use instead)."""
        name = settings.url.strip().partition("://")[2]
        store = connection if isinstance(connection, Store) else _STORES.setdefault(name, Store())
        return cls(store, Keys(settings.key_prefix), asynchronous=asyncio)

    # -- IO -----------------------------------------------------------------------------------------------------
    def send(self, step: Call) -> Any:
        if self.asynchronous:
            return asyncio.to_thread(self._locked, step.fn)
        return self._locked(step.fn)

    def _locked(self, fn: Callable[[], T]) -> T:
        with self.store.lock:
            return fn()

    def _op(self, fn: Callable[[], T]) -> Op[T]:
        return (yield Call(fn))  # type: ignore[no-any-return]

    def close(self) -> Any:
        return asyncio.sleep(0) if self.asynchronous else None

    def reachable(self) -> bool:
        return True

    def master(self) -> str:
        return ""

    @property
    def master_changes(self) -> int:
        return 0

    def topology(self) -> dict[str, Any]:
        return {"master": "memory", "replicas": 0}

    # -- a client's steps ---------------------------------------------------------------------------------------
    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        def run() -> None:
            for stream in streams:
                self.store.ensure_group(stream)
        return self._op(run)

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        reply = yield Call(lambda: self._admit(sub, queue))
        check_admitted(reply, sub, queue)

    def _admit(self, sub: Submission, q: QueueSettings) -> list[Any]:
        st, k = self.store, self.keys
        lane = sub.segments[0].lane
        backlog = st.hash(k.backlog(lane))
        n, s = num(backlog.get(b"n")), num(backlog.get(b"s"))
        if st.exists(k.status(sub.job_id)):
            return [2 if st.hget(k.status(sub.job_id), "fingerprint") == b(sub.fingerprint) else 3, n, s]
        max_n, max_s = limits(q, lane)
        add_n, add_s = len(sub.segments), round(sum(seg.est_s for seg in sub.segments), 3)
        if n > 0 and ((max_n > 0 and n + add_n > max_n) or (max_s > 0 and s + add_s > max_s)):
            return [0, n, s]
        status = k.status(sub.job_id)
        st.hset(status, admitted_status(sub, q))
        st.expire(status, q.job_ttl_s)
        now_n = admitted_at_submit([seg.est_s for seg in sub.segments], lane, q.admission_horizon_s)
        admitted_s = 0.0
        for i, (seg, stream) in enumerate(zip(sub.segments, sub.streams)):
            est = round(seg.est_s, 3)
            if i < now_n:
                st.xadd(stream, seg.to_fields())
                admitted_s += est
            else:
                st.rpush(k.staged(sub.job_id), st.xadd(k.staging(lane), {**seg.to_fields(), "stream": stream, "est": est}))
        st.hset(status, {"admitted_n": now_n, "admitted_s": admitted_s, "staged": add_n - now_n})
        if add_n > now_n:
            st.expire(k.staged(sub.job_id), q.job_ttl_s)
            st.zadd(k.admission_due(), sub.job_id, time.time() + 0.25)
        st.hincr(k.backlog(lane), "n", add_n)
        st.hincr(k.backlog(lane), "s", add_s)
        st.hincr(k.backlog(lane), "q", now_n)
        return [1, n + add_n, s + add_s]

    def cancel(self, job_id: str) -> Op[int]:
        return self._op(lambda: self._cancel([job_id])[0])

    def _cancel(self, job_ids: Sequence[str]) -> list[int]:
        out = []
        for job_id in job_ids:
            key = self.keys.status(job_id)
            state = self.store.hget(key, "state")
            if state is None:
                out.append(-1)
            elif text_of(state) in STATES_FINAL:
                out.append(0)
            else:
                self.store.hset(key, {"state": "cancelled", "finished": time.time()})
                lane = self.store.hget(key, "lane")
                if lane is not None:
                    self._drop_staged(job_id, text_of(lane))
                out.append(1)
        return out

    def open_job(self, job_id: str, status: Mapping[str, Any], queue: QueueSettings) -> Op[None]:
        def run() -> int:
            key = self.keys.status(job_id)
            fingerprint, fields = appends.opened_status(dict(status))
            if self.store.exists(key):
                return 2 if self.store.hget(key, "fingerprint") == b(fingerprint) else 3
            self.store.hset(key, fields)
            self.store.expire(key, queue.job_ttl_s)
            return 1
        appends.check_opened((yield Call(run)), job_id)

    def append(self, job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first_seg: int, *,
               close: bool, last: tuple[SegmentJob, str] | None, queue: QueueSettings) -> Op[None]:
        lane = appends.lane_of(segments, last)
        reply = yield Call(lambda: self._append(job_id, segments, streams, first_seg, close, last, lane, queue))
        appends.check_appended(reply, job_id, lane, queue)

    def _append(self, job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first: int, closing: bool,
                last: tuple[SegmentJob, str] | None, lane: str, q: QueueSettings) -> list[Any]:
        st, key, backlog = self.store, self.keys.status(job_id), self.keys.backlog(lane)
        h = dict(st.hash(key))
        if b"state" not in h:
            return [appends.MISSING, 0, "0"]
        appended, add_n, is_open = int(num(h.get(b"appended"))), len(segments), h.get(b"open") == b"1"
        if (add_n > 0 and first + add_n <= appended) or (closing and not is_open and first + add_n == appended):
            return [appends.RETRIED, 0, "0"]
        if text_of(h[b"state"]) in STATES_FINAL:
            return [appends.ENDED, 0, h[b"state"]]
        if not is_open:
            return [appends.CLOSED, 0, "0"]
        if first != appended:
            return [appends.OUT_OF_ORDER, appended, "0"]
        if closing and appended + add_n == 0:
            return [appends.EMPTY, 0, "0"]
        n, s = num(st.hget(backlog, "n")), num(st.hget(backlog, "s"))
        max_n, max_s = limits(q, lane)
        add_s = round(sum(seg.est_s for seg in segments), 3)
        if add_n > 0 and n > 0 and ((max_n > 0 and n + add_n > max_n) or (max_s > 0 and s + add_s > max_s)):
            return [appends.FULL, n, s]
        for seg, stream in zip(segments, streams):
            st.xadd(stream, seg.to_fields())
        appended += add_n
        st.hset(key, {"appended": appended, "admitted_n": appended})
        st.hincr(key, "est_seconds", add_s)
        st.expire(key, q.job_ttl_s)
        if add_n > 0:
            st.hincr(backlog, "n", add_n)
            st.hincr(backlog, "s", add_s)
            st.hincr(backlog, "q", add_n)
        if closing:
            st.hset(key, {"total": appended})
            st.hdel(key, "open")
            if add_n == 0 and last is not None and num(st.hget(key, "done")) >= appended:
                job, stream = last
                closer = dataclasses.replace(job, total=first, closing=True, est_s=0.0)
                st.xadd(stream, closer.to_fields())
                st.hincr(backlog, "n", 1)
                st.hincr(backlog, "q", 1)
        return [appends.APPENDED, n + add_n, s + add_s]

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        return self._op(lambda: JobStatus.from_fields(job_id, dict(self.store.hash(self.keys.status(job_id)))))

    def read_results(self, job_id: str, after_id: Any, count: int, block_ms: int) -> Op[list[tuple[Any, Any]]]:
        def run() -> list[tuple[Any, Any]]:
            after, key = id_of(text_of(after_id)), self.keys.results(job_id)

            def came() -> list[tuple[Any, Any]]:
                stream = self.store.stream(key)
                return [(i.encode(), dict(f)) for i, f in stream.after(after)][:count] if stream is not None else []
            got = came()
            if not got and block_ms > 0:
                self.store.lock.wait_for(came, block_ms / 1000)
                got = came()
            return got
        return self._op(run)

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        return self._op(lambda: heartbeats.decode(dict(self.store.hash(self.keys.workers()))))

    # -- a worker's steps ---------------------------------------------------------------------------------------
    def consumer(self, name: str, streams: Sequence[str]) -> StubConsumer:
        return StubConsumer(self.store, self.keys, name, streams)

    def job_states(self, job_ids: Sequence[str]) -> list[str]:
        with self.store.lock:
            return [text_of(self.store.hget(self.keys.status(j), "state") or b"") for j in job_ids]

    def start_segments(self, job_ids: Sequence[str], worker: str, startable: Sequence[bool],
                       claimed: Sequence[float]) -> list[tuple[str, bool]]:
        out = []
        with self.store.lock:
            now = time.time()
            for job_id, ok, at in zip(job_ids, startable, claimed):
                key = self.keys.status(job_id)
                h = self.store.hash(key)
                state = text_of(h.get(b"state") or b"")
                first = bool(ok) and state not in STATES_FINAL and b"started" not in h
                if first:
                    marks = {"started": now, "worker": worker, "claimed": at}
                    self.store.hset(key, {**marks, "state": "running"} if state == "queued" else marks)
                out.append((state, first))
        return out

    def playback_clocks(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        with self.store.lock:
            return {j: (self.store.hget(self.keys.status(j), "first_chunk"),
                        self.store.hget(self.keys.status(j), "delivered_s")) for j in sorted(set(job_ids))}

    def publish_pieces(self, pieces: Sequence[Piece], *, maxlen: int, ttl_s: int) -> list[PieceReply]:
        with self.store.lock:
            now = time.time()
            return [self._publish(p, maxlen, ttl_s, now) if p.chunks or p.end is not None else PieceReply()
                    for p in pieces]

    def _publish(self, p: Piece, maxlen: int, ttl: int, now: float) -> PieceReply:
        st, k, seg = self.store, self.keys, p.seg
        key = k.status(p.job_id)
        h = dict(st.hash(key))  # as read at the step's start
        state = text_of(h.get(b"state") or b"")
        first, done = h.get(b"first_chunk"), int(num(h.get(b"done")))
        windows, held = int(num(h.get(f"windows:{seg}".encode()))), h.get(f"claim:{seg}".encode())
        if state in STATES_FINAL:  # the job ended (a client's cancel): nothing of it is written
            return PieceReply(state=state, written=False)
        status: dict[str, Any] = {}
        parts: dict[str, Any] = {}
        if p.claim is not None:
            claim = f"{p.claim.attempt}|{p.claim.replay}"
            if held is not None and held != b(claim):  # another attempt holds the segment: what it left
                tag, _, replay = text_of(held).rpartition("|")
                ended = f"batch:{seg}".encode() in h
                frames = b"" if ended else st.hash(k.frames(p.job_id)).get(str(seg).encode(), b"")
                return PieceReply(state=state, written=False, claim=ClaimReply(tag, replay, frames, windows, ended))
            if held is None:
                status[f"claim:{seg}"] = claim
                if p.claim.frames:  # frames live while the segment runs
                    st.hset(k.frames(p.job_id), {str(seg): p.claim.frames})
                    st.expire(k.frames(p.job_id), ttl)
        delivered = num(h.get(b"delivered_s"))
        wrote = bool(p.chunks) and p.piece >= windows  # the first copy of a piece stays
        if wrote:
            if p.copy:
                parts[f"{seg}:{p.piece}"] = p.pcm
            entry = int(num(h.get(b"results_entries")))
            for c, fields in enumerate(p.chunks, 1):  # each numbered: a reader tells by a gap what trimming took
                st.xadd(k.results(p.job_id), {ENTRY: entry + c, **fields}, maxlen=maxlen)
            if first is None:
                keep = ttl + RESULTS_SLACK_S
                st.expire(k.results(p.job_id), keep)
                status["results_expire"] = now + keep
            delivered += p.seconds
            status.update({"delivered_s": delivered, f"windows:{seg}": p.piece + 1,
                           "results_entries": int(num(h.get(b"results_entries"))) + len(p.chunks)})
        if (p.chunks or p.end is not None) and first is None:
            first = b(now)
            status["first_chunk"] = now
        counted = False
        if p.end is not None:
            if p.end.frames:
                st.hdel(k.frames(p.job_id), str(seg))
            if f"batch:{seg}".encode() not in h:  # the segment's first end counts
                done, counted = done + 1, True
                parts[f"words:{seg}"] = p.end.words_json
                status.update({f"batch:{seg}": p.end.batch_id, f"worker:{seg}": p.end.worker, "done": done})
        whole, total = False, 0
        if p.end is not None:
            total = p.total or int(num(h.get(b"total")))  # an appended job's records say 0 until it is closed
            whole = total > 0 and done >= total
        output = None
        if whole and counted and total == 1 and p.piece == 0 and wrote:
            output = ({seg: p.pcm}, {seg: json.loads(p.end.words_json)})  # type: ignore[union-attr]
        st.hset(k.parts(p.job_id), parts)
        if counted and done == 1 and not whole:
            st.expire(k.parts(p.job_id), ttl)
        st.hset(key, status)
        if p.admission is not None:
            self._admit_next(p.job_id, now, p.admission.idle_ahead, ending=p.end is not None)
        clock = (num(first), delivered) if p.chunks else (0.0, 0.0)
        if p.end is None:
            return PieceReply(*clock, state=state)
        return PieceReply(*clock, done=done, state=state, total=int(num(h.get(b"total"))), output=output,
                          counted=counted or not whole)

    def admit_due(self, admission: Admission, limit: int = 64) -> int:
        with self.store.lock:
            now, due = time.time(), self.store.zset(self.keys.admission_due())
            if not due:
                return -1
            jobs = [j for j, at in sorted(due.items(), key=lambda kv: kv[1]) if at <= now][:limit]
            if not jobs and num(self.store.hget(self.keys.backlog("interactive"), "q")) <= 0:
                jobs = [j for j, _ in sorted(due.items(), key=lambda kv: kv[1])][:limit]
            return sum(self._admit_next(j, now, admission.idle_ahead, ending=False) for j in jobs)

    def _admit_next(self, job_id: str, now: float, idle_ahead: int, *, ending: bool) -> int:
        """A job's next staged segments to their bucket streams while its audio admitted and not yet played is under
        its horizon, or while the farm has nothing else queued and the job has fewer than ``idle_ahead`` in flight
        (``wire.admission``); its place in the due set after."""
        st, k = self.store, self.keys
        staged_key, due_key = k.staged(job_id), k.admission_due()
        staged = st.get(staged_key, list) or []
        h = dict(st.hash(k.status(job_id)))
        state = text_of(h.get(b"state") or b"")
        if not staged or not state or state in STATES_FINAL:
            st.zrem(due_key, job_id)
            return 0
        lane, first = text_of(h[b"lane"]), num(h.get(b"first_chunk"))
        played = max(0.0, min(now - first, num(h.get(b"delivered_s")))) if first > 0 else 0.0
        admitted_s, admitted_n = num(h.get(b"admitted_s")), int(num(h.get(b"admitted_n")))
        horizon = num(h.get(b"horizon_s"))
        queued = num(st.hget(k.backlog(lane), "q")) - int(ending)
        in_flight = max(0, admitted_n - int(num(h.get(b"done"))))
        added = 0
        while staged:
            idle = queued - in_flight <= 0 and in_flight < idle_ahead
            if admitted_s - played >= horizon and not idle:
                break
            entry_id = text_of(staged.pop(0))
            staging = st.stream(k.staging(lane))
            fields = staging.entries.pop(entry_id, None) if staging is not None else None
            if fields is not None:
                st.xadd(text_of(fields[b"stream"]), {"v": fields[b"v"], "job": fields[b"job"]})
                admitted_s += num(fields.get(b"est"))
                added, in_flight, queued = added + 1, in_flight + 1, queued + 1
        if added:
            st.hset(k.status(job_id), {"admitted_s": admitted_s, "admitted_n": admitted_n + added, "staged": len(staged)})
            st.hincr(k.backlog(lane), "q", added)
        if not staged:
            st.zrem(due_key, job_id)
            st.delete(staged_key)
        elif first > 0:
            st.zadd(due_key, job_id, first + admitted_s - horizon)
        else:
            st.zadd(due_key, job_id, now + 0.25)  # before its first chunk: looked at again soon (an idle farm)
        return added

    def _drop_staged(self, job_id: str, lane: str) -> None:
        """A job's staged segments, dropped (it ended before they were admitted): off the staging stream, the due set
        and the lane's backlog counters."""
        st, k = self.store, self.keys
        ids = [text_of(i) for i in st.get(k.staged(job_id), list) or []]
        staging, est = st.stream(k.staging(lane)), 0.0
        for entry_id in ids:
            fields = staging.entries.pop(entry_id, None) if staging is not None else None
            est += num(fields.get(b"est")) if fields is not None else 0.0
        st.delete(k.staged(job_id))
        st.zrem(k.admission_due(), job_id)
        if ids:
            backlog = st.hash(k.backlog(lane))
            st.hset(k.backlog(lane), {"n": max(num(backlog.get(b"n")) - len(ids), 0),
                                      "s": max(num(backlog.get(b"s")) - est, 0)})

    def segments_done(self, job_id: str) -> int:
        with self.store.lock:
            return int(num(self.store.hget(self.keys.status(job_id), "done")))

    def count_failure(self, job_id: str, seg: int) -> int:
        with self.store.lock:
            return int(self.store.hincr(self.keys.status(job_id), f"failures:{seg}", 1))

    def dead_letter(self, record: Mapping[str, Any]) -> None:
        with self.store.lock:
            self.store.xadd(self.keys.dead_letters(), record, maxlen=100_000)

    def job_output(self, job_id: str) -> tuple[dict[int, bytes], dict[int, Any]]:
        with self.store.lock:
            by_seg, words = parts_output(dict(self.store.hash(self.keys.parts(job_id))))
            if set(words) - set(by_seg):
                stream = self.store.stream(self.keys.results(job_id))
                by_seg = {**stream_pcm(stream.entries.values() if stream is not None else ()), **by_seg}
            return by_seg, words

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 drop_work: bool = False, ack: Sequence[Entry] = (), **status: Any) -> int:
        st, k = self.store, self.keys
        with st.lock:
            ack_entries(st, k, ack)
            key = k.status(job_id)
            h = dict(st.hash(key))
            if b"final" in h:
                return 0  # ended already
            entries = int(num(h.get(b"results_entries"))) + 1  # the final record is one more entry
            ended, fields = state, final_fields(state, **final_info)
            if h.get(b"state") == b"cancelled" and state != "cancelled":  # a client's cancel won the race
                ended, fields = "cancelled", final_fields("cancelled", **CANCELLED_INFO)
                st.hset(key, {"final": 1, "results_entries": entries})
            else:
                st.hset(key, {"final": 1, "state": state, "results_entries": entries, **status})
            if ended != "done" and b"lane" in h:
                self._drop_staged(job_id, text_of(h[b"lane"]))
            st.xadd(k.results(job_id), {ENTRY: entries, **fields}, maxlen=maxlen)
            expires = num(h.get(b"results_expire"), 0.0)
            if not expires or expires < time.time() + ttl_s + RESULTS_SLACK_S // 2:
                st.expire(k.results(job_id), ttl_s)
            if drop_work:
                st.delete(k.parts(job_id), k.frames(job_id))
            return 2 if ended == "cancelled" and state != "cancelled" else 1

    def write_heartbeat(self, hostname: str, pid: int, info: Mapping[str, Any]) -> None:
        name, value = heartbeats.encode(hostname, pid, info)
        with self.store.lock:
            self.store.hset(self.keys.workers(), {name: value})

    # -- an operator's steps ------------------------------------------------------------------------------------
    def queue_snapshot(self, n_buckets: int, *, dead_letters: int = 0) -> QueueSnapshot:
        st, k = self.store, self.keys
        with st.lock:
            backlog = {}
            for lane in LANES:
                h, staging = st.hash(k.backlog(lane)), st.stream(k.staging(lane))
                backlog[lane] = LaneBacklog(segments=num(h.get(b"n")), seconds=num(h.get(b"s")),
                                            staged=len(staging.entries) if staging is not None else 0)
            buckets = tuple(_bucket(lane, i, k.queue(lane, i), st.stream(k.queue(lane, i)))
                            for lane in LANES for i in range(n_buckets))
            letters = st.stream(k.dead_letters())
            newest = list(reversed(letters.entries.items()))[:dead_letters] if letters is not None and dead_letters > 0 else []
            return QueueSnapshot(backlog=backlog, buckets=buckets,
                                 dead_letter_count=len(letters.entries) if letters is not None else 0,
                                 dead_letters=tuple(parse_dead_letter(i, f) for i, f in newest))

    def dead_letters(self, count: int) -> list[DeadLetter]:
        with self.store.lock:
            letters = self.store.stream(self.keys.dead_letters())
            newest = list(reversed(letters.entries.items()))[:count] if letters is not None else []
            return [parse_dead_letter(i, f) for i, f in newest]

    def find_dead_letter(self, entry_id: str) -> DeadLetter | None:
        with self.store.lock:
            letters = self.store.stream(self.keys.dead_letters())
            fields = letters.entries.get(entry_id) if letters is not None else None
            return parse_dead_letter(entry_id, fields) if fields is not None else None

    def requeue_dead_letter(self, entry_id: str) -> str:
        st, k = self.store, self.keys
        with st.lock:
            dl = self.find_dead_letter(entry_id)
            if dl is None:
                raise KeyError(entry_id)
            job = SegmentJob.from_fields(dl.fields)  # MALFORMED_JOB for an entry that never parsed: it stays
            status = k.status(job.job_id)
            st.hdel(status, "final", "error_code", "error_message", "finished")
            st.hset(status, {"state": "queued"})
            results = st.stream(k.results(job.job_id))
            for rid, fields in list(results.entries.items()) if results is not None else ():
                if fields.get(b"type") == b(FINAL):  # its number is the next record's
                    del results.entries[rid]
                    st.hincr(status, "results_entries", -1)
            new_id = st.xadd(dl.stream, job.to_fields())
            st.xdel(k.dead_letters(), dl.id)
            st.hincr(k.backlog(job.lane), "n", 1)  # queued again: on its lane's backlog until a worker acks it
            st.hincr(k.backlog(job.lane), "q", 1)
            return new_id

    def purge_dead_letters(self) -> int:
        with self.store.lock:
            letters = self.store.stream(self.keys.dead_letters())
            self.store.delete(self.keys.dead_letters())
            return len(letters.entries) if letters is not None else 0

    # -- books' steps -------------------------------------------------------------------------------------------
    def cancel_jobs(self, job_ids: Sequence[str]) -> list[int]:
        with self.store.lock:
            return self._cancel(job_ids)

    def admit_book_segments(self, subs: Sequence[Submission], queue: QueueSettings, *, force: bool) -> list[str]:
        with self.store.lock:
            return [self._book_segment(sub, queue, force) for sub in subs]

    def _book_segment(self, sub: Submission, q: QueueSettings, force: bool) -> str:
        st, k = self.store, self.keys
        (job,), (stream,) = sub.segments, sub.streams  # one segment each
        state = text_of(st.hget(k.status(sub.job_id), "state") or b"")
        if state in ("queued", "running") or (state == "done" and not force):
            return state
        backlog = st.hash(k.backlog(job.lane))
        n, s = num(backlog.get(b"n")), num(backlog.get(b"s"))
        max_n, max_s = limits(q, job.lane)
        if n > 0 and ((max_n > 0 and n + 1 > max_n) or (max_s > 0 and s + job.est_s > max_s)):
            return "full"
        st.delete(k.status(sub.job_id), k.results(sub.job_id), k.parts(sub.job_id))
        st.hset(k.status(sub.job_id), sub.status)
        st.expire(k.status(sub.job_id), q.job_ttl_s)
        st.xadd(stream, job.to_fields())
        st.hincr(k.backlog(job.lane), "n", 1)
        st.hincr(k.backlog(job.lane), "s", job.est_s)
        st.hincr(k.backlog(job.lane), "q", 1)
        return "submitted"

    def job_fields(self, job_ids: Sequence[str], fields: Sequence[str]) -> list[list[str | None]]:
        with self.store.lock:
            rows = [self.store.hash(self.keys.status(j)) for j in job_ids]
            return [[None if h.get(f.encode()) is None else text_of(h[f.encode()]) for f in fields] for h in rows]

    def keep_jobs(self, job_ids: Sequence[str], ttl_s: int) -> None:
        with self.store.lock:
            for j in job_ids:
                self.store.expire(self.keys.status(j), ttl_s)

    def drop_results(self, job_ids: Sequence[str]) -> None:
        with self.store.lock:
            self.store.delete(*[self.keys.results(j) for j in job_ids])

    def start_book_run(self, book_id: str, run_id: str, ttl_s: int) -> str:
        run_key = self.keys.book_run(book_id)
        with self.store.lock:
            self.store.set(run_key, run_id, ttl_s)
        return run_key

    def book_run(self, run_key: str) -> str:
        with self.store.lock:
            return text_of(self.store.get(run_key, bytes) or b"")

    def reply_to_book(self, reply_key: str, reply: str, ttl_s: int) -> None:
        with self.store.lock:
            self.store.rpush(reply_key, reply)
            self.store.expire(reply_key, ttl_s)

    def book_replies(self, reply_keys: Sequence[str]) -> list[str | None]:
        with self.store.lock:
            return [None if (v := self.store.lpop(key)) is None else text_of(v) for key in reply_keys]


def _bucket(lane: str, bucket: int, key: str, stream: Stream | None) -> BucketState:
    if stream is None or stream.group is None:
        return BucketState(lane, bucket, key, length=len(stream.entries) if stream is not None else 0)
    group = stream.group
    return BucketState(lane, bucket, key, grouped=True, length=len(stream.entries), lag=len(stream.undelivered()),
                       pending=len(group.pending), consumers=len(group.consumers))
