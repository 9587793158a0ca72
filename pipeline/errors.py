"""The compute package's errors: one base class, input and model errors, and their stable codes.

Every error carries a stable ``code`` (a client can match on it), a human message, and whether
retrying could help. Input problems are ``ValueError`` subclasses, model and runtime problems
``RuntimeError`` subclasses, so code that only knows the builtin families still does the right thing.

The farm's own errors (a job that failed on a worker, an overloaded lane, a backend that is down) and
the registry of every code the farm answers with live on the wire: ``wire.errors``.
"""

from __future__ import annotations

from typing import Any

# Stable codes of the base classes. Clients match on these strings; never rename one.
INTERNAL_ERROR = "INTERNAL_ERROR"
BAD_INPUT = "BAD_INPUT"

# Stable input codes. Clients match on these strings; never rename one.
EMPTY_TEXT = "EMPTY_TEXT"
TEXT_TOO_LONG = "TEXT_TOO_LONG"
INVALID_UTF8 = "INVALID_UTF8"
CONTROL_CHARACTERS = "CONTROL_CHARACTERS"
NOTHING_TO_SPEAK = "NOTHING_TO_SPEAK"
UNKNOWN_VOICE = "UNKNOWN_VOICE"
UNSUPPORTED_LANGUAGE = "UNSUPPORTED_LANGUAGE"
UNSUPPORTED_FORMAT = "UNSUPPORTED_FORMAT"
UNSUPPORTED_SAMPLE_RATE = "UNSUPPORTED_SAMPLE_RATE"
BAD_OPTION = "BAD_OPTION"
MALFORMED_JOB = "MALFORMED_JOB"
VOICE_UNAVAILABLE = "VOICE_UNAVAILABLE"  # the catalogue has the voice, but the worker could not load it (reason in the message)
BAD_SSML = "BAD_SSML"  # SSML that does not parse, or markup outside the supported subset
BAD_LEXICON = "BAD_LEXICON"  # a pronunciation lexicon entry that is not pinyin with tones or phonemes
UNKNOWN_MODEL = "UNKNOWN_MODEL"  # an OpenAI model name the gateway does not answer to
# Stable model codes.
MODEL_MISSING = "MODEL_MISSING"
MODEL_CORRUPT = "MODEL_CORRUPT"
MODEL_LOAD_FAILED = "MODEL_LOAD_FAILED"
EXTRA_MISSING = "EXTRA_MISSING"  # an optional part (a pip extra) is needed and not installed
MODEL_STAGE_FAILED = "MODEL_STAGE_FAILED"  # a stage of a two-stage voice failed while running
MODEL_NOT_PREPARED = "MODEL_NOT_PREPARED"  # a voice needs `ttsfarm voices prepare` first
MODEL_PREPARE_FAILED = "MODEL_PREPARE_FAILED"  # `ttsfarm voices prepare` failed for a reason other than its input
VOICE_GATE_FAILED = "VOICE_GATE_FAILED"  # a user's voice (`ttsfarm voices add`) failed a gate that decides whether it is served
DEVICE_UNAVAILABLE = "DEVICE_UNAVAILABLE"  # device = cuda asked for, and this onnxruntime has no CUDA provider

# The codes this package owns, by the class that carries them (``wire.errors`` adds the farm's).
INPUT_CODES = (BAD_INPUT, EMPTY_TEXT, TEXT_TOO_LONG, INVALID_UTF8, CONTROL_CHARACTERS, NOTHING_TO_SPEAK, UNKNOWN_VOICE,
               UNSUPPORTED_LANGUAGE, UNSUPPORTED_FORMAT, UNSUPPORTED_SAMPLE_RATE, BAD_OPTION, MALFORMED_JOB,
               VOICE_UNAVAILABLE, BAD_SSML, BAD_LEXICON, UNKNOWN_MODEL)
MODEL_CODES = (MODEL_MISSING, MODEL_CORRUPT, MODEL_LOAD_FAILED, EXTRA_MISSING, MODEL_STAGE_FAILED, MODEL_NOT_PREPARED,
               MODEL_PREPARE_FAILED, VOICE_GATE_FAILED)  # DEVICE_UNAVAILABLE is a worker's failure: rebuilt as the farm's JobError


class TTSFarmError(Exception):
    """Base of every error the farm raises on purpose."""

    code: str = INTERNAL_ERROR
    retryable: bool = False

    def __init__(self, message: str, *, code: str | None = None, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.detail = detail

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}


class InputError(TTSFarmError, ValueError):
    """The request itself is wrong; retrying it unchanged will fail the same way."""

    code = BAD_INPUT


class ModelError(TTSFarmError, RuntimeError):
    """A model file is missing, corrupt, or its runtime could not start."""

    code = MODEL_LOAD_FAILED
