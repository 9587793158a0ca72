"""Optional API keys: ``Authorization: Bearer <key>``, or ``?api_key=<key>`` where a client cannot set
headers (a browser's WebSocket and EventSource). No keys configured means no authentication."""

from __future__ import annotations

import hmac

from fastapi import Request
from starlette.requests import HTTPConnection

from gateway.errors import unauthorized


def presented_key(conn: HTTPConnection) -> str:
    header = conn.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return conn.query_params.get("api_key", "")


def key_ok(conn: HTTPConnection) -> bool:
    keys: tuple[str, ...] = conn.app.state.gateway.api_keys
    if not keys:
        return True
    given = presented_key(conn).encode()
    ok = False
    for key in keys:  # every key is compared, so the time taken does not tell which one was close
        ok |= hmac.compare_digest(given, key.encode())
    return ok


async def require_key(request: Request) -> None:
    """A route dependency: 401 UNAUTHORIZED unless a configured key was presented."""
    if not key_ok(request):
        raise unauthorized()
