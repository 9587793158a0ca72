"""The worker's side of the bucket streams: peeking heads, claiming, acking, reclaiming.

Peeking reads the first undelivered entry of every queue without claiming it (a plain XREAD from
each group's last-delivered id), so a worker only claims, with XREADGROUP on one stream at a time,
what it is about to batch. No worker hoards entries another could run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from producer.wire.keys import GROUP, LANES, Keys
from producer.wire.broker import run_blocking
from producer.wire.redis_broker import RedisBroker
from producer.wire.records import SegmentJob
from workers.batcher import Head

log = logging.getLogger(__name__)


@dataclass
class Entry:
    """A claimed stream entry; ``job`` is None when the entry could not be parsed."""

    stream: str
    entry_id: str
    fields: dict[bytes, bytes]
    job: SegmentJob | None
    error: Exception | None = None
    deliveries: int = 1

    @property
    def arrived_ms(self) -> int:
        return int(self.entry_id.split("-")[0])


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def parse_entry(stream: str, entry_id: Any, fields: dict[bytes, bytes]) -> Entry:
    try:
        job = SegmentJob.from_fields(fields)
        return Entry(stream, _s(entry_id), fields, job)
    except Exception as exc:  # a malformed entry becomes an error record, never a crash
        return Entry(stream, _s(entry_id), fields, None, exc)


class StreamQueue:
    """The bucket streams of some lanes (default: all), read through the consumer group as ``consumer``."""

    def __init__(self, r: redis.Redis, keys: Keys, n_buckets: int, consumer: str, lanes: tuple[str, ...] = LANES) -> None:
        self.r = r
        self.keys = keys
        self.streams = keys.queues(n_buckets, lanes)
        self.undelivered = 0  # entries no consumer had taken yet, over these streams, at the last peek
        self.consumer = consumer
        self.broker = RedisBroker(r, keys)

    def ensure_groups(self) -> None:
        run_blocking(self.broker, self.broker.ensure_groups(self.streams))

    def _delivered_ids(self) -> dict[str, str]:
        pipe = self.r.pipeline(transaction=False)
        for stream in self.streams:
            pipe.xinfo_groups(stream)
        ids: dict[str, str] = {}
        lag = 0
        for stream, groups in zip(self.streams, pipe.execute(raise_on_error=False)):
            if isinstance(groups, Exception):
                self.ensure_groups()
                ids[stream] = "0-0"
                continue
            for g in groups:
                if _s(g["name"]) == GROUP:
                    ids[stream] = _s(g["last-delivered-id"])
                    lag += int(g.get("lag") or 0)  # Redis 7: entries not yet delivered (None when unknown)
        self.undelivered = lag
        return ids

    def peek(self, block_ms: int) -> list[Head]:
        """Heads of all queues with undelivered entries; blocks up to ``block_ms`` while all are empty (0: no wait)."""
        ids = self._delivered_ids()
        reply = self.r.xread(ids, count=1, block=block_ms if block_ms > 0 else None) if ids else []
        heads = []
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                e = parse_entry(_s(stream), entry_id, fields)
                lane = _s(stream).split(":")[-2]
                job = e.job
                heads.append(Head(stream=_s(stream), lane=lane, arrived_ms=e.arrived_ms, est_s=job.est_s if job else 0.0,
                                  voice=job.voice if job else "", seg=job.seg if job else 0, job_id=job.job_id if job else "",
                                  created=job.created if job else 0.0, deadline=job.deadline if job else 0.0))
        return heads

    def claim(self, stream: str, count: int, block_ms: int | None = None) -> list[Entry]:
        reply = self.r.xreadgroup(GROUP, self.consumer, {stream: ">"}, count=count, block=block_ms)
        return [parse_entry(_s(s), eid, f) for s, entries in reply or [] for eid, f in entries]

    def ack(self, entries: list[Entry]) -> None:
        """Ack entries and delete them from their stream (the group is the only reader, so a finished entry
        would otherwise stay for ever: a 10,000-job soak left every one); those whose XACK counted come off their
        lane's backlog (once, even if redelivered)."""
        pipe = self.r.pipeline(transaction=False)
        for e in entries:
            pipe.xack(e.stream, GROUP, e.entry_id)
            pipe.xdel(e.stream, e.entry_id)
        released: dict[str, list[float]] = {}
        for e, n in zip(entries, pipe.execute()[0::2]):
            if n and e.job is not None:
                tally = released.setdefault(e.job.lane, [0, 0.0])
                tally[0] += 1
                tally[1] += e.job.est_s
        for lane, (count, seconds) in released.items():
            self.broker.release(lane, int(count), seconds)

    def reclaim(self, min_idle_ms: int, count: int = 16) -> list[Entry]:
        """Entries another consumer took and left idle (it died): take them over, with delivery counts."""
        taken: list[Entry] = []
        for stream in self.streams:
            if len(taken) >= count:
                break
            try:
                _, entries, _deleted = self.r.xautoclaim(stream, GROUP, self.consumer, min_idle_ms, "0-0", count=count)
            except redis.ResponseError:
                continue
            if not entries:
                continue
            pending = {
                _s(p["message_id"]): int(p["times_delivered"])
                for p in self.r.xpending_range(stream, GROUP, min="-", max="+", count=1000, consumername=self.consumer)
            }
            for eid, fields in entries:
                if fields is None:
                    continue
                e = parse_entry(stream, eid, fields)
                e.deliveries = pending.get(e.entry_id, 1)
                taken.append(e)
        return taken

    def touch(self, entries: list[Entry]) -> None:
        """Reset the idle time of entries this consumer holds (XCLAIM JUSTID: the delivery count is kept), so a
        segment held between its windows is not reclaimed from a live worker. Only entries still pending with this
        consumer are touched: one another worker took over is not taken back."""
        if not entries:
            return
        pipe = self.r.pipeline(transaction=False)
        for e in entries:
            pipe.xpending_range(e.stream, GROUP, min=e.entry_id, max=e.entry_id, count=1)
        ours: dict[str, list[str]] = {}
        for e, pending in zip(entries, pipe.execute()):
            if pending and _s(pending[0]["consumer"]) == self.consumer:
                ours.setdefault(e.stream, []).append(e.entry_id)
        for stream, ids in ours.items():
            pipe.xclaim(stream, GROUP, self.consumer, 0, ids, justid=True)
        pipe.execute()

    def requeue(self, entries: list[Entry]) -> None:
        """Give claimed entries back: each is re-added to its stream and the claim acked, atomically.
        The lane's backlog is unchanged (the same work is still queued)."""
        pipe = self.r.pipeline(transaction=True)
        for e in entries:
            pipe.xadd(e.stream, e.fields)
            pipe.xack(e.stream, GROUP, e.entry_id)
            pipe.xdel(e.stream, e.entry_id)
        pipe.execute()

    def prune_consumers(self, min_idle_ms: int) -> int:
        """Remove consumers of dead workers: nothing pending and idle for ``min_idle_ms``."""
        removed = 0
        for stream in self.streams:
            try:
                consumers = self.r.xinfo_consumers(stream, GROUP)
            except redis.ResponseError:
                continue
            for c in consumers:
                name = _s(c["name"])
                if name != self.consumer and int(c["pending"]) == 0 and int(c["idle"]) >= min_idle_ms:
                    removed += int(self.r.xgroup_delconsumer(stream, GROUP, name) == 0)
        return removed

    def forget_consumer(self) -> None:
        """Leave the groups (after the last ack): dead consumer names do not pile up."""
        for stream in self.streams:
            try:
                pending = self.r.xpending_range(stream, GROUP, min="-", max="+", count=1, consumername=self.consumer)
                if not pending:
                    self.r.xgroup_delconsumer(stream, GROUP, self.consumer)
            except redis.RedisError:
                pass
