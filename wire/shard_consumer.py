"""A worker's queue reading over every shard: one consumer per shard under one name, read as one ``Consumer``.

The shards' bucket streams have the same names (``Keys.queue``), so the streams this consumer reports carry their
shard, ``<shard>@<stream>`` (``tag``): a head's stream, a claimed entry's. A claim, an ack, a touch, a requeue and a
dead letter (``ShardedBroker.dead_letter``) go to the shard the name says, with the name Redis knows. The tag is
written in front so what a worker reads off a stream's name (its lane, its bucket: the name's last parts) is
unchanged; Redis never sees it.

Peeking asks every shard without waiting (each shard's own peek: ``RedisConsumer.heads``), except a busy loop's: it
asks the shards where it last found heads and one more in turn (each shard at least every ``BUSY_ROUND_S``), so a
node is not asked at every step of every loop of every worker. Only when all are empty does an idle loop wait, on
every shard at once, each shard's blocking peek on a thread of its own, and returns the heads that the shards that
woke read (no peek of every shard again: a wake costs the shards nothing more). A shard's wait left running when
another woke is reused by the next wait, so each shard has at most one blocking read in flight per consumer.

A shard that does not answer is left out of peeks, reclaiming and pruning for a while (0.5 s, doubling to 5 s, logged
when it goes and when it answers again), so the other shards' jobs are served meanwhile; only when no shard answers
does the error reach the loop. Acks, touches and requeues go to every shard they name before an error is raised.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from wire.broker import Consumer
from wire.queue import Entry, Head

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_S = (0.5, 5.0)  # how long a shard that failed is left out: the first time, and at most
BUSY_ROUND_S = 0.1  # a busy peek asks a shard that had no heads at its turn, or once this long has passed


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
    """``Consumer`` (``wire.broker``) over the consumers of one name on every shard, in shard order."""

    def __init__(self, consumers: Sequence[Consumer]) -> None:
        self.shards = list(consumers)
        self.name = self.shards[0].name
        self.streams = [tag(i, s) for i, c in enumerate(self.shards) for s in c.streams]
        self.undelivered = 0
        self._waits: list[Future[list[Head]] | None] = [None] * len(self.shards)
        self._pool: ThreadPoolExecutor | None = None
        self._out_until = [0.0] * len(self.shards)  # a shard that failed is left out until then (monotonic)
        self._out_for = [0.0] * len(self.shards)  # ... for this long (0: it answers)
        self._had = [True] * len(self.shards)  # whether its last peek found heads
        self._asked_at = [0.0] * len(self.shards)  # when it was last peeked (monotonic)
        self._turn = 0  # the shard a busy peek asks whatever its last one found

    def _each(self, fn: Callable[[Consumer], T], only: Collection[int] | None = None) -> list[tuple[int, T]]:
        """``fn`` on every shard not left out (of ``only``, if given), by shard; one that fails is left out for a while.
        Raises the last error when every shard tried failed."""
        out: list[tuple[int, T]] = []
        error: Exception | None = None
        for i, c in enumerate(self.shards):
            if self._out_until[i] > time.monotonic() or (only is not None and i not in only):
                continue
            try:
                out.append((i, fn(c)))
            except Exception as exc:
                error = exc
                self._failed(i, exc)
            else:
                self._answered(i)
        if error is not None and not out:
            raise error
        return out

    def _failed(self, shard: int, exc: BaseException) -> None:
        if not self._out_for[shard]:
            log.warning("%s: shard %d does not answer (%s); serving the other shards", self.name, shard, exc)
        self._out_for[shard] = min(RETRY_S[1], max(RETRY_S[0], 2 * self._out_for[shard]))
        self._out_until[shard] = time.monotonic() + self._out_for[shard]

    def _answered(self, shard: int) -> None:
        if self._out_for[shard]:
            log.info("%s: shard %d answers again", self.name, shard)
            self._out_for[shard] = 0.0

    def ensure_groups(self) -> None:
        self._each(lambda c: c.ensure_groups())  # a shard out now gets its groups at its first peek

    def heads(self, block_ms: int) -> list[Head]:
        heads = self._peek(busy=block_ms <= 0)
        if heads or block_ms <= 0:
            return heads
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self.shards), thread_name_prefix=f"ttsfarm-peek-{self.name}")
        for i, c in enumerate(self.shards):
            old = self._waits[i]
            if old is not None and old.done():  # what it saw is older than the peek above
                self._waits[i] = None
                if old.exception() is not None:
                    self._failed(i, old.exception())  # type: ignore[arg-type]
            if self._waits[i] is None and self._out_until[i] <= time.monotonic():
                self._waits[i] = self._pool.submit(c.heads, block_ms)
        running = [f for f in self._waits if f is not None]
        done, _ = wait(running, timeout=block_ms / 1000, return_when=FIRST_COMPLETED)
        if not running:  # every shard is out: wait as a peek would, then try again
            time.sleep(block_ms / 1000)
        heads = []  # what the shards that woke read: their heads, no peek of every shard again
        for i, f in enumerate(self._waits):
            if f is not None and f in done:
                self._waits[i] = None
                if f.exception() is not None:
                    self._failed(i, f.exception())  # type: ignore[arg-type]
                else:
                    got = f.result()
                    self._had[i] = self._had[i] or bool(got)
                    heads += _tagged_heads(i, got)
        self.undelivered = sum(c.undelivered for c in self.shards)
        return heads

    def _peek(self, busy: bool = False) -> list[Head]:
        """Every shard's heads; ``busy`` (a loop between its steps): those of the shards whose last peek found heads,
        of the shard whose turn it is and of those not asked for ``BUSY_ROUND_S``. Any other had none when it was last
        asked, a few steps ago; an idle loop asks every shard, then waits on each."""
        now = time.monotonic()
        n = len(self.shards)
        only = None
        if busy and n > 1:
            only = {i for i in range(n) if self._had[i] or now - self._asked_at[i] >= BUSY_ROUND_S} | {self._turn}
            self._turn = (self._turn + 1) % n
        try:
            answers = self._each(lambda c: c.heads(0), only)
        except Exception:
            if only is None:
                raise
            answers = self._each(lambda c: c.heads(0))  # the shards asked failed (now left out): the others may answer
        heads = []
        for i, got in answers:
            self._had[i], self._asked_at[i] = bool(got), now
            heads += _tagged_heads(i, got)
        self.undelivered = sum(c.undelivered for c in self.shards)
        return heads

    def claim(self, stream: str, count: int) -> list[Entry]:
        shard, name = untag(stream)
        return self._tagged(shard, self.shards[shard].claim(name, count))

    def ack(self, entries: Sequence[Entry]) -> None:
        self._on_their_shards(entries, lambda c, own: c.ack(own))

    def reclaim(self, min_idle_ms: int, count: int = 16, keep: Collection[tuple[str, str]] = ()) -> list[Entry]:
        """Up to ``count`` entries from each shard."""
        own: dict[int, set[tuple[str, str]]] = {}
        for stream, eid in keep:
            shard, name = untag(stream)
            own.setdefault(shard, set()).add((name, eid))
        return [e for i, got in self._each(lambda c: c.reclaim(min_idle_ms, count, own.get(self.shards.index(c), set())))
                for e in self._tagged(i, got)]

    def touch(self, entries: Sequence[Entry]) -> None:
        self._on_their_shards(entries, lambda c, own: c.touch(own))

    def requeue(self, entries: Sequence[Entry]) -> None:
        self._on_their_shards(entries, lambda c, own: c.requeue(own))

    def prune(self, min_idle_ms: int) -> int:
        return sum(n for _, n in self._each(lambda c: c.prune(min_idle_ms)))

    def _on_their_shards(self, entries: Sequence[Entry], fn: Callable[[Consumer, list[Entry]], None]) -> None:
        """``fn`` on each shard with its entries; the first error raised once every shard had its turn."""
        error: Exception | None = None
        for shard, own in _by_shard(entries).items():
            try:
                fn(self.shards[shard], own)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error

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


def _tagged_heads(shard: int, heads: list[Head]) -> list[Head]:
    """A shard's heads, each stream named as this consumer reports it."""
    return [dataclasses.replace(h, stream=tag(shard, h.stream)) for h in heads]


def _by_shard(entries: Sequence[Entry]) -> dict[int, list[Entry]]:
    """Entries by shard, each with the stream name its shard knows."""
    out: dict[int, list[Entry]] = {}
    for e in entries:
        shard, stream = untag(e.stream)
        out.setdefault(shard, []).append(dataclasses.replace(e, stream=stream))
    return out
