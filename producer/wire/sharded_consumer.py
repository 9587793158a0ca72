"""A worker's queue reading over every shard: one consumer per shard under one name, read as one ``Consumer``.

The shards' bucket streams have the same names (``Keys.queue``), so the streams this consumer reports carry their
shard, ``<shard>@<stream>`` (``tag``): a head's stream, a claimed entry's. A claim, an ack, a touch, a requeue and a
dead letter (``ShardedBroker.dead_letter``) go to the shard the name says, with the name Redis knows. The tag is
written in front so what a worker reads off a stream's name (its lane, its bucket: the name's last parts) is
unchanged; Redis never sees it.

Peeking asks every shard without waiting (each shard's own peek: ``RedisConsumer.heads``); only when all are empty
does it wait, on every shard at once, each shard's blocking peek on a thread of its own, and peeks all shards again
when one of them wakes. A shard's wait left running when another woke is reused by the next wait, so each shard has
at most one blocking read in flight per consumer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from producer.wire.broker import Consumer
from producer.wire.queue import Entry, Head


def tag(shard: int, stream: str) -> str:
    """A queue stream's name as a sharded consumer reports it."""
    return f"{shard}@{stream}"


def untag(name: str) -> tuple[int, str]:
    """The shard and the stream of a name ``tag`` made."""
    shard, sep, stream = name.partition("@")
    if not sep or not shard.isdigit():
        raise ValueError(f"{name!r} is not a sharded stream name (<shard>@<stream>)")
    return int(shard), stream


class ShardedConsumer:
    """``Consumer`` (``producer.wire.broker``) over the consumers of one name on every shard, in shard order."""

    def __init__(self, consumers: Sequence[Consumer]) -> None:
        self.shards = list(consumers)
        self.name = self.shards[0].name
        self.streams = [tag(i, s) for i, c in enumerate(self.shards) for s in c.streams]
        self.undelivered = 0
        self._waits: list[Future[list[Head]] | None] = [None] * len(self.shards)
        self._pool: ThreadPoolExecutor | None = None

    def ensure_groups(self) -> None:
        for c in self.shards:
            c.ensure_groups()

    def heads(self, block_ms: int) -> list[Head]:
        heads = self._peek()
        if heads or block_ms <= 0:
            return heads
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self.shards), thread_name_prefix=f"ttsfarm-peek-{self.name}")
        for i, c in enumerate(self.shards):
            old = self._waits[i]
            if old is not None and old.done():  # what it saw is older than the peek above
                self._waits[i] = None
                old.result()  # a shard's error is this consumer's
            if self._waits[i] is None:
                self._waits[i] = self._pool.submit(c.heads, block_ms)
        running = [f for f in self._waits if f is not None]
        done, _ = wait(running, timeout=block_ms / 1000, return_when=FIRST_COMPLETED)
        woke = False
        for i, f in enumerate(self._waits):
            if f is not None and f in done:
                self._waits[i] = None
                woke = woke or bool(f.result())
        return self._peek() if woke else []

    def _peek(self) -> list[Head]:
        heads = [dataclasses.replace(h, stream=tag(i, h.stream)) for i, c in enumerate(self.shards) for h in c.heads(0)]
        self.undelivered = sum(c.undelivered for c in self.shards)
        return heads

    def claim(self, stream: str, count: int) -> list[Entry]:
        shard, name = untag(stream)
        return self._tagged(shard, self.shards[shard].claim(name, count))

    def ack(self, entries: Sequence[Entry]) -> None:
        for shard, own in _by_shard(entries).items():
            self.shards[shard].ack(own)

    def reclaim(self, min_idle_ms: int, count: int = 16) -> list[Entry]:
        """Up to ``count`` entries from each shard."""
        return [e for i, c in enumerate(self.shards) for e in self._tagged(i, c.reclaim(min_idle_ms, count))]

    def touch(self, entries: Sequence[Entry]) -> None:
        for shard, own in _by_shard(entries).items():
            self.shards[shard].touch(own)

    def requeue(self, entries: Sequence[Entry]) -> None:
        for shard, own in _by_shard(entries).items():
            self.shards[shard].requeue(own)

    def prune(self, min_idle_ms: int) -> int:
        return sum(c.prune(min_idle_ms) for c in self.shards)

    def leave(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for c in self.shards:
            c.leave()

    @staticmethod
    def _tagged(shard: int, entries: list[Entry]) -> list[Entry]:
        for e in entries:
            e.stream = tag(shard, e.stream)
        return entries


def _by_shard(entries: Sequence[Entry]) -> dict[int, list[Entry]]:
    """Entries by shard, each with the stream name its shard knows."""
    out: dict[int, list[Entry]] = {}
    for e in entries:
        shard, stream = untag(e.stream)
        out.setdefault(shard, []).append(dataclasses.replace(e, stream=stream))
    return out
