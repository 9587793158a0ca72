"""The stub broker's store: the few kinds of object the farm keeps (hashes, streams with one consumer group, lists,
sorted sets, strings), in memory, under the names of ``wire.keys.Keys``, with expiry. Values are kept and read back
as bytes, as redis-py reads them from Redis, so the records' readers parse them the same way.

Every step holds ``Store.lock`` from start to end, which makes it atomic as a Lua script is on Redis; a blocking read
waits on the same lock's condition, which each write notifies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


def b(value: Any) -> bytes:
    """A value as the store keeps it (redis-py's encoding: text as UTF-8, a number as its text)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, float):
        return repr(value).encode()
    return str(value).encode()


def num(value: bytes | None, default: float = 0.0) -> float:
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def id_of(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class Pending:
    """An entry delivered to a consumer of the group and not acked yet."""

    consumer: str
    at_ms: float  # its last delivery or claim (its idle time runs from here)
    deliveries: int = 1


@dataclass
class Group:
    """The workers' consumer group on a stream: the last entry it delivered, what its consumers hold, when each
    consumer last read."""

    last: tuple[int, int] = (0, 0)
    pending: dict[str, Pending] = field(default_factory=dict)
    consumers: dict[str, float] = field(default_factory=dict)


@dataclass
class Stream:
    """Entries by id, in order; how many were ever added; its group, once created."""

    entries: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    added: int = 0
    group: Group | None = None

    def after(self, start: tuple[int, int]) -> Iterator[tuple[str, dict[bytes, bytes]]]:
        return ((i, f) for i, f in self.entries.items() if id_of(i) > start)

    def undelivered(self) -> list[tuple[str, dict[bytes, bytes]]]:
        return list(self.after(self.group.last)) if self.group is not None else []


class Store:
    """One farm's store: shared by every stub broker built on it (a client's and a worker's in one process)."""

    def __init__(self) -> None:
        self.lock = threading.Condition(threading.RLock())
        self.data: dict[str, Any] = {}
        self.expires: dict[str, float] = {}
        self._last = (0, 0)

    # -- keys ---------------------------------------------------------------------------------------------------
    def get(self, key: str, kind: type[T]) -> T | None:
        """The object under ``key`` if it is there, of this kind, and has not expired."""
        until = self.expires.get(key)
        if until is not None and until <= time.time():
            self.delete(key)
        found = self.data.get(key)
        return found if isinstance(found, kind) else None

    def take(self, key: str, kind: type[T]) -> T:
        """The object under ``key``, made empty if it is not there."""
        found = self.get(key, kind)
        if found is None:
            found = self.data[key] = kind()
        return found

    def exists(self, key: str) -> bool:
        return self.get(key, object) is not None

    def delete(self, *keys: str) -> int:
        gone = 0
        for key in keys:
            self.expires.pop(key, None)
            gone += int(self.data.pop(key, None) is not None)
        return gone

    def expire(self, key: str, ttl_s: float) -> None:
        if self.exists(key):
            self.expires[key] = time.time() + float(ttl_s)

    # -- hashes -------------------------------------------------------------------------------------------------
    def hash(self, key: str) -> dict[bytes, bytes]:
        return self.get(key, dict) or {}

    def hget(self, key: str, name: str) -> bytes | None:
        return self.hash(key).get(name.encode())

    def hset(self, key: str, fields: Mapping[str, Any]) -> None:
        if fields:
            self.take(key, dict).update({k.encode(): b(v) for k, v in fields.items()})

    def hincr(self, key: str, name: str, by: float) -> float:
        h = self.take(key, dict)
        value = num(h.get(name.encode())) + by
        h[name.encode()] = b(int(value) if float(by).is_integer() and float(value).is_integer() else value)
        return value

    def hdel(self, key: str, *names: str) -> None:
        h = self.get(key, dict)
        for name in names if h is not None else ():
            h.pop(name.encode(), None)
        if h is not None and not h:
            self.delete(key)

    # -- streams ------------------------------------------------------------------------------------------------
    def new_id(self) -> str:
        ms = int(time.time() * 1000)
        self._last = (ms, 0) if ms > self._last[0] else (self._last[0], self._last[1] + 1)
        return f"{self._last[0]}-{self._last[1]}"

    def xadd(self, key: str, fields: Mapping[Any, Any], maxlen: int = 0) -> str:
        stream = self.take(key, Stream)
        entry_id = self.new_id()
        stream.entries[entry_id] = {b(k): b(v) for k, v in fields.items()}
        stream.added += 1
        while maxlen and len(stream.entries) > maxlen:
            del stream.entries[next(iter(stream.entries))]
        self.lock.notify_all()
        return entry_id

    def xdel(self, key: str, *ids: str) -> None:
        stream = self.get(key, Stream)
        for entry_id in ids if stream is not None else ():
            stream.entries.pop(entry_id, None)

    def stream(self, key: str) -> Stream | None:
        return self.get(key, Stream)

    def group(self, key: str) -> Group | None:
        stream = self.get(key, Stream)
        return stream.group if stream is not None else None

    def ensure_group(self, key: str) -> None:
        stream = self.take(key, Stream)
        if stream.group is None:
            stream.group = Group()

    def ack(self, key: str, entry_id: str) -> int:
        group = self.group(key)
        return int(group is not None and group.pending.pop(entry_id, None) is not None)

    # -- lists, sorted sets, strings ----------------------------------------------------------------------------
    def rpush(self, key: str, value: Any) -> None:
        self.take(key, list).append(b(value))

    def lpop(self, key: str) -> bytes | None:
        items = self.get(key, list)
        if not items:
            return None
        value = items.pop(0)
        if not items:
            self.delete(key)
        return value  # type: ignore[no-any-return]

    def zset(self, key: str) -> dict[str, float]:
        return self.get(key, dict) or {}

    def zadd(self, key: str, member: str, score: float) -> None:
        self.take(key, dict)[member] = score

    def zrem(self, key: str, member: str) -> None:
        z = self.get(key, dict)
        if z is not None:
            z.pop(member, None)
            if not z:
                self.delete(key)

    def set(self, key: str, value: Any, ttl_s: float) -> None:
        self.data[key] = b(value)
        self.expire(key, ttl_s)

