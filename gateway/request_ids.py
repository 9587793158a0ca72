"""``X-Request-Id`` on every HTTP answer: the job's id where the request has a job, else an id of the request.

A client that logs one id per call (LiveKit's plugins read ``x-request-id`` from each response) can then find the
job with ``GET /v1/jobs/{id}``. A route that submits or looks up a job names it with ``mark_job``; the middleware
writes the header when the answer starts, errors included (a 409 on a job's audio carries the job's id; a 404 for a
job that does not exist, or a 400 before any job was made, carries a request id: the client's own ``X-Request-Id``
when it sent a short, plain one, else a new one).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-Id"
SCOPE_KEY = "ttsfarm.request_id"  # a one-item list in the ASGI scope, shared by the middleware and the routes
CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def mark_job(conn: HTTPConnection, job_id: str) -> None:
    """Answer this request with ``job_id`` as its ``X-Request-Id``."""
    holder = conn.scope.get(SCOPE_KEY)
    if holder is not None:
        holder[0] = job_id


def request_id(conn: HTTPConnection) -> str | None:
    """The id this request's answer carries (None where the middleware does not run)."""
    holder = conn.scope.get(SCOPE_KEY)
    return holder[0] if holder is not None else None


def _own_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = value.decode("latin-1").strip()
            if CLIENT_ID.fullmatch(given):
                return given
    return "req_" + uuid.uuid4().hex


class RequestIdMiddleware:
    """Pure ASGI (a streamed body passes through untouched); WebSockets are left alone."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        holder = [_own_id(scope)]
        scope[SCOPE_KEY] = holder

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = holder[0]
            await send(message)

        await self.app(scope, receive, send_with_id)


def headers_for(conn: HTTPConnection) -> dict[str, Any]:
    """The header for an answer written outside the middleware (Starlette's last-resort 500 handler)."""
    rid = request_id(conn)
    return {HEADER: rid} if rid else {}
