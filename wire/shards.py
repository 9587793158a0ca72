"""Shards: the farm's jobs spread over several stores (Redis nodes or Sentinel groups), one broker per shard behind
``ShardedBroker``, itself a ``Broker``: the SDK, the front ends and the workers call the same steps.

A job lives on one shard, ``shard_of(job_id, n)``: its status, results stream, parts, words, frames, staged segments
and its segments' queue entries. Every step on a job goes to that shard's broker, so each stays atomic on one node and
a reader finds the job from its id alone. What belongs to the farm rather than to a job is on shard 0 (``redis.url``):
the workers' heartbeats, a book's run key and its tasks' replies, and Celery's broker (Celery does not shard). Workers
consume every shard (``ShardedConsumer``); the admission sweep runs on every shard; the queue snapshot and the dead
letters are read from every shard and added up. A book's sentences are jobs of their own ids, so they spread.

How each step routes is one line of ``ROUTES``, not a copy of the step: by the job it names, by the jobs of a batch
(one call per shard that holds some of them, answers put back in order), on every shard (answers combined), or on
the first. A lane's backlog limit stays the farm's: each shard admits its share (``limit / n``, rounded up), which
adds up to the limit for evenly spread ids; a job larger than a shard's share still runs when its shard's lane is
empty.

Names a sharded farm hands out carry the shard where several shards have the same one: a queue stream as its
consumer reports it, ``<shard>@<stream>`` (``shard_consumer.tag``), and a dead letter's id, ``<id>@<shard>`` (what
`ttsfarm dlq` shows and takes back; an id without a shard is looked for on every shard).

``shard_of`` is the jump consistent hash (Lamping and Veach, 2014) of the id's BLAKE2b digest: the same on every
machine and Python, even over ids, and a shard added moves only 1/n of the ids. Still, change ``redis.shards`` on a
drained farm only: a job whose id moved is not found where its reader looks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from wire.broker import Broker, Op, advance
from wire.queue import Entry
from wire.shard_consumer import ShardedConsumer, untag
from wire.snapshot import BucketState, LaneBacklog, QueueSnapshot

if TYPE_CHECKING:
    from wire.records import DeadLetter
    from wire.settings import QueueSettings

log = logging.getLogger(__name__)
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


def _job_id(item: Any) -> str:
    return item if isinstance(item, str) else str(item.job_id)


@dataclass(frozen=True)
class Route:
    """How a step routes. ``by``: ``job`` (the job its first argument names), ``batch`` (the jobs its first argument
    lists; ``columns``: the positional arguments that run beside it, item by item), ``every`` (each shard; ``combine``
    the answers), ``first`` (shard 0). ``op``: the step is a client's ``Op`` (its IO steps are addressed to the shard).
    ``shares``: it takes the queue settings (each shard admits by its share of the limits)."""

    by: str
    op: bool = False
    shares: bool = False
    columns: tuple[int, ...] = (0,)
    combine: Callable[[list[Any]], Any] | None = None


def _sum_due(counts: list[int]) -> int:
    """The admission sweep over every shard: segments admitted, -1 when no shard has a job with staged segments."""
    return sum(max(0, n) for n in counts) if any(n >= 0 for n in counts) else -1


def _merged(answers: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: v for answer in answers for k, v in answer.items()}


ROUTES: dict[str, Route] = {
    # a client's steps
    "ensure_groups": Route("every", op=True),
    "admit": Route("job", op=True, shares=True),
    "cancel": Route("job", op=True),
    "open_job": Route("job", op=True, shares=True),
    "append": Route("job", op=True, shares=True),
    "job_status": Route("job", op=True),
    "read_results": Route("job", op=True),
    "read_heartbeats": Route("first", op=True),
    # a worker's
    "job_states": Route("batch"),
    "start_segments": Route("batch", columns=(0, 2, 3)),
    "playback_clocks": Route("batch", combine=_merged),
    "publish_pieces": Route("batch"),  # a window step's pieces of one job stay in order: one call to its shard
    "admit_due": Route("every", combine=_sum_due),
    "segments_done": Route("job"),
    "count_failure": Route("job"),
    "job_output": Route("job"),
    "write_heartbeat": Route("first"),
    # an operator's
    "purge_dead_letters": Route("every", combine=sum),
    "reachable": Route("every", combine=all),
    # books'
    "cancel_jobs": Route("batch"),
    "admit_book_segments": Route("batch", shares=True),
    "job_fields": Route("batch"),
    "keep_jobs": Route("batch", combine=lambda _: None),
    "drop_results": Route("batch", combine=lambda _: None),
    "start_book_run": Route("first"),
    "book_run": Route("first"),
    "reply_to_book": Route("first"),
    "book_replies": Route("first"),
}


class ShardedBroker:
    """``Broker`` over one broker per shard (``shards[0]`` on ``redis.url``): each step of ``ROUTES`` goes where its
    route says; the steps below it are the few that need more than routing."""

    def __init__(self, shards: Sequence[Broker]) -> None:
        if len(shards) < 2:
            raise ValueError("a sharded broker needs two shards or more")
        self.shards = list(shards)
        self.first = self.shards[0]
        self.keys = self.first.keys

    def __getattr__(self, name: str) -> Any:
        route = ROUTES.get(name)
        if route is None:
            raise AttributeError(name)
        step = functools.partial(self._routed, name, route)
        self.__dict__[name] = step  # built once per step and broker
        return step

    def _routed(self, name: str, route: Route, *args: Any, **kwargs: Any) -> Any:
        if route.shares:
            args, kwargs = self._shared(name, args, kwargs)
        if route.by == "first":
            return self._on(0, name, route, args, kwargs)
        if route.by == "job":
            return self._on(self.shard(_job_id(args[0])), name, route, args, kwargs)
        if route.by == "every":
            if route.op:
                return self._every_op(name, args, kwargs)
            return self._every(name, route, args, kwargs)
        return self._batch(name, route, args, kwargs)

    def _shared(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The step's queue settings replaced by one shard's share of them."""
        if "queue" in kwargs:
            return args, {**kwargs, "queue": share(kwargs["queue"], len(self.shards))}
        at = list(inspect.signature(getattr(self.first, name)).parameters).index("queue")
        return (*args[:at], share(args[at], len(self.shards)), *args[at + 1:]), kwargs

    def _on(self, shard: int, name: str, route: Route, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        answer = getattr(self.shards[shard], name)(*args, **kwargs)
        return on_shard(shard, answer) if route.op else answer

    def _every_op(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Op[None]:
        for shard, broker in enumerate(self.shards):
            yield from on_shard(shard, getattr(broker, name)(*args, **kwargs))

    def _every(self, name: str, route: Route, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The step on each shard; a shard that fails does not keep the others from theirs (its error is raised after
        them)."""
        answers, error = [], None
        for broker in self.shards:
            try:
                answers.append(getattr(broker, name)(*args, **kwargs))
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return route.combine(answers) if route.combine else answers

    def _batch(self, name: str, route: Route, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call per shard holding some of the batch's jobs, with its part of each column; the answers in the
        batch's order (or combined)."""
        items = args[route.columns[0]]
        by_shard: dict[int, list[int]] = {}
        for pos, item in enumerate(items):
            by_shard.setdefault(self.shard(_job_id(item)), []).append(pos)
        out: list[Any] = [None] * len(items)
        answers = []
        for shard, positions in by_shard.items():
            part = list(args)
            for col in route.columns:
                part[col] = [args[col][p] for p in positions]
            answer = getattr(self.shards[shard], name)(*part, **kwargs)
            answers.append(answer)
            if route.combine is None:
                for pos, one in zip(positions, answer):
                    out[pos] = one
        return route.combine(answers) if route.combine else out

    def shard(self, job_id: str) -> int:
        return shard_of(job_id, len(self.shards))

    def of(self, job_id: str) -> Broker:
        """The broker of the shard that holds ``job_id``."""
        return self.shards[self.shard(job_id)]

    def send(self, step: Any) -> Any:
        if isinstance(step, Routed):
            return self.shards[step.shard].send(step.step)
        return self.first.send(step)  # a step of no shard in particular: the first's (Celery's node)

    @property
    def r(self) -> Any:
        """The first shard's connection, where its broker keeps one (the SDK's ``client.redis``)."""
        return getattr(self.first, "r", None)

    def close(self) -> Any:
        """Close every shard's broker (an awaitable on asyncio brokers)."""
        closing = [broker.close() for broker in self.shards]
        if inspect.isawaitable(closing[0]):
            async def wait() -> None:
                for pending in closing:
                    await pending
            return wait()
        return None

    def master(self) -> str:
        """Each shard's failover master, comma-separated; '' when no shard has one."""
        masters = [broker.master() for broker in self.shards]
        return ",".join(masters) if any(masters) else ""

    @property
    def master_changes(self) -> int:
        return sum(broker.master_changes for broker in self.shards)

    # -- the steps that need more than a route ------------------------------------------------------------------
    def consumer(self, name: str, streams: Sequence[str]) -> ShardedConsumer:
        return ShardedConsumer([broker.consumer(name, streams) for broker in self.shards])

    def finalize(self, job_id: str, state: str, final_info: Mapping[str, Any], /, *, ack: Sequence[Entry] = (),
                 **kwargs: Any) -> int:
        """On the job's shard, with the entries to ack named as that shard knows their streams (a job's entries are
        in its shard's queue, as its consumer named them: ``<shard>@<stream>``). An entry another shard holds is left
        out (its consumer's reclaim acks it once it finds the job ended)."""
        shard = self.shard(job_id)
        own = []
        for e in ack:
            at, stream = untag(e.stream)
            if at == shard:
                own.append(dataclasses.replace(e, stream=stream))
            else:
                log.warning("entry %s of job %s is on shard %d, not the job's %d: left to a reclaim", e.entry_id,
                            job_id, at, shard)
        return int(self.shards[shard].finalize(job_id, state, final_info, ack=own, **kwargs))

    def dead_letter(self, record: dict[str, Any]) -> None:
        """On the shard of the entry's stream (``<shard>@<stream>``, as its consumer named it), where its job is."""
        shard, stream = untag(str(record["stream"]))
        self.shards[shard].dead_letter({**record, "stream": stream})

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

    def topology(self) -> dict[str, Any]:
        """The first shard's, with ``shards``: each shard's, in order."""
        each = [broker.topology() for broker in self.shards]
        return {**each[0], "shards": each}


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
