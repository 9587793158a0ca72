"""The consuming side of the Redis wire: one consumer of the workers' group on some lanes' bucket streams.

Peeking reads the first undelivered entry of every queue without claiming it (a plain XREAD from each group's
last-delivered id), so a worker only claims, with XREADGROUP on one stream at a time, what it is about to batch.
No worker hoards entries another could run. ``RedisBroker.consumer`` makes one per inference loop.

While a process's loops are idle, those reading the same streams wait for new entries together (``IdleGate``): one
blocking read at a time, the others wait for it to return, so an idle worker costs Redis one XREAD per block and
per set of streams, not one per loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

import redis

from wire.broker import JobBroker, run_blocking
from wire.keys import GROUP, Keys
from wire.queue import Entry, Head, head_of, parse_entry
from wire.records import text_of
from wire.redis.errors import raises_wire_errors
from wire.redis.lua import ACK, HEADS
from wire.redis.steps import Script

FULL_PEEK_S = 5.0  # a peek asks every stream for the group's id at least this often (not only those that moved)
GATE_SLACK_S = 1.0  # a consumer waiting on another's blocking read gives up this long after that read's block


class IdleGate:
    """The idle consumers of one process on the same streams: one of them at a time blocks on the streams (the
    reader), the others wait for its read to return. A read that timed out leaves the group's ids it read from
    exact (nothing was added meanwhile), and every waiter takes them for its next wait; a read that saw entries
    sends each waiter to peek."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reading = False
        self._round = 0  # reads returned so far
        self._exact: dict[str, str] | None = None  # after a read that timed out: the ids it read from

    def enter(self) -> tuple[bool, int]:
        """(whether the caller is the reader now, the round it waits for the end of)."""
        with self._cond:
            lead = not self._reading
            self._reading = True
            return lead, self._round

    def leave(self, exact: dict[str, str] | None) -> None:
        """The reader's read returned: ``exact`` its ids if it timed out, else None (it saw entries, or failed)."""
        with self._cond:
            self._reading, self._exact = False, exact
            self._round += 1
            self._cond.notify_all()

    @property
    def reading(self) -> bool:
        """Whether a consumer is in a blocking read on these streams now."""
        return self._reading

    def wait(self, round_: int, timeout_s: float) -> dict[str, str] | None:
        """Wait for the end of the read in flight at ``round_``: the exact ids it left (None if it saw entries, failed,
        or has not ended within ``timeout_s``)."""
        with self._cond:
            ended = self._cond.wait_for(lambda: self._round != round_, timeout_s)
            return dict(self._exact) if ended and self._exact is not None else None


