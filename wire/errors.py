"""The farm's errors and the one registry of every stable error code.

``pipeline.errors`` holds the base class, input and model errors and their codes (the compute package
knows nothing of the farm). This module adds what only the farm can go through: a job that failed on a
worker, a lane that sheds load, a backend that is down, a job that is not there or took too long; and
every code that a worker, the SDK, the storage layer, the book runner or a front end answers with.
Each code string is declared once, here or in ``pipeline.errors``; ``tests/test_structure.py`` checks it.

``error_from_dict`` rebuilds an error from its wire form (``{"code", "message"}``) as the class that owns
its code: an input code as ``InputError``, a model code as ``ModelError``, an unknown one as ``JobError``.
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import INPUT_CODES, MODEL_CODES, InputError, ModelError, TTSFarmError

# Codes of the farm's error classes. Clients match on these strings; never rename one.
JOB_FAILED = "JOB_FAILED"
BACKEND_UNAVAILABLE = "BACKEND_UNAVAILABLE"
OVERLOADED = "OVERLOADED"
JOB_NOT_FOUND = "JOB_NOT_FOUND"
JOB_TIMEOUT = "JOB_TIMEOUT"
BACKEND_AUTH_FAILED = "BACKEND_AUTH_FAILED"  # the broker's store (Redis) refused the credentials
BROKER_FAILED = "BROKER_FAILED"  # the broker's store refused a step for another reason (out of memory, a script error)
JOB_ID_CONFLICT = "JOB_ID_CONFLICT"  # a submit under a job id that another request (other text or options) holds

# A job's end, as its final record says it (``JOB_<STATE>`` of a job that ended without a worker's code).
JOB_CANCELLED = "JOB_CANCELLED"
JOB_EXPIRED = "JOB_EXPIRED"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # the job's deadline passed before it ran
STREAM_TRIMMED = "STREAM_TRIMMED"  # the chunks a reader needs are no longer in the results stream
JOB_CLOSED = "JOB_CLOSED"  # text appended to a job whose text was closed
APPEND_OUT_OF_ORDER = "APPEND_OUT_OF_ORDER"  # an append that does not follow the job's last one (two writers)

# Dead letters: why a segment left its queue for the dead-letter stream.
TOO_MANY_FAILURES = "TOO_MANY_FAILURES"
TOO_MANY_DELIVERIES = "TOO_MANY_DELIVERIES"
SEGMENT_FAILED = "SEGMENT_FAILED"  # a segment's attempt failed without a code of its own

# Stored outputs (``wire.storage``).
BAD_KEY = "BAD_KEY"
OBJECT_NOT_FOUND = "OBJECT_NOT_FOUND"
STORAGE_ERROR = "STORAGE_ERROR"
STORAGE_ACCESS_DENIED = "STORAGE_ACCESS_DENIED"
STORAGE_NO_BUCKET = "STORAGE_NO_BUCKET"
STORAGE_NO_CREDENTIALS = "STORAGE_NO_CREDENTIALS"
STORAGE_REJECTED = "STORAGE_REJECTED"
STORAGE_IO_ERROR = "STORAGE_IO_ERROR"

# Books (``books``, ``workers.assembly``).
BAD_BOOK = "BAD_BOOK"  # the book file cannot be read (not UTF-8, a broken or DRM-protected EPUB)
BOOK_OUTPUT_REFUSED = "BOOK_OUTPUT_REFUSED"
BOOK_NOT_FINISHED = "BOOK_NOT_FINISHED"
SEGMENT_MISSING = "SEGMENT_MISSING"
BOOK_SUPERSEDED = "BOOK_SUPERSEDED"

# Front ends (the HTTP gateway).
NO_WORKERS = "NO_WORKERS"
UNAUTHORIZED = "UNAUTHORIZED"
JOB_NOT_DONE = "JOB_NOT_DONE"
NOT_FOUND = "NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
UNKNOWN_CONTEXT = "UNKNOWN_CONTEXT"  # an agents' socket message for a context that is not open on it
CONTEXT_EXISTS = "CONTEXT_EXISTS"  # an agents' socket open for a context id already open on it
TOO_MANY_CONTEXTS = "TOO_MANY_CONTEXTS"  # an agents' socket open over the gateway's agent_max_contexts
IDLE_TIMEOUT = "IDLE_TIMEOUT"  # an agents' socket closed after agent_idle_s with nothing said either way


class BrokerError(TTSFarmError, RuntimeError):
    """The broker's store failed a step. Every broker raises this family, never its client library's own classes
    (the library's error is the ``__cause__``): front ends, the SDK and workers catch these names, so another
    broker changes nothing above the wire."""

    code = BROKER_FAILED


class BrokerRefused(BrokerError):
    """The store refused the credentials: never retried."""

    code = BACKEND_AUTH_FAILED


class TransientError(TTSFarmError, RuntimeError):
    """A backend (Redis, object storage, accelerator) failed in a way that may pass."""

    code = BACKEND_UNAVAILABLE
    retryable = True


class BrokerUnavailable(BrokerError, TransientError):
    """The store could not be reached, or a step's reply was lost (a restart, a failover, a timeout): worth retrying
    where the call can wait; an idempotent step sent again is answered as done. A ``TransientError`` too."""

    code = BACKEND_UNAVAILABLE
    retryable = True


class OverloadedError(TTSFarmError, RuntimeError):
    """The farm sheds this request on purpose: a backlog limit was reached."""

    code = OVERLOADED
    retryable = True


class JobError(TTSFarmError, RuntimeError):
    """A job ended badly on a worker; ``code`` is the worker's code."""

    code = JOB_FAILED


class JobNotFoundError(TTSFarmError, LookupError):
    code = JOB_NOT_FOUND


class JobTimeoutError(TTSFarmError, TimeoutError):
    code = JOB_TIMEOUT
    retryable = True


class StorageError(TTSFarmError, RuntimeError):
    """Object storage refused an operation in a way retrying will not fix (codes ``STORAGE_*``; what may pass
    is a ``TransientError``)."""

    code = STORAGE_ERROR


class ObjectNotFoundError(TTSFarmError, KeyError):
    """A stored-object read of a key that holds no object. A ``KeyError``, so ``except KeyError`` works too."""

    code = OBJECT_NOT_FOUND


_CLASS_BY_CODE: dict[str, type[TTSFarmError]] = {
    **{c: InputError for c in (*INPUT_CODES, BAD_BOOK, BOOK_OUTPUT_REFUSED, BAD_KEY, JOB_ID_CONFLICT)},
    **{c: ModelError for c in MODEL_CODES},
    TransientError.code: TransientError,
    BrokerRefused.code: BrokerRefused,
    BrokerError.code: BrokerError,
    OverloadedError.code: OverloadedError,
    JobNotFoundError.code: JobNotFoundError,
    JobTimeoutError.code: JobTimeoutError,
}


def error_class_for(code: str) -> type[TTSFarmError]:
    return _CLASS_BY_CODE.get(code, JobError)


def error_from_dict(data: dict[str, Any]) -> TTSFarmError:
    """Rebuild an error from its wire form, as the most specific class that owns its code."""
    code = str(data.get("code") or TTSFarmError.code)
    message = str(data.get("message") or code)
    return error_class_for(code)(message, code=code)
