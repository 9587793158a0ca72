"""Shards: the farm's jobs spread over several Redis nodes (or Sentinel groups), one ``Broker`` per shard behind
``ShardedBroker``, itself a ``Broker`` (``wire.broker``): the SDK, the front ends and the workers call the
same steps.

A job lives on one shard, ``shard_of(job_id, n)``: its status, results stream, parts, words, frames, staged segments
and its segments' queue entries. Every step on a job goes to that shard's broker, so each stays one Lua script or
pipeline on one node, as atomic as on one Redis, and a reader finds the job from its id alone. What belongs to the
farm rather than to a job is on shard 0 (``redis.url``): the workers' heartbeats, a book's run key and its tasks'
replies, and Celery's broker (Celery does not shard). Workers consume every shard (``ShardedConsumer``); the
admission sweep, reclaiming and pruning run on every shard; the queue snapshot and the dead letters are read from
every shard and added up. A book's sentences are jobs of their own ids, so they spread over the shards.

A lane's backlog limit stays the farm's: each shard admits its share (``limit / n``, rounded up), which adds up to
the limit for evenly spread ids. A job larger than a shard's share still runs when its shard's lane is empty.

Names a sharded farm hands out carry the shard where several shards have the same one: a queue stream as its
consumer reports it, ``<shard>@<stream>`` (``sharded_consumer.tag``), and a dead letter's id, ``<id>@<shard>`` (what
`ttsfarm dlq` shows and takes back; an id without a shard is looked for on every shard).

``shard_of`` is the jump consistent hash (Lamping and Veach, 2014) of the id's BLAKE2b digest: the same on every
machine and Python, even over ids, and a shard added moves only 1/n of the ids. Still, change ``redis.shards`` on a
drained farm only: a job whose id moved is not found where its reader looks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from wire.broker import Broker, Op, Piece, PieceReply, advance
from wire.redis.broker import RedisBroker
from wire.shard_consumer import ShardedConsumer, untag
from wire.snapshot import BucketState, LaneBacklog, QueueSnapshot

if TYPE_CHECKING:
    from wire.admission import Admission
    from wire.records import DeadLetter, SegmentJob, Submission
    from wire.settings import QueueSettings, RedisSettings
    from wire.status import JobStatus

T = TypeVar("T")


def shard_of(job_id: str, shards: int) -> int:
    """The shard (0 .. ``shards`` - 1) that holds the job ``job_id``."""
    key = int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8).digest(), "little")
    b, j = -1, 0
    while j < shards:
        b = j
        key = (key * 2862933555777941757 + 1) % 2**64
        j = int((b + 1) * (2**31 / ((key >> 33) + 1)))
    return b


@dataclass(frozen=True)
class Routed:
    """An IO step of one shard's broker: ``ShardedBroker.send`` hands it to that shard."""

    shard: int
    step: Any


def on_shard(shard: int, op: Op[T]) -> Op[T]:
    """``op`` of one shard's broker, each of its steps addressed to that shard."""
    finished, step = advance(op, None, None)
    while not finished:
        try:
            outcome: tuple[Any, BaseException | None] = ((yield Routed(shard, step)), None)
        except Exception as exc:  # the step failed: the shard's op decides what that means
            outcome = (None, exc)
        finished, step = advance(op, *outcome)
    return step  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=32)
def share(queue: QueueSettings, shards: int) -> QueueSettings:
    """The queue settings one of ``shards`` shards admits by: each lane's backlog limits divided among them."""
    return dataclasses.replace(
        queue,
        max_backlog_interactive_segments=math.ceil(queue.max_backlog_interactive_segments / shards),
        max_backlog_interactive_seconds=queue.max_backlog_interactive_seconds / shards,
        max_backlog_bulk_segments=math.ceil(queue.max_backlog_bulk_segments / shards),
        max_backlog_bulk_seconds=queue.max_backlog_bulk_seconds / shards)