@raises_wire_errors
class RedisConsumer:
    """``Consumer`` (``wire.broker``) on Redis Streams: ``name`` in the group ``keys.GROUP``."""

    def __init__(self, r: redis.Redis, broker: JobBroker, name: str, streams: Sequence[str], gate: IdleGate | None = None) -> None:
        self.r = r
        self.broker = broker  # for its scripts (``send``)
        self.name = name
        self.streams = list(streams)
        self.undelivered = 0  # entries no consumer had taken yet, over these streams, at the last peek
        self._idle_ids: dict[str, str] | None = None  # the group's ids, still exact after a blocking read timed out
        # per stream, an id the group's last-delivered id is at or past (it only moves on): read by the last peek, or
        # the last entry this consumer claimed; a peek asks only the streams with an entry after it (``lua.HEADS``)
        self._seen: dict[str, str] = {}
        self._full_peek_at = 0.0
        self._checked = False  # whether ``_seen`` is at or before the group's ids with nothing undelivered read past it
        self.gate = gate if gate is not None else IdleGate()  # shared with the process's consumers of the same streams

    def ensure_groups(self) -> None:
        run_blocking(self.broker, self.broker.ensure_groups(self.streams))

    def heads(self, block_ms: int) -> list[Head]:
        """Heads of all queues with undelivered entries, read with the group's ids in one script (``lua.HEADS``); while
        all are empty it blocks up to ``block_ms`` (0: no wait) on those ids. Each stream's second entry is read too,
        to tell whether another caller's first segment waits behind.

        A blocking read that timed out saw nothing added to these streams, so nobody claimed from them meanwhile: the
        group's ids it read from are still exact, and the next call blocks again from them without the script. A
        consumer going idle after a peek (a busy loop's last step) blocks from the ids that peek read, again without the
        script: an entry after them is undelivered, or was taken since by another consumer and is still pending; after
        a read that returned entries the next call peeks, so one taken meanwhile is never a head twice. Only
        one consumer of the process on these streams blocks at a time (``IdleGate``): another one waits for that read
        and returns no heads (after a read that saw entries, its next call peeks). An idle process costs Redis one
        XREAD per ``block_ms`` and per set of streams."""
        ids, self._idle_ids = self._idle_ids, None
        found: list[tuple[str, list[Any]]] = []
        if ids is None and block_ms > 0 and self._checked and len(self._seen) == len(self.streams) \
                and time.monotonic() - self._full_peek_at < FULL_PEEK_S:
            ids = dict(self._seen)  # going idle after a peek: wait from the ids it read (no peek first)
            self.undelivered = 0  # as a peek that found nothing would say
        elif ids is None:
            ids, found = self._peek()
        if not found and block_ms > 0 and ids:
            lead, round_ = self.gate.enter()
            if not lead:
                exact = self.gate.wait(round_, block_ms / 1000 + GATE_SLACK_S)
                self._idle_ids = exact if exact is not None and set(exact) == set(ids) else None
                return []
            try:
                reply = self.r.xread(ids, count=2, block=block_ms)
            except BaseException:
                self.gate.leave(None)
                raise
            self.gate.leave(None if reply else dict(ids))
            if not reply:
                self._idle_ids = ids
            else:  # until a peek, what it read may be there still, taken by another consumer: not waited from again
                self._checked = False
                self.undelivered = sum(len(entries) for _, entries in reply)  # what waits, as far as this read saw
            found = [(text_of(stream), [(eid, fields) for eid, fields in entries]) for stream, entries in reply or []]
        heads = []
        for stream, entries in found:
            behind = parse_entry(stream, *entries[1]) if len(entries) > 1 else None
            first_behind = behind is not None and behind.job is not None and behind.job.seg == 0
            heads.append(head_of(stream, *entries[0], first_behind=first_behind))
        return heads

    def _peek(self) -> tuple[dict[str, str], list[tuple[str, list[Any]]]]:
        """The group's ids per stream and the undelivered heads (``lua.HEADS``: streams with nothing after the id this
        consumer last saw are not asked; all are, every ``FULL_PEEK_S``); a stream without the group gets it."""
        now = time.monotonic()
        if now - self._full_peek_at >= FULL_PEEK_S:
            self._seen, self._full_peek_at = {}, now
        ids_raw, lag, heads = self.broker.send(Script(HEADS, self.streams, [GROUP, *[self._seen.get(s, "") for s in self.streams]]))
        ids = {stream: text_of(i) for stream, i in zip(self.streams, ids_raw)}
        self._seen = {stream: i for stream, i in ids.items() if i}
        self._checked = True
        if any(not i for i in ids.values()):
            self.ensure_groups()
            ids = {stream: i or "0-0" for stream, i in ids.items()}
        self.undelivered = int(lag)  # Redis 7: entries not yet delivered (where known)
        found = [(text_of(stream), [(eid, _pairs(fields)) for eid, fields in entries]) for stream, entries in heads]
        return ids, found

    def claim(self, stream: str, count: int) -> list[Entry]:
        reply = self.r.xreadgroup(GROUP, self.name, {stream: ">"}, count=count)
        taken = [parse_entry(text_of(s), eid, f) for s, entries in reply or [] for eid, f in entries]
        if taken and stream in self._seen:  # the group's id is now at this consumer's last entry, or past it
            self._seen[stream] = taken[-1].entry_id
        return taken

    def ack(self, entries: Sequence[Entry]) -> None:
        """Ack entries and delete them from their stream; those whose XACK counted come off their lane's backlog (once,
        even if redelivered). One script call for all of them (``lua.ACK``)."""
        if not entries:
            return
        self.broker.send(Script(ACK, [e.stream for e in entries], [GROUP, *ack_args(self.broker.keys, entries)]))

    def reclaim(self, min_idle_ms: int, count: int = 16, keep: Collection[tuple[str, str]] = ()) -> list[Entry]:
        """Entries another consumer took and left idle (it died): take them over, with delivery counts; none of
        ``keep`` ((stream, entry id): what the caller's process holds itself). Two round trips when something is
        idle that long (one pipelined XPENDING over the streams, one XCLAIM per stream with any), else one."""
        pipe = self.r.pipeline(transaction=False)
        for stream in self.streams:
            pipe.xpending_range(stream, GROUP, min="-", max="+", count=count + len(keep), idle=min_idle_ms)
        wanted: dict[str, dict[str, int]] = {}  # stream -> entry id -> deliveries once taken
        room = count
        for stream, pending in zip(self.streams, pipe.execute(raise_on_error=False)):
            if isinstance(pending, Exception):  # the stream or its group is not there yet
                continue
            for p in pending:
                eid = text_of(p["message_id"])
                if room > 0 and (stream, eid) not in keep:
                    wanted.setdefault(stream, {})[eid] = int(p["times_delivered"]) + 1
                    room -= 1
        if not wanted:
            return []
        for stream, ids in wanted.items():  # the idle guard again: one another worker took meanwhile stays its
            pipe.xclaim(stream, GROUP, self.name, min_idle_ms, list(ids))
        taken: list[Entry] = []
        for (stream, ids), entries in zip(wanted.items(), pipe.execute(raise_on_error=False)):
            if isinstance(entries, Exception):
                continue
            for eid, fields in entries:
                if fields is None:  # deleted meanwhile
                    continue
                e = parse_entry(stream, eid, fields)
                e.deliveries = ids.get(e.entry_id, 1)
                taken.append(e)
        return taken

    def touch(self, entries: Sequence[Entry]) -> None:
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
            if pending and text_of(pending[0]["consumer"]) == self.name:
                ours.setdefault(e.stream, []).append(e.entry_id)
        for stream, ids in ours.items():
            pipe.xclaim(stream, GROUP, self.name, 0, ids, justid=True)
        pipe.execute()

    def requeue(self, entries: Sequence[Entry]) -> None:
        """Give claimed entries back: each is re-added to its stream and the claim acked, atomically.
        The lane's backlog is unchanged (the same work is still queued)."""
        pipe = self.r.pipeline(transaction=True)
        for e in entries:
            pipe.xadd(e.stream, e.fields)
            pipe.xack(e.stream, GROUP, e.entry_id)
            pipe.xdel(e.stream, e.entry_id)
        pipe.execute()

    def prune(self, min_idle_ms: int) -> int:
        """Remove consumers of dead workers: nothing pending and idle for ``min_idle_ms``."""
        removed = 0
        for stream in self.streams:
            try:
                consumers = self.r.xinfo_consumers(stream, GROUP)
            except redis.ResponseError:
                continue
            for c in consumers:
                name = text_of(c["name"])
                if name != self.name and int(c["pending"]) == 0 and int(c["idle"]) >= min_idle_ms:
                    removed += int(self.r.xgroup_delconsumer(stream, GROUP, name) == 0)
        return removed

    def leave(self) -> None:
        """Leave the groups (after the last ack) unless something is still pending: dead names do not pile up."""
        for stream in self.streams:
            try:
                pending = self.r.xpending_range(stream, GROUP, min="-", max="+", count=1, consumername=self.name)
                if not pending:
                    self.r.xgroup_delconsumer(stream, GROUP, self.name)
            except redis.RedisError:
                pass


def ack_args(keys: Keys, entries: Sequence[Entry]) -> list[object]:
    """The arguments ``lua.ack_entries`` takes per entry: its id, its lane's backlog hash ('' for an entry that never
    parsed) and its predicted seconds (what its ack takes off the lane's counters)."""
    out: list[object] = []
    for e in entries:
        out += [e.entry_id, keys.backlog(e.job.lane) if e.job is not None else "", e.job.est_s if e.job else 0]
    return out


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    """A stream entry's fields as a script returns them (a flat list) -> a dict, as redis-py gives XREAD's."""
    return dict(zip(flat[0::2], flat[1::2]))
