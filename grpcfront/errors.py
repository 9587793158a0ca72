"""Farm errors as gRPC status codes: one code per error family, the farm's stable code in the details.

A failed call ends with a status whose details read ``"<CODE>: <message>"`` (``CODE`` one of the farm's, as the
HTTP gateway's bodies carry it) and whose trailing metadata holds ``ttsfarm-error-code: <CODE>``, so a Riva client
that prints ``e.details()`` shows it and a program reads it without parsing text. Bad input is always
``INVALID_ARGUMENT``; nothing answers with a traceback.
"""

from __future__ import annotations

import grpc

from pipeline.errors import InputError, TTSFarmError
from wire.errors import (
    JOB_CANCELLED,
    JOB_EXPIRED,
    JOB_ID_CONFLICT,
    NO_WORKERS,
    STREAM_TRIMMED,
    UNAUTHORIZED,
    JobError,
    JobNotFoundError,
    JobTimeoutError,
    OverloadedError,
    TransientError,
)

CODE_KEY = "ttsfarm-error-code"  # trailing metadata: the farm's error code


class FrontError(TTSFarmError):
    """An error this front end raises itself, answered with ``status``."""

    def __init__(self, status: grpc.StatusCode, message: str, *, code: str) -> None:
        super().__init__(message, code=code)
        self.status = status


def no_workers() -> FrontError:
    return FrontError(grpc.StatusCode.UNAVAILABLE, "no farm worker is serving right now; try again shortly",
                      code=NO_WORKERS)


def unauthenticated() -> FrontError:
    return FrontError(grpc.StatusCode.UNAUTHENTICATED,
                      "a valid API key is required (metadata authorization: Bearer <key>)", code=UNAUTHORIZED)


def status_for(exc: TTSFarmError) -> grpc.StatusCode:
    """The gRPC status of an error. Order matters: the classes overlap (JobNotFoundError is a LookupError)."""
    if isinstance(exc, FrontError):
        return exc.status
    if exc.code == JOB_ID_CONFLICT:
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(exc, InputError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, JobNotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, OverloadedError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, TransientError):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, JobTimeoutError) or exc.code == JOB_EXPIRED:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    if isinstance(exc, JobError) and exc.code == JOB_CANCELLED:
        return grpc.StatusCode.CANCELLED
    if exc.code == STREAM_TRIMMED:
        return grpc.StatusCode.DATA_LOSS
    return grpc.StatusCode.INTERNAL  # ModelError, a job that failed on a worker for a server-side reason


def details(exc: TTSFarmError) -> str:
    return f"{exc.code}: {exc.message}"