class ShardedBroker:
    """``Broker`` over one broker per shard (``shards[0]`` on ``redis.url``). Blocking steps on a job go to its
    shard's broker; producing steps wrap its shard's ``Op`` (``on_shard``) so ``send`` knows where each IO step
    goes. Steps over many jobs make one round trip per shard that holds some of them (atomic per shard)."""

    def __init__(self, shards: Sequence[Broker]) -> None:
        if len(shards) < 2:
            raise ValueError("a sharded broker needs two shards or more")
        self.shards = list(shards)
        self.first = self.shards[0]
        self.keys = self.first.keys
        self.lost = self.first.lost
        self.refused = self.first.refused

    @property
    def r(self) -> Any:
        """The first shard's connection, where its broker keeps one (the SDK's ``client.redis``)."""
        return getattr(self.first, "r", None)

    def connections(self) -> list[Any]:
        """Every shard's connection (what the SDK closes)."""
        return [getattr(s, "r") for s in self.shards if getattr(s, "r", None) is not None]

    def shard(self, job_id: str) -> int:
        return shard_of(job_id, len(self.shards))

    def of(self, job_id: str) -> Broker:
        """The broker of the shard that holds ``job_id``."""
        return self.shards[self.shard(job_id)]

    def send(self, step: Any) -> Any:
        if isinstance(step, Routed):
            return self.shards[step.shard].send(step.step)
        return self.first.send(step)  # a step of no shard in particular: the first's (Celery's node)

    def _by_shard(self, job_ids: Sequence[str]) -> dict[int, list[int]]:
        """The positions of ``job_ids`` by shard."""
        out: dict[int, list[int]] = {}
        for pos, job_id in enumerate(job_ids):
            out.setdefault(self.shard(job_id), []).append(pos)
        return out

    def _gather(self, items: Sequence[Any], ids: Sequence[str], call: Callable[[Broker, list[Any]], list[T]]) -> list[T]:
        """``call`` on each shard with its part of ``items`` (``ids``: each item's job id), answers in order."""
        out: list[Any] = [None] * len(items)
        for shard, positions in self._by_shard(ids).items():
            for pos, answer in zip(positions, call(self.shards[shard], [items[p] for p in positions])):
                out[pos] = answer
        return out

    # -- producing side -------------------------------------------------------------------------------------
    def ensure_groups(self, streams: Sequence[str]) -> Op[None]:
        for shard, broker in enumerate(self.shards):
            yield from on_shard(shard, broker.ensure_groups(streams))

    def admit(self, sub: Submission, queue: QueueSettings) -> Op[None]:
        shard = self.shard(sub.job_id)
        yield from on_shard(shard, self.shards[shard].admit(sub, share(queue, len(self.shards))))

    def cancel(self, job_id: str) -> Op[int]:
        shard = self.shard(job_id)
        return (yield from on_shard(shard, self.shards[shard].cancel(job_id)))

    def open_job(self, job_id: str, status: Mapping[str, Any], queue: QueueSettings) -> Op[None]:
        shard = self.shard(job_id)
        yield from on_shard(shard, self.shards[shard].open_job(job_id, status, share(queue, len(self.shards))))

    def append(self, job_id: str, segments: Sequence[SegmentJob], streams: Sequence[str], first_seg: int, *,
               close: bool, last: tuple[SegmentJob, str] | None, queue: QueueSettings) -> Op[None]:
        shard = self.shard(job_id)
        yield from on_shard(shard, self.shards[shard].append(job_id, segments, streams, first_seg, close=close, last=last,
                                                             queue=share(queue, len(self.shards))))

    def job_status(self, job_id: str) -> Op[JobStatus | None]:
        shard = self.shard(job_id)
        return (yield from on_shard(shard, self.shards[shard].job_status(job_id)))

    def read_results(self, job_id: str, args: Sequence[Any]) -> Op[Any]:
        shard = self.shard(job_id)
        return (yield from on_shard(shard, self.shards[shard].read_results(job_id, args)))

    def await_results(self, job_id: str, after_id: Any, block_ms: int) -> Op[bool]:
        shard = self.shard(job_id)
        return (yield from on_shard(shard, self.shards[shard].await_results(job_id, after_id, block_ms)))

    # -- consuming side -------------------------------------------------------------------------------------
    def consumer(self, name: str, streams: Sequence[str]) -> ShardedConsumer:
        return ShardedConsumer([broker.consumer(name, streams) for broker in self.shards])

    # -- results: each on its job's shard -------------------------------------------------------------------
    def job_states(self, job_ids: Sequence[str]) -> list[str]:
        return self._gather(job_ids, job_ids, lambda broker, ids: broker.job_states(ids))

    def start_segments(self, job_ids: Sequence[str], worker: str, startable: Sequence[bool],
                       claimed: Sequence[float]) -> list[tuple[str, bool]]:
        items = list(zip(job_ids, startable, claimed))
        return self._gather(items, job_ids, lambda broker, part: broker.start_segments(
            [i[0] for i in part], worker, [i[1] for i in part], [i[2] for i in part]))

    def playback_clocks(self, job_ids: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        out: dict[str, tuple[Any, Any]] = {}
        for shard, positions in self._by_shard(job_ids).items():
            out.update(self.shards[shard].playback_clocks([job_ids[p] for p in positions]))
        return out

    def publish_pieces(self, pieces: Sequence[Piece], *, maxlen: int, ttl_s: int) -> list[PieceReply]:
        """One round trip per shard the pieces' jobs live on (a window step's pieces of one job stay in order: they
        go to one shard, in one call)."""
        return self._gather(pieces, [p.job_id for p in pieces],
                            lambda broker, part: broker.publish_pieces(part, maxlen=maxlen, ttl_s=ttl_s))

    def admit_due(self, admission: Admission, limit: int = 64) -> int:
        """Every shard's due segments (a sweep of each; a shard that fails does not keep the others from theirs: its
        error is raised after them); -1 when no shard has a job with staged segments."""
        counts, error = [], None
        for broker in self.shards:
            try:
                counts.append(broker.admit_due(admission, limit))
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return sum(max(0, n) for n in counts) if any(n >= 0 for n in counts) else -1

    def segments_done(self, job_id: str) -> int:
        return self.of(job_id).segments_done(job_id)

    def count_failure(self, job_id: str, seg: int) -> int:
        return self.of(job_id).count_failure(job_id, seg)

    def dead_letter(self, record: Mapping[str, Any]) -> None:
        """On the shard of the entry's stream (``<shard>@<stream>``, as its consumer named it), where its job is."""
        shard, stream = untag(str(record["stream"]))
        self.shards[shard].dead_letter({**record, "stream": stream})

    def job_output(self, job_id: str) -> tuple[dict[int, bytes], dict[int, Any]]:
        return self.of(job_id).job_output(job_id)

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, maxlen: int, ttl_s: int,
                 drop_work: bool = False, **status: Any) -> int:
        return self.of(job_id).finalize(job_id, state, final_info, maxlen=maxlen, ttl_s=ttl_s, drop_work=drop_work,
                                        **status)

    # -- admin: every shard's, added up ---------------------------------------------------------------------
    def queue_snapshot(self, n_buckets: int, *, dead_letters: int = 0) -> QueueSnapshot:
        """Every shard's snapshot (each one consistent read of its shard), added up lane by lane and bucket by
        bucket; the newest ``dead_letters`` of all shards."""
        snaps = [broker.queue_snapshot(n_buckets, dead_letters=dead_letters) for broker in self.shards]
        backlog = {lane: LaneBacklog(segments=sum(s.backlog[lane].segments for s in snaps),
                                     seconds=sum(s.backlog[lane].seconds for s in snaps),
                                     staged=sum(s.backlog[lane].staged for s in snaps)) for lane in snaps[0].backlog}
        letters = [_tagged(dl, shard) for shard, s in enumerate(snaps) for dl in s.dead_letters]
        return QueueSnapshot(backlog=backlog, buckets=tuple(_bucket_sum(b) for b in zip(*(s.buckets for s in snaps))),
                             dead_letter_count=sum(s.dead_letter_count for s in snaps),
                             dead_letters=tuple(_newest(letters, dead_letters)))

    def dead_letters(self, count: int) -> list[DeadLetter]:
        return _newest([_tagged(dl, shard) for shard, b in enumerate(self.shards) for dl in b.dead_letters(count)], count)

    def find_dead_letter(self, entry_id: str) -> DeadLetter | None:
        for shard, raw in self._dead_letter_shards(entry_id):
            found = self.shards[shard].find_dead_letter(raw)
            if found is not None:
                return _tagged(found, shard)
        return None

    def requeue_dead_letter(self, entry_id: str) -> str:
        for shard, raw in self._dead_letter_shards(entry_id):
            if self.shards[shard].find_dead_letter(raw) is not None:
                return self.shards[shard].requeue_dead_letter(raw)
        raise KeyError(entry_id)

    def _dead_letter_shards(self, entry_id: str) -> list[tuple[int, str]]:
        """Where a dead letter of this id may be: the shard its id names, or (an id without one) every shard."""
        raw, sep, shard = entry_id.rpartition("@")
        if sep and shard.isdigit() and int(shard) < len(self.shards):
            return [(int(shard), raw)]
        return [(i, entry_id) for i in range(len(self.shards))]

    def purge_dead_letters(self) -> int:
        return sum(broker.purge_dead_letters() for broker in self.shards)

    def write_heartbeat(self, hostname: str, pid: int, info: Mapping[str, Any]) -> None:
        self.first.write_heartbeat(hostname, pid, info)

    def read_heartbeats(self) -> Op[dict[str, dict[str, Any]]]:
        return (yield from on_shard(0, self.first.read_heartbeats()))

    def reachable(self) -> bool:
        return all(broker.reachable() for broker in self.shards)

    def topology(self) -> dict[str, Any]:
        """The first shard's, with ``shards``: each shard's, in order."""
        each = [broker.topology() for broker in self.shards]
        return {**each[0], "shards": each}

    def master(self) -> str:
        """Each shard's Sentinel master (``RedisBroker.master``), comma-separated; '' when no shard has one."""
        masters = [getattr(broker, "master", lambda: "")() for broker in self.shards]
        return ",".join(masters) if any(masters) else ""

    @property
    def master_changes(self) -> int:
        return sum(int(getattr(broker, "master_changes", 0)) for broker in self.shards)

    # -- books: each job on its shard; the book's run key and replies on the first ---------------------------
    def cancel_jobs(self, job_ids: Sequence[str]) -> list[int]:
        return self._gather(job_ids, job_ids, lambda broker, ids: broker.cancel_jobs(ids))

    def admit_book_segments(self, subs: Sequence[Submission], queue: QueueSettings, *, force: bool) -> list[str]:
        mine = share(queue, len(self.shards))
        return self._gather(subs, [s.job_id for s in subs],
                            lambda broker, part: broker.admit_book_segments(part, mine, force=force))

    def job_fields(self, job_ids: Sequence[str], fields: Sequence[str]) -> list[list[str | None]]:
        return self._gather(job_ids, job_ids, lambda broker, ids: broker.job_fields(ids, fields))

    def keep_jobs(self, job_ids: Sequence[str], ttl_s: int) -> None:
        for shard, positions in self._by_shard(job_ids).items():
            self.shards[shard].keep_jobs([job_ids[p] for p in positions], ttl_s)

    def drop_results(self, job_ids: Sequence[str]) -> None:
        for shard, positions in self._by_shard(job_ids).items():
            self.shards[shard].drop_results([job_ids[p] for p in positions])

    def start_book_run(self, book_id: str, run_id: str, ttl_s: int) -> str:
        return self.first.start_book_run(book_id, run_id, ttl_s)

    def book_run(self, run_key: str) -> str:
        return self.first.book_run(run_key)

    def reply_to_book(self, reply_key: str, reply: str, ttl_s: int) -> None:
        self.first.reply_to_book(reply_key, reply, ttl_s)

    def book_replies(self, reply_keys: Sequence[str]) -> list[str | None]:
        return self.first.book_replies(reply_keys)


