"""Counting a process's Redis round trips, for the benches (``ttsfarm bench host``) and the worker module they start
(``workers.bench_app``). It lives with the Redis backend because it patches redis-py's connection.

A round trip is one call of redis-py's ``send_packed_command``: a single command, or a whole pipeline or
transaction, is sent in one call and its replies are read before that connection sends again (redis-py's blocking
client never has two requests in flight on one connection). Health-check PINGs count as their own. Redis's own
``total_writes_processed`` is no count of them: a large request or reply is read or written in several events.
"""

from __future__ import annotations

import itertools
from typing import Any

import redis.connection


class RoundTrips:
    """Counts ``send_packed_command`` calls of every redis-py connection in this process from its creation (one
    per process: each wraps the method again)."""

    def __init__(self) -> None:
        counter = self._counter = itertools.count()
        original = redis.connection.AbstractConnection.send_packed_command

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            next(counter)
            original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]

    @property
    def total(self) -> int:
        """Round trips so far (reading the counter does not advance it)."""
        return int(repr(self._counter)[len("count("):-1])
