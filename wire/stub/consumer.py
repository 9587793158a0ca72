"""The stub broker's queue reading: one consumer of the workers' group, as ``wire.redis.consumer`` reads Redis
Streams (a peek that claims nothing, a claim of one stream's undelivered entries, acks that take each entry off its
lane's backlog once, reclaiming from a dead consumer after an idle time, pruning, leaving)."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from wire.keys import Keys
from wire.queue import Entry, Head, head_of, parse_entry
from wire.stub.store import Group, Pending, Store, id_of, num


def _now_ms() -> float:
    return time.time() * 1000


class StubConsumer:
    """``Consumer`` (``wire.broker``) on the stub's store: ``name`` in the workers' group."""

    def __init__(self, store: Store, keys: Keys, name: str, streams: Sequence[str]) -> None:
        self.store, self.keys = store, keys
        self.name = name
        self.streams = list(streams)
        self.undelivered = 0

    def _group(self, stream: str) -> Group | None:
        return self.store.group(stream)

    def _seen(self, group: Group) -> None:
        group.consumers[self.name] = _now_ms()

    def ensure_groups(self) -> None:
        with self.store.lock:
            for stream in self.streams:
                self.store.ensure_group(stream)

    def heads(self, block_ms: int) -> list[Head]:
        """Each stream's oldest undelivered entry (and whether another job's first segment waits behind it); while all
        are empty, waits up to ``block_ms`` for an entry."""
        store = self.store
        with store.lock:
            self.ensure_groups()
            heads = self._heads()
            if not heads and block_ms > 0:
                store.lock.wait_for(lambda: bool(self._heads()), block_ms / 1000)
                heads = self._heads()
            return heads

    def _heads(self) -> list[Head]:
        heads, lag = [], 0
        for stream in self.streams:
            found = self.store.stream(stream)
            waiting = found.undelivered() if found is not None else []
            lag += len(waiting)
            if waiting:
                behind = parse_entry(stream, *waiting[1]) if len(waiting) > 1 else None
                first_behind = behind is not None and behind.job is not None and behind.job.seg == 0
                heads.append(head_of(stream, *waiting[0], first_behind=first_behind))
        self.undelivered = lag
        return heads

    def claim(self, stream: str, count: int) -> list[Entry]:
        with self.store.lock:
            self.store.ensure_group(stream)
            found = self.store.stream(stream)
            assert found is not None and found.group is not None
            group = found.group
            taken = found.undelivered()[:count]
            now = _now_ms()
            for entry_id, _ in taken:
                group.pending[entry_id] = Pending(self.name, now)
            if taken:
                group.last = id_of(taken[-1][0])
            self._seen(group)
            return [parse_entry(stream, entry_id, fields) for entry_id, fields in taken]

    def ack(self, entries: Sequence[Entry]) -> None:
        """Each entry acked and deleted; those whose ack counted come off their lane's counters (``n``, ``s``, ``q``),
        once even if redelivered, never below zero."""
        if not entries:
            return
        with self.store.lock:
            ack_entries(self.store, self.keys, entries)

    def reclaim(self, min_idle_ms: int, count: int = 16, keep: Collection[tuple[str, str]] = ()) -> list[Entry]:
        """Entries another consumer took and left idle that long, none of ``keep``: taken over, each delivery
        counted; entries deleted meanwhile leave the pending list."""
        taken: list[Entry] = []
        with self.store.lock:
            now = _now_ms()
            for stream in self.streams:
                found = self.store.stream(stream)
                if found is None or found.group is None or len(taken) >= count:
                    continue
                group = found.group
                for entry_id, held in sorted(group.pending.items(), key=lambda kv: id_of(kv[0])):
                    if len(taken) >= count:
                        break
                    if now - held.at_ms < min_idle_ms or (stream, entry_id) in keep:
                        continue
                    fields = found.entries.get(entry_id)
                    if fields is None:
                        del group.pending[entry_id]
                        continue
                    group.pending[entry_id] = Pending(self.name, now, held.deliveries + 1)
                    e = parse_entry(stream, entry_id, fields)
                    e.deliveries = held.deliveries + 1
                    taken.append(e)
                self._seen(group)
        return taken

    def touch(self, entries: Sequence[Entry]) -> None:
        with self.store.lock:
            now = _now_ms()
            for e in entries:
                group = self._group(e.stream)
                held = group.pending.get(e.entry_id) if group is not None else None
                if held is not None and held.consumer == self.name:
                    held.at_ms = now

    def requeue(self, entries: Sequence[Entry]) -> None:
        """Each entry added to its stream again and its claim acked and deleted, at once (the backlog unchanged)."""
        with self.store.lock:
            for e in entries:
                self.store.xadd(e.stream, e.fields)
                self.store.ack(e.stream, e.entry_id)
                self.store.xdel(e.stream, e.entry_id)

    def prune(self, min_idle_ms: int) -> int:
        removed = 0
        with self.store.lock:
            now = _now_ms()
            for stream in self.streams:
                group = self._group(stream)
                if group is None:
                    continue
                for name, seen in list(group.consumers.items()):
                    holds = any(p.consumer == name for p in group.pending.values())
                    if name != self.name and not holds and now - seen >= min_idle_ms:
                        del group.consumers[name]
                        removed += 1
        return removed

    def leave(self) -> None:
        with self.store.lock:
            for stream in self.streams:
                group = self._group(stream)
                if group is not None and not any(p.consumer == self.name for p in group.pending.values()):
                    group.consumers.pop(self.name, None)


def ack_entries(store: Store, keys: Keys, entries: Sequence[Entry]) -> None:
    """``StubConsumer.ack``'s step, the store's lock held (``StubBroker.finalize`` acks with a job's end too)."""
    tally: dict[str, tuple[int, float]] = {}
    for e in entries:
        if store.ack(e.stream, e.entry_id) and e.job is not None:
            count, seconds = tally.get(e.job.lane, (0, 0.0))
            tally[e.job.lane] = (count + 1, seconds + e.job.est_s)
        store.xdel(e.stream, e.entry_id)
    for lane, (count, seconds) in tally.items():
        key = keys.backlog(lane)
        h = store.hash(key)
        store.hset(key, {"n": max(num(h.get(b"n")) - count, 0), "s": max(num(h.get(b"s")) - seconds, 0),
                         "q": max(num(h.get(b"q")) - count, 0)})
