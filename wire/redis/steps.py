"""The Redis broker's IO steps: what its ``Op``s yield and its ``send`` performs (another broker yields its own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Command:
    """A redis-py call: ``getattr(connection, name)(*args, **kwargs)``."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Script:
    """A Lua script of the wire, run by its SHA (loaded on first use)."""

    source: str
    keys: Sequence[Any]
    args: Sequence[Any]


@dataclass(frozen=True)
class Transaction:
    """Commands run as one step (``MULTI``/``EXEC``) in one round trip: their replies, in order. For reads whose
    parts must agree, where a script would cost more: every value a script reads becomes a Lua string that Redis
    hashes whole, a plain command's reply is copied out."""

    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Replicated:
    """A script and then ``WAIT replicas timeout_ms`` on the same connection, in one round trip: the reply is the
    script's and the number of replicas that hold its writes (WAIT counts the writes of its own connection only)."""

    script: Script
    replicas: int
    timeout_ms: int
