"""Farm errors as HTTP answers: one status per error family, one body shape, never a traceback.

Every error body is ``{"error": {"code": ..., "message": ...}}`` with the farm's stable codes
(``pipeline.errors``) plus the few the gateway owns below. Bad input is always a 4xx.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pipeline.errors import BAD_INPUT, BAD_OPTION, INTERNAL_ERROR, MALFORMED_JOB, InputError, TTSFarmError
from gateway.request_ids import headers_for
from wire.errors import (
    JOB_CANCELLED,
    JOB_EXPIRED,
    JOB_ID_CONFLICT,
    JOB_NOT_DONE,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    NO_WORKERS,
    OBJECT_NOT_FOUND,
    STREAM_TRIMMED,
    UNAUTHORIZED,
    JobError,
    JobNotFoundError,
    JobTimeoutError,
    OverloadedError,
    TransientError,
)

log = logging.getLogger(__name__)

class GatewayError(TTSFarmError):
    """An error answered with a given HTTP status (and optional headers)."""

    def __init__(self, status: int, message: str, *, code: str, headers: dict[str, str] | None = None,
                 **detail: Any) -> None:
        super().__init__(message, code=code, **detail)
        self.status = status
        self.headers = headers or {}


def no_workers() -> GatewayError:
    return GatewayError(503, "no farm worker is serving right now; try again shortly", code=NO_WORKERS,
                        headers={"Retry-After": "5"})


def unauthorized() -> GatewayError:
    return GatewayError(401, "a valid API key is required (Authorization: Bearer <key>)", code=UNAUTHORIZED,
                        headers={"WWW-Authenticate": "Bearer"})


def status_for(exc: TTSFarmError) -> int:
    """The HTTP status of an error. Order matters: the classes overlap (JobNotFoundError is a LookupError)."""
    if isinstance(exc, GatewayError):
        return exc.status
    if exc.code == JOB_ID_CONFLICT:  # the request is well formed; the job id it names holds another request
        return 409
    if isinstance(exc, InputError):
        return 400
    if isinstance(exc, JobNotFoundError) or exc.code == OBJECT_NOT_FOUND:
        return 404
    if isinstance(exc, OverloadedError):
        return 429
    if isinstance(exc, TransientError):
        return 503
    if isinstance(exc, JobTimeoutError):
        return 504
    if isinstance(exc, JobError) and exc.code in (JOB_CANCELLED, JOB_EXPIRED):
        return 409
    if exc.code == STREAM_TRIMMED:  # the chunks asked for are gone from the results stream
        return 410
    return 500  # ModelError, a job that failed on a worker for a server-side reason


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def error_response(exc: TTSFarmError) -> JSONResponse:
    status = status_for(exc)
    headers = dict(getattr(exc, "headers", {}) or {})
    if status in (429, 503) and "Retry-After" not in headers:
        headers["Retry-After"] = "1" if status == 429 else "5"
    extra = {"retryable": exc.retryable} if exc.retryable else {}
    return JSONResponse(body(exc.code, exc.message, **extra, **_plain(exc.detail)), status_code=status, headers=headers)


def _plain(detail: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in detail.items() if isinstance(v, (str, int, float, bool)) or v is None}


TEXT_FIELDS = ("text", "input")  # the text of a request: a wrong type is MALFORMED_JOB, as in the SDK
SHAPE_ERRORS = ("missing", "extra_forbidden", "json_invalid", "model_type", "model_attributes_type")


def _validation_code(exc: RequestValidationError) -> str:
    """The farm's code for a request the schema refused, as the SDK would answer the same values
    (``producer.checks``): the text of a wrong type MALFORMED_JOB, an option of a wrong type BAD_OPTION;
    a body that is not a JSON object, or a missing or unknown field, BAD_INPUT."""
    errors = exc.errors()
    if not errors:
        return BAD_INPUT
    loc, kind = tuple(errors[0].get("loc", ())), str(errors[0].get("type", ""))
    if kind in SHAPE_ERRORS or len(loc) < 2:
        return BAD_INPUT
    if loc[0] == "body" and loc[1] in TEXT_FIELDS:
        return MALFORMED_JOB
    return BAD_OPTION


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def install(app: FastAPI) -> None:
    """Answer every error with the one body shape; 422 validation errors become 400 with the farm's code."""

    @app.exception_handler(TTSFarmError)
    async def _farm(request: Request, exc: TTSFarmError) -> JSONResponse:
        if status_for(exc) >= 500:
            log.warning("%s %s -> %s", request.method, request.url.path, exc)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(body(_validation_code(exc), _validation_message(exc)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {400: BAD_INPUT, 404: NOT_FOUND, 405: METHOD_NOT_ALLOWED, 401: UNAUTHORIZED}.get(exc.status_code, f"HTTP_{exc.status_code}")
        return JSONResponse(body(code, str(exc.detail)), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(body(INTERNAL_ERROR, "the gateway failed unexpectedly; see its log"), status_code=500,
                            headers=headers_for(request))