def _tagged(dl: DeadLetter, shard: int) -> DeadLetter:
    return dataclasses.replace(dl, id=f"{dl.id}@{shard}")


def _newest(letters: list[DeadLetter], count: int) -> list[DeadLetter]:
    """The newest ``count`` dead letters of several shards, the newest first (by their entry ids' time)."""
    def when(dl: DeadLetter) -> tuple[int, int]:
        ms, _, seq = dl.id.partition("@")[0].partition("-")
        return int(ms or 0), int(seq or 0)

    return sorted(letters, key=when, reverse=True)[:max(0, count)]


def _bucket_sum(same: tuple[BucketState, ...]) -> BucketState:
    """One bucket stream over every shard: lengths, lag and pending added up; the consumers of the shard with most
    (every worker loop reads every shard); the lag unknown when a grouped shard's is."""
    grouped = [b for b in same if b.grouped]
    first = same[0]
    if not grouped:
        return BucketState(first.lane, first.bucket, first.stream, length=sum(b.length for b in same))
    lags = [b.lag for b in grouped]
    return BucketState(first.lane, first.bucket, first.stream, grouped=True, length=sum(b.length for b in same),
                       lag=None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
                       pending=sum(b.pending for b in grouped), consumers=max(b.consumers for b in grouped))


def broker_from_settings(settings: RedisSettings, *, asyncio: bool = False, first: Broker | None = None,
                         **redis_kwargs: Any) -> Broker:
    """The farm's broker for these settings: a ``RedisBroker`` on ``redis.url``, or, with ``redis.shards``, a
    ``ShardedBroker`` over it and one per shard URL (each with the same key prefix, master name and replica wait).
    ``first``: the broker of ``redis.url`` when the caller has one (on a connection it was handed)."""
    head = first if first is not None else RedisBroker.from_settings(settings, asyncio=asyncio, **redis_kwargs)
    if not settings.shards:
        return head
    more = [RedisBroker.from_settings(dataclasses.replace(settings, url=url, shards=()), asyncio=asyncio, **redis_kwargs)
            for url in settings.shards]
    return ShardedBroker([head, *more])
