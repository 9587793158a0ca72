"""Redis's errors as the wire's (``wire.errors``): the Redis broker and its consumers raise ``BrokerUnavailable``
(a lost connection, a timeout, a failover under way), ``BrokerRefused`` (refused credentials) or ``BrokerError``
(anything else), with redis-py's error as the cause, so nothing above the wire catches redis-py's classes."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.exceptions as rx

from wire.errors import BrokerError, BrokerRefused, BrokerUnavailable

C = TypeVar("C", bound=type)

# Refusals a retry cannot mend; then what passes with a restart or a failover (a replica that was promoted answers
# READONLY until clients follow it, a loading one LOADING, a cluster TRYAGAIN).
_REFUSED = (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError)
_LOST = (rx.ConnectionError, rx.TimeoutError, rx.ReadOnlyError, rx.TryAgainError, rx.MasterDownError)


def broker_error(exc: redis.RedisError) -> BrokerError:
    """The wire's error for what redis-py raised."""
    cls = BrokerRefused if isinstance(exc, _REFUSED) else BrokerUnavailable if isinstance(exc, _LOST) else BrokerError
    err = cls(f"Redis: {exc}" if str(exc) else f"Redis: {type(exc).__name__}")
    err.__cause__ = exc
    return err


async def _awaited(pending: Awaitable[Any]) -> Any:
    try:
        return await pending
    except redis.RedisError as exc:
        raise broker_error(exc) from exc


def _translating(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise broker_error(exc) from exc
        return _awaited(out) if inspect.isawaitable(out) else out

    return call


def raises_wire_errors(cls: C) -> C:
    """Every public method of ``cls`` (not an ``Op``: its errors come through ``send``) raises the wire's errors for
    redis-py's, awaited ones too (an asyncio connection's ``send``)."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(member) or inspect.isgeneratorfunction(member):
            continue
        setattr(cls, name, _translating(member))
    return cls
